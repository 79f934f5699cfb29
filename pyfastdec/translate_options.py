"""The options of one Translator.translate call, checked: which algorithm runs (the
strategy registry, decoding/strategies.py, says what each one needs and which options
apply to it), and the defaults that depend on the model (edit margin, BiLD thresholds,
the repetition guard). Errors are one line naming the bad option.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from pyfastdec.decoding import strategies
from pyfastdec.decoding.beam import RULES as BEAM_RULES
from pyfastdec.decoding.bild import DEFAULT_FALLBACK, DEFAULT_ROLLBACK, MAX_ROLLBACK
from pyfastdec.decoding.limits import DEFAULT_MAX_LENGTH_FACTOR
from pyfastdec.decoding.logit_rules import LogitRules, check_rules, check_rules_algo
from pyfastdec.decoding.sampling import check_sampling
from pyfastdec.decoding.strategies import (ACCEPTANCE, BEAM, BLOCK, EDIT_MARGIN, FALLBACK, REPETITION_GUARD,
                                           ROLLBACK, RULES_REFUSED, quoted, taking)
from pyfastdec.model_dir import engine_edit_margin, is_edit_margin
from pyfastdec.size_limits import MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA, MAX_BLOCK, MAX_N_BEST, check_size


@dataclass(frozen=True)
class CallOptions:
    """The checked options of one translate call (check_call); strategies.Strategy.run
    reads the decoding ones (the fields of strategies.RunOptions)."""

    algo: str  # a strategies.STRATEGIES name: one of strategies.names(), or "sample"
    beam_size: int
    batch_size: int
    n_best: int
    scores: bool
    block: Optional[int]
    beta: int
    tau: float
    max_len: Optional[int]  # max_decoding_length
    length_penalty: float
    topk: int
    temperature: float
    seed: int
    beam_rule: str = "pyfastdec"  # decoding/beam.py RULES
    edit_margin: float = 0.0  # greedy / iad: the edit-margin rule (decoding/source_ngrams.py)
    fallback: float = 0.0  # bild: the little model drafts while its top-1 probability is >= this
    rollback: float = 0.0  # bild-lossy: nats a little token may be from the big model (decoding/bild.py)
    repetition_guard: bool = False  # Corrector: a looping output comes back as its source (repetition_guard.py)
    topp: float = 1.0  # sampling: the nucleus (decoding/sampling.py)
    rules: LogitRules = LogitRules()  # repetition penalty, no-repeat n-grams, min length (decoding/logit_rules.py)
    length_factor: Optional[float] = DEFAULT_MAX_LENGTH_FACTOR  # the relative limit (decoding/limits.py); None: off


def check_call(t, algo=None, beam_size=1, batch_size=32, n_best=1, return_scores=False, block=None,
               beta=1, tau=0.0, max_decoding_length=None, length_penalty=1.0, num_hypotheses=None,
               sampling_topk=1, sampling_temperature=1.0, sampling_seed=None, beam_rule="pyfastdec",
               edit_margin=None, target_prefix=None, fallback=None, rollback=None,
               repetition_guard=None, sampling_topp=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0,
               min_decoding_length=0, return_alternatives=False,
               max_length_factor=None) -> CallOptions:
    """The checked options of one call to Translator `t`; ValueError/TypeError naming the bad one."""
    if return_alternatives:  # translate takes it before calling here
        raise ValueError("return_alternatives=True: only Translator.translate returns alternatives (a list of "
                         "outputs per input)")
    n_best = one_n_best(n_best, num_hypotheses)
    check_sampling(sampling_topk, sampling_temperature, t.verifier.vocab_size, sampling_topp)
    sampling = sampling_topk != 1
    rules = check_rules(repetition_penalty, no_repeat_ngram_size, min_decoding_length,
                        max_decoding_length if isinstance(max_decoding_length, (int, np.integer)) else None)
    if algo is None:
        algo = "beam" if beam_size > 1 else "sample" if sampling else t.strategy.algo
    elif sampling:
        if algo != "greedy":
            raise ValueError(f"sampling_topk={sampling_topk}: random sampling is greedy-style; it needs "
                             f"algo 'greedy' (or none), got {algo!r}")
        algo = "sample"
    if rules.active:  # every step is ruled (RuledBackend)
        known = strategies.STRATEGIES.get(algo)
        check_rules_algo(algo, edit_margin, known is not None and known.rules == RULES_REFUSED)
        edit_margin = 0.0
    if algo == "sample" and beam_size > 1:
        raise ValueError(f"sampling_topk={sampling_topk} with beam_size={beam_size}: sampling draws one "
                         f"token per step; use beam_size=1")
    # Sampling is checked as the greedy it replaces: "sample" is no name algo= takes.
    check_algo(t, "greedy" if algo == "sample" else algo, beam_size, batch_size, n_best, block, beta, tau)
    if max_decoding_length is not None:
        if isinstance(max_decoding_length, bool) or not isinstance(max_decoding_length, (int, np.integer)) \
                or max_decoding_length < 1:
            raise ValueError(f"max_decoding_length must be an int >= 1 (output tokens, the target prefix "
                             f"included, EOS not counted), got {max_decoding_length!r}")
    check_length_factor(max_length_factor)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
            or not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
    if beam_rule not in BEAM_RULES:
        raise ValueError(f"beam_rule must be one of {', '.join(map(repr, BEAM_RULES))}, got {beam_rule!r}")
    if sampling_seed is not None and (isinstance(sampling_seed, bool)
                                      or not isinstance(sampling_seed, (int, np.integer)) or sampling_seed < 0):
        raise ValueError(f"sampling_seed must be an int >= 0 or None, got {sampling_seed!r}")
    # Fresh entropy only when sampling: the OS call is a cost every other call would pay for nothing.
    seed = int(sampling_seed) if sampling_seed is not None else \
        int(np.random.SeedSequence().entropy) if algo == "sample" else 0
    return CallOptions(algo, beam_size, batch_size, n_best, return_scores, block, beta, tau,
                       None if max_decoding_length is None else int(max_decoding_length), float(length_penalty),
                       int(sampling_topk), float(sampling_temperature), seed, beam_rule,
                       check_edit_margin(t, algo, edit_margin, target_prefix),
                       *check_bild(t, algo, fallback, rollback),
                       check_repetition_guard(t, algo, repetition_guard, target_prefix), float(sampling_topp), rules,
                       relative_factor(max_length_factor, max_decoding_length))


def relative_factor(factor, max_decoding_length) -> float | None:
    """The relative limit's factor of a call: the one given; or, given none, the default
    unless max_decoding_length is given, which is then the only limit, as CTranslate2's
    max_decoding_length is (decoding/limits.py: never no limit at all)."""
    if factor is not None:
        return float(factor)
    return DEFAULT_MAX_LENGTH_FACTOR if max_decoding_length is None else None


def one_n_best(n_best, num_hypotheses):
    """The n-best size of a call given as n_best or by its CTranslate2 name num_hypotheses."""
    if num_hypotheses is None:
        return n_best
    if n_best != 1 and n_best != num_hypotheses:
        raise ValueError(f"n_best={n_best} and num_hypotheses={num_hypotheses}: two names for the same "
                         f"option, give one")
    return num_hypotheses


def check_length_factor(factor) -> None:
    """max_length_factor is None (the default) or a finite number > 0."""
    if factor is None:
        return
    if isinstance(factor, (bool, np.bool_)) or not isinstance(factor, (int, float, np.integer, np.floating)) \
            or not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"max_length_factor must be a finite number > 0 (output tokens per source token; None: "
                         f"the default), got {factor!r}")


def check_algo(t, algo, beam_size, batch_size, n_best, block, beta, tau) -> None:
    """`algo` is one algo= takes, Translator `t` can run it, and the sizes and thresholds
    given apply to it."""
    strategy = strategies.STRATEGIES.get(algo)
    if strategy is None or not strategy.public:
        raise ValueError(f"algo must be one of {', '.join(strategies.names())}, got {algo!r}")
    check_size("beam_size", beam_size, MAX_BEAM_SIZE)
    check_size("batch_size", batch_size, MAX_BATCH_SIZE)
    check_size("n_best", n_best, MAX_N_BEST)
    if BEAM not in strategy.options and (beam_size > 1 or n_best > 1):
        raise ValueError(f"beam_size={beam_size}, n_best={n_best}: beam sizes and n-best lists need "
                         f"{' or '.join(f'algo={n!r}' for n in taking(BEAM))}")
    if n_best > beam_size:
        raise ValueError(f"n_best={n_best} exceeds beam_size={beam_size}")
    if strategy.needs is not None:
        strategy.needs(t, algo)
    if BLOCK in strategy.options:
        if block is not None:
            check_size("block", block, MAX_BLOCK)
    elif block is not None:
        raise ValueError(f"block={block}: a draft block size applies to algo {quoted(taking(BLOCK))} only")
    if ACCEPTANCE in strategy.options:
        check_size("beta", beta, MAX_BETA)
    elif beta != 1 or tau != 0.0:
        raise ValueError(f"beta={beta}, tau={tau}: acceptance thresholds apply to algo "
                         f"{quoted(taking(ACCEPTANCE))} only")


def check_repetition_guard(t, algo: str, guard, target_prefix) -> bool:
    """Whether a call reverts looping outputs to their sources: a correction rule, on by
    default for a Corrector's greedy and IAD (the outputs the rule was measured on)."""
    applies = REPETITION_GUARD in strategies.get(algo).options
    if guard is None:
        return t._role == "correct" and applies and target_prefix is None
    if not isinstance(guard, (bool, np.bool_)):
        raise TypeError(f"repetition_guard must be True, False or None, got {guard!r}")
    if guard and t._role != "correct":
        raise ValueError("repetition_guard=True: a looping output is reverted to its source, which only a "
                         "correction model's output may be (use Corrector)")
    if guard and not applies:
        raise ValueError(f"repetition_guard=True applies to algo {quoted(taking(REPETITION_GUARD))} only, "
                         f"got {algo!r}")
    if guard and target_prefix is not None:
        raise ValueError("repetition_guard=True with target_prefix: a reverted output would lose its prefix; "
                         "give one or the other")
    return bool(guard)


def check_bild(t, algo: str, fallback, rollback) -> tuple[float, float]:
    """The checked (fallback, rollback) of a call: explicit, or the little model's own
    (config.json decoding; bild.DEFAULT_FALLBACK without). bild is lossless (rollback 0)."""
    options = strategies.get(algo).options
    if FALLBACK not in options:
        if fallback is not None or rollback is not None:
            raise ValueError(f"fallback={fallback}, rollback={rollback}: BiLD thresholds apply to algo "
                             f"{quoted(taking(FALLBACK))} only, got {algo!r}")
        return 0.0, 0.0
    own = t.drafter_dir.config.bild or {}
    if ROLLBACK not in options:
        if rollback:
            raise ValueError(f"rollback={rollback}: algo {algo!r} is lossless (rollback 0); use "
                             f"{quoted(taking(ROLLBACK), 'or')}")
        rollback, default = 0.0, own.get("fallback", DEFAULT_FALLBACK)
    else:
        default = own.get("lossy_fallback", DEFAULT_FALLBACK)
        rollback = own.get("rollback", DEFAULT_ROLLBACK) if rollback is None else rollback
    fallback = default if fallback is None else fallback
    for name, value, top in (("fallback", fallback, 1.0), ("rollback", rollback, MAX_ROLLBACK)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
            raise ValueError(f"{name} must be a number in [0, {top:.4g}], got {value!r}")
    return float(fallback), float(rollback)


def check_edit_margin(t, algo: str, edit_margin, target_prefix) -> float:
    """The checked edit margin of a call: explicit, or the model's own for greedy/iad."""
    applies = EDIT_MARGIN in strategies.get(algo).options
    if edit_margin is None:
        if not applies or target_prefix is not None:
            return 0.0
        return engine_edit_margin(t.model_dir.config.edit_margin)
    if not is_edit_margin(edit_margin):
        raise ValueError(f"edit_margin must be a number >= 0 (nats; inf: never edit), got {edit_margin!r}")
    if edit_margin and not applies:
        raise ValueError(f"edit_margin={edit_margin}: the edit-margin rule applies to algo "
                         f"{quoted(taking(EDIT_MARGIN))} only, got {algo!r}")
    if edit_margin and target_prefix is not None:
        raise ValueError(f"edit_margin={edit_margin} with target_prefix: the rule aligns the output with its "
                         f"source from the first token; give one or the other")
    return engine_edit_margin(edit_margin)
