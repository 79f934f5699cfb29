"""config.json as the engine modules read it: one reader, csrc/py_config.cc, for the CPU
engine (pyfastdec._engine) and the GPU model (pyfastdec._engine_gpuref here, _engine_cuda
on a GPU). Both refuse the same broken configs with the same message. That the GPU model
reads the optional fields for models trained elsewhere (activation, layer_norm_eps,
positions, suppress) as the PyTorch reference computes with them is checked beside the CPU
engine's case, in test_foreign_model_fields.test_greedy_equals_torch_reference."""
from __future__ import annotations

import importlib

import pytest

from pyfastdec import _engine
from pyfastdec.backends.native import engine_config
from pyfastdec.model_dir import ModelDir

from gpu_cases import MODELS


def modules():
    """(name, Model constructor) of each engine module built here; the GPU model's only
    where FASTDEC_GPU_REFERENCE=1 or FASTDEC_CUDA=1 built it."""
    out = [("_engine", lambda cfg: _engine.Model(cfg, {}, {}, 1))]
    try:
        gpuref = importlib.import_module("pyfastdec._engine_gpuref")
        out.append(("_engine_gpuref", lambda cfg: gpuref.Model(cfg, {})))
    except ImportError:
        pass
    return out


def refusals(config: dict) -> dict[str, str]:
    """Per module, the message of the ValueError its Model raises for config, or
    "accepted"."""
    out = {}
    for name, make in modules():
        try:
            make(config)
            out[name] = "accepted"
        except ValueError as err:
            out[name] = str(err)
    return out


# pyfastdec/model_dir refuses all of these first; the engines check them again because a
# wrong value there would read past a table or run a model the engine cannot run.
@pytest.mark.parametrize("field,value,message", [
    ("arch", "bert", "config: arch 'bert' is not transformer or nat-drafter"),
    ("activation", "tanh", "config: activation 'tanh' is not relu, swish or gelu"),
    ("positions", "rope", "config: positions 'rope' is not interleaved, halves or marian"),
    ("suppress", [5, 8000], "config: suppress id 8000 outside the vocabulary"),
    ("suppress", [-1], "config: suppress id -1 outside the vocabulary"),
    ("arch", "nat-drafter", "config: a nat-drafter needs a mask token and an attention decoder"),  # en-de: SSRU
], ids=["arch", "activation", "positions", "suppress-high", "suppress-negative", "ssru-drafter"])
def test_every_module_refuses_a_broken_config_alike(field, value, message):
    cfg = engine_config(ModelDir.load(MODELS / "en-de").config)
    assert refusals({**cfg, field: value}) == {name: message for name, _ in modules()}


def test_a_drafter_without_a_mask_token_is_refused():
    cfg = engine_config(ModelDir.load(MODELS / "en-de-drafter").config)
    del cfg["tokens"]["mask"]
    assert refusals(cfg) == {
        name: "config: a nat-drafter needs a mask token and an attention decoder" for name, _ in modules()}
