"""Structured pruning (export/prune_groups.py, export/prune.py): slicing removes exactly
the zeroed groups, pruned models run the same on the engine as on the torch reference,
lossless strategies stay lossless on them, and the prune command runs end to end."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pruning needs the 'test' extra (torch)")

from safetensors.numpy import load_file

from export.prune import main as prune_main
from export.prune_groups import group_lasso_prox, group_sets, slice_model
from export.tiny import random_sources, tiny_model, tiny_spm
from export.tiny_task import task_sources, trained_drafter, trained_verifier
from export.torch_backend import TorchBackend
from export.writer import read_model_dir, write_model_dir
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.blockwise import blockwise
from pyfastdec.decoding.gad import gad
from pyfastdec.decoding.greedy import greedy
from pyfastdec.decoding.iad import iad

from test_export_train import corpus  # noqa: F401  (fixture: a synthetic Multi30k)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def some_removed(model, seed: int) -> dict[str, list[int]]:
    """A different, non-empty choice of groups in every layer (never all of them)."""
    rng = np.random.default_rng(seed)
    out = {}
    for gs in group_sets(model):
        n = int(rng.integers(1, gs.count))  # 1 .. count-1 removed
        out[gs.name] = sorted(int(g) for g in rng.choice(gs.count, n, replace=False))
    return out


def zeroed(model, removed):
    group_lasso_prox(group_sets(model), {}, 0.0, {k: set(v) for k, v in removed.items()})
    return model


def logits_of(model, sources, targets):
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sources], batch_first=True,
                                          padding_value=model.pad)
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor([model.bos] + t) for t in targets], batch_first=True,
                                          padding_value=model.pad)
    with torch.no_grad():
        return model(src, tgt)


@pytest.mark.parametrize("kind", [{}, {"decoder_self": "ssru"}, {"norm": "post"}])
def test_slicing_equals_the_zeroed_model(kind):
    model = tiny_model(seed=3, **kind)
    removed = some_removed(model, seed=4)
    ref = zeroed(model, removed)
    sliced = slice_model(ref, removed)
    for gs, before in zip(group_sets(sliced), group_sets(ref)):
        assert gs.count == before.count - len(removed[gs.name])  # exactly the removed ones left
    sources = random_sources(6, seed=5)
    targets = [s[:-1][::-1] for s in sources]
    np.testing.assert_allclose(logits_of(sliced, sources, targets), logits_of(ref, sources, targets),
                               rtol=0, atol=2e-5)
    # ... and not because the groups did not matter: the unzeroed model differs.
    full = logits_of(tiny_model(seed=3, **kind), sources, targets)
    assert (full - logits_of(ref, sources, targets)).abs().max() > 1e-2


def test_slicing_a_drafter_equals_the_zeroed_drafter():
    model = tiny_model(seed=6, arch="nat-drafter")
    removed = some_removed(model, seed=7)
    ref = zeroed(model, removed)
    sliced = slice_model(ref, removed)
    a, b = TorchBackend(ref), TorchBackend(sliced)
    sources = random_sources(5, seed=8)
    prefixes = [[], [7], [8, 9], [10, 11, 12], [13]]
    da = a.draft(a.encode(sources), prefixes, 4)
    db = b.draft(b.encode(sources), prefixes, 4)
    np.testing.assert_array_equal(db.ids, da.ids)
    np.testing.assert_allclose(db.logprobs, da.logprobs, atol=1e-5)


def test_zeroed_groups_stay_zero_and_the_penalty_shrinks_groups():
    model = tiny_model(seed=9)
    sets = group_sets(model)
    before = [gs.norms().clone() for gs in sets]
    removed = {sets[0].name: {0}}
    group_lasso_prox(sets, {"enc_ffn": 0.5}, 1e-3, removed)
    after = [gs.norms() for gs in sets]
    assert after[0][0] == 0 and torch.equal(after[0][1:], before[0][1:])  # heads: only the removed one
    for gs, b, a in zip(sets, before, after):
        if gs.kind == "enc_ffn":  # every unit shrank by lr * strength * sqrt(size), or to zero
            expected = torch.clamp(b - 1e-3 * 0.5 * gs.size ** 0.5, min=0)
            torch.testing.assert_close(a, expected, rtol=1e-5, atol=1e-6)
        elif gs.kind != "enc_heads":
            assert torch.equal(a, b)


@pytest.fixture(scope="module")
def pruned_verifier():
    """The tiny TRAINED verifier with the lowest-norm quarter of each layer's FFN units
    and one head per 4-head layer sliced away: a pruned model whose outputs still vary
    from source to source (non-degenerate) and whose layers all differ in shape."""
    model = trained_verifier("attention")
    removed = {}
    for gs in group_sets(model):
        order = torch.argsort(gs.norms())
        n = max(1, gs.count // 4) if not gs.kind.endswith("heads") else (1 if gs.count >= 4 else 0)
        removed[gs.name] = sorted(int(g) for g in order[:n])
    return slice_model(zeroed(model, removed), removed)


def test_pruned_model_engine_equals_torch_and_strategies_stay_lossless(pruned_verifier, spm, tmp_path):
    cfg = pruned_verifier.cfg
    shapes = [(l.heads, l.ffn) for l in cfg.encoder_layers + cfg.decoder_layers]
    assert len(set(shapes)) == len(shapes)  # every layer its own shape
    sources = task_sources(40, seed=11)
    torch_out, _ = greedy(TorchBackend(pruned_verifier), sources)
    assert len({tuple(o) for o in torch_out}) > 30  # non-degenerate
    native = NativeBackend(write_model_dir(pruned_verifier, spm, tmp_path / "f32"), threads=1)
    for batch in (1, 7):
        got = []
        for i in range(0, len(sources), batch):
            got += greedy(native, sources[i:i + batch])[0]
        assert got == torch_out
    drafter = NativeBackend(write_model_dir(trained_drafter(), spm, tmp_path / "drafter"), threads=1)
    assert iad(native, sources, policy=None)[0] == torch_out
    assert gad(native, drafter, sources)[0] == torch_out
    # blockwise needs proposal heads: random ones (some proposals right, most wrong)
    with_heads = copy.deepcopy(pruned_verifier).add_heads(3, 8)
    heads = NativeBackend(write_model_dir(with_heads, spm, tmp_path / "heads"), threads=1)
    assert blockwise(heads, sources, policy=None)[0] == torch_out


def test_pruned_model_int8_agrees_with_float(pruned_verifier, spm, tmp_path):
    from export.calibrate import calibrate
    from export.tiny_task import translate

    pairs = [(s[:-1], translate(s)) for s in task_sources(64, seed=5)]
    path = write_model_dir(pruned_verifier, spm, tmp_path / "i8", act_scales=calibrate(pruned_verifier, pairs),
                           int8=True)
    sources = task_sources(40, seed=12)
    want, _ = greedy(TorchBackend(pruned_verifier), sources)
    got, _ = greedy(NativeBackend(path, threads=1), sources)
    same = sum(a == b for a, b in zip(got, want)) / len(want)
    # The tiny task's model is trained here, and torch trains it differently per CPU
    # (AVX-512 or AVX2 kernels): its int8 agreement was 0.9+ on AVX-512 machines and is
    # 0.875 on these 40 (0.82 on 400) on an AVX2-only one, float32 1.0 on both. A broken
    # slice of int8 scales agrees on almost nothing.
    assert same >= 0.8, same


def test_prune_command_writes_a_sliced_int8_directory_and_resumes(corpus, spm):  # noqa: F811
    source = write_model_dir(tiny_model(seed=13), spm, corpus / "source")
    run = corpus / "run"
    args = [str(source), "--recipe", "test-tiny", "--run", str(run), "--keep",
            "enc_heads=0.5,enc_ffn=0.5,dec_heads=0.5,dec_ffn=0.5", "--min-ffn", "4", "--lasso-minutes", "0.04",
            "--finetune-minutes", "0.02", "--batch-tokens", "200", "--threads", "1"]
    prune_main(args)
    report = json.loads((run / "report.json").read_text())
    model, _ = read_model_dir(run / "model")
    cfg = model.cfg
    assert cfg.quantization is not None
    before = tiny_model(seed=13).cfg
    removed_heads = sum(b.heads - a.heads for b, a in zip(before.encoder_layers, cfg.encoder_layers))
    assert removed_heads == report["targets"]["enc_heads"] == round(6 * 0.5)
    removed_ffn = sum(b.ffn - a.ffn for b, a in zip(before.decoder_layers, cfg.decoder_layers))
    assert removed_ffn == report["targets"]["dec_ffn"] == round((16 + 40) * 0.5)
    assert [row["ffn"][1] for row in report["layers"]] == [l.ffn for l in cfg.encoder_layers + cfg.decoder_layers]
    assert (run / "report.md").read_text().startswith("| layer |")
    # Running it again resumes from the finished stages and rewrites the same model.
    first = load_file(str(run / "model" / "model.safetensors"))
    first_config = json.loads((run / "model" / "config.json").read_text())
    prune_main(args)
    again = load_file(str(run / "model" / "model.safetensors"))
    assert set(again) == set(first) and all(np.array_equal(again[k], first[k]) for k in first)
    assert json.loads((run / "model" / "config.json").read_text())["quantization"] == first_config["quantization"]


@pytest.mark.parametrize("stack, i, field, value, tensor", [
    ("encoder", 1, "ffn", 48, "encoder.layers.1.ffn.fc1.weight"),
    ("decoder", 0, "heads", 3, "decoder.layers.0.self_attn.q.weight"),
])
def test_layer_sizes_that_do_not_match_the_tensors_are_refused(spm, tmp_path, stack, i, field, value, tensor):
    from pyfastdec.model_dir import ModelDir, ModelDirError

    path = write_model_dir(tiny_model(seed=1), spm, tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    cfg.pop("checksum")  # a hand-edited config, as a user would write it
    cfg[stack]["layers"][i][field] = value
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError) as err:
        ModelDir.load(path)
    assert tensor in str(err.value) and f"{stack}.layers[{i}].{field} {value}" in str(err.value)


def test_pruned_model_runs_in_the_onnx_export(pruned_verifier, spm, tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx backend needs the 'bench' extra (onnxruntime)")
    pytest.importorskip("onnx", reason="the onnx export needs the 'bench' extra (onnx)")
    from export.onnx_export import main as export_main
    from pyfastdec.backends.onnx import OnnxBackend

    path = write_model_dir(pruned_verifier, spm, tmp_path / "model")
    assert export_main([str(path), str(tmp_path / "onnx")]) == 0
    sources = task_sources(20, seed=13)
    assert greedy(OnnxBackend(tmp_path / "onnx", threads=1), sources)[0] == \
        greedy(TorchBackend(pruned_verifier), sources)[0]


def test_a_dead_ffn_calibrates_to_a_valid_int8_directory(spm, tmp_path):
    """Pruning can leave a layer whose remaining FFN units never fire (the drafter's
    encoder layer 1 did): its fc2 input is all zeros, calibration must still give a
    multiplier the format accepts, and the int8 model decodes like the float one."""
    from export.calibrate import calibrate
    from pyfastdec.model_dir import MAX_ACTIVATION_SCALE

    model = tiny_model(seed=17)
    with torch.no_grad():
        model.encoder.layers[0].ffn.fc1.bias.fill_(-100.0)  # relu(x W + b) = 0 for every input
    pairs = [(s[:-1], s[:-1][::-1]) for s in random_sources(30, seed=18)]
    scales = calibrate(model, pairs)
    assert scales["encoder.layers.0.ffn.fc2"] == MAX_ACTIVATION_SCALE
    path = write_model_dir(model, spm, tmp_path / "i8", act_scales=scales, int8=True)
    sources = random_sources(8, seed=19)
    want, _ = greedy(TorchBackend(model), sources)
    got, _ = greedy(NativeBackend(path, threads=1), sources)
    assert sum(a == b for a, b in zip(got, want)) >= 6
