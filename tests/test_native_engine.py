"""The native engine against the PyTorch reference (export/), on tiny random models of
every architecture: same log-probs at every step, exact roll-back, batch independence,
shortlists, the drafter, threads, and clear errors for bad input."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from export.calibrate import calibrate  # noqa: E402
from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.torch_backend import TorchBackend  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.model_dir.shortlist import Shortlist  # noqa: E402

VARIANTS = {
    "attention-pre": dict(),
    "ssru-pre": dict(decoder_self="ssru"),
    "attention-post": dict(norm="post"),
    "ssru-post": dict(decoder_self="ssru", norm="post"),
}
BOS = 2


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, spm, tmp_path_factory):
    """(torch reference, native backend) on the same float32 weights."""
    model = tiny_model(seed=len(request.param), **VARIANTS[request.param])
    path = write_model_dir(model, spm, tmp_path_factory.mktemp(request.param))
    return TorchBackend(model), NativeBackend(path, threads=1), path


def assert_logprobs_close(native, reference):
    """The Engine issue's bound: within 1e-4 of the largest magnitude at every step."""
    bound = 1e-4 * np.abs(reference[np.isfinite(reference)]).max()
    np.testing.assert_allclose(native, reference, rtol=0, atol=bound)


def greedy_logprobs(backend, sources, steps):
    state = backend.start(backend.encode(sources))
    tokens = np.full((len(sources), 1), BOS)
    out = []
    for _ in range(steps):
        res = backend.step(state, tokens, Want(logprobs=True))
        out.append(res.logprobs)
        tokens = res.argmax
    return np.stack(out), state


def test_every_step_matches_torch(pair):
    ref, native, _ = pair
    sources = random_sources(5, seed=1)
    want, _ = greedy_logprobs(ref, sources, 8)
    got, state = greedy_logprobs(native, sources, 8)
    assert_logprobs_close(got, want)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    np.testing.assert_array_equal(state.lengths, [8] * 5)


def test_multi_token_step_equals_single_steps(pair):
    ref, native, _ = pair
    sources = random_sources(3, seed=2)
    prefix = np.array([[BOS, 7, 9, 11, 5]] * 3)
    state = native.start(native.encode(sources))
    at_once = native.step(state, prefix, Want(logprobs=True)).logprobs
    state = native.start(native.encode(sources))
    one_by_one = np.concatenate([native.step(state, prefix[:, i:i + 1], Want(logprobs=True)).logprobs
                                 for i in range(prefix.shape[1])], axis=1)
    # Bit for bit: a position's numbers must not depend on how many positions share the
    # step, or verifying a draft could disagree with greedy decoding on a near-tie.
    np.testing.assert_array_equal(at_once, one_by_one)
    ref_state = ref.start(ref.encode(sources))
    assert_logprobs_close(at_once, ref.step(ref_state, prefix, Want(logprobs=True)).logprobs)


def test_truncate_then_step_equals_never_appended(pair):
    _, native, _ = pair
    sources = random_sources(2, seed=3)
    clean = native.start(native.encode(sources))
    native.step(clean, np.array([[BOS, 8], [BOS, 6]]), Want())
    expected = native.step(clean, np.array([[10], [12]]), Want(logprobs=True)).logprobs

    rolled = native.start(native.encode(sources))
    native.step(rolled, np.array([[BOS, 8, 20, 21, 22], [BOS, 6, 30, 31, 32]]), Want())
    native.truncate(rolled, np.array([2, 2]))
    np.testing.assert_array_equal(rolled.lengths, [2, 2])
    got = native.step(rolled, np.array([[10], [12]]), Want(logprobs=True)).logprobs
    np.testing.assert_array_equal(got, expected)


def test_rows_are_independent_of_the_batch(pair):
    """A batch of rows (different lengths, rows leaving mid-way) decodes each row exactly
    as it decodes alone."""
    _, native, _ = pair
    sources = random_sources(6, seed=4)
    alone = [greedy_logprobs(native, [s], 6)[0][:, 0, 0] for s in sources]
    state = native.start(native.encode(sources))
    tokens = np.full((6, 1), BOS)
    live = np.arange(6)
    for t in range(6):
        res = native.step(state, tokens, Want(logprobs=True))
        for r, row in enumerate(live):
            np.testing.assert_array_equal(res.logprobs[r, 0], alone[row][t])
        if t == 2:  # drop rows 1 and 4 (finished), keep the rest in a new order
            keep = np.array([5, 0, 3, 2])
            live, state, tokens = live[keep], native.select(state, keep), res.argmax[keep]
        else:
            tokens = res.argmax


def test_duplicated_rows_decode_independently(pair):
    """select() may repeat rows (beam search): the copies must not share caches."""
    _, native, _ = pair
    state = native.start(native.encode(random_sources(1, seed=5)))
    native.step(state, np.array([[BOS]]), Want())
    twins = native.select(state, np.array([0, 0]))
    a = native.step(twins, np.array([[7], [9]]), Want(logprobs=True)).logprobs
    single = native.select(state, np.array([0]))
    b = native.step(single, np.array([[9]]), Want(logprobs=True)).logprobs
    np.testing.assert_array_equal(a[1], b[0])


def test_want_fields_agree_with_full_logprobs(pair):
    _, native, _ = pair
    state = native.start(native.encode(random_sources(3, seed=6)))
    ids = np.array([[5], [9], [2]])
    res = native.step(state, np.full((3, 1), BOS), Want(argmax=True, topk=4, ids=ids, logprobs=True))
    full = res.logprobs[:, 0]
    order = np.argsort(-full, axis=-1, kind="stable")[:, :4]
    np.testing.assert_array_equal(res.topk_ids[:, 0], order)
    # One row_stats pass gives all of them: logit - log_sum_exp, the same bits.
    np.testing.assert_array_equal(res.topk_logprobs[:, 0], np.take_along_axis(full, order, 1))
    np.testing.assert_array_equal(res.id_logprobs[:, 0], full[np.arange(3), ids[:, 0]])
    np.testing.assert_array_equal(res.argmax[:, 0], order[:, 0])



def test_step_out_carries_what_the_engine_returns(pair):
    """base.step_out (shared by the native and GPU backends) maps the engine's dict onto
    StepOut: each array the engine returns is the field of that name, the rest None."""
    _, native, _ = pair
    src, ids = random_sources(2, seed=3), np.array([[5, 7], [9, 2]])
    tokens = np.array([[BOS, 6], [BOS, 8]])
    kw = dict(argmax=True, topk=3, ids=ids, logprobs=True, logits=True)
    raw = native._model.step(native.start(native.encode(src)), tokens, **kw)
    out = native.step(native.start(native.encode(src)), tokens, Want(**kw))
    assert set(raw) == {"argmax", "topk_ids", "topk_logprobs", "id_logprobs", "logprobs", "logits"}
    for name in ("argmax", "topk_ids", "topk_logprobs", "id_logprobs", "logprobs", "logits"):
        np.testing.assert_array_equal(getattr(out, name), raw[name], err_msg=name)
    assert out.proposals is None and out.accepted is None


def test_threads_give_identical_results(pair):
    _, native, path = pair
    two = NativeBackend(path, threads=2)
    sources = random_sources(7, seed=7)
    np.testing.assert_array_equal(greedy_logprobs(two, sources, 5)[0], greedy_logprobs(native, sources, 5)[0])


def make_shortlist(vocab_size, frequent, per_source):
    indptr = np.zeros(vocab_size + 1, np.uint64)
    targets = []
    for f in range(vocab_size):
        t = per_source.get(f, [])
        targets.extend(t)
        indptr[f + 1] = indptr[f] + len(t)
    return Shortlist(vocab_size, sorted(frequent), indptr, targets, best=4, first_fill_id=5)


def test_shortlist_restricts_each_row_to_its_own_candidates(spm, tmp_path):
    model = tiny_model(seed=11)
    path = write_model_dir(model, spm, tmp_path / "m")
    V = model.cfg.vocab_size
    sl = make_shortlist(V, [1, 2, 3], {7: [20, 21], 8: [22], 9: [30, 31, 32]})
    sl.save(tmp_path / "sl.bin")
    full = NativeBackend(path, threads=1, shortlist=False)
    short = NativeBackend(path, threads=1, shortlist=tmp_path / "sl.bin")
    sources = [[7, 8, 3], [9, 3]]
    for backend in (full, short):
        backend.state = backend.start(backend.encode(sources))
    f = full.step(full.state, np.full((2, 1), BOS), Want(logprobs=True)).logprobs[:, 0]
    s = short.step(short.state, np.full((2, 1), BOS), Want(argmax=True, logprobs=True))
    for row, src in enumerate(sources):
        cand = sl.candidates(src)
        assert set(cand) >= {1, 2, 3} and (20 in cand) == (row == 0) and (30 in cand) == (row == 1)
        outside = np.setdiff1d(np.arange(V), cand)
        assert np.all(np.isneginf(s.logprobs[row, 0, outside]))
        # Inside the shortlist: the full distribution renormalised over the candidates.
        renorm = f[row, cand] - np.log(np.exp(f[row, cand].astype(np.float64)).sum())
        np.testing.assert_allclose(s.logprobs[row, 0, cand], renorm, atol=2e-5)
        assert s.argmax[row, 0] == cand[np.argmax(f[row, cand])]


def test_shortlist_of_everything_equals_full_vocabulary_int8(spm, tmp_path):
    model = tiny_model(seed=12)
    pairs = [(s, s[:-1][::-1] + [3]) for s in random_sources(20, seed=12)]
    scales = calibrate(model, pairs)
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=scales, int8=True)
    V = model.cfg.vocab_size
    sl = make_shortlist(V, range(V), {})
    sl.save(tmp_path / "all.bin")
    sources = random_sources(4, seed=13)
    a, _ = greedy_logprobs(NativeBackend(path, threads=1, shortlist=False), sources, 5)
    b, _ = greedy_logprobs(NativeBackend(path, threads=1, shortlist=tmp_path / "all.bin"), sources, 5)
    np.testing.assert_array_equal(a, b)  # same int32 sums, same epilogue: bit for bit


def test_int8_is_close_to_the_simulated_int8_reference(spm, tmp_path):
    """Native int8 vs torch with int8 weights and activations simulated on the same
    grids. The native output layer also quantises its input (dynamic, per token), which
    torch keeps in float (its weights are the same int8 rows): the remaining difference is
    that rounding, a few hundredths."""
    model = tiny_model(seed=14)
    pairs = [(s, s[:-1][::-1] + [3]) for s in random_sources(30, seed=14)]
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=calibrate(model, pairs), int8=True)
    ref = TorchBackend.from_dir(path, simulate_int8=True)
    fp32 = TorchBackend(model)
    native = NativeBackend(path, threads=1)
    sources = random_sources(6, seed=15)
    want, _ = greedy_logprobs(ref, sources, 1)
    got, _ = greedy_logprobs(native, sources, 1)
    float_ref, _ = greedy_logprobs(fp32, sources, 1)
    err_vs_sim = np.abs(got - want).max()
    err_sim_vs_float = np.abs(want - float_ref).max()
    assert err_vs_sim < 0.05 * np.abs(want).max()
    assert err_vs_sim < err_sim_vs_float + 0.05 * np.abs(want).max()


@pytest.fixture(scope="module")
def drafter_pair(spm, tmp_path_factory):
    model = tiny_model(seed=21, arch="nat-drafter")
    path = write_model_dir(model, spm, tmp_path_factory.mktemp("drafter"))
    return TorchBackend(model), NativeBackend(path, threads=1)


def test_drafter_matches_torch(drafter_pair):
    ref, native = drafter_pair
    sources = random_sources(4, seed=22)
    prefixes = [[], [7], [8, 9, 10], [11, 12]]
    for k in (1, 4):
        a = ref.draft(ref.encode(sources), prefixes, k)
        b = native.draft(native.encode(sources), prefixes, k)
        assert b.ids.shape == (4, k)
        np.testing.assert_array_equal(b.ids, a.ids)
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4 * np.abs(a.logprobs).max())


def test_drafter_prefix_cache_changes_nothing(drafter_pair):
    """The engine keeps each memory row's drafted prefix positions for the next call;
    a call must give bit for bit what a fresh memory gives, whether its prefix extends
    the cached one, diverges from it, is shorter, or shows the same row twice."""
    _, native = drafter_pair
    sources = random_sources(3, seed=23)
    memory = native.encode(sources)
    calls = [
        ([[], [7], [8, 9]], 4),
        ([[5], [7, 8, 9], [8, 9, 10, 11]], 4),         # extended
        ([[5, 6], [7, 20, 9], [8]], 3),                 # diverged / cut back, another k
        ([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [], [8, 9, 10]], 4),
    ]
    for prefixes, k in calls:
        cached = native.draft(memory, prefixes, k)
        fresh = native.draft(native.encode(sources), prefixes, k)
        np.testing.assert_array_equal(cached.ids, fresh.ids)
        np.testing.assert_array_equal(cached.logprobs, fresh.logprobs)
    twice = native.select(memory, np.array([1, 1, 0]))
    prefixes = [[7, 8], [7, 30, 31], [5, 6, 7]]
    got = native.draft(twice, prefixes, 4)
    fresh = native.draft(native.select(native.encode(sources), np.array([1, 1, 0])), prefixes, 4)
    np.testing.assert_array_equal(got.ids, fresh.ids)
    np.testing.assert_array_equal(got.logprobs, fresh.logprobs)


class TestBadInput:
    def test_token_out_of_range_and_empty_step(self, pair):
        _, native, _ = pair
        state = native.start(native.encode(random_sources(2, seed=30)))
        with pytest.raises(ValueError, match=r"token id 40 at row 1, position 0 is outside \[0, 40\)"):
            native.step(state, np.array([[BOS], [40]]), Want())
        with pytest.raises(ValueError, match=r"n >= 1"):
            native.step(state, np.zeros((2, 0), np.int64), Want())
        with pytest.raises(ValueError, match=r"dimension 0 must be 2"):
            native.step(state, np.array([[BOS]]), Want())
        with pytest.raises(ValueError, match=r"source 0 has token id -1"):
            native.encode([[-1, 3]])
        with pytest.raises(ValueError, match=r"source 1 is empty"):
            native.encode([[5, 3], []])

    def test_truncate_and_select_limits(self, pair):
        _, native, _ = pair
        state = native.start(native.encode(random_sources(2, seed=31)))
        native.step(state, np.full((2, 3), BOS), Want())
        with pytest.raises(ValueError, match=r"row 1 holds 3 positions; cannot keep 4"):
            native.truncate(state, np.array([3, 4]))
        with pytest.raises(ValueError, match=r"row 2 does not exist \(2 live rows\)"):
            native.select(state, np.array([0, 2]))
        with pytest.raises(ValueError, match=r"one length per live row"):
            native.truncate(state, np.array([1]))

    def test_states_and_memories_stay_with_their_model(self, pair, drafter_pair):
        """Another model's layers differ: handing it a foreign memory or state must be a
        clear error, never a read out of bounds."""
        _, native, path = pair
        _, drafter = drafter_pair
        other = NativeBackend(path, threads=1)  # same weights, still another model
        memory = native.encode([[5, 3]])
        state = native.start(memory)
        with pytest.raises(ValueError, match=r"start: this memory was made by another model"):
            other.start(memory)
        with pytest.raises(ValueError, match=r"step: this state was made by another model"):
            other.step(state, np.array([[BOS]]), Want())
        with pytest.raises(ValueError, match=r"truncate: this state was made by another model"):
            other.truncate(state, np.array([0]))
        with pytest.raises(ValueError, match=r"draft: this memory was made by another model"):
            drafter.draft(memory, [[]], 2)
        with pytest.raises(ValueError, match=r"select: this memory was made by another model"):
            other.select(memory, np.array([0]))

    def test_drafter_and_verifier_calls_are_not_mixed(self, pair, drafter_pair):
        _, native, _ = pair
        _, drafter = drafter_pair
        with pytest.raises(ValueError, match="not a drafter"):
            native._model.draft(native.encode([[5, 3]]), [[]], 2)
        with pytest.raises(ValueError, match="no incremental decoder"):
            drafter.start(drafter.encode([[5, 3]]))
