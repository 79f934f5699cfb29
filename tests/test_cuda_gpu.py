"""The CUDA backend on a GPU (skipped, with the reason, where pyfastdec._engine_cuda is not
built or finds no GPU; tools/device/cuda_check.sh runs it on the device).

- GPU greedy against the CPU engine's float32 greedy on 60 real sentences per model: fp16
  weights may flip near-ties, so the rule is gpu_cases.agreement's: every difference
  starts where the CPU's top-2 are within NEAR_TIE_FP16 nats, and at least MIN_EQUAL of
  the outputs are identical.
- Every lossless strategy equals GPU greedy at batch 1, 7 and 32 (exactly: the decoder's
  GEMMs are row-stable, Ops::linear_rows).
- Beam against the CPU float32 beam under the same rule on the best hypothesis.
- The CUDA ops against the reference ops on the same step: log-probs within FP16_LOGPROB.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest


def _gpu_reason() -> str | None:
    try:
        importlib.import_module("pyfastdec._engine_cuda").device_name()
    except ImportError:
        return "pyfastdec._engine_cuda is not built (FASTDEC_CUDA=1; README 'GPU (CUDA) build')"
    except RuntimeError as err:
        return f"no usable GPU: {err}"
    return None


_REASON = _gpu_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"the CUDA backend needs a GPU: {_REASON}")

from gpu_cases import MODELS, agreement, cpu_float32, sentences  # noqa: E402

from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.cuda import CudaBackend  # noqa: E402
from pyfastdec.decoding.strategies import batch_runner  # noqa: E402

NEAR_TIE_FP16 = 0.1  # nats: fp16 weights move log-probs by a few hundredths
MIN_EQUAL = 0.9  # of the outputs identical to the CPU's float32 ones
FP16_LOGPROB = 0.1
_BACKENDS: dict = {}


def gpu(model: str) -> CudaBackend:
    if model not in _BACKENDS:
        _BACKENDS[model] = CudaBackend(MODELS / model)
    return _BACKENDS[model]


def in_batches(run, src, batch):
    outs = []
    for i in range(0, len(src), batch):
        outs += run(src[i:i + batch])[0]
    return outs


@pytest.mark.parametrize("model", ["en-de", "uk-gec"])
def test_greedy_agrees_with_cpu_float32(model):
    src = sentences(model, 60)
    cpu = cpu_float32(model)
    expected, _ = batch_runner("greedy", cpu)(src)
    got, _ = batch_runner("greedy", gpu(model))(src)
    equal, gaps = agreement(cpu, expected, got, src)
    print(f"{model}: {equal}/{len(src)} identical; differences at top-2 gaps {[round(g, 4) for _, g in gaps]}")
    assert equal >= MIN_EQUAL * len(src)
    assert all(g < NEAR_TIE_FP16 for _, g in gaps), gaps


LOSSLESS = [("blockwise", "en-de", None), ("gad", "en-de", "en-de-drafter"), ("iad", "uk-gec", None),
            ("bild", "en-de-big", "en-de-little")]


@pytest.mark.parametrize("batch", [1, 7, 32])
@pytest.mark.parametrize("algo,model,drafter", LOSSLESS)
def test_every_lossless_strategy_equals_gpu_greedy(algo, model, drafter, batch):
    src = sentences(model, 40)
    verifier = gpu(model)
    expected = in_batches(batch_runner("greedy", verifier), src, batch)
    helper = None if drafter is None else gpu(drafter)
    for policy in (False, True):  # always drafting, and the cost policies' own choices
        assert in_batches(batch_runner(algo, verifier, helper, policy=policy), src, batch) == expected


def test_beam_agrees_with_cpu_float32_beam():
    src = sentences("en-de", 30)
    cpu = cpu_float32("en-de")
    expected, _ = batch_runner("beam", cpu, beam_size=4)(src)
    got, _ = batch_runner("beam", gpu("en-de"), beam_size=4)(src)
    best_cpu, best_gpu = [r[0].tokens for r in expected], [r[0].tokens for r in got]
    equal = sum(a == b for a, b in zip(best_cpu, best_gpu))
    print(f"beam: {equal}/{len(src)} identical best hypotheses")
    assert equal >= MIN_EQUAL * len(src)
    for a, b in zip(expected, got):
        if a[0].tokens == b[0].tokens:
            assert abs(a[0].score - b[0].score) < FP16_LOGPROB


@pytest.mark.parametrize("model", ["en-de", "uk-gec"])
def test_cuda_ops_against_the_reference_ops(model):
    """One multi-token step after truncate and select, every output, CUDA vs the float32
    reference ops (the same orchestration): only the kernels differ."""
    src = sentences(model, 4)
    ref = CudaBackend(MODELS / model, ops="reference")
    outs = []
    for b in (ref, gpu(model)):
        s = b.start(b.encode(src))
        b.step(s, np.array([[b.tokens["bos"], 9, 10]] * 4))
        b.truncate(s, np.array([3, 1, 2, 3]))
        s = b.select(s, np.array([3, 0, 0, 1, 2]))
        outs.append(b.step(s, np.full((5, 2), 12), Want(topk=3, logprobs=True)))
    a, g = outs
    finite = np.isfinite(a.logprobs)
    np.testing.assert_array_equal(np.isfinite(g.logprobs), finite)
    assert np.abs(g.logprobs[finite] - a.logprobs[finite]).max() < FP16_LOGPROB
    np.testing.assert_allclose(g.topk_logprobs, a.topk_logprobs, atol=FP16_LOGPROB)


def test_device_name_is_device_0s_as_torch_reads_it():
    """cuda_device_name() (no stream, no cuBLAS handle) names the GPU the ops run on."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch here has no CUDA")
    assert importlib.import_module("pyfastdec._engine_cuda").device_name() == f"cuda ({torch.cuda.get_device_name(0)})"
