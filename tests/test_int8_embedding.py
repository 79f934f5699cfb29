"""The int8 tied embedding stored in the model directory (export/FORMAT.md, int8,
quantization.embedding "int8_per_row").

An int8 directory with a float32 embedding (written before the field existed) and its
conversion (export.int8_embedding) must decode bit for bit alike on the native engine:
the engine quantises the float rows at load by the very rule the converter and the writer
store. Independent references: numpy float64 for the rule, the torch model for the
decoding, and the untouched float-embedding directory for the conversion.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from export.calibrate import calibrate  # noqa: E402
from export.int8_embedding import convert, main as convert_main  # noqa: E402
from export.modeling import LayerSpec, ModelConfig, Seq2Seq  # noqa: E402
from export.rehash import dump_config  # noqa: E402
from pyfastdec.model_dir.checksums import directory_checksums as checksums  # noqa: E402
from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.torch_backend import TorchBackend  # noqa: E402
from export.writer import read_model_dir, write_model_dir  # noqa: E402
from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend, engine_config  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError  # noqa: E402
from pyfastdec.runtime import _engine  # noqa: E402
from pyfastdec.model_dir.shortlist import Shortlist  # noqa: E402

BOS, EOS = 2, 3
REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "en-de"


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def int8_dirs(spm, root: Path, seed: int, model: Seq2Seq | None = None, **kind) -> tuple[Path, Path]:
    """(int8 directory with a float32 embedding, its export.int8_embedding conversion)."""
    model = model or tiny_model(seed=seed, **kind)
    with torch.no_grad():  # every embedding value next to a rounding tie: engine and numpy must agree
        w = model.embed.weight.numpy()
        model.embed.weight.copy_(torch.from_numpy(near_halves(w, np.random.default_rng(seed))))
    pairs = [(s, s[:-1][::-1] + [EOS]) for s in random_sources(30, seed=seed)]
    old = write_model_dir(model, spm, root / "float-embed", act_scales=calibrate(model, pairs), int8=True,
                          int8_embedding=False)
    return old, convert(old, root / "int8-embed")


@pytest.fixture(scope="module", params=["attention-pre", "ssru-post"])
def dirs(request, spm, tmp_path_factory):
    kind = {"attention-pre": {}, "ssru-post": dict(decoder_self="ssru", norm="post")}[request.param]
    return int8_dirs(spm, tmp_path_factory.mktemp(request.param), seed=40 + len(request.param), **kind)


def tensors_of(path: Path) -> dict[str, np.ndarray]:
    with safe_open(str(path / "model.safetensors"), "np") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def write_tensors(path: Path, tensors: dict, config: dict | None = None) -> None:
    """Replace a directory's tensors (and config), with valid checksums, so what is refused
    is the content, not a checksum mismatch."""
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "fastdec", "version": "1"})
    config = dict(json.loads((path / "config.json").read_text()) if config is None else config)
    config.pop("checksum", None)
    config["checksum"] = checksums(path, config)
    (path / "config.json").write_text(dump_config(config))


def greedy_steps(backend, sources, steps):
    """(log-probs [steps, rows, V], argmax ids [steps, rows]) of greedy decoding."""
    state = backend.start(backend.encode(sources))
    tokens = np.full((len(sources), 1), BOS)
    logprobs, ids = [], []
    for _ in range(steps):
        res = backend.step(state, tokens, Want(logprobs=True))
        logprobs.append(res.logprobs)
        ids.append(res.argmax[:, 0])
        tokens = res.argmax
    return np.stack(logprobs), np.stack(ids)


def numpy_rule_float64(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """export/FORMAT.md's rule written independently of pyfastdec/model_dir/int8_rows.py: each
    float32 operation as float64 arithmetic rounded to float32, which is the correctly
    rounded float32 result (float64 carries more than 2 * 24 + 2 bits)."""
    amax = np.abs(w.astype(np.float64)).max(axis=1)
    scale = np.array([np.float32(a / 127.0) if a > 0 else np.float32(1.0) for a in amax], dtype=np.float32)
    ratio = (w.astype(np.float64) / scale.astype(np.float64)[:, None]).astype(np.float32)
    q = np.clip(np.round(ratio.astype(np.float64)), -127, 127).astype(np.int8)  # np.round: half to even
    return q, scale


def near_halves(w: np.ndarray, rng) -> np.ndarray:
    """Rows of w's magnitudes (column 0 keeps max|row|) whose other values sit an ulp off
    (k + 0.5) * scale: w / scale lands next to a rounding tie, where any other
    formulation of the rule (w * (127 / max), float64 division, rounding half away)
    gives another q for many elements."""
    amax = np.abs(w).max(axis=1).astype(np.float32)
    scale = (amax.astype(np.float64) / 127).astype(np.float32).astype(np.float64)
    k = rng.integers(-126, 126, size=(w.shape[0], w.shape[1] - 1)) + 0.5
    near = (k * scale[:, None]).astype(np.float32)
    direction = np.where(rng.random(near.shape) < 0.5, np.float32(-np.inf), np.float32(np.inf))
    return np.concatenate([amax[:, None], np.nextafter(near, direction)], axis=1).astype(np.float32)


# ----------------------------------------------------------------------------- the stored rows
def test_conversion_stores_the_rule_and_changes_nothing_else(dirs):
    old, new = dirs
    before, after = tensors_of(old), tensors_of(new)
    assert set(after) == set(before) | {"embed.weight_scale"}
    assert after["embed.weight"].dtype == np.int8 and after["embed.weight_scale"].dtype == np.float32
    q, scale = numpy_rule_float64(before["embed.weight"])
    np.testing.assert_array_equal(after["embed.weight"], q)
    np.testing.assert_array_equal(after["embed.weight_scale"], scale)
    for name in before:
        if name != "embed.weight":
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    # Each row spans the int8 range at its largest weight and rounds to within half a step.
    assert (np.abs(after["embed.weight"].astype(int)).max(axis=1) == 127).all()
    err = np.abs(q.astype(np.float32) * scale[:, None] - before["embed.weight"]).max(axis=1)
    assert (err <= scale * (0.5 + 1e-4)).all()  # + the float32 rounding of q * scale
    cfg_old, cfg_new = (json.loads((p / "config.json").read_text()) for p in (old, new))
    assert "embedding" not in cfg_old["quantization"]
    assert cfg_new["quantization"].pop("embedding") == "int8_per_row"
    assert {k: v for k, v in cfg_new.items() if k != "checksum"} == \
        {k: v for k, v in cfg_old.items() if k != "checksum"}


def test_rule_on_many_rows_and_ties():
    """pyfastdec/model_dir/int8_rows.py against the float64 formulation on 4000 rows of assorted
    magnitudes, and on exact halves, which round to even (not away from zero)."""
    from pyfastdec.model_dir.int8_rows import quantize_rows
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((4000, 64)) * np.exp(rng.uniform(-8, 3, size=(4000, 1)))).astype(np.float32)
    w[17] = 0.0
    w[18, :] = 0.0
    w[18, 3] = -2e-30  # a tiny row still spans +-127
    for rows in (w, near_halves(np.exp(rng.uniform(-6, 2, size=(2000, 64))).astype(np.float32), rng)):
        for got, want in zip(quantize_rows(rows), numpy_rule_float64(rows)):
            np.testing.assert_array_equal(got, want)
    ties = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5, -126.5]], np.float32)  # scale exactly 1
    q, scale = quantize_rows(ties)
    assert scale.tolist() == [1.0] and q.tolist() == [[127, 0, 2, 2, 0, -2, 126, -126]]


def test_writer_stores_what_the_converter_stores(spm, tmp_path):
    """write_model_dir's default for int8: the same int8 embedding as converting its
    float-embedding directory, so every writer agrees with the engine's load-time rule."""
    model = tiny_model(seed=50)
    scales = calibrate(model, [(s, s[:-1][::-1] + [EOS]) for s in random_sources(20, seed=50)])
    direct = write_model_dir(model, spm, tmp_path / "direct", act_scales=scales, int8=True)
    old = write_model_dir(model, spm, tmp_path / "old", act_scales=scales, int8=True, int8_embedding=False)
    a, b = tensors_of(direct), tensors_of(convert(old, tmp_path / "converted"))
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # A float32 model keeps its float32 embedding (int8_embedding applies to int8 only).
    plain = tensors_of(write_model_dir(model, spm, tmp_path / "f32"))
    assert plain["embed.weight"].dtype == np.float32 and "embed.weight_scale" not in plain


def test_all_zero_row_gets_scale_one(spm, tmp_path):
    model = tiny_model(seed=51)
    with torch.no_grad():
        model.embed.weight[7] = 0.0
    scales = calibrate(model, [(s, s[:-1]) for s in random_sources(10, seed=51)])
    t = tensors_of(write_model_dir(model, spm, tmp_path / "q", act_scales=scales, int8=True))
    assert t["embed.weight_scale"][7] == 1.0 and not t["embed.weight"][7].any()


def test_file_size_on_a_realistic_shape(tmp_path):
    """models/en-de's shape (V 8000, d 256, 6 encoder layers, 2 SSRU decoder layers):
    embed.weight goes from 4 V d to V d + 4 V bytes, the rest stays byte for byte."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="transformer", d_model=256, head_dim=64, vocab_size=8000, norm="pre",
                      encoder_layers=[LayerSpec(4, 1024)] * 6, decoder_layers=[LayerSpec(4, 1024)] * 2,
                      decoder_self="ssru", max_source_len=128)
    model = Seq2Seq(cfg)
    from export.writer import quantized_linears
    scales = {name: 20.0 for name in quantized_linears(model)}
    spm_file = SHIPPED / "spm.model"
    old = write_model_dir(model, spm_file, tmp_path / "old", act_scales=scales, int8=True, int8_embedding=False)
    new = write_model_dir(model, spm_file, tmp_path / "new", act_scales=scales, int8=True)
    size_old = (old / "model.safetensors").stat().st_size
    size_new = (new / "model.safetensors").stat().st_size
    V, d = 8000, 256
    # The header grows by one entry (~100 bytes) and alignment padding: within 1 KB.
    assert abs((size_old - size_new) - (3 * V * d - 4 * V)) < 1024
    assert size_new < 0.62 * size_old, (size_old, size_new)


# ----------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("rows", [1, 5])
def test_converted_directory_decodes_bit_identically(dirs, rows):
    old, new = dirs
    sources = random_sources(rows, seed=60 + rows)
    a = greedy_steps(NativeBackend(old, threads=1), sources, 8)
    b = greedy_steps(NativeBackend(new, threads=1), sources, 8)
    np.testing.assert_array_equal(b[1], a[1])
    np.testing.assert_array_equal(b[0], a[0])


def test_converted_directory_decodes_bit_identically_with_a_shortlist(dirs, tmp_path):
    old, new = dirs
    V = ModelDir.load(old).config.vocab_size
    rng = np.random.default_rng(3)
    per_source = {f: sorted(rng.choice(np.arange(5, V), size=4, replace=False).tolist()) for f in range(5, V)}
    indptr = np.zeros(V + 1, np.uint64)
    targets: list[int] = []
    for f in range(V):
        targets += per_source.get(f, [])
        indptr[f + 1] = len(targets)
    Shortlist(V, [EOS, 5, 6, 7], indptr, targets, best=4, first_fill_id=5).save(tmp_path / "sl.bin")
    for rows in (1, 4):
        sources = random_sources(rows, seed=70 + rows)
        a = greedy_steps(NativeBackend(old, threads=1, shortlist=tmp_path / "sl.bin"), sources, 6)
        b = greedy_steps(NativeBackend(new, threads=1, shortlist=tmp_path / "sl.bin"), sources, 6)
        np.testing.assert_array_equal(b[1], a[1])
        np.testing.assert_array_equal(b[0], a[0])
        full = greedy_steps(NativeBackend(new, threads=1, shortlist=False), sources, 1)[0]
        assert np.isinf(b[0][0]).sum() > np.isinf(full).sum()  # the shortlist did restrict


def test_torch_reference_reads_what_the_engine_reads(dirs):
    """read_model_dir gives the same float model for both forms (the float embedding goes
    through the int8 rule and back), and with simulate_int8 it stays as close to the
    native engine as test_native_engine's int8 bound requires."""
    old, new = dirs
    a, _ = read_model_dir(old)
    b, _ = read_model_dir(new)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    t = tensors_of(new)
    want = torch.from_numpy(t["embed.weight"].astype(np.float32) * t["embed.weight_scale"][:, None])
    assert torch.equal(b.embed.weight, want)

    sources = random_sources(6, seed=80)
    sim, _ = greedy_steps(TorchBackend.from_dir(new, simulate_int8=True), sources, 1)
    got, _ = greedy_steps(NativeBackend(new, threads=1), sources, 1)
    assert np.abs(got - sim).max() < 0.05 * np.abs(sim).max()


def test_float_twin_holds_the_int8_rows(dirs, tmp_path):
    from export.writer import write_float_twin
    _, new = dirs
    twin = tensors_of(write_float_twin(new, tmp_path / "twin"))
    t = tensors_of(new)
    assert twin["embed.weight"].dtype == np.float32
    np.testing.assert_array_equal(twin["embed.weight"],
                                  t["embed.weight"].astype(np.float32) * t["embed.weight_scale"][:, None])


def float_embedding_dir(int8_embedding_dir: Path, out: Path) -> Path:
    """The int8 directory with a float32 embedding that int8_embedding_dir converts from:
    its rows dequantised (q * scale, float32), quantization.embedding absent, every other
    tensor and file as it is. (write_model_dir(..., int8_embedding=False) from
    read_model_dir's model would re-quantise every linear too.)"""
    from pyfastdec.model_dir.int8_rows import dequantize_rows

    shutil.copytree(int8_embedding_dir, out)
    tensors = tensors_of(out)
    tensors["embed.weight"] = dequantize_rows(tensors["embed.weight"], tensors.pop("embed.weight_scale"))
    config = json.loads((out / "config.json").read_text())
    del config["quantization"]["embedding"]
    write_tensors(out, tensors, config)
    assert ModelDir.load(out).config.quantization.embedding is None
    return out


def test_float_embedding_dir_converts_back(dirs, tmp_path):
    """The helper the shipped-model test needs once models/en-de stores an int8 embedding:
    the derived float-embedding directory converts back to the very tensors and config
    (the near-tie rows of int8_dirs included) and decodes alike."""
    _, new = dirs
    derived = float_embedding_dir(new, tmp_path / "float-embed")
    back = convert(derived, tmp_path / "back")
    t, want = tensors_of(back), tensors_of(new)
    assert set(t) == set(want)
    for name in want:
        np.testing.assert_array_equal(t[name], want[name], err_msg=name)
    # All but the checksum: safetensors reads the file's metadata into a hash map, so the
    # copy may write its keys in another order, and the file's bytes differ.
    configs = [json.loads((d / "config.json").read_text()) for d in (back, new)]
    for c in configs:
        del c["checksum"]
    assert configs[0] == configs[1]
    sources = random_sources(3, seed=95)
    a = greedy_steps(NativeBackend(new, threads=1), sources, 6)
    b = greedy_steps(NativeBackend(derived, threads=1), sources, 6)
    np.testing.assert_array_equal(b[1], a[1])
    np.testing.assert_array_equal(b[0], a[0])


@pytest.mark.skipif(not (SHIPPED / "config.json").is_file(), reason="models/en-de is not in this checkout")
def test_shipped_model_loads_and_its_conversion_decodes_identically(tmp_path):
    """models/en-de as shipped (an int8 directory, with a float32 embedding until issue 14,
    an int8 one after) loads and decodes. Its float-embedding form (as shipped, or derived
    from the int8 rows) converted decodes identically and is smaller."""
    import sentencepiece

    shipped = NativeBackend(SHIPPED, threads=1, shortlist=False)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(SHIPPED / "spm.model"))
    sources = [sp.encode(s) + [EOS] for s in ("Two dogs play in the snow.", "A man is riding a bicycle.")]
    a = as_shipped = greedy_steps(shipped, sources, 6)
    assert "Hunde" in sp.decode(a[1][:, 0].tolist())
    old = SHIPPED
    if shipped.model_dir.config.quantization.embedding is not None:
        old = float_embedding_dir(SHIPPED, tmp_path / "float-embed")
        a = greedy_steps(NativeBackend(old, threads=1, shortlist=False), sources, 6)
    new = convert(old, tmp_path / "en-de")
    assert (new / "model.safetensors").stat().st_size < 0.62 * (old / "model.safetensors").stat().st_size
    b = greedy_steps(NativeBackend(new, threads=1, shortlist=False), sources, 6)
    np.testing.assert_array_equal(b[1], a[1])
    np.testing.assert_array_equal(b[0], a[0])
    assert (new / "shortlist.bin").read_bytes() == (SHIPPED / "shortlist.bin").read_bytes()
    if old != SHIPPED:
        # The round trip gives back the shipped rows: scale = max|row| / 127 survives
        # q * scale re-quantised (true for every row of en-de's int8 embedding).
        t, want = tensors_of(new), tensors_of(SHIPPED)
        for name in ("embed.weight", "embed.weight_scale"):
            np.testing.assert_array_equal(t[name], want[name], err_msg=name)
        np.testing.assert_array_equal(a[0], as_shipped[0])
        np.testing.assert_array_equal(a[1], as_shipped[1])


# ----------------------------------------------------------------------------- other readers
def test_ctranslate2_converts_both_forms_alike(spm, tmp_path):
    """pyfastdec.convert reads the int8 rows either way: the converted models are equal
    byte for byte, and CTranslate2 float32 greedy on them equals the torch reference on
    read_model_dir's weights (the pattern of test_convert_ct2, which checks the logits)."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the CTranslate2 converter needs the 'bench' extra")
    from export.decode import greedy
    from export.tiny import tiny_config
    from pyfastdec.convert.ctranslate2_export import to_ctranslate2
    from pyfastdec.convert.weights import float_weights
    cfg = tiny_config()  # CTranslate2 has one head count per stack
    cfg.encoder_layers, cfg.decoder_layers = [LayerSpec(2, 24), LayerSpec(2, 32)], [LayerSpec(4, 16), LayerSpec(4, 40)]
    torch.manual_seed(54)
    old, new = int8_dirs(spm, tmp_path, seed=54, model=Seq2Seq(cfg).eval())
    a, b = float_weights(ModelDir.load(old)), float_weights(ModelDir.load(new))
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    t = tensors_of(new)
    np.testing.assert_array_equal(b["embed.weight"], t["embed.weight"] * t["embed.weight_scale"][:, None])
    x = to_ctranslate2(old, tmp_path / "a")
    y = to_ctranslate2(new, tmp_path / "b")
    assert (x / "model.bin").read_bytes() == (y / "model.bin").read_bytes()
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    tr = ctranslate2.Translator(str(y), device="cpu", compute_type="float32", inter_threads=1, intra_threads=1)
    sources = random_sources(8, seed=55)
    got = tr.translate_batch([[pieces[i] for i in s[:-1]] for s in sources], beam_size=1,
                             min_decoding_length=0, max_decoding_length=10)
    want = greedy(read_model_dir(new)[0], sources, max_len=10)
    assert [[pieces.index(p) for p in r.hypotheses[0]] for r in got] == want


def test_onnx_export_of_an_int8_embedding_directory(dirs, tmp_path):
    """The float32 graphs of the int8-embedding directory match torch on read_model_dir's
    weights (test_onnx_backend's bound) and the graphs of the float-embedding directory."""
    pytest.importorskip("onnxruntime", reason="the onnx backend needs the 'bench' extra (onnxruntime)")
    pytest.importorskip("onnx", reason="the onnx export needs the 'bench' extra (onnx)")
    from export.onnx_export import export_model_dir
    from pyfastdec.backends.onnx import OnnxBackend
    old, new = dirs
    sources = random_sources(4, seed=90)
    want, _ = greedy_steps(TorchBackend.from_dir(new), sources, 5)
    got, _ = greedy_steps(OnnxBackend(export_model_dir(new, tmp_path / "new"), threads=1), sources, 5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want[np.isfinite(want)]).max())
    from_old, _ = greedy_steps(OnnxBackend(export_model_dir(old, tmp_path / "old"), threads=1), sources, 5)
    np.testing.assert_array_equal(got, from_old)


# ----------------------------------------------------------------------------- bad input
@pytest.fixture()
def broken(dirs, tmp_path):
    """A writable copy of the int8-embedding directory."""
    path = tmp_path / "broken"
    shutil.copytree(dirs[1], path)
    return path


def refused(path: Path, message: str) -> None:
    with pytest.raises(ModelDirError) as err:
        ModelDir.load(path)
    assert re.fullmatch(message, str(err.value)), str(err.value)
    assert "\n" not in str(err.value)


def test_refuses_missing_scale(broken):
    t = tensors_of(broken)
    del t["embed.weight_scale"]
    write_tensors(broken, t)
    refused(broken, re.escape(f"{broken / 'model.safetensors'}: embed.weight_scale: missing tensor") + r" \(expected F32 \[\d+\].*")


def test_refuses_scale_of_wrong_shape(broken):
    t = tensors_of(broken)
    t["embed.weight_scale"] = t["embed.weight_scale"][:-1].copy()
    write_tensors(broken, t)
    refused(broken, re.escape(f"{broken / 'model.safetensors'}: embed.weight_scale: shape [39] (expected [40])"))


@pytest.mark.parametrize("bad,shown", [(0.0, "0.0"), (-0.01, "-0.01"), (float("nan"), "nan")])
def test_refuses_zero_negative_or_nan_scale(broken, bad, shown):
    t = tensors_of(broken)
    t["embed.weight_scale"][11] = bad
    write_tensors(broken, t)
    refused(broken, re.escape(f"{broken / 'model.safetensors'}: embed.weight_scale: {shown} at [11]")
            + r", 1 such value\(s\) in all \(expected finite scales > 0 and <= 78\.74\)")


def test_refuses_float_embedding_declared_int8(dirs, tmp_path):
    """quantization.embedding set, but the file still holds the float32 embedding."""
    old = shutil.copytree(dirs[0], tmp_path / "declared")
    config = json.loads((old / "config.json").read_text())
    config["quantization"]["embedding"] = "int8_per_row"
    write_tensors(old, tensors_of(old), config)
    refused(old, re.escape(f"{old / 'model.safetensors'}: embed.weight_scale: missing tensor") + ".*")


def test_refuses_unknown_embedding_value(broken):
    config = json.loads((broken / "config.json").read_text())
    config["quantization"]["embedding"] = "int4_per_row"
    write_tensors(broken, tensors_of(broken), config)
    refused(broken, re.escape(f'{broken / "config.json"}: quantization.embedding: "int4_per_row" '
                              f'(expected "int8_per_row", null or no field)'))


def test_refuses_int8_embedding_in_a_float32_model(broken):
    config = json.loads((broken / "config.json").read_text())
    config["quantization"] = None
    tensors = tensors_of(broken)
    for name in [n for n in tensors if n.endswith(".weight_scale") and n != "embed.weight_scale"]:
        weight = name[: -len("_scale")]
        tensors[weight] = tensors[weight].astype(np.float32) * tensors.pop(name)[:, None]
    # Every linear is float32 now; only the embedding (and its scale) stay int8.
    write_tensors(broken, tensors, config)
    message = re.escape(f"{broken / 'model.safetensors'}: embed.weight: dtype I8 (expected F32: config.json "
                        "quantization is null, and only int8 models store an int8 embedding)")
    refused(broken, message)
    del tensors["embed.weight_scale"]  # without its scale too
    write_tensors(broken, tensors, config)
    refused(broken, message)


def test_engine_refuses_int8_embedding_in_a_float32_model(spm, tmp_path):
    """The engine's own check, for callers that hand it tensors without ModelDir."""
    path = write_model_dir(tiny_model(seed=52), spm, tmp_path / "f32")
    md = ModelDir.load(path)
    tensors = dict(md.tensors)
    q = np.zeros(tensors["embed.weight"].shape, np.int8)
    tensors["embed.weight"] = q
    tensors["embed.weight_scale"] = np.ones(q.shape[0], np.float32)
    with pytest.raises(ValueError, match=r"^tensor 'embed\.weight': int8 in a float32 model"):
        _engine.Model(engine_config(md.config), tensors, {}, 1)


def test_engine_refuses_int8_embedding_without_scale(dirs):
    md = ModelDir.load(dirs[1])
    tensors = {n: t for n, t in md.tensors.items() if n != "embed.weight_scale"}
    with pytest.raises(ValueError, match=r"^missing tensor 'embed\.weight_scale'"):
        _engine.Model(engine_config(md.config), tensors, dict(md.config.quantization.activation_scales), 1)
    tensors["embed.weight_scale"] = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"^tensor 'embed\.weight_scale': expected float32 \[40\], got float32 \[3\]"):
        _engine.Model(engine_config(md.config), tensors, dict(md.config.quantization.activation_scales), 1)


def test_converter_refuses_float32_and_already_converted(dirs, spm, tmp_path, capsys):
    _, new = dirs
    assert convert_main([str(new), "--out", str(tmp_path / "again")]) == 1
    assert capsys.readouterr().out == (f"export.int8_embedding: {new / 'config.json'}: quantization.embedding: "
                                       "already 'int8_per_row' (nothing to convert)\n")
    assert not (tmp_path / "again").exists()
    f32 = write_model_dir(tiny_model(seed=53), spm, tmp_path / "f32")
    assert convert_main([str(f32)]) == 1
    assert "quantization: null (expected an int8 model directory" in capsys.readouterr().out


def test_converter_in_place_is_atomic(dirs, tmp_path, monkeypatch):
    """In place: MODEL_DIR is replaced only by a complete directory; a failure while
    writing leaves it as it was (and no temporary directory behind)."""
    old = shutil.copytree(dirs[0], tmp_path / "m")
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    import export.int8_embedding as mod

    def fail(*_a, **_k):
        raise OSError("disk full")
    monkeypatch.setattr(mod, "save_file", fail)
    from pyfastdec.model_dir.staging import ConvertOutputError

    with pytest.raises(ConvertOutputError, match=f"{old}: cannot write: disk full"):  # never the staging path
        convert(old)
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    monkeypatch.undo()
    assert convert_main([str(old)]) == 0
    assert ModelDir.load(old).config.quantization.embedding == "int8_per_row"
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(old / "model.safetensors") == mode(dirs[0] / "model.safetensors")
