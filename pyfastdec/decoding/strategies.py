"""The strategy registry: every decoding algorithm, one entry each, read by the API (its
option checks and its decoding), the CLI's description of a call, bench and the export
choosers.

An entry (Strategy) holds an algorithm's name, what it needs beyond the verifier (proposal
heads, a drafter of which arch), which per-call options apply to it (the option names
below), how it runs with CTranslate2's logit rules, the cost policy it keeps for a
Translator's lifetime, and `run(call)`: one signature over the free functions (greedy,
beam_search, sample, iad, blockwise, bild, gad, gad_plus), whose own parameter lists stay
as they are. Adding a strategy means adding one entry to STRATEGIES: `algo=` accepts it,
and the option checks and their messages name it where its options apply.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from .beam import beam_search
from .bild import DEFAULT_FALLBACK, bild
from .blockwise import blockwise
from .gad import gad, gad_plus
from .greedy import greedy
from .iad import iad
from .sampling import sample
from .policies import AdaptiveDraftLength, DraftOrPlain, SourceDraftLength

# The per-call options an entry may take (Strategy.options); the others are refused for it.
BEAM = "beam"  # beam_size > 1, n_best > 1 (n-best lists), beam_rule
BLOCK = "block"  # GAD's draft block size
ACCEPTANCE = "beta/tau"  # GAD++'s acceptance thresholds
FALLBACK = "fallback"  # BiLD: the little model drafts while confident
ROLLBACK = "rollback"  # lossy BiLD: the rollback threshold (without it, rollback must be 0)
EDIT_MARGIN = "edit_margin"  # the edit-margin rule (source_ngrams.py), and the model's default margin
REPETITION_GUARD = "repetition_guard"  # a Corrector's looping output reverted to its source

# How an entry runs under logit rules (logit_rules.py: repetition penalty, no-repeat n-grams,
# min length), whose distribution every step then samples or maximises.
RULES_OWN = "own"  # the strategy itself runs over the ruled distribution (beam search, sampling)
RULES_GREEDY = "greedy"  # lossless: greedy runs in its place, since its output is greedy's
RULES_REFUSED = "refused"  # lossy: its output is not greedy's, so ruled greedy would not be it


@dataclass(frozen=True)
class RunOptions:
    """The options `run` reads, with the free functions' own defaults: what a caller
    outside the API (bench, export) passes. The API passes its checked call options
    (translate_options.CallOptions), which have the same fields."""

    beam_size: int = 1
    n_best: int = 1
    length_penalty: float = 1.0
    beam_rule: str = "pyfastdec"
    block: Optional[int] = None
    beta: int = 1
    tau: float = 0.0
    fallback: float = DEFAULT_FALLBACK
    rollback: float = 0.0
    edit_margin: float = 0.0
    seed: int = 0
    topk: int = 1
    temperature: float = 1.0
    topp: float = 1.0


@dataclass(frozen=True)
class StrategyCall:
    """One batch for `Strategy.run`: backends (the API may have wrapped them for target
    prefixes and logit rules), sources (ids + EOS), max_len as the free functions take it,
    the options, each row's sampling seed key, and the entry's policy (None: none)."""

    verifier: object
    drafter: object
    src: list
    max_len: object = None
    options: object = RunOptions()
    seeds: list = field(default_factory=list)
    policy: object = None


@dataclass(frozen=True)
class PolicySlot:
    """A cost policy kept for the holder's lifetime, so it learns this machine's costs once:
    `make(holder)` builds it at first use and it is stored as the holder's attribute `attr`
    (entries naming the same attr share one; a Translator may set it up front, e.g. GAD's
    draft_policy). `make` reads holder.verifier, holder.drafter, holder.max_source_len.
    skip_with_block: a call giving a block size uses that block as is, with no policy."""

    attr: str
    make: Callable[[object], object]
    skip_with_block: bool = False

    def get(self, holder, options) -> object:
        if self.skip_with_block and options.block is not None:
            return None
        policy = getattr(holder, self.attr, None)
        if policy is None:
            policy = self.make(holder)
            setattr(holder, self.attr, policy)
        return policy


# ----------------------------------------------------------------------------- requirements
def needs_heads(models, algo: str) -> None:
    """A ValueError unless the verifier has proposal heads (models: .verifier, .model_dir)."""
    if not models.verifier.proposal_heads:
        raise ValueError(f"algo {algo!r} needs proposal heads in the model: {models.model_dir.path}/config.json "
                         f"has no \"heads\" (add them with fastdec train-heads), or use algo='greedy'")


def needs_little(models, algo: str) -> None:
    """A ValueError unless the drafter is BiLD's little autoregressive model."""
    if models.drafter is None or models.drafter.arch != "transformer":
        raise ValueError(f"algo {algo!r} needs a little model: Translator(model, drafter='path/to/little') "
                         f"(CLI: --drafter DIR), an autoregressive model with config.json encoder.shared "
                         f"(export.train_shared little); or use algo='greedy'")


def needs_nat_drafter(models, algo: str) -> None:
    """A ValueError unless the drafter is a GAD (nat-drafter) one."""
    if models.drafter is None or models.drafter.arch != "nat-drafter":
        raise ValueError(f"algo {algo!r} needs a drafter (arch nat-drafter): "
                         f"Translator(model, drafter='path/to/drafter') (CLI: --drafter DIR), or use algo='greedy'")


# ----------------------------------------------------------------------------- run adapters
# Each looks the free function up in this module when called, so a test (or a profiler)
# that replaces strategies.bild sees every call.
def _greedy(c: StrategyCall):
    return greedy(c.verifier, c.src, c.max_len, edit_margin=c.options.edit_margin)


def _beam(c: StrategyCall):
    o = c.options
    return beam_search(c.verifier, c.src, beam_size=o.beam_size, nbest=o.n_best, alpha=o.length_penalty,
                       max_len=c.max_len, rule=o.beam_rule)


def _sample(c: StrategyCall):
    o = c.options
    return sample(c.verifier, c.src, [[o.seed, *key] for key in c.seeds], o.topk, o.temperature, c.max_len,
                  topp=o.topp)


def _iad(c: StrategyCall):
    return iad(c.verifier, c.src, c.max_len, policy=c.policy, edit_margin=c.options.edit_margin)


def _blockwise(c: StrategyCall):
    return blockwise(c.verifier, c.src, c.max_len, policy=c.policy)


def _bild(c: StrategyCall):
    return bild(c.verifier, c.drafter, c.src, fallback=c.options.fallback, rollback=c.options.rollback,
                max_len=c.max_len, policy=c.policy)


def _gad(c: StrategyCall):
    return gad(c.verifier, c.drafter, c.src, k=c.options.block, max_len=c.max_len, policy=c.policy)


def _gad_plus(c: StrategyCall):
    o = c.options
    return gad_plus(c.verifier, c.drafter, c.src, beta=o.beta, tau=o.tau, k=o.block, max_len=c.max_len,
                    policy=c.policy)


# ----------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Strategy:
    """One algorithm; see the module docstring."""

    name: str
    run: Callable[[StrategyCall], tuple]  # -> (outputs in input order, DecodeStats)
    needs: Optional[Callable[[object, str], None]] = None  # (models, name): ValueError if they cannot run it
    options: frozenset = frozenset()
    rules: str = RULES_GREEDY
    policy: Optional[PolicySlot] = None
    hypotheses: bool = False  # run returns n-best Hypothesis lists, scored as it goes (beam), not token lists
    public: bool = True  # chosen by algo=; False: chosen otherwise (sampling, by sampling_topk)


_DRAFT_LENGTH = PolicySlot("_draft_policy", lambda t: AdaptiveDraftLength(t.drafter.block_size), skip_with_block=True)
_DRAFT_OR_PLAIN = PolicySlot("_bild_policy", lambda t: DraftOrPlain())

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("greedy", _greedy, options=frozenset({EDIT_MARGIN, REPETITION_GUARD})),
    Strategy("beam", _beam, options=frozenset({BEAM}), rules=RULES_OWN, hypotheses=True),
    Strategy("iad", _iad, options=frozenset({EDIT_MARGIN, REPETITION_GUARD}),
             policy=PolicySlot("_iad_policy", lambda t: SourceDraftLength(t.max_source_len))),
    Strategy("gad", _gad, needs_nat_drafter, frozenset({BLOCK}), policy=_DRAFT_LENGTH),
    Strategy("gad++", _gad_plus, needs_nat_drafter, frozenset({BLOCK, ACCEPTANCE}), RULES_REFUSED, _DRAFT_LENGTH),
    Strategy("blockwise", _blockwise, needs_heads,
             policy=PolicySlot("_heads_policy", lambda t: SourceDraftLength(t.verifier.proposal_heads))),
    Strategy("bild", _bild, needs_little, frozenset({FALLBACK}), policy=_DRAFT_OR_PLAIN),
    Strategy("bild-lossy", _bild, needs_little, frozenset({FALLBACK, ROLLBACK}), RULES_REFUSED, _DRAFT_OR_PLAIN),
    Strategy("sample", _sample, rules=RULES_OWN, public=False),
)}


def names() -> tuple[str, ...]:
    """The algorithms `algo=` accepts, in registry order."""
    return tuple(name for name, s in STRATEGIES.items() if s.public)


def get(name: str) -> Strategy:
    """The entry of `name` (public or not); a ValueError naming the choices otherwise."""
    if name not in STRATEGIES:
        raise ValueError(f"algo must be one of {', '.join(names())}, got {name!r}")
    return STRATEGIES[name]


def taking(option: str) -> list[str]:
    """The public algorithms that take `option`, in registry order."""
    return [name for name, s in STRATEGIES.items() if s.public and option in s.options]


def quoted(names_: list[str], word: str = "and") -> str:
    """"'gad' and 'gad++'": the algorithms an option applies to, as error messages name them."""
    return f" {word} ".join(repr(n) for n in names_)


class _Backends:
    """What PolicySlot.make reads, for batch_runner; it keeps the policy across calls."""

    def __init__(self, verifier, drafter):
        self.verifier, self.drafter = verifier, drafter

    @property
    def max_source_len(self) -> int:
        return self.verifier.config.max_source_len


def batch_runner(name: str, verifier, drafter=None, *, policy: bool = True, max_len=None, **options):
    """`batch -> (outputs, DecodeStats)` running `name` as the API does, for callers that
    hold backends rather than a Translator (bench, export's choosers). policy: keep the
    entry's cost policy across calls, as a Translator does (False: none, e.g. GAD drafting
    its whole block every iteration). options: RunOptions fields (block=, fallback=, ...)."""
    strategy, opts = get(name), RunOptions(**options)
    holder = _Backends(verifier, drafter)
    slot = strategy.policy if policy else None

    def run(batch):
        return strategy.run(StrategyCall(verifier, drafter, batch, max_len, opts,
                                         policy=None if slot is None else slot.get(holder, opts)))
    return run


# ----------------------------------------------------------------------------- describing a call
def describe(options) -> str:
    """One line naming a call's algorithm and the options that matter for it, as `fastdec`
    prints it. options: the CLI's DecodeOptions (algo, batch_size, ..., None for "the
    model's own")."""
    algo = get(options.algo).options if options.algo in STRATEGIES else frozenset()
    parts = [f"algo {options.algo}", f"batch size {options.batch_size}"]
    if BEAM in algo:
        parts.append(f"beam size {options.beam_size}, n-best {options.n_best}")
    if BLOCK in algo:
        parts.append(f"block {options.block if options.block is not None else 'drafter default'}")
    if ACCEPTANCE in algo:
        beta, tau = (1 if options.beta is None else options.beta), (0.0 if options.tau is None else options.tau)
        parts.append(f"beta {beta}, tau {tau}")
    if options.sampling_topk != 1:
        parts.append(f"sampling top-{options.sampling_topk or 'all'}, temperature {options.sampling_temperature}, "
                     f"seed {options.sampling_seed}")
    if options.edit_margin is not None:
        parts.append(f"edit margin {options.edit_margin}")
    if (options.repetition_penalty, options.no_repeat_ngram_size, options.min_decoding_length) != (1.0, 0, 0):
        parts.append(f"repetition penalty {options.repetition_penalty}, no repeat n-gram size "
                     f"{options.no_repeat_ngram_size}, min decoding length {options.min_decoding_length}")
    if options.repetition_guard is False:
        parts.append("no repetition guard")
    if FALLBACK in algo:
        parts.append(f"fallback {'model default' if options.fallback is None else options.fallback}")
    if ROLLBACK in algo:
        parts.append(f"rollback {'model default' if options.rollback is None else options.rollback}")
    if options.max_decoding_length is not None:
        parts.append(f"max decoding length {options.max_decoding_length}")
    if getattr(options, "max_length_factor", None) is not None:
        parts.append(f"max length factor {options.max_length_factor:g}")
    if options.length_penalty != 1.0:
        parts.append(f"length penalty {options.length_penalty}")
    if BEAM in algo and options.beam_rule != "pyfastdec":
        parts.append(f"beam rule {options.beam_rule}")
    return ", ".join(parts)
