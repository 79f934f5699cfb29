"""Shared pieces of the decoding-strategy tests (test_decoding_*.py), and tests of them.

- verifier/drafter pairs: tiny models TRAINED for a few seconds on a synthetic task
  (export/tiny_task.py), so greedy outputs differ from source to source and depend on
  what the decoder holds, and the drafter's drafts are sometimes accepted and sometimes
  rejected (a random model repeats one token whatever it holds, and a random drafter is
  never accepted: a rollback bug is invisible on them). Each model runs behind the torch
  reference backend and the native engine (float32, and int8 where asked);
- naive_greedy: an independent greedy reference that re-runs the whole prefix through
  the torch model every step (no cache, no Backend);
- RuleCorrector: a fake verifier backend whose greedy output is a known "correction" of
  the source (mostly copies), so IAD meets long accepted drafts and real re-entries;
- OracleDrafter: a fake drafter proposing the verifier's greedy continuation (optionally
  with one wrong token), so GAD's acceptance counts are known exactly;
- HeadsCorrector: RuleCorrector with K proposal heads (Want.proposals, backends/base.py)
  that propose its own greedy continuation with a wrong token at known places, so
  blockwise decoding's acceptance counts are known exactly.
The fakes check how they are called (BOS first, accepted prefixes only, no positions
beyond what is held), so a strategy misusing the protocol fails loudly.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from export.calibrate import calibrate
from export.tiny import random_sources, tiny_spm
from export.tiny_task import task_sources, trained_drafter, trained_verifier, translate
from export.torch_backend import TorchBackend
from export.writer import write_model_dir
from pyfastdec.backends.base import BackendBase, Draft, StepOut, Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import gad, greedy
from pyfastdec.decoding.limits import default_max_len

torch.set_num_threads(1)  # tiny models; the machine's cores are shared

TOKENS = {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "mask": 4}
PAD, UNK, BOS, EOS, MASK = 0, 1, 2, 3, 4
V = 40
# The verifiers every real-model test runs on: both decoder kinds; the SSRU one with its
# EOS pushed down so that some rows run to their length limit (test_decoding_greedy
# checks that both endings occur).
VARIANTS = {"attention": {}, "ssru": {"decoder_self": "ssru", "eos_bias": -3.0}}


def tiny_verifier(decoder_self: str = "attention", eos_bias: float = 0.0):
    """The tiny trained verifier (a fresh copy) with its EOS bias shifted by eos_bias
    (negative: more rows run to max_len)."""
    model = trained_verifier(decoder_self)
    with torch.no_grad():
        model.output.bias[EOS] += eos_bias
    return model


def tiny_drafter():
    """The tiny NAT drafter (a fresh copy), trained on the attention verifier's outputs."""
    return trained_drafter()


def backends(model, spm, directory, threads: int = 1, int8: bool = False):
    """(torch backend, native backend) on the same float32 weights; with int8, a third:
    the native engine on an int8 directory of the same model (calibrated on task pairs)."""
    made = (TorchBackend(model), NativeBackend(write_model_dir(model, spm, directory / "float32"), threads=threads))
    if not int8:
        return made
    pairs = [(s[:-1], translate(s)) for s in task_sources(64, seed=5)]
    path = write_model_dir(model, spm, directory / "int8", act_scales=calibrate(model, pairs), int8=True)
    return (*made, NativeBackend(path, threads=threads))


@torch.no_grad()
def naive_greedy(model, src: list[int], max_len: int | None = None) -> list[int]:
    """Greedy for one source, re-running the full prefix without any cache each step."""
    limit = max_len or default_max_len(len(src))
    prefix = [BOS]
    while len(prefix) - 1 < limit:
        logits = model(torch.tensor([src]), torch.tensor([prefix]))
        token = int(logits[0, -1].argmax())
        if token == EOS:
            break
        prefix.append(token)
    return prefix[1:]


# ----------------------------------------------------------------------------- fakes
def corrected(src: list[int]) -> list[int]:
    """RuleCorrector's output for a source (EOS dropped): a copy with edits every few
    tokens: multiples of 7 deleted, of 11 doubled, of 13 replaced by the next id (5 for
    the last id)."""
    out = []
    for t in src:
        if t == EOS:
            break
        if t % 7 == 0:
            continue
        out += [t, t] if t % 11 == 0 else [(t + 1 if t + 1 < V else 5) if t % 13 == 0 else t]
    return out


class Charged:
    """A backend wrapper that charges each step what `cost` says, as the policy sees it."""

    def __init__(self, backend, cost):
        self.backend, self.cost, self.spent = backend, cost, 0.0
        self.tokens, self.vocab_size, self.arch = backend.tokens, backend.vocab_size, backend.arch

    def step(self, state, tokens, want=None):
        tokens = np.asarray(tokens)
        self.spent += self.cost(tokens.size, tokens.shape[1] > 1)
        return self.backend.step(state, tokens, want)

    def __getattr__(self, name):
        return getattr(self.backend, name)


class RuleCorrector(BackendBase):
    """A verifier whose next token, after a prefix that follows corrected(source), is the
    next corrected token (else a junk token from a hash of the prefix). Its top-1
    log-prob is log 0.9, every other id shares the rest (ties ordered by id)."""

    tokens, vocab_size, arch, block_size = dict(TOKENS), V, "transformer", None

    def encode(self, src_ids):
        return [list(map(int, s)) for s in src_ids]

    def start(self, memory):
        return {"src": [list(s) for s in memory], "held": [[] for _ in memory]}

    def step(self, state, tokens, want=None):
        want = want or Want()
        tokens = np.asarray(tokens)
        assert tokens.ndim == 2 and tokens.shape[0] == len(state["held"]) and tokens.shape[1] >= 1
        nxt = np.zeros(tokens.shape, dtype=np.int64)
        for r, (src, held) in enumerate(zip(state["src"], state["held"])):
            for i, t in enumerate(tokens[r]):
                assert (int(t) == BOS) == (len(held) == 0), "BOS must be fed first, and only first"
                held.append(int(t))
                nxt[r, i] = self.next_token(src, held[1:])
        return self.outputs(nxt, want)

    @staticmethod
    def next_token(src, prefix):
        target = corrected(src) + [EOS]
        if len(prefix) < len(target) and prefix == target[:len(prefix)]:
            return target[len(prefix)]
        return 5 + (sum(prefix) * 31 + len(prefix)) % (V - 5)

    @staticmethod
    def outputs(nxt, want):
        logp = np.full(nxt.shape + (V,), np.log(0.1 / (V - 1)), dtype=np.float32)
        np.put_along_axis(logp, nxt[..., None], np.float32(np.log(0.9)), axis=-1)
        order = np.argsort(-logp, axis=-1, kind="stable")
        out = StepOut(argmax=nxt if want.argmax else None, logprobs=logp if want.logprobs else None)
        if want.topk:
            out.topk_ids = order[..., :want.topk]
            out.topk_logprobs = np.take_along_axis(logp, out.topk_ids, -1)
        if want.ids is not None:
            out.id_logprobs = np.take_along_axis(logp, np.asarray(want.ids)[..., None], -1)[..., 0]
        return out

    def truncate(self, state, lengths):
        assert len(lengths) == len(state["held"])
        for held, n in zip(state["held"], lengths):
            assert 0 <= n <= len(held), "truncate beyond the held positions"
            del held[int(n):]
        return state

    def select(self, state, rows):
        rows = [int(r) for r in rows]
        if isinstance(state, dict):
            return {"src": [list(state["src"][r]) for r in rows], "held": [list(state["held"][r]) for r in rows]}
        return [list(state[r]) for r in rows]

    def draft(self, memory, prefix, k):
        raise ValueError("not a drafter")


class OracleDrafter(BackendBase):
    """Proposes the next k tokens of each source's known greedy output (+ EOS), padded
    with junk past it; with `noise`, replaces one proposed token in about half of the
    calls by a wrong one. Asserts that it is given exactly the accepted prefix."""

    tokens, arch = dict(TOKENS), "nat-drafter"

    def __init__(self, greedy_outputs: dict[tuple, list[int]], block_size: int = 4, noise: bool = False,
                 vocab_size: int = V):
        self.table, self.block_size, self.noise, self.vocab_size = greedy_outputs, block_size, noise, vocab_size
        self.calls = 0

    def encode(self, src_ids):
        return [tuple(map(int, s)) for s in src_ids]

    def select(self, memory, rows):
        return [memory[int(r)] for r in rows]

    def draft(self, memory, prefix, k=None):
        k = k or self.block_size
        assert len(prefix) == len(memory)
        self.calls += 1
        ids = np.zeros((len(memory), k), dtype=np.int64)
        for r, (src, p) in enumerate(zip(memory, prefix)):
            target = self.table[src] + [EOS]
            assert list(p) == target[:len(p)], "the drafter must get the accepted prefix (no BOS)"
            block = (target[len(p):len(p) + k] + [7] * k)[:k]
            rng = random.Random(hash((src, len(p))))
            if self.noise and rng.random() < 0.5:
                at = rng.randrange(k)
                block[at] = 5 + (block[at] - 5 + 1 + rng.randrange(V - 6)) % (V - 5)
            ids[r] = block
        return Draft(ids, np.zeros(ids.shape, dtype=np.float32))


class HeadsCorrector(RuleCorrector):
    """RuleCorrector with `heads` proposal heads. At a position whose next token is y, on
    the corrected target, head i proposes the target token i+1 places after y (7 past
    EOS), except that one head is wrong where mistake() says so (by default at about
    `errors` of the positions, from a hash of source and position); off the target every
    head proposes junk. Want.proposals (and Want.heads) is implemented as base.py specifies, with j
    counted here (not with draft_verify's code), and asserts that the step's drafts fit
    it (lengths within the step, padding after them)."""

    def __init__(self, heads: int = 4, errors: float = 0.3):
        self.proposal_heads, self.errors = heads, errors

    def mistake(self, src: list[int], prefix: list[int]) -> int | None:
        """The head that is wrong after `prefix` (no BOS), or None."""
        rng = random.Random(hash((tuple(src), len(prefix))))
        return rng.randrange(self.proposal_heads) if rng.random() < self.errors else None

    def block(self, src: list[int], prefix: list[int]) -> list[int]:
        """What the heads propose at the position that holds `prefix` (no BOS)."""
        k, target = self.proposal_heads, corrected(src) + [EOS]
        ahead = prefix + [self.next_token(src, prefix)]
        if ahead != target[:len(ahead)]:
            return [5 + (sum(ahead) * 17 + i) % (V - 5) for i in range(k)]
        out = (target[len(ahead):len(ahead) + k] + [7] * k)[:k]
        wrong = self.mistake(src, prefix)
        if wrong is not None:
            out[wrong] = 5 + (out[wrong] - 5 + 1) % (V - 5)
        return out

    def step(self, state, tokens, want=None):
        want = want or Want()
        tokens = np.asarray(tokens)
        starts = [len(h) for h in state["held"]]
        out = super().step(state, tokens, want)
        if want.proposals is None:
            return out
        lengths = np.asarray(want.proposals)
        assert want.argmax, "Want.proposals needs argmax"
        assert lengths.dtype == np.int64 and lengths.shape == (tokens.shape[0],)
        assert ((lengths >= 0) & (lengths <= tokens.shape[1] - 1)).all(), "a draft longer than the step"
        assert 0 <= want.heads <= self.proposal_heads
        heads = want.heads or self.proposal_heads
        accepted = np.zeros(len(lengths), dtype=np.int64)
        proposals = np.zeros((len(lengths), heads), dtype=np.int64)
        for r, (src, held, n) in enumerate(zip(state["src"], state["held"], lengths.tolist())):
            assert (tokens[r, 1 + n:] == PAD).all(), "the step's padding after a row's draft"
            j = 0
            while j < n and tokens[r, 1 + j] == out.argmax[r, j]:
                j += 1
            accepted[r] = j
            proposals[r] = self.block(src, held[1:starts[r] + 1 + j])[:heads]
        out.accepted, out.proposals = accepted, proposals
        return out


def heads_dirs(directory: Path, heads: int = 3, steps: int = 300) -> dict[str, Path]:
    """The tiny trained (attention) verifier with K proposal heads trained by
    fastdec train-heads on its own greedy outputs: {"float32": dir, "int8": dir}. The
    sources are task sentences as text (the tiny vocabulary's pieces)."""
    from export.vocab import load_vocab
    from pyfastdec.training.heads_command import main as train_heads

    spm = tiny_spm(directory / "spm.model")
    sp = load_vocab(spm)
    sources = directory / "sources.txt"
    sources.write_text("".join((sp.decode(s[:-1]) or "a") + "\n" for s in task_sources(600, seed=9)))
    backends(tiny_verifier(), spm, directory / "plain", int8=True)  # writes plain/float32 and plain/int8
    made = {}
    for kind in ("float32", "int8"):
        plain = directory / "plain" / kind
        out = directory / f"{kind}-heads"
        rc = train_heads([str(plain), "--sources", str(sources), "--out", str(out), "--heads", str(heads),
                          "--hidden", "16", "--steps", str(steps), "--batch", "128", "--held-out", "60",
                          "--threads", "1", "--save-every", "100"])
        assert rc == 0
        made[kind] = out
    return made


def oracle_for(verifier, sources, **kw) -> OracleDrafter:
    outs, _ = greedy(verifier, sources)
    return OracleDrafter({tuple(s): o for s, o in zip(sources, outs)}, **kw)


# ----------------------------------------------------------------------------- tests of the pieces above
def test_rule_corrector_greedy_is_its_correction():
    sources = random_sources(10, seed=3) + [[EOS], [7, 14, EOS], [11, 13, 26, EOS]]
    outs, stats = greedy(RuleCorrector(), sources)
    assert outs == [corrected(s) for s in sources]
    assert outs[-3:] == [[], [], [11, 11, 14, 27]]
    assert stats.hit_max_len == []


def test_rule_corrector_multi_token_step_and_truncate_agree_with_single_steps():
    fake = RuleCorrector()
    src = [[9, 11, 14, 20, 39, EOS]]
    target = corrected(src[0])
    assert target == [9, 11, 11, 20, 5]
    state = fake.start(fake.encode(src))
    at_once = fake.step(state, np.array([[BOS] + target[:3] + [30, 31]]), Want()).argmax[0]
    assert list(at_once[:4]) == target[:4]
    assert at_once[4] == RuleCorrector.next_token(src[0], target[:3] + [30]) != target[4]
    fake.truncate(state, np.array([3]))
    assert list(fake.step(state, np.array([[target[2]]]), Want()).argmax[0]) == [target[3]]


def test_oracle_drafter_proposes_the_greedy_continuation():
    drafter = OracleDrafter({(9, EOS): [5, 6, 8]}, block_size=3)
    memory = drafter.encode([[9, EOS], [9, EOS]])
    assert drafter.draft(memory, [[], [5, 6]]).ids.tolist() == [[5, 6, 8], [8, EOS, 7]]
    with pytest.raises(AssertionError, match="accepted prefix"):
        drafter.draft(memory, [[5], [6]])


def test_heads_corrector_proposes_the_block_after_the_accepted_position():
    fake = HeadsCorrector(heads=3, errors=0.0)
    src = [[5, 6, 8, 9, 10, 12, 15, EOS]]  # no multiples of 7, 11, 13: copied
    state = fake.start(fake.encode(src))
    first = fake.step(state, np.array([[BOS]]), Want(proposals=np.array([0])))
    assert (first.argmax.tolist(), first.accepted.tolist(), first.proposals.tolist()) == ([[5]], [0], [[6, 8, 9]])
    # Draft 6 8 30: two accepted, the verifier says 9 after them; the heads: 10 12 15.
    out = fake.step(state, np.array([[5, 6, 8, 30]]), Want(proposals=np.array([3])))
    assert (out.accepted.tolist(), out.argmax[0, 2], out.proposals.tolist()) == ([2], 9, [[10, 12, 15]])
    fake.truncate(state, np.array([4]))
    out = fake.step(state, np.array([[9, 10, 12, 15, PAD]]), Want(proposals=np.array([3])))
    assert (out.accepted.tolist(), out.proposals.tolist()) == ([3], [[7, 7, 7]])  # after EOS
    with pytest.raises(AssertionError, match="padding"):
        fake.step(fake.start(fake.encode(src)), np.array([[BOS, 5]]), Want(proposals=np.array([0])))


# ----------------------------------------------------------------------------- the trained models are not degenerate
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spm = tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")
    verifiers = {name: backends(tiny_verifier(**spec), spm, tmp_path_factory.mktemp(name))
                 for name, spec in VARIANTS.items()}
    return verifiers, backends(tiny_drafter(), spm, tmp_path_factory.mktemp("drafter"))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_trained_verifier_outputs_vary_with_the_source_and_learnt_the_task(trained, name):
    sources = random_sources(32, seed=51)
    limits = [2 * len(s) + 10 for s in sources]  # what the thresholds below were set under (a loop runs to it)
    for backend in trained[0][name]:
        outs, _ = greedy(backend, sources, limits)
        assert len(set(map(tuple, outs))) >= 28, "most sources must get an output of their own"
        tokens = [t for o in outs for t in o]
        assert len(set(tokens)) >= 20 and max(map(tokens.count, set(tokens))) < 0.35 * len(tokens)
        # Better than chance (1 word in 35) at the task it was trained on.
        right = sum(a == b for o, s in zip(outs, sources) for a, b in zip(o, translate(s)))
        assert right >= 0.2 * sum(len(translate(s)) for s in sources)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_trained_verifier_next_token_depends_on_what_it_holds(trained, name):
    """A wrong token left in the verifier's cache (a rollback bug) changes what comes next."""
    ref = trained[0][name][0]
    sources = random_sources(16, seed=52)
    outs, _ = greedy(ref, sources)
    changed = total = 0
    for src, out in zip(sources, outs):
        for i in range(1, min(len(out), 6)):
            wrong = out[:i - 1] + [5 + (out[i - 1] - 5 + 17) % (V - 5)]
            state = ref.start(ref.encode([src]))
            after = ref.step(state, np.array([[BOS] + wrong]), Want()).argmax[0, -1]
            changed, total = changed + int(after != out[i]), total + 1
    assert changed >= 0.5 * total


@pytest.mark.parametrize("name", list(VARIANTS))
def test_trained_drafter_is_sometimes_accepted_and_sometimes_not(trained, name):
    sources = random_sources(32, seed=53)
    for verifier, drafter in zip(trained[0][name], trained[1]):
        _, stats = gad(verifier, drafter, sources)
        assert 0.1 * stats.drafted < stats.accepted < 0.9 * stats.drafted
