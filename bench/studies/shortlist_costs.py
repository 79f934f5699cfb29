"""The constants of the shortlisted output layer's cost model (csrc/model/shortlist_union.cc,
ShortlistCosts::measured), measured on this machine with the engine's own kernels, one
thread, on the output layer's shape (N = 8000, K = 256) and real candidate lists (the
shortlist of --model on Multi30k sentences).

    python -m bench.studies.shortlist_costs [--model models/en-de-attn] [--rows 32] [--repeats 200]

Prints ns per (column x 256 of K): the per-row kernel (each row its own list), the union
GEMM's streaming and per-row parts (fitted from M = 1 and M = rows), packing a gathered
block. Run it under /work/measure.sh on the shared machine.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from bench.data import multi30k_test
import pyfastdec
from pyfastdec import kernels
from pyfastdec.model_dir.shortlist import Shortlist
from pyfastdec.text import Tokenizer


def best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/en-de-attn")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)
    sl = Shortlist.load(f"{args.model}/shortlist.bin")
    tok = Tokenizer(f"{args.model}/spm.model")
    lists = [sl.candidates(tok.encode(s) + [2]) for s in multi30k_test(args.rows).sources]
    N, K, M = sl.vocab_size, 256, len(lists)
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    W = kernels.Int8Matrix(w, (rng.random(N) * 0.01 + 1e-3).astype(np.float32), columns=True)
    bias = rng.standard_normal(N).astype(np.float32)
    a = rng.standard_normal((M, K)).astype(np.float32)
    k = K / 256
    cols = np.concatenate(lists).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in lists])]).astype(np.int64)
    union = np.unique(cols).astype(np.int32)
    U = union.size
    per_row = best_seconds(lambda: kernels.gemm_i8_columns(a, W, cols, offsets, bias=bias), args.repeats)
    # Five consecutive rows per list (a beam's hypotheses, a verified row's positions):
    # the kernel reads a list's weights once for its rows, so extra rows cost less.
    beam = [c for c in lists[:8] for _ in range(5)]
    bcols = np.concatenate(beam).astype(np.int32)
    boffsets = np.concatenate([[0], np.cumsum([len(c) for c in beam])]).astype(np.int64)
    ba = rng.standard_normal((len(beam), K)).astype(np.float32)
    grouped = best_seconds(lambda: kernels.gemm_i8_columns(ba, W, bcols, boffsets, bias=bias), args.repeats)
    G = W.gathered(union)
    gbias = bias[union]
    one = best_seconds(lambda: kernels.gemm_i8(a[:1], G, bias=gbias), args.repeats)
    full = best_seconds(lambda: kernels.gemm_i8(a, G, bias=gbias), args.repeats)
    pack = best_seconds(lambda: W.gathered(union), max(args.repeats // 10, 5))
    per_row_ns = per_row * 1e9 / (cols.size * k)
    row_ns = (full - one) * 1e9 / (U * k * (M - 1))
    stream_ns = one * 1e9 / (U * k) - row_ns
    print(f"{M} rows, mean list {cols.size / M:.0f} columns, union {U} of {N}, K {K}, isa "
          f"{pyfastdec.cpu_info()['isa']}")
    print(f"per-row kernel: {per_row * 1e6:.1f} us = {per_row_ns:.2f} ns per row-column")
    first = sum(len(c) for c in lists[:8])
    extra_ns = (grouped * 1e9 / k - first * per_row_ns) / (4 * first)
    print(f"per-row kernel, 5 rows per list: {grouped * 1e6:.1f} us -> {extra_ns:.2f} ns per extra row-column")
    print(f"union GEMM: M=1 {one * 1e6:.1f} us, M={M} {full * 1e6:.1f} us -> "
          f"{stream_ns:.2f} ns per column + {row_ns:.3f} ns per column per row")
    print(f"pack: {pack * 1e6:.1f} us = {pack * 1e9 / (U * k):.2f} ns per column")

    # Two threads against one, the full vocabulary beside the two shortlist paths.
    full_bias = bias
    pool = kernels.ThreadPool(2)
    print("output layer at M = %d, best of %d: 1 thread / 2 threads / speed-up" % (M, args.repeats))
    for name, fn in [
        ("full vocabulary GEMM", lambda p: kernels.gemm_i8(a, W, bias=full_bias, pool=p)),
        ("shortlist per-row", lambda p: kernels.gemm_i8_columns(a, W, cols, offsets, bias=bias, pool=p)),
        ("shortlist union GEMM", lambda p: kernels.gemm_i8(a, G, bias=gbias, pool=p)),
    ]:
        one_t = best_seconds(lambda: fn(None), args.repeats)
        two_t = best_seconds(lambda: fn(pool), args.repeats)
        print(f"  {name:22s} {one_t * 1e6:7.1f} us {two_t * 1e6:7.1f} us {one_t / two_t:5.2f}x")

    # Candidates per sentence: the engine's (one Python call each) and the Python reference.
    index = kernels.ShortlistIndex(sl.vocab_size, sl.frequent, sl.indptr, sl.targets, sl.first_fill_id)
    sentences = [tok.encode(s) + [2] for s in multi30k_test(1000).sources]
    t_native = best_seconds(lambda: [index.candidates(s) for s in sentences], 5) / len(sentences)
    t_python = best_seconds(lambda: [sl.candidates(s) for s in sentences], 2) / len(sentences)
    print(f"candidates per sentence ({len(sentences)} sentences): engine {t_native * 1e6:.1f} us "
          f"(Python call included), Python reference {t_python * 1e6:.1f} us")


if __name__ == "__main__":
    main()
