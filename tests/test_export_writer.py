"""Model directories: writer -> reader round trips, int8 export, and clear refusals."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from export.calibrate import calibrate
from export.tiny import random_sources, tiny_model, tiny_spm
from export.torch_backend import TorchBackend
from export.writer import quantize_weight, quantized_linears, read_model_dir, write_model_dir
from pyfastdec.backends.base import Want

torch.set_num_threads(1)
KINDS = [dict(), dict(norm="post"), dict(decoder_self="ssru"), dict(decoder_self="ssru", norm="post"),
         dict(arch="nat-drafter")]
IDS = ["attn-pre", "attn-post", "ssru-pre", "ssru-post", "drafter"]


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def outputs(be: TorchBackend, srcs):
    mem = be.encode(srcs)
    if be.arch == "nat-drafter":
        d = be.draft(mem, [[], [6, 7]][: len(srcs)], 3)
        return np.concatenate([d.ids.astype(np.float32), d.logprobs], 1)
    state = be.start(mem)
    return be.step(state, np.array([[2, 5, 6, 7]] * len(srcs)), Want(logprobs=True)).logprobs


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_round_trip_is_exact(kind, spm, tmp_path):
    model = tiny_model(**kind)
    write_model_dir(model, spm, tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["format"] == "fastdec" and cfg["version"] == 1 and cfg["quantization"] is None
    loaded, _ = read_model_dir(tmp_path / "m")
    # The file holds exactly the state_dict: names, shapes and values.
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    sd = model.state_dict()
    assert set(tensors) == set(sd)
    for k in sd:
        assert torch.equal(tensors[k], sd[k]), k
    srcs = random_sources(2, seed=11)
    np.testing.assert_array_equal(outputs(TorchBackend(model), srcs), outputs(TorchBackend(loaded), srcs))


@pytest.mark.parametrize("kind", [dict(), dict(decoder_self="ssru")], ids=["attn", "ssru"])
def test_int8_export(kind, spm, tmp_path):
    model = tiny_model(**kind)
    pairs = [(s[:-1], s[:-1][::-1]) for s in random_sources(40, seed=12)]
    scales = calibrate(model, pairs, batch_size=8)
    assert set(scales) == set(quantized_linears(model)) and all(v > 0 for v in scales.values())
    write_model_dir(model, spm, tmp_path / "q", act_scales=scales, int8=True, calibration={"data": "synthetic"})
    tensors = load_file(str(tmp_path / "q" / "model.safetensors"))
    lin = quantized_linears(model)[0]
    assert tensors[f"{lin}.weight"].dtype == torch.int8
    assert tensors[f"{lin}.weight_scale"].shape == (tensors[f"{lin}.weight"].shape[0],)
    # The tied embedding is int8 per row too (test_int8_embedding.py checks its values).
    assert tensors["embed.weight"].dtype == torch.int8
    assert tensors["embed.weight_scale"].shape == (tensors["embed.weight"].shape[0],)
    # Every row uses the full int8 range at its largest weight.
    assert (tensors[f"{lin}.weight"].abs().amax(1) == 127).all()
    cfg = json.loads((tmp_path / "q" / "config.json").read_text())
    assert cfg["quantization"]["weights"] == "int8" and cfg["quantization"]["embedding"] == "int8_per_row"
    assert set(cfg["quantization"]["activation_scales"]) == set(scales)
    srcs = random_sources(2, seed=13)
    ref = outputs(TorchBackend(model), srcs)
    deq = outputs(TorchBackend(read_model_dir(tmp_path / "q")[0]), srcs)
    sim = outputs(TorchBackend(read_model_dir(tmp_path / "q", simulate_int8=True)[0]), srcs)
    assert np.abs(deq - ref).max() < 0.05
    assert np.abs(sim - ref).max() < 0.15


def test_quantize_weight_per_row():
    w = torch.tensor([[0.5, -1.0, 0.25], [2.0, 1.0, -0.5]])
    q, scale = quantize_weight(w)
    assert q.tolist() == [[64, -127, 32], [127, 64, -32]]
    torch.testing.assert_close(scale, torch.tensor([1.0 / 127, 2.0 / 127]))
    assert (q.float() * scale[:, None] - w).abs().max() <= scale.max() / 2 + 1e-7


def written(spm, tmp_path, **kind):
    write_model_dir(tiny_model(**kind), spm, tmp_path / "m")
    return tmp_path / "m"


def test_refuses_unknown_version(spm, tmp_path):
    d = written(spm, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["version"] = 2
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json: version: unsupported version 2"):
        read_model_dir(d)


def test_refuses_missing_field(spm, tmp_path):
    d = written(spm, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["head_dim"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json: head_dim: missing"):
        read_model_dir(d)


def test_refuses_missing_and_misshaped_tensors(spm, tmp_path):
    d = written(spm, tmp_path, decoder_self="ssru")
    tensors = load_file(str(d / "model.safetensors"))
    name = "decoder.layers.1.ssru.wf.bias"
    save_file({k: v for k, v in tensors.items() if k != name}, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.safetensors: decoder\.layers\.1\.ssru\.wf\.bias: missing tensor"):
        read_model_dir(d)
    tensors["encoder.layers.0.ffn.fc1.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.safetensors: encoder\.layers\.0\.ffn\.fc1\.weight: shape \[3, 3\]"):
        read_model_dir(d)


def test_refuses_truncated_weights(spm, tmp_path):
    d = written(spm, tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors: .*\(file truncated\?\)"):
        read_model_dir(d)


def test_refuses_vocab_mismatch(spm, tmp_path):
    # The writer loads what it wrote as pyfastdec will, so the mismatch is refused at once.
    with pytest.raises(ValueError, match=r"spm\.model: vocabulary size: 40 pieces \(expected vocab_size 48"):
        write_model_dir(tiny_model(vocab_size=48), spm, tmp_path / "m")


def test_drafter_calibration_sees_mask_tokens():
    """A drafter's decoder reads prefix + k mask tokens; its scales must come from those
    inputs. A mask embedding that is one large spike becomes, after the pre-norm layer
    norm, a vector with one entry near sqrt(d_model): the decoder's first multiplier must
    fall (teacher-forced calibration, which never feeds a mask token, would not change)."""
    pairs = [(list(range(5, 12)), list(range(12, 22)))] * 6
    drafter = tiny_model(seed=21, arch="nat-drafter")
    before = calibrate(drafter, pairs)
    with torch.no_grad():
        drafter.embed.weight[drafter.mask_id] = 0.0
        drafter.embed.weight[drafter.mask_id, 0] = 1000.0
    after = calibrate(drafter, pairs)
    first = "decoder.layers.0.self_attn.q"
    assert after[first] < 0.8 * before[first]
    assert after["encoder.layers.0.self_attn.q"] == pytest.approx(before["encoder.layers.0.self_attn.q"])
