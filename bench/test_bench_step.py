"""pytest-benchmark suite of one decoder step, so regressions of the engine (not only of
its kernels) show in numbers:
    pytest bench/test_bench_step.py --benchmark-only --benchmark-group-by=param:rows,param:n

The models are bench.engine's random-weight ones (6 encoder + 2 decoder layers, d_model
256, an 8k vocabulary; built once and cached under ~/.cache/pyfastdec-bench/step-test),
on one thread. The vocabulary is the shipped en-de one (8k pieces, Multi30k) rather than
one trained by bench.engine: a clone has no training corpus, and the timed calls feed
random ids. One timed call = `step` of n new tokens per row (n = 1: a greedy step;
n = 5: verifying a 4-token draft) after 10 positions, then `truncate` back to those 10,
so every round sees the same state; truncate is a length update in every backend here.
onnxruntime runs the same float32 weights (ONNX export with IOBinding) as a reference.
Plain `pytest -m slow` runs each call once, as a test (building the models takes a while).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from bench.kernel_cases import single_thread_everywhere

pytest.importorskip("torch", reason="building the benchmark models needs torch (the 'bench' extra)")

WORK = Path(os.environ.get("FASTDEC_BENCH_WORK", "~/.cache/pyfastdec-bench")).expanduser() / "step-test"
VOCAB = Path(__file__).resolve().parents[1] / "models" / "en-de" / "spm.model"
PAST = 10  # positions held before the timed step (BOS + 9 tokens)
ENGINES = ["fastdec attn-int8", "fastdec ssru-int8", "fastdec attn-fp32", "onnx attn-fp32"]

pytestmark = pytest.mark.slow  # building the four model directories and two CTranslate2 models

single_thread_everywhere()


@pytest.fixture(scope="module")
def model_paths():
    import shutil

    from bench.engine import build_models

    WORK.mkdir(parents=True, exist_ok=True)
    if not (WORK / "spm.model").exists():
        shutil.copyfile(VOCAB, WORK / "spm.model")  # build_models trains one only when absent
    return build_models(WORK)


@pytest.fixture(scope="module")
def backends(model_paths):
    made = {}

    def get(engine):
        if engine not in made:
            kind, name = engine.split(" ")
            if kind == "fastdec":
                from pyfastdec.backends.native import NativeBackend

                made[engine] = NativeBackend(model_paths[name], threads=1, shortlist=False)
            else:
                pytest.importorskip("onnxruntime", reason="the onnx reference needs onnxruntime")
                from bench.models import onnx_model
                from pyfastdec.backends.onnx import OnnxBackend

                made[engine] = OnnxBackend(onnx_model(model_paths[name], int8=False), threads=1)
        return made[engine]
    return get


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("rows", [1, 32])
@pytest.mark.parametrize("engine", ENGINES)
def test_decoder_step(benchmark, backends, engine, rows, n):
    from pyfastdec.backends.base import Want

    backend = backends(engine)
    rng = np.random.default_rng(rows)
    sources = [[int(t) for t in rng.integers(5, 8000, 15)] + [3] for _ in range(rows)]
    state = backend.start(backend.encode(sources))
    backend.step(state, np.concatenate([np.full((rows, 1), 2), rng.integers(5, 8000, (rows, PAST - 1))], 1), Want())
    tokens = rng.integers(5, 8000, (rows, n))
    held = np.full(rows, PAST)

    def step_and_roll_back():
        out = backend.step(state, tokens, Want(argmax=True))
        backend.truncate(state, held)
        return out

    benchmark.extra_info["tokens_per_call"] = rows * n
    out = benchmark(step_and_roll_back)
    assert out.argmax.shape == (rows, n)
