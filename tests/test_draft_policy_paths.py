"""GAD through the Translator takes every draft-length path deterministically: the
policy is injected (Translator(draft_policy=...)), so no test depends on wall-clock
timings. Each path gives greedy's output: k = 0 (plain greedy steps, no drafter call),
a partial draft, the full block, a mix; and the adaptive policy itself, fed a modelled
cost instead of measured times, makes the decisions its cost model implies."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import models, sentences  # noqa: E402,F401  (fixtures)
from pyfastdec.api import Translator  # noqa: E402
from pyfastdec.decoding.policies import AdaptiveDraftLength, FixedDraftLength  # noqa: E402

K_MAX = 4  # the tiny drafter's block_size
TEXTS = sentences(9, seed=51)


def translator(models, policy=None) -> Translator:
    return Translator(models["verifier"], drafter=models["drafter"], threads=1, compute_type="float32",
                      draft_policy=policy)


@pytest.fixture(scope="module")
def greedy_reference(models):
    return {b: translator(models).translate(TEXTS, algo="greedy", batch_size=b, return_stats=True) for b in (1, 4)}


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("lengths", [[0], [1], [2], [K_MAX], [K_MAX, 0, 2, 1]], ids=str)
def test_every_draft_length_path_gives_greedy_output(models, greedy_reference, batch_size, lengths):
    policy = FixedDraftLength(K_MAX, lengths)
    outputs, stats = translator(models, policy).translate(TEXTS, algo="gad", batch_size=batch_size,
                                                          return_stats=True)
    expected, greedy_stats = greedy_reference[batch_size]
    assert outputs == expected
    assert policy.chosen and policy.chosen == [lengths[i % len(lengths)] for i in range(len(policy.chosen))]
    if lengths == [0]:  # plain greedy steps: nothing drafted, the drafter never called
        assert stats.drafted == 0 and stats.drafter_s == 0.0
        assert stats.iterations == greedy_stats.iterations and stats.row_steps == greedy_stats.row_steps
    else:
        assert 0 < stats.drafted <= max(lengths) * stats.row_steps
        assert stats.iterations <= greedy_stats.iterations


class ModelledCosts(AdaptiveDraftLength):
    """The adaptive policy, told modelled seconds (t = a + b * token rows, per model)
    instead of the measured ones: its decisions follow from the model and the real
    acceptance of the tiny drafter."""

    def __init__(self, k_max: int, verifier: tuple[float, float], drafter: tuple[float, float]):
        super().__init__(k_max)
        self.verifier_ab, self.drafter_ab = verifier, drafter

    def drafted(self, tokens, seconds):
        a, b = self.drafter_ab
        super().drafted(tokens, a + b * tokens)

    def verified(self, width, accepted, lengths, seconds):
        a, b = self.verifier_ab
        super().verified(width, accepted, lengths, a + b * width * len(accepted))


@pytest.mark.parametrize("verifier, drafter, expected", [
    ((1e-3, 1e-9), (0.0, 0.0), {K_MAX}),  # verifier calls cost their overhead, drafts are free: whole block
    ((1e-9, 1e-3), (1e-9, 1e-3), {0}),    # every token row costs: drafts that may be rejected do not pay
])
def test_the_adaptive_policy_decides_from_its_cost_model(models, greedy_reference, verifier, drafter, expected):
    policy = ModelledCosts(K_MAX, verifier, drafter)
    t = translator(models, policy)
    assert t.translate(TEXTS, algo="gad", batch_size=1) == greedy_reference[1][0]
    assert t.translate(TEXTS, algo="gad", batch_size=4) == greedy_reference[4][0]
    assert policy.chosen[:AdaptiveDraftLength.EXPLORE] == [K_MAX, 0, K_MAX // 2]  # exploration first
    assert set(policy.chosen[AdaptiveDraftLength.EXPLORE:]) == expected


def test_a_policy_must_fit_the_drafter(models):
    with pytest.raises(ValueError, match=f"draft_policy: k_max 3 differs from the drafter's block_size {K_MAX}"):
        translator(models, FixedDraftLength(3, [1]))
    with pytest.raises(ValueError, match="draft_policy: applies to GAD, which needs a drafter"):
        Translator(models["verifier"], threads=1, compute_type="float32", draft_policy=FixedDraftLength(4, [1]))
    with pytest.raises(ValueError, match=r"lengths must be a non-empty list of draft lengths in \[0, 4\]"):
        FixedDraftLength(4, [5])
