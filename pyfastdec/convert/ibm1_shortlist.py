"""IBM Model 1 lexical shortlists from parallel text: the numpy part of building a
shortlist.bin (format: export/SHORTLIST_FORMAT.md, reader: pyfastdec/model_dir/shortlist.py).

It lives in the package so that `fastdec convert marian --shortlist SRC TGT` works from
an installed wheel; `python -m export.shortlist` (the training-side command line) builds
on it. Only numpy is needed.
"""
from __future__ import annotations

import gzip
import itertools
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyfastdec.model_dir.shortlist import Shortlist

DEFAULT_ALWAYS = (1, 2, 3)        # unk, bos, eos in the project's id convention
DEFAULT_FIRST_FILL_ID = 5         # ids 0..4 are pad, unk, bos, eos, mask


# ---------------------------------------------------------------------- IBM Model 1
@dataclass
class Ibm1Table:
    """Sparse t(e | f) over co-occurring pairs; f == vocab_size is the NULL word."""
    pair_src: np.ndarray            # int64 [P], sorted by (src, tgt)
    pair_tgt: np.ndarray            # int64 [P]
    prob: np.ndarray                # float64 [P]
    log_likelihood: list[float]     # corpus log-likelihood before each M-step


def _flatten(sentences: list[list[int]], vocab_size: int, side: str):
    lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
    flat = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int64,
                       count=int(lengths.sum()))
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        bad = int(np.flatnonzero((flat < 0) | (flat >= vocab_size))[0])
        line = int(np.searchsorted(np.cumsum(lengths), bad, side="right"))
        raise ValueError(f"{side} sentence {line + 1}: id {int(flat[bad])} outside "
                         f"vocabulary [0, {vocab_size})")
    return flat, lengths


def _links(src, src_len, tgt, tgt_len, null: int, vocab_size: int, chunk: int = 4096):
    """Pair key f*(V+1)+e and target-token index of every link, in link order.

    Links run sentence-major, then target position, then source position (position 0
    is NULL), so the links explaining one target token are contiguous. Built a chunk of
    sentences at a time to keep the int64 temporaries small.
    """
    src = np.append(src, null)                  # sentinel: empty corpora still index
    src_start = np.cumsum(src_len) - src_len
    tgt_start = np.cumsum(tgt_len) - tgt_len
    token_dtype = np.int32 if tgt.size < 2**31 else np.int64
    keys, tokens = [], []
    for lo in range(0, len(src_len), chunk):
        part = slice(lo, lo + chunk)
        width = src_len[part] + 1
        per_sentence = width * tgt_len[part]
        sentence = np.repeat(np.arange(width.size), per_sentence)
        k = np.arange(sentence.size) - np.repeat(np.cumsum(per_sentence) - per_sentence,
                                                 per_sentence)
        j, i = np.divmod(k, width[sentence])
        token = tgt_start[part][sentence] + j
        src_pos = np.maximum(src_start[part][sentence] + i - 1, 0)
        f = np.where(i == 0, null, src[src_pos])
        keys.append(f * (vocab_size + 1) + tgt[token])
        tokens.append(token.astype(token_dtype))
    return (np.concatenate(keys) if keys else np.zeros(0, np.int64),
            np.concatenate(tokens) if tokens else np.zeros(0, token_dtype))


def train_ibm1(src_ids: list[list[int]], tgt_ids: list[list[int]], vocab_size: int,
               iterations: int = 5, log=None) -> Ibm1Table:
    """EM for IBM Model 1 with a NULL source word, vectorised over the whole corpus.

    Every (sentence, target position j, source position i) triple is one "link".
    They are enumerated once as flat arrays: which co-occurring type pair (f, e) a link
    belongs to and which target token j it explains. An EM iteration is then a gather
    and three bincounts over the links — no Python loop over sentences.
    Memory is ~8 bytes per link kept across iterations plus ~16 transient per link
    (29k pairs of length 16 are ~8M links).
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} source sentences but {len(tgt_ids)} target ones")
    null = vocab_size
    src, src_len = _flatten(src_ids, vocab_size, "source")
    tgt, tgt_len = _flatten(tgt_ids, vocab_size, "target")
    key, token = _links(src, src_len, tgt, tgt_len, null, vocab_size)
    n_links = key.size
    pair_key, link_pair = np.unique(key, return_inverse=True)
    del key
    link_pair = link_pair.astype(np.int32 if pair_key.size < 2**31 else np.int64)
    pair_src, pair_tgt = np.divmod(pair_key, vocab_size + 1)
    # log p(e|f) = sum_j log sum_i t(e_j|f_i) - m log(l+1): the second term, the
    # uniform alignment prior, is constant; kept so the reported value is a likelihood.
    log_alignment_prior = float(np.sum(tgt_len * np.log(src_len + 1)))

    # Start from t(e|f) = 1/V for every e: a proper distribution (so the likelihood
    # history is monotone from the first value) whose first E-step gives uniform
    # alignment posteriors, as any constant start would.
    prob = np.full(pair_key.size, 1.0 / vocab_size)
    history = []
    for it in range(iterations):
        t0 = time.perf_counter()
        link_t = prob[link_pair]
        token_total = np.bincount(token, weights=link_t, minlength=tgt.size)
        # Guard against t underflowing to 0 for every link of a token (0/0 = NaN).
        np.maximum(token_total, np.finfo(np.float64).tiny, out=token_total)
        history.append(float(np.log(token_total).sum()) - log_alignment_prior)
        link_t /= token_total[token]                    # alignment posterior per link
        counts = np.bincount(link_pair, weights=link_t, minlength=pair_key.size)
        del link_t
        src_total = np.bincount(pair_src, weights=counts, minlength=vocab_size + 1)
        prob = counts / src_total[pair_src]
        if log:
            log(f"EM iteration {it + 1}/{iterations}: log-likelihood {history[-1]:.1f} "
                f"({time.perf_counter() - t0:.2f} s, {n_links} links, {pair_key.size} pairs)")
    return Ibm1Table(pair_src, pair_tgt, prob, history)


# ---------------------------------------------------------------------- selection
def _most_frequent(tgt_ids: list[list[int]], vocab_size: int, n: int,
                   always: tuple[int, ...]) -> np.ndarray:
    """The n most frequent target ids (ties by lower id), plus `always`, sorted."""
    flat = np.fromiter(itertools.chain.from_iterable(tgt_ids), dtype=np.int64)
    counts = np.bincount(flat, minlength=vocab_size)
    by_rank = np.lexsort((np.arange(vocab_size), -counts))
    top = by_rank[:n]
    top = top[counts[top] > 0]                  # never seen is not "frequent"
    return np.union1d(top, np.asarray(always, dtype=np.int64))


def _best_per_source(table: Ibm1Table, vocab_size: int, best: int, identity: bool = False):
    """CSR (indptr, targets, probs) with each source id's `best` most probable targets.

    identity: every row (seen in training or not) is the id itself, with probability 1,
    then its best - 1 most probable other targets."""
    keep = table.pair_src < vocab_size            # NULL's translations are not a row
    if identity:                                  # f -> f is added below, first in its row
        keep &= table.pair_src != table.pair_tgt
    f, e, p = table.pair_src[keep], table.pair_tgt[keep], table.prob[keep]
    order = np.lexsort((e, -p, f))                # by source, then probability desc, id asc
    f, e, p = f[order], e[order], p[order]
    row_start = np.searchsorted(f, np.arange(vocab_size + 1))
    rank = np.arange(f.size) - row_start[f]
    keep = rank < (best - 1 if identity else best)
    f, e, p = f[keep], e[keep], p[keep]
    if identity:
        ids = np.arange(vocab_size, dtype=f.dtype)
        # A stable sort by source keeps each row's own id (concatenated first) at its head.
        order = np.argsort(np.concatenate((ids, f)), kind="stable")
        f = np.concatenate((ids, f))[order]
        e = np.concatenate((ids, e))[order]
        p = np.concatenate((np.ones(vocab_size), p))[order]
    counts = np.bincount(f, minlength=vocab_size)
    indptr = np.concatenate(([0], np.cumsum(counts)))
    return indptr, e, p


def build_shortlist(src_ids: list[list[int]], tgt_ids: list[list[int]], vocab_size: int,
                    frequent: int = 100, best: int = 100, iterations: int = 5, *,
                    always: tuple[int, ...] = DEFAULT_ALWAYS,
                    first_fill_id: int = DEFAULT_FIRST_FILL_ID,
                    keep_probs: bool = True, identity: bool = False, log=None) -> Shortlist:
    """Shortlist from tokenised parallel sentences (lists of ids in [0, vocab_size)).
    identity: every source id lists itself first (a copy is always a candidate; for
    correction models), then its best - 1 most probable other targets."""
    if frequent < 0 or best < 0 or iterations < 1:
        raise ValueError("frequent and best must be >= 0 and iterations >= 1")
    if identity and best < 1:
        raise ValueError("identity needs best >= 1 (the row's first entry is the source id)")
    table = train_ibm1(src_ids, tgt_ids, vocab_size, iterations, log=log)
    indptr, targets, probs = _best_per_source(table, vocab_size, best, identity)
    return Shortlist(vocab_size, _most_frequent(tgt_ids, vocab_size, frequent, always),
                     indptr, targets, probs.astype(np.float32) if keep_probs else None,
                     best=best, first_fill_id=first_fill_id)


# ---------------------------------------------------------------------- corpus files
def read_lines(path: Path) -> list[bytes]:
    """The raw lines of a text file, gzip-compressed if it ends in .gz; a missing,
    unreadable, truncated or damaged file is a ValueError naming it."""
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            return f.readlines()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(f"{path}: truncated or damaged gzip file ({err or 'ends early'})") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror or err})") from None


def read_parallel(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Both sides as lists of lines; mismatched lengths or bad UTF-8 name file and line."""
    sides = []
    for path in (src_path, tgt_path):
        lines = []
        for lineno, raw in enumerate(read_lines(path), start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{lineno}: invalid UTF-8 at byte {err.start} of the line") from None
        sides.append(lines)
    src_lines, tgt_lines = sides
    if len(src_lines) != len(tgt_lines):
        n = min(len(src_lines), len(tgt_lines))
        short, other = (src_path, tgt_path) if len(src_lines) == n else (tgt_path, src_path)
        raise ValueError(f"{short} ends after {n} lines but {other} has line {n + 1}: the files must be "
                         f"line-parallel")
    return src_lines, tgt_lines
