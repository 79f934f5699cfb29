"""The strategy-level pieces behind target_prefix and sampling: PrefixedBackend shows a
drafter the target prefix before the accepted tokens, and sample() with topk 1 is
greedy on the backend directly (the Translator routes topk 1 to greedy itself)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api_ctranslate2_options import sources, tiny  # noqa: E402,F401  (fixture)
from pyfastdec.decoding import gad, greedy  # noqa: E402
from pyfastdec.decoding.prefix import PrefixedBackend, PrefixSource  # noqa: E402
from pyfastdec.decoding.sampling import sample  # noqa: E402

EOS = 3


class RecordingDrafter:
    """Wraps a real drafter and records the prefixes every draft call saw."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, memory, prefix, k=None):
        self.seen.append([list(p) for p in prefix])
        return self.inner.draft(memory, prefix, k)


def test_drafter_sees_the_target_prefix_before_the_accepted_tokens(tiny):
    t = tiny["translator"]
    srcs = [s + [EOS] for s in sources(6, seed=111)]
    prefixes = [[7, 8, 9][:i % 4] for i in range(len(srcs))]
    drafter = RecordingDrafter(t.drafter)
    outs, _ = gad(PrefixedBackend(t.verifier), PrefixedBackend(drafter), [PrefixSource(s, p) for s, p in
                                                                          zip(srcs, prefixes)], k=4)
    first = drafter.seen[0]
    assert first == prefixes  # the first draft call: nothing accepted yet, the whole prefix
    # later calls: the prefix, then what was accepted (rows leave as they finish)
    assert all(len(row) >= 1 for call in drafter.seen[1:] for row in call)
    want, _ = greedy(PrefixedBackend(t.verifier), [PrefixSource(s, p) for s, p in zip(srcs, prefixes)])
    assert outs == want


def test_sample_with_topk_1_is_greedy_on_the_backend(tiny):
    backend = tiny["translator"].verifier
    srcs = [s + [EOS] for s in sources(12, seed=112)]
    want, _ = greedy(backend, srcs)
    for temperature in (0.5, 3.0):
        got, _ = sample(backend, srcs, seeds=list(range(len(srcs))), topk=1, temperature=temperature)
        assert got == want


@pytest.mark.parametrize("topk", [0, 2, 10])
def test_sample_rows_do_not_depend_on_their_batch(tiny, topk):
    """Each row draws from its own generator: alone, or in a batch whose other rows finish
    at other steps (the live rows are then renumbered), or reversed, it samples the same.
    A row drawing from the generator of its place among the live rows fails this."""
    backend = tiny["translator"].verifier
    srcs = [s + [EOS] for s in sources(8, seed=113)]
    seeds = [[5, i] for i in range(len(srcs))]
    together, _ = sample(backend, srcs, seeds, topk=topk)
    alone = [sample(backend, [s], [seed], topk=topk)[0][0] for s, seed in zip(srcs, seeds)]
    assert together == alone
    assert sample(backend, srcs[::-1], seeds[::-1], topk=topk)[0] == together[::-1]
    assert together != greedy(backend, srcs)[0]
    assert len({len(o) for o in together}) > 1  # rows finish at different steps
