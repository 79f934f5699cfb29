"""blockwise(): token-identical to greedy, with one verifier call per iteration, on a
fake verifier whose proposal heads propose its own greedy continuation with a wrong
token at known places (HeadsCorrector): exact iteration, draft and accept counts on
hand-made sentences, batches of 1, 7 and 32 against greedy, and the draft-length policy
down to 0 (plain greedy steps); then on the tiny trained verifier with heads trained by
export.train_heads (torch reference, native float32 and int8), partly accepted."""
from __future__ import annotations

import math

import numpy as np
import pytest
from test_decoding_support import (
    EOS,
    V,
    HeadsCorrector,
    RuleCorrector,
    corrected,
    heads_dirs,
)

from export.tiny import random_sources
from export.tiny_task import task_sources
from pyfastdec.backends.base import Want
from pyfastdec.decoding import blockwise, greedy
from pyfastdec.decoding.policies import FixedDraftLength, SourceDraftLength

COPIED = [5, 6, 8, 9, 10, 12, 15, EOS]  # no multiples of 7, 11, 13: the corrector copies it


class Counting(HeadsCorrector):
    """HeadsCorrector counting its steps and the widths asked for."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.widths: list[int] = []

        self.heads: list[int] = []  # Want.heads of every step that asked for proposals

    def step(self, state, tokens, want=None):
        self.widths.append(np.asarray(tokens).shape[1])
        if want is not None and want.proposals is not None:
            self.heads.append(want.heads)
        return super().step(state, tokens, want)


class WrongAt(HeadsCorrector):
    """Heads that are wrong exactly where `wrong` ({prefix length: head}) says."""

    def __init__(self, heads: int, wrong: dict[int, int]):
        super().__init__(heads, errors=0.0)
        self.wrong = wrong

    def mistake(self, src, prefix):
        return self.wrong.get(len(prefix))


def sources_for_tests(n: int, seed: int) -> list[list[int]]:
    return random_sources(n, seed=seed) + [[EOS], [7, 14, EOS], [11, 13, 26, EOS], COPIED]


# ----------------------------------------------------------------------------- exact counts
def test_perfect_heads_commit_k_plus_one_tokens_per_iteration():
    fake = Counting(heads=3, errors=0.0)
    outs, stats = blockwise(fake, [COPIED], policy=None)
    assert outs == [COPIED[:-1]]
    # [BOS] -> 5 and the block 6 8 9; [5 6 8 9] -> all kept + 10, block 12 15 EOS;
    # [10 12 15 EOS] -> all kept, EOS ends the row.
    assert fake.widths == [1, 4, 4]
    assert (stats.iterations, stats.row_steps, stats.drafted, stats.accepted, stats.generated) == (3, 3, 6, 6, 8)


def test_a_wrong_head_is_rolled_back_and_the_verifier_corrects_it():
    # After 5 6 8 9 (prefix length 4) head 1 is wrong: the block after 10 is 12 X EOS.
    fake = WrongAt(3, {4: 1})
    outs, stats = blockwise(fake, [COPIED], policy=None)
    assert outs == [COPIED[:-1]]
    # [10 12 X EOS] keeps 12, corrects X to 15; the heads after 15: EOS (cut there);
    # [15 EOS] keeps EOS.
    assert (stats.iterations, stats.drafted, stats.accepted, stats.generated) == (4, 3 + 3 + 1, 3 + 1 + 1, 8)


def test_every_row_takes_one_plus_ceil_rest_over_k_plus_one_iterations_with_perfect_heads():
    sources = sources_for_tests(40, seed=61)
    for k in (1, 2, 4, 6):
        outs, stats = blockwise(HeadsCorrector(heads=k, errors=0.0), sources, policy=None)
        assert outs == [corrected(s) for s in sources]
        # The first step commits y1; every later one k proposals and the bonus token.
        assert stats.row_steps == sum(1 + math.ceil(len(o) / (k + 1)) for o in outs)
        assert stats.accepted == stats.drafted


# ----------------------------------------------------------------------------- = greedy
@pytest.mark.parametrize("batch", [1, 7, 32])
def test_blockwise_equals_greedy_with_fewer_iterations(batch):
    sources = sources_for_tests(60, seed=62)
    expected, _ = greedy(RuleCorrector(), sources)
    assert expected == [corrected(s) for s in sources]
    outs, iterations, drafted, accepted = [], 0, 0, 0
    for start in range(0, len(sources), batch):
        part, stats = blockwise(HeadsCorrector(heads=4, errors=0.3), sources[start:start + batch], policy=None)
        outs += part
        iterations, drafted, accepted = iterations + stats.iterations, drafted + stats.drafted, stats.accepted + accepted
        assert stats.generated == sum(len(o) + 1 for o in part)
    assert outs == expected
    assert 0 < accepted < drafted
    greedy_iterations = sum(greedy(RuleCorrector(), sources[s:s + batch])[1].iterations
                            for s in range(0, len(sources), batch))
    assert iterations < 0.6 * greedy_iterations


def test_wrong_heads_everywhere_still_give_greedy():
    sources = sources_for_tests(30, seed=63)
    outs, stats = blockwise(HeadsCorrector(heads=4, errors=1.0), sources, policy=None)
    assert outs == [corrected(s) for s in sources]
    assert 0 < stats.accepted < stats.drafted


def test_max_len_cuts_blocks_exactly_like_greedy():
    sources = sources_for_tests(20, seed=64)
    for max_len in (1, 2, 3, 5, 8):
        expected, g = greedy(RuleCorrector(), sources, max_len=max_len)
        outs, stats = blockwise(HeadsCorrector(heads=4), sources, max_len=max_len, policy=None)
        assert outs == expected and stats.hit_max_len == g.hit_max_len


# ----------------------------------------------------------------------------- the draft-length policy
def test_a_policy_fixed_to_zero_is_greedy_step_for_step():
    sources = sources_for_tests(30, seed=65)
    expected, g = greedy(RuleCorrector(), sources)
    fake = Counting(heads=4)
    outs, stats = blockwise(fake, sources, policy=FixedDraftLength(4, [0]))
    assert outs == expected
    assert (stats.iterations, stats.row_steps, stats.drafted) == (g.iterations, g.row_steps, 0)
    assert set(fake.widths) == {1}


def test_every_cap_on_the_block_gives_greedy():
    sources = sources_for_tests(30, seed=66)
    expected, _ = greedy(RuleCorrector(), sources)
    policy = FixedDraftLength(4, [4, 0, 1, 3, 2])
    for batch in (1, 7, 32):
        outs = [o for s in range(0, len(sources), batch)
                for o in blockwise(HeadsCorrector(heads=4), sources[s:s + batch], policy=policy)[0]]
        assert outs == expected
    assert set(policy.chosen) == {0, 1, 2, 3, 4}


def policy_inputs(policy) -> list[list[int]]:
    """The block lengths blockwise gives policy.choose_lengths over one COPIED sentence."""
    seen = []
    choose = policy.choose_lengths
    policy.choose_lengths = lambda lengths: seen.append(list(lengths)) or choose(lengths)
    blockwise(Counting(heads=4, errors=0.0), [COPIED], policy=policy)
    return seen


def test_a_step_runs_as_many_heads_as_the_next_iteration_verifies():
    """Heads cost work, so a step runs only the cap it verifies (at least one); the first
    step (no block yet) runs all K. A cap that grows after a short block verifies the
    short block, asks for the larger count, and verifies it whole on the next iteration."""
    fake = Counting(heads=4, errors=0.0)
    outs, _ = blockwise(fake, [COPIED], policy=FixedDraftLength(4, [1, 3, 3]))
    assert outs == greedy(RuleCorrector(), [COPIED])[0]
    # COPIED: 7 tokens + EOS. Step 1 [BOS] (all 4 heads); then caps 1, 3, 3
    assert fake.heads == [0, 1, 3, 3]
    assert fake.widths == [1, 2, 2, 4]  # cap 3 on a block of 1: width 2, then 3 + 1
    # The policy weighs every row's block as whole (K), so a cap can grow again: were it
    # given the short block's length, it could never choose more than that.
    assert policy_inputs(FixedDraftLength(4, [1, 3, 3])) == [[4], [4], [4]]
    fixed = Counting(heads=4, errors=0.0)
    blockwise(fixed, [COPIED], policy=FixedDraftLength(4, [0]))
    assert fixed.heads == [0] + [1] * (len(fixed.heads) - 1)  # cap 0: one head keeps acceptance measured


def test_the_default_policy_gives_greedy_and_learns_across_calls():
    sources = sources_for_tests(30, seed=67)
    expected, _ = greedy(RuleCorrector(), sources)
    assert blockwise(HeadsCorrector(heads=4), sources)[0] == expected
    policy = SourceDraftLength(4)
    outs = [o for s in range(0, len(sources), 8) for o in blockwise(HeadsCorrector(heads=4), sources[s:s + 8],
                                                                     policy=policy)[0]]
    assert outs == expected and policy.calls > 0


class Charged(HeadsCorrector):
    """HeadsCorrector charging each step what `cost(token rows, heads ran)` says: the
    machine the policy is given as its cost model, so its decisions are deterministic."""

    def __init__(self, cost, **kw):
        super().__init__(**kw)
        self.cost, self.spent, self.head_steps, self.steps = cost, 0.0, 0, 0

    def step(self, state, tokens, want=None):
        heads = want is not None and want.proposals is not None
        self.spent += self.cost(np.asarray(tokens).size, heads)
        self.steps += 1
        self.head_steps += heads
        return super().step(state, tokens, want)


def heads_are_dear(token_rows: int, heads: bool) -> float:
    """This machine at batch 1 (bench/README.md): every position costs, heads ~+60 %."""
    return 1.0 + 0.3 * token_rows + (0.6 if heads else 0.0)


def heads_are_cheap(token_rows: int, heads: bool) -> float:
    """A core where a block costs little more than one position."""
    return 1.0 + 0.03 * token_rows + (0.1 if heads else 0.0)


class Junk(Charged):
    """Heads that are always wrong."""

    def block(self, src, prefix):
        return [5 + (len(prefix) * 7 + i) % (V - 5) for i in range(self.proposal_heads)]


def charged_runs(machine_class, cost, batch: int):
    """Greedy and blockwise over the same sentences twice, one policy throughout (as a
    Translator keeps one); the machines' counters cover the second pass only, after the
    policy has learnt the costs and the heads (the first pass is checked for outputs)."""
    sources = [s[:-1] * 3 + [EOS] for s in sources_for_tests(60, seed=70)]
    greedy_machine, machine = machine_class(cost, heads=4, errors=0.0), machine_class(cost, heads=4, errors=0.0)
    policy = SourceDraftLength(4, cost_model=cost)
    for _ in range(2):
        for m in (greedy_machine, machine):
            m.spent, m.head_steps, m.steps = 0.0, 0, 0
        expected, outs = [], []
        for s in range(0, len(sources), batch):
            expected += greedy(greedy_machine, sources[s:s + batch])[0]
            outs += blockwise(machine, sources[s:s + batch], policy=policy)[0]
        assert outs == expected
    return expected, outs, greedy_machine, machine


@pytest.mark.parametrize("batch", [1, 8])
def test_heads_that_do_not_pay_are_switched_off(batch):
    expected, outs, greedy_machine, machine = charged_runs(Junk, heads_are_dear, batch)
    assert outs == expected
    assert machine.head_steps <= 0.1 * machine.steps  # probes, and relearning after each
    assert machine.spent <= 1.05 * greedy_machine.spent


def test_probes_that_keep_failing_come_ever_less_often():
    """While probes keep finding junk heads not paying, the gap to the next probe doubles,
    up to MAX_PROBE_GAP x probe_every (probing every probe_every steps cost ~4 % at batch 1)."""
    machine = Junk(heads_are_dear, heads=4, errors=0.0)
    policy = SourceDraftLength(4, cost_model=heads_are_dear, probe_every=8)
    ran: list[bool] = []  # per step: did the heads run?
    step = machine.step

    def recording(state, tokens, want=None):
        ran.append(want is not None and want.proposals is not None)
        return step(state, tokens, want)

    machine.step = recording
    for s in sources_for_tests(400, seed=72):
        blockwise(machine, [s[:-1] * 4 + [EOS]], policy=policy)
    probes = [i for i in range(1, len(ran)) if ran[i] and not ran[i - 1]]
    gaps = np.diff(probes)[3:]  # after the first probes and plain-step measurements
    assert len(gaps) >= 5 and gaps.max() <= 16 * 8 + 8
    assert gaps[-1] >= 8 * 8 and (np.diff(gaps) >= -8).all()  # grows, and stays up


@pytest.mark.parametrize("batch", [1, 8])
def test_heads_that_pay_draft_every_step(batch):
    expected, outs, greedy_machine, machine = charged_runs(Charged, heads_are_cheap, batch)
    assert outs == expected
    assert machine.head_steps >= 0.95 * machine.steps
    assert machine.spent <= 0.5 * greedy_machine.spent


def test_heads_switched_off_come_back_when_they_start_to_pay():
    """Probes keep measuring acceptance while the heads are off (here: junk heads, then
    a model whose heads are right, under the same costs and the same policy)."""
    sources = [s[:-1] * 3 + [EOS] for s in sources_for_tests(60, seed=71)]
    expected = greedy(RuleCorrector(), sources)[0]
    policy = SourceDraftLength(4, cost_model=heads_are_dear)

    def head_share(machine) -> float:
        machine.head_steps = machine.steps = 0
        outs = [o for s in range(0, len(sources), 8) for o in blockwise(machine, sources[s:s + 8], policy=policy)[0]]
        assert outs == expected
        return machine.head_steps / machine.steps

    junk = Junk(heads_are_dear, heads=4)
    assert [head_share(junk) <= 0.05 for _ in range(2)][-1]
    good = Charged(heads_are_dear, heads=4, errors=0.0)
    shares = [head_share(good) for _ in range(10)]  # ~200 steps a pass; a probe every 128 plain steps
    assert shares[-1] >= 0.9 and shares[0] < 0.9


# ----------------------------------------------------------------------------- errors
def test_a_model_without_heads_is_refused():
    with pytest.raises(ValueError, match="no proposal heads.*'heads'"):
        blockwise(RuleCorrector(), [COPIED])


def test_a_policy_for_another_block_size_is_refused():
    with pytest.raises(ValueError, match="blocks of 3, the model has 4 heads"):
        blockwise(HeadsCorrector(heads=4), [COPIED], policy=FixedDraftLength(3, [1]))
    with pytest.raises(ValueError, match="policy must be"):
        blockwise(HeadsCorrector(heads=4), [COPIED], policy="fast")


def test_a_backend_whose_accepted_position_differs_from_the_loops_is_caught():
    class Misplaced(HeadsCorrector):
        def step(self, state, tokens, want=None):
            out = super().step(state, tokens, want)
            if out.accepted is not None and np.asarray(tokens).shape[1] > 1:
                out.accepted = out.accepted + 1
            return out

    with pytest.raises(AssertionError):
        blockwise(Misplaced(heads=4), [COPIED], policy=None)


def test_empty_batch():
    outs, stats = blockwise(HeadsCorrector(heads=2), [])
    assert outs == [] and stats.iterations == 0
    assert HeadsCorrector(heads=2).step(HeadsCorrector().start([[5, EOS]]), np.array([[2]]), Want()).proposals is None


# ----------------------------------------------------------------------------- real models with trained heads
@pytest.fixture(scope="module")
def trained_heads(tmp_path_factory):
    """Backends on the tiny trained verifier with heads from export.train_heads: torch
    reference and native engine on float32, native engine on int8."""
    from export.torch_backend import TorchBackend
    from pyfastdec.backends.native import NativeBackend

    dirs = heads_dirs(tmp_path_factory.mktemp("heads"))
    return {"torch": TorchBackend.from_dir(dirs["float32"]), "native": NativeBackend(dirs["float32"], threads=1),
            "native-int8": NativeBackend(dirs["int8"], threads=1)}


@pytest.mark.parametrize("name", ["torch", "native", "native-int8"])
def test_trained_heads_blockwise_equals_greedy(trained_heads, name):
    backend = trained_heads[name]
    assert backend.proposal_heads == 3
    sources = task_sources(64, seed=68)
    expected, g = greedy(backend, sources)
    drafted = accepted = 0
    for batch in (1, 7, 32):
        for policy in (None, FixedDraftLength(3, [3, 0, 1, 2]), "auto"):
            outs, iterations = [], 0
            for s in range(0, len(sources), batch):
                part, stats = blockwise(backend, sources[s:s + batch], policy=policy)
                outs += part
                drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
                iterations += stats.row_steps
            assert outs == expected, (batch, policy)
            if policy is None:
                assert iterations < g.row_steps
    assert 0 < accepted < drafted  # the heads are sometimes right, sometimes not


def test_trained_heads_torch_and_native_agree(trained_heads):
    sources = task_sources(32, seed=69)
    torch_outs, torch_stats = blockwise(trained_heads["torch"], sources, policy=None)
    native_outs, native_stats = blockwise(trained_heads["native"], sources, policy=None)
    assert torch_outs == native_outs
    assert (torch_stats.accepted, torch_stats.drafted) == (native_stats.accepted, native_stats.drafted)
