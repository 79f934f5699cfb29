"""The GPU model's orchestration (csrc/cuda/gpu_model.cc) on its float32 reference ops
(pyfastdec._engine_gpuref), checked on this CPU against the CPU engine in float32 on the
same (dequantised) weights: the encoder, the decoder with its KV cache or SSRU states,
truncate, select, shortlists, every Want, the proposal heads, the shared-encoder attach
and the NAT drafter all run here; on a GPU only the kernels of cuda_ops.cu differ
(tests/test_cuda_gpu.py).

Expected: equal outputs (same float32 arithmetic up to summation order), log-probs
within 1e-4.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyfastdec._engine_gpuref",
                    reason="the GPU model's reference ops are built with FASTDEC_GPU_REFERENCE=1 or FASTDEC_CUDA=1")

from gpu_cases import MODELS, cpu_float32, sentences  # noqa: E402

from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.cuda import CudaBackend  # noqa: E402
from pyfastdec.decoding.strategies import batch_runner  # noqa: E402

TOL = 1e-4


def reference(model: str) -> CudaBackend:
    return CudaBackend(MODELS / model, ops="reference")


@pytest.mark.parametrize("model", ["en-de", "uk-gec"])  # SSRU + heads + shortlist; attention + shortlist
def test_greedy_equals_the_cpu_engines_float32_greedy_on_50_sentences(model):
    src = sentences(model, 50)
    expected, _ = batch_runner("greedy", cpu_float32(model))(src)
    got, _ = batch_runner("greedy", reference(model))(src)
    assert len({tuple(o) for o in expected}) > 40  # real, mostly distinct outputs
    assert got == expected


def run_batches(run, src, batch):
    outs = []
    for i in range(0, len(src), batch):
        outs += run(src[i:i + batch])[0]
    return outs


LOSSLESS = [("greedy", "en-de", None), ("blockwise", "en-de", None), ("gad", "en-de", "en-de-drafter"),
            ("iad", "uk-gec", None), ("bild", "en-de-big", "en-de-little")]


@pytest.mark.parametrize("batch", [1, 7, 32])
@pytest.mark.parametrize("algo,model,drafter", LOSSLESS)
def test_every_lossless_strategy_equals_greedy(algo, model, drafter, batch):
    src = sentences(model, 20)
    verifier = reference(model)
    expected, _ = batch_runner("greedy", cpu_float32(model))(src)
    helper = None if drafter is None else reference(drafter)
    # policy=False: GAD drafts its whole block, IAD and blockwise always draft.
    got = run_batches(batch_runner(algo, verifier, helper, policy=False), src, batch)
    assert got == expected


def test_beam_equals_the_cpu_engines_float32_beam():
    src = sentences("en-de", 12)
    expected, _ = batch_runner("beam", cpu_float32("en-de"), beam_size=4, n_best=2)(src)
    got, _ = batch_runner("beam", reference("en-de"), beam_size=4, n_best=2)(src)
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in expected]
    assert max(abs(a.score - b.score) for r, q in zip(got, expected) for a, b in zip(r, q)) < TOL


@pytest.mark.parametrize("model", ["en-de", "uk-gec"])
def test_every_want_after_truncate_and_select(model):
    """A multi-token step after a roll-back and a duplicating select, asking for every
    output (top-k, ids, log-probs, logits, kept ids, proposals where the model has heads),
    on rows of different lengths: each equals the CPU engine's."""
    src = sentences(model, 3)
    cpu, gpu = cpu_float32(model), reference(model)
    bos = cpu.tokens["bos"]
    rng = np.random.default_rng(0)
    states = []
    for b in (cpu, gpu):
        s = b.start(b.encode(src))
        b.step(s, np.array([[bos, 9, 10, 11]] * 3))
        b.truncate(s, np.array([4, 2, 3]))
        s = b.select(s, np.array([2, 0, 0, 1]))
        states.append(s)
    tokens = rng.integers(5, 400, size=(4, 3))
    ids = rng.integers(0, cpu.vocab_size, size=(4, 3))
    # Kept tokens among the most frequent pieces (in every shortlist) with a margin that
    # most argmaxes do not clear: the rule changes the argmax at most of these positions.
    keep = np.where(rng.random((4, 3)) < 0.7, rng.integers(5, 30, size=(4, 3)), -1)
    heads = cpu.proposal_heads
    want = Want(topk=5, ids=ids, logprobs=True, logits=True, keep_ids=keep, edit_margin=8.0,
                proposals=np.array([2, 0, 1, 2]) if heads else None)
    a, b = (be.step(s, tokens, want) for be, s in zip((cpu, gpu), states))
    np.testing.assert_array_equal(b.argmax, a.argmax)
    assert ((a.argmax == keep) & (a.topk_ids[..., 0] != keep)).sum() >= 3  # the rule did change argmaxes
    np.testing.assert_array_equal(b.topk_ids, a.topk_ids)
    for field in ("topk_logprobs", "id_logprobs", "logprobs", "logits"):
        x, y = getattr(a, field), getattr(b, field)
        np.testing.assert_array_equal(np.isinf(y), np.isinf(x))
        np.testing.assert_allclose(y[np.isfinite(y)], x[np.isfinite(x)], atol=TOL, rtol=0, err_msg=field)
    if heads:
        np.testing.assert_array_equal(b.accepted, a.accepted)
        np.testing.assert_array_equal(b.proposals, a.proposals)



@pytest.mark.parametrize("fields", [("logprobs",), ("logits",), ("logprobs", "logits")])
def test_full_logprobs_and_logits_alone_or_together(fields):
    """Each full output asked for alone (downloaded into its own array, log-probs made
    there in place) or both (log-probs made from the logits array): the CPU engine's."""
    src = sentences("en-de", 2)
    cpu, gpu = cpu_float32("en-de"), reference("en-de")
    bos = cpu.tokens["bos"]
    tokens = np.array([[bos, 12, 20], [bos, 16, 9]])
    want = Want(**{f: True for f in fields})
    a, b = (be.step(be.start(be.encode(src)), tokens, want) for be in (cpu, gpu))
    for field in ("logprobs", "logits"):
        x, y = getattr(a, field), getattr(b, field)
        if field not in fields:
            assert y is None
            continue
        np.testing.assert_array_equal(np.isinf(y), np.isinf(x))
        np.testing.assert_allclose(y[np.isfinite(y)], x[np.isfinite(x)], atol=TOL, rtol=0, err_msg=field)



@pytest.mark.parametrize("positions", ["interleaved", "halves", "marian"])
def test_every_position_encoding_over_300_positions(tmp_path, positions):
    """The GPU model's position table (layers/positions.cc, the CPU engine's function)
    for each config.json "positions", past its first growth: the CPU engine's log-probs."""
    import json
    import shutil

    model = Path(shutil.copytree(MODELS / "en-de", tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    config["positions"] = positions
    config.pop("checksum", None)  # a hand-edited directory: no checksums to match
    (model / "config.json").write_text(json.dumps(config))
    cpu, gpu = cpu_float32(model), CudaBackend(model, ops="reference")
    src = sentences("en-de", 2)
    tokens = np.random.default_rng(1).integers(5, 400, size=(2, 300))
    tokens[:, 0] = cpu.tokens["bos"]
    a, b = (be.step(be.start(be.encode(src)), tokens, Want(logprobs=True)) for be in (cpu, gpu))
    np.testing.assert_array_equal(b.argmax, a.argmax)
    finite = np.isfinite(a.logprobs)
    np.testing.assert_array_equal(np.isfinite(b.logprobs), finite)
    np.testing.assert_allclose(b.logprobs[finite], a.logprobs[finite], atol=TOL, rtol=0)


def test_nat_drafter_blocks_equal_the_cpu_engines():
    src = sentences("en-de", 4)
    host_cpu, host_gpu = cpu_float32("en-de"), reference("en-de")
    drafter_cpu, drafter_gpu = cpu_float32("en-de-drafter"), reference("en-de-drafter")
    prefixes = [[], [12, 20], [12], [12, 20, 16, 9]]
    a = drafter_cpu.draft(drafter_cpu.attach(host_cpu.encode(src)), prefixes, 4)
    b = drafter_gpu.draft(drafter_gpu.attach(host_gpu.encode(src)), prefixes, 4)
    np.testing.assert_array_equal(b.ids, a.ids)
    np.testing.assert_allclose(b.logprobs, a.logprobs, atol=TOL, rtol=0)


def test_proposals_at_the_accepted_position():
    """Drafts that are the model's own greedy tokens, cut at different places: the heads
    run at each row's accepted position (j = 3, 1, 1 here) and propose what the CPU
    engine's heads do there."""
    src = sentences("en-de", 3)
    cpu, gpu = cpu_float32("en-de"), reference("en-de")
    y, _ = batch_runner("greedy", cpu)(src)
    bos = cpu.tokens["bos"]
    tokens = np.array([[bos, *y[0][:3]], [bos, y[1][0], 7, y[1][2]], [bos, *y[2][:3]]])
    want = Want(proposals=np.array([3, 3, 1]))
    a, b = (be.step(be.start(be.encode(src)), tokens, want) for be in (cpu, gpu))
    assert a.accepted.tolist() == [3, 1, 1]
    np.testing.assert_array_equal(b.accepted, a.accepted)
    np.testing.assert_array_equal(b.proposals, a.proposals)



def test_the_modules_step_refuses_heads_and_draft_lengths_out_of_range():
    """The module itself (not only CudaBackend's checks) refuses what would read past a
    row's tokens or size proposals beyond the heads run, naming the argument and range;
    in range, `heads` runs that many heads, as the CPU engine's do."""
    src = sentences("en-de", 2)
    cpu, gpu = cpu_float32("en-de"), reference("en-de")
    bos = cpu.tokens["bos"]
    tokens = np.array([[bos, 12, 20], [bos, 12, 9]])
    model, state = gpu._model, gpu.start(gpu.encode(src))
    for kw, message in (({"proposals": np.array([3, 0])}, r"proposals\[0\] = 3 outside \[0, 2\]"),
                        ({"proposals": np.array([0, -1])}, r"proposals\[1\] = -1 outside \[0, 2\]"),
                        ({"proposals": np.array([1, 1]), "heads": 5}, r"heads = 5 outside \[0, 4\]"),
                        ({"proposals": np.array([1, 1]), "heads": -1}, r"heads = -1 outside \[0, 4\]")):
        with pytest.raises(ValueError, match=message):
            model.step(state, tokens, **kw)
    uk = reference("uk-gec")  # no proposal heads
    with pytest.raises(ValueError, match="no proposal heads"):
        uk._model.step(uk.start(uk.encode(src)), tokens, proposals=np.array([1, 1]))
    a = cpu.step(cpu.start(cpu.encode(src)), tokens, Want(proposals=np.array([2, 1]), heads=2))
    b = model.step(gpu.start(gpu.encode(src)), tokens, proposals=np.array([2, 1]), heads=2)
    assert b["proposals"].shape == (2, 2)
    np.testing.assert_array_equal(b["proposals"], a.proposals)




def test_the_modules_surface_is_what_cuda_py_calls():
    """The module and its Model bind what backends/cuda.py calls and nothing else (an
    unused binding is code kept working for no caller)."""
    import pyfastdec._engine_gpuref as engine

    assert {n for n in dir(engine) if not n.startswith("_")} == {"Memory", "State", "Model", "device_name"}
    assert {n for n in dir(engine.Model) if not n.startswith("_")} == {
        "encode", "attach", "start", "step", "draft", "truncate", "select_state", "select_memory"}
    assert engine.device_name() == "reference"
    backend = reference("en-de")
    assert not hasattr(backend, "ops") and not hasattr(backend, "device_name")


@pytest.mark.parametrize("kind", ["directory", "dangling symbolic link"])
def test_both_backends_load_and_refuse_shortlists_alike(tmp_path, kind):
    """One loader (native.load_shortlist) for both backends: the same refusal of a broken
    shortlist.bin, none with shortlist=False, and for a given file the candidates
    Shortlist.candidates (the reference) computes."""
    import shutil

    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.model_dir import ModelDirError
    from pyfastdec.model_dir.shortlist import Shortlist

    model = Path(shutil.copytree(MODELS / "en-de", tmp_path / "model"))
    (model / "shortlist.bin").unlink()
    if kind == "directory":
        (model / "shortlist.bin").mkdir()
    else:
        (model / "shortlist.bin").symlink_to(tmp_path / "gone.bin")
    messages = []
    for make in (lambda **kw: NativeBackend(model, threads=1, **kw),
                 lambda **kw: CudaBackend(model, ops="reference", **kw)):
        with pytest.raises(ModelDirError, match=f"\\(file\\): a {kind} \\(expected a shortlist file") as err:
            make()
        messages.append(str(err.value))
        assert make(shortlist=False).shortlist is None
        other = MODELS / "uk-gec" / "shortlist.bin"
        backend = make(shortlist=other)
        src = sentences("en-de", 1)[0]
        assert sorted(backend._shortlist_index.candidates(src).tolist()) == sorted(
            Shortlist.load(other).candidates(src).tolist())
    assert messages[0] == messages[1]


def test_translator_and_corrector_over_the_gpu_model(monkeypatch):
    """The API's own loop (sentence splitting, batching, default strategy, prefixes,
    n-best, scores) built through device="cuda" (the API's and devices.py's wiring), with
    the reference ops' module standing in for _engine_cuda: the same text as over the
    CPU engine in float32 (swapped in by hand: the CPU device runs the int8 weights)."""
    from pyfastdec import Corrector, Translator
    from pyfastdec.backends import cuda as cuda_backend

    monkeypatch.setitem(cuda_backend.MODULES, "cuda", "_engine_gpuref")
    en = ["A man in an orange hat starring at something.", "Two dogs run on the grass. One of them is black."]
    uk = ["Я хочу піти до магазин.", "Він сказав що прийде завтра."]
    for make, texts, helper in ((lambda **kw: Translator(MODELS / "en-de", MODELS / "en-de-drafter", **kw), en, True),
                                (lambda **kw: Corrector(MODELS / "uk-gec", **kw), uk, False)):
        cpu, gpu = make(), make(device="cuda")
        assert isinstance(gpu.verifier, CudaBackend) and gpu.verifier._engine.__name__ == "pyfastdec._engine_gpuref"
        assert isinstance(gpu.drafter, CudaBackend) if helper else gpu.drafter is None
        model = cpu.model_dir.path.name
        cpu.verifier = cpu_float32(model)
        if helper:
            cpu.drafter = cpu_float32("en-de-drafter")
        for kw in ({}, {"algo": "gad"} if helper else {"algo": "iad"},
                   {"algo": "greedy", "target_prefix": [texts[0].split()[0], None]},
                   {"algo": "beam", "beam_size": 3, "n_best": 2, "return_scores": True}):
            if "target_prefix" in kw and not helper:
                continue
            a, b = cpu.translate(texts, **kw), gpu.translate(texts, **kw)
            if kw.get("return_scores"):  # [[(text, score)] * n_best] per input
                assert [[t for t, _ in r] for r in a] == [[t for t, _ in r] for r in b]
                assert np.allclose([s for r in a for _, s in r], [s for r in b for _, s in r], atol=TOL, rtol=0)
            else:
                assert a == b, (model, kw)
