"""The optional config.json fields for models trained elsewhere (export/FORMAT.md:
activation, layer_norm_eps, positions, suppress; tokens without mask, bos = pad): the
native engine against the PyTorch reference (export.modeling), and the layer-norm eps
on every ISA against numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernel_reference import available_isas  # noqa: E402

from export.modeling import Seq2Seq, sinusoidal_positions  # noqa: E402
from export.tiny import random_sources, tiny_config, tiny_spm  # noqa: E402
from export.torch_backend import TorchBackend  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec import _engine  # noqa: E402
from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.decoding.greedy import greedy  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError  # noqa: E402

SUPPRESS = [5, 7, 16]


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def write(tmp_path, spm, **fields):
    cfg = tiny_config(norm="post")
    for name, value in fields.items():
        setattr(cfg, name, value)
    torch.manual_seed(0)
    model = Seq2Seq(cfg)
    with torch.no_grad():  # wide weights: outputs that depend on every detail
        for p in model.parameters():
            p.mul_(3)
    return write_model_dir(model, spm, tmp_path / "model")


def native(out):
    return NativeBackend(ModelDir.load(out), threads=1)


def gpu_reference(out):
    """The GPU model (csrc/cuda/gpu_model.cc) over the reference ops: it reads config.json
    through the same csrc/py_config.cc as the CPU engine, so the fields must reach it too."""
    pytest.importorskip("pyfastdec._engine_gpuref", reason="built with FASTDEC_GPU_REFERENCE=1 or FASTDEC_CUDA=1")
    from pyfastdec.backends.cuda import CudaBackend

    return CudaBackend(out, ops="reference")


@pytest.mark.parametrize("make", [native, gpu_reference], ids=["native", "gpuref"])
@pytest.mark.parametrize("fields", [
    {"activation": "swish", "positions": "halves", "layer_norm_eps": 1e-6},
    {"activation": "gelu", "positions": "marian", "layer_norm_eps": 1e-2},
    {"activation": "relu", "positions": "interleaved", "layer_norm_eps": 1e-3},
], ids=["swish-halves", "gelu-marian", "relu-eps"])
def test_greedy_equals_torch_reference(tmp_path, spm, fields, make):
    out = write(tmp_path, spm, suppress=SUPPRESS, **fields)
    config = json.loads((out / "config.json").read_text())
    defaults = {"positions": "interleaved"}  # written only when not the default
    assert {k: config.get(k, defaults.get(k)) for k in fields} == fields and config["suppress"] == SUPPRESS
    sources = random_sources(40)
    got, _ = greedy(make(out), sources, max_len=20)
    reference, _ = greedy(TorchBackend.from_dir(out), sources, max_len=20)
    assert got == reference
    assert len({tuple(o) for o in got}) >= 5
    assert not {t for o in got for t in o} & set(SUPPRESS)


def test_suppressed_ids_are_never_generated(tmp_path, spm):
    out = write(tmp_path, spm)
    sources = random_sources(40)
    free, _ = greedy(NativeBackend(ModelDir.load(out), threads=1), sources, max_len=20)
    banned = sorted({t for o in free for t in o})[:3]  # ids this model does generate
    config = json.loads((out / "config.json").read_text())
    config["suppress"] = banned
    config.pop("checksum")
    (out / "config.json").write_text(json.dumps(config))
    md = ModelDir.load(out)
    state = NativeBackend(md, threads=1)
    got, _ = greedy(state, sources, max_len=20)
    assert not {t for o in got for t in o} & set(banned)
    # Their log-probs are -inf and the others renormalise without them.
    be = NativeBackend(md, threads=1)
    s = be.start(be.encode(sources[:1]))
    out_step = be.step(s, np.array([[md.config.tokens["bos"]]]), Want(argmax=False, ids=np.array([[banned[0]]])))
    assert out_step.id_logprobs[0, 0] == -np.inf


def test_positions_tables():
    p = torch.arange(50)
    for layout in ("halves", "marian"):
        table = sinusoidal_positions(p, 16, layout).numpy()
        assert np.allclose(table[:, :8] ** 2 + table[:, 8:] ** 2, 1.0, atol=1e-6)
    halves = sinusoidal_positions(p, 16, "halves").numpy()
    interleaved = sinusoidal_positions(p, 16).numpy()
    np.testing.assert_allclose(halves[:, :8], interleaved[:, 0::2], atol=2e-5)  # same frequencies
    marian = sinusoidal_positions(p, 16, "marian").numpy()
    assert np.allclose(marian[:, 7], np.sin(p.numpy() * np.exp(-7 * np.log(10000.0) / 7)), atol=1e-5)


def test_tokens_without_mask_and_bos_equal_pad():
    from pyfastdec.model_dir import parse_config

    base = {"format": "fastdec", "version": 1, "arch": "transformer", "d_model": 8, "head_dim": 4, "vocab_size": 10,
            "norm": "post", "activation": "swish", "encoder": {"layers": [{"heads": 2, "ffn": 8}]},
            "decoder": {"self": "attention", "layers": [{"heads": 2, "ffn": 8}]},
            "tokens": {"pad": 9, "unk": 1, "bos": 9, "eos": 0}, "max_source_len": 16, "quantization": None}
    assert parse_config(base).tokens == {"pad": 9, "unk": 1, "bos": 9, "eos": 0}
    for change, message in (({"tokens": dict(base["tokens"], eos=9)}, r"tokens\.eos: id 9 is also tokens\.pad"),
                            ({"arch": "nat-drafter", "block_size": 2}, r"tokens\.mask: missing"),
                            ({"suppress": [0]}, r"suppress\[0\]: 0 \(expected .* not tokens\.eos"),
                            ({"suppress": [3, 3]}, r"suppress\[1\]: 3"),
                            ({"layer_norm_eps": 0}, r"layer_norm_eps: 0 \(expected a number from 1e-12"),
                            ({"positions": "rope"}, r"positions: \"rope\" \(expected \"interleaved\""),
                            ({"tokenizer": "bpe"}, r"tokenizer: \"bpe\" \(expected \"spm\" or \"marian\"")):
        with pytest.raises(ModelDirError, match=message):
            parse_config({**base, **change})


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_layer_norm_eps(isa, eps):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 65)) * 0.05).astype(np.float32)  # small variance: eps matters
    gamma, beta = rng.standard_normal(65).astype(np.float32), rng.standard_normal(65).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(1, keepdims=True) + eps) * gamma + beta
    np.testing.assert_allclose(_engine.layer_norm(x, gamma, beta, isa=isa, eps=eps), want, rtol=1e-4, atol=1e-4)
