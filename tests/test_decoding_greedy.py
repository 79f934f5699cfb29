"""greedy() on the torch reference and the native engine against a cache-free greedy
reference; statistics; input order; max_len; empty sources."""
from __future__ import annotations

import numpy as np
import pytest
from test_decoding_support import (
    EOS,
    VARIANTS,
    RuleCorrector,
    backends,
    corrected,
    naive_greedy,
    tiny_verifier,
)

from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import default_max_len, greedy

@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=list(VARIANTS))
def model_and_backends(request, spm, tmp_path_factory):
    model = tiny_verifier(**VARIANTS[request.param])
    return (model, *backends(model, spm, tmp_path_factory.mktemp(request.param)))


@pytest.mark.parametrize("which", ["torch", "native"])
def test_greedy_equals_the_cache_free_reference(model_and_backends, which):
    model, ref, native = model_and_backends
    backend = ref if which == "torch" else native
    sources = random_sources(8, seed=11) + [[EOS]]
    expected = [naive_greedy(model, s) for s in sources]
    batched, _ = greedy(backend, sources)
    assert batched == expected
    assert [greedy(backend, [s])[0][0] for s in sources[:3]] == expected[:3]


def test_stats_count_steps_per_row(model_and_backends):
    _, _, native = model_and_backends
    sources = random_sources(8, seed=12)
    outs, stats = greedy(native, sources)
    ended = [i not in stats.hit_max_len for i in range(len(sources))]
    # A row that ends at EOS after L tokens takes L + 1 steps; one cut at max_len, L.
    steps = [len(o) + e for o, e in zip(outs, ended)]
    assert stats.iterations == max(steps)
    assert stats.row_steps == stats.generated == sum(steps)
    assert stats.hit_max_len == [i for i, o in enumerate(outs) if len(o) == default_max_len(len(sources[i]))]
    assert stats.drafted == stats.accepted == 0 and stats.mean_tokens == 1.0
    assert stats.sentences == 8 and stats.total_s >= stats.encoder_s + stats.verifier_s > 0


def test_mixed_endings_and_the_fake_corrector_order():
    """Rows of very different lengths leave the batch at different steps (the fake
    corrector ends each at EOS); outputs stay in input order."""
    sources = random_sources(12, seed=13) + [[EOS], [5, 6, EOS]]
    outs, stats = greedy(RuleCorrector(), sources)
    assert outs == [corrected(s) for s in sources]
    assert stats.iterations == max(len(o) for o in outs) + 1 and stats.hit_max_len == []


def test_max_len_cuts_rows_and_flags_them(model_and_backends):
    model, ref, native = model_and_backends
    sources = random_sources(5, seed=14)
    for backend in (ref, native):
        outs, stats = greedy(backend, sources, max_len=3)
        assert outs == [naive_greedy(model, s, max_len=3) for s in sources]
        assert all(len(o) <= 3 for o in outs)
        assert stats.hit_max_len == [i for i, o in enumerate(outs) if len(o) == 3]
        assert stats.iterations <= 3
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        greedy(native, sources, max_len=0)


def test_empty_source_and_empty_batch(model_and_backends):
    model, ref, native = model_and_backends
    for backend in (ref, native):
        assert greedy(backend, [[EOS]])[0] == [naive_greedy(model, [EOS])]
        outs, stats = greedy(backend, [])
        assert outs == [] and stats.iterations == 0
    assert np.array_equal(greedy(RuleCorrector(), [[EOS], [EOS]])[0], [[], []])


def test_the_models_end_some_rows_at_eos_and_cut_others():
    """Guard on the fixtures: both kinds of row ending are exercised above."""
    ended = cut = 0
    for spec in VARIANTS.values():
        model = tiny_verifier(**spec)
        sources = random_sources(16, seed=12)
        hit = [len(naive_greedy(model, s)) == default_max_len(len(s)) for s in sources]
        assert sum(hit) < len(sources)
        ended, cut = ended + len(sources) - sum(hit), cut + sum(hit)
    assert ended and cut
