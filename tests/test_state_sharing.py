"""select() shares a row's decoder positions between the rows it selects (copy on
write: the engine copies a row's positions only when a shared row is about to be
written). Each selected row must still decode exactly as a row decoded on its own, and
the state it was selected from must be left as it was, whichever is stepped first and
whether or not a child is truncated into the positions it shares.

The reference is the same engine decoding each row alone, teacher-forced on the same
tokens from a fresh state (rows are independent of their batch and of how positions are
split over steps, bit for bit: test_native_engine), so every comparison is exact."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from export.tiny import random_sources, tiny_model, tiny_spm
from export.writer import write_model_dir
from pyfastdec.backends.base import Want
from pyfastdec.backends.native import NativeBackend

BOS = 2
VARIANTS = {"attention": {}, "ssru": {"decoder_self": "ssru"}}
SOURCES = random_sources(3, seed=11)
PREFIX = [[BOS, 7, 9, 11, 5, 6], [BOS, 8, 8, 12, 20, 7], [BOS, 30, 9, 10, 21, 5]]
# The children: (parent row, positions of the parent kept, tokens stepped one at a time).
# Row 0 has three children, one of them truncated into the positions it shares; row 2
# two; row 1 one (selected once: it may write in place, unless its parent is kept).
CHILDREN = [(0, 6, [13, 14, 15]), (2, 6, [16, 17, 18]), (0, 6, [19, 5, 5]), (1, 6, [22, 23, 24]),
            (0, 3, [25, 26, 27]), (2, 6, [16, 28, 29])]


@pytest.fixture(scope="module", params=[(v, t) for v in VARIANTS for t in (1, 2)],
                ids=lambda p: f"{p[0]}-{p[1]}threads")
def native(request, tmp_path_factory):
    variant, threads = request.param
    model = tiny_model(seed=3, **VARIANTS[variant])
    spm = tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")
    return NativeBackend(write_model_dir(model, spm, tmp_path_factory.mktemp(variant)), threads=threads)


def alone(native, source: list[int], tokens: list[int]) -> np.ndarray:
    """Log-probs after each of `tokens`, one row decoded alone from a fresh state."""
    state = native.start(native.encode([source]))
    return np.stack([native.step(state, np.array([[t]]), Want(logprobs=True)).logprobs[0, 0] for t in tokens])


def parent_state(native):
    state = native.start(native.encode(SOURCES))
    native.step(state, np.array(PREFIX), Want())
    return state


def step_children(native, state) -> list[np.ndarray]:
    """Selects CHILDREN from state, truncates and steps them; per child its log-probs."""
    children = native.select(state, np.array([parent for parent, _, _ in CHILDREN]))
    native.truncate(children, np.array([kept for _, kept, _ in CHILDREN]))
    steps = np.array([tokens for _, _, tokens in CHILDREN])
    got = [native.step(children, steps[:, i:i + 1], Want(logprobs=True)).logprobs[:, 0]
           for i in range(steps.shape[1])]
    return list(np.stack(got, axis=1))


def expected_children(native) -> list[np.ndarray]:
    return [alone(native, SOURCES[parent], PREFIX[parent][:kept] + tokens)[kept:]
            for parent, kept, tokens in CHILDREN]


def assert_parent_intact(native, state):
    """The parent still holds its prefixes: stepping it twice more gives what rows decoded
    alone on prefix + those tokens give."""
    np.testing.assert_array_equal(state.lengths, [len(p) for p in PREFIX])
    more = np.array([[31, 32], [33, 34], [35, 36]])
    got = np.stack([native.step(state, more[:, i:i + 1], Want(logprobs=True)).logprobs[:, 0]
                    for i in range(2)], axis=1)
    for r in range(len(SOURCES)):
        np.testing.assert_array_equal(got[r], alone(native, SOURCES[r], PREFIX[r] + list(more[r]))[-2:])


def test_children_decode_as_rows_alone_and_leave_their_parent_intact(native):
    state = parent_state(native)
    got = step_children(native, state)
    for child, (g, want) in enumerate(zip(got, expected_children(native))):
        np.testing.assert_array_equal(g, want, err_msg=f"child {child} {CHILDREN[child][:2]}")
    assert_parent_intact(native, state)


def test_parent_stepped_first_leaves_its_children_intact(native):
    """The parent writes first; then the children (two steps each: within one step a
    row reads back what it has just written, so only the next step sees a clobbered
    position); then the parent once more."""
    state = parent_state(native)
    children = native.select(state, np.array([0, 0, 1]))
    assert_parent_intact(native, state)
    steps = [(0, [13, 14]), (0, [19, 20]), (1, [22, 23])]
    got = np.stack([native.step(children, np.array([[t[i]] for _, t in steps]), Want(logprobs=True)).logprobs[:, 0]
                    for i in range(2)], axis=1)
    for r, (parent, tokens) in enumerate(steps):
        np.testing.assert_array_equal(got[r], alone(native, SOURCES[parent], PREFIX[parent] + tokens)[-2:])
    last = native.step(state, np.array([[5], [6], [7]]), Want(logprobs=True)).logprobs[:, 0]
    for r, token in enumerate([5, 6, 7]):
        np.testing.assert_array_equal(last[r], alone(native, SOURCES[r], PREFIX[r] + [31 + 2 * r, 32 + 2 * r, token])[-1])


def test_selecting_a_selection_shares_down_the_generations(native):
    """Grandchildren of one row (select of a select, the parents dropped or not), stepped
    in turn: beam search's pattern over several steps."""
    state = parent_state(native)
    first = native.select(state, np.array([0, 0]))
    native.step(first, np.array([[13], [14]]), Want())
    second = native.select(first, np.array([1, 1, 0]))
    got = native.step(second, np.array([[15], [16], [17]]), Want(logprobs=True)).logprobs[:, 0]
    for r, tokens in enumerate([[14, 15], [14, 16], [13, 17]]):
        np.testing.assert_array_equal(got[r], alone(native, SOURCES[0], PREFIX[0] + tokens)[-1])
    again = native.step(first, np.array([[18], [18]]), Want(logprobs=True)).logprobs[:, 0]
    for r, tokens in enumerate([[13, 18], [14, 18]]):
        np.testing.assert_array_equal(again[r], alone(native, SOURCES[0], PREFIX[0] + tokens)[-1])
