"""Translator.translate(..., return_alternatives=True): CTranslate2's alternatives at the
first unconstrained position.

For every input, the model reads its target prefix (none: nothing) and the
num_hypotheses most likely tokens at the next position are taken (EOS excluded, as
CTranslate2 excludes it there; the call's repetition_penalty, no_repeat_ngram_size and
min_decoding_length applied first), best first. Each one is then appended to the
prefix and the output continued by the call's own decoding (greedy, the default
strategy, beam search, sampling): alternative j of an input is exactly
translate(input, target_prefix=prefix + [token j]). The alternatives come back in the
order of their first token's probability, as CTranslate2 returns them. One difference,
with repetition_penalty or no_repeat_ngram_size: in this mode CTranslate2's penalties see
neither the prefix nor the alternative token (it feeds them outside its penalised
searches); here they see the whole output, as everywhere else.

With text input the prefix belongs to the input's first sentence, so the alternatives
are those of the first sentence; the others are decoded once and shared. An input
whose prefix already fills max_decoding_length, an empty input, or a sentence a
Corrector keeps as it is has one output.
"""
from __future__ import annotations

import warnings

import numpy as np

from pyfastdec import sentence_units
from pyfastdec.backends.base import Want
from pyfastdec.decoding import DecodeStats
from pyfastdec.decoding.limits import sentence_limit
from pyfastdec.decoding.prefix import PrefixedBackend, PrefixSource
from pyfastdec.hypotheses import merge_stats
from pyfastdec.size_limits import MAX_N_BEST, check_size
from pyfastdec.translate_options import one_n_best


def check_alternatives(n_best: int, num_hypotheses: int | None) -> int:
    """How many alternatives a call asks for (num_hypotheses, or its other name n_best)."""
    return check_size("num_hypotheses", one_n_best(n_best, num_hypotheses), MAX_N_BEST)


def first_tokens(translator, units: list, n: int, opts) -> list[list[int]]:
    """The n best first tokens after each unit's prefix (fewer where fewer are possible)."""
    backend = PrefixedBackend(translator.verifier)
    bos, eos = backend.tokens["bos"], backend.tokens["eos"]
    tokens = []
    for start in range(0, len(units), opts.batch_size):
        batch = units[start:start + opts.batch_size]
        state = backend.start(backend.encode([PrefixSource(u.src, u.prefix) for u in batch]))
        out = backend.step(state, np.full((len(batch), 1), bos, dtype=np.int64), Want(argmax=False, logits=True))
        for r, unit in enumerate(batch):
            x = opts.rules.apply(out.logits[r, 0], unit.prefix, eos)
            x[eos] = -np.inf
            best = np.argsort(-x, kind="stable")[:n]
            tokens.append([int(t) for t in best if np.isfinite(x[t])])
    return tokens


def translate_alternatives(translator, items: list, prefixes, n: int, opts) -> tuple[list[list], DecodeStats]:
    """(per input, its list of up to n outputs as translate formats them; DecodeStats)."""
    prefix_ids = sentence_units.prefix_ids(translator, items, prefixes)
    units, kinds, _ = sentence_units.units(translator, items, prefix_ids)
    first: dict[int, object] = {}
    for unit in units:
        first.setdefault(unit.input, unit)
    expand = [i for i, u in first.items()
              if u.keep is None and len(u.prefix) < sentence_limit(len(u.src), opts.max_len, opts.length_factor)]
    alternatives = dict(zip(expand, first_tokens(translator, [first[i] for i in expand], n, opts)))
    results: list[list] = [[] for _ in items]
    stats = DecodeStats(sentences=len(items))
    for j in range(n):
        rows = [i for i in range(len(items)) if j == 0 or len(alternatives.get(i, ())) > j]
        if not rows:
            break
        rows_prefixes = [prefix_ids[i] + alternatives[i][j:j + 1] if alternatives.get(i) else prefix_ids[i] or None
                         for i in rows]
        hyps, _, part, splits = translator._run([items[i] for i in rows], rows_prefixes, opts)
        if j == 0:
            for warning in splits:
                warnings.warn(warning, stacklevel=3)
        merge_stats(stats, part, rows)
        for i, h in zip(rows, hyps):
            results[i].append(translator._format(h, kinds[i], opts))
    return results, stats
