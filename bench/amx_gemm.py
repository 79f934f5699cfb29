"""AMX tiles against the VNNI kernel on the shipped models' int8 GEMM shapes, 1 thread
(issue 31): where tiles pay, and so the row count at which the engine should switch.

    python -m bench.amx_gemm [--m 1,2,4,8,16,64,256] [--repeats R] [--out FILE.json]
    python -m bench.amx_gemm --isas avx2,amx-emulated --m 1,17 --shapes 256x256 --repeats 2  # dry run, any CPU

Tables (pyfastdec.kernels isa=): "vnni"; "amx-tiles", tiles at every row count; "amx",
what the engine runs (VNNI's kernel below amx_min_rows rows, tiles from there). Each
call is the whole gemm_i8 (activation quantisation, product, epilogue), as layers run it.
Before timing, every table's output is checked equal, bit for bit, to the first one's.
Printed last: per shape, the smallest M of the list from which amx-tiles beats vnni at
every larger M too, and the largest of these: the value for kAmxMinRows in
csrc/kernels/isa_amx.cc. Times are medians over R batches (bench.kernels.time_call).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.kernel_cases import MODEL_KN_VALUES, make_inputs, quantized
from bench.kernels import time_call

M_VALUES = [1, 2, 4, 8, 16, 64, 256]
DEFAULT_ISAS = ["vnni", "amx-tiles", "amx"]


def measure(shapes, m_values, isas, repeats):
    from pyfastdec import kernels

    rows = []
    for K, N in shapes:
        _, w = make_inputs(1, K, N)
        q, scale = quantized(w)
        matrices = {isa: kernels.Int8Matrix(q, scale, isa=isa) for isa in isas}
        bias = np.random.default_rng(3).standard_normal(N).astype(np.float32)
        for M in m_values:
            a, _ = make_inputs(M, K, N, seed=M)
            out = np.empty((M, N), np.float32)
            first = kernels.gemm_i8(a, matrices[isas[0]], bias=bias)
            row = {"M": M, "K": K, "N": N, "us": {}}
            for isa in isas:
                got = kernels.gemm_i8(a, matrices[isa], bias=bias)
                if not np.array_equal(got, first):
                    raise SystemExit(f"bench.amx_gemm: {isa} differs from {isas[0]} at M={M} K={K} N={N}")
                median, _, _ = time_call(lambda W=matrices[isa]: kernels.gemm_i8(a, W, bias=bias, out=out), repeats)
                row["us"][isa] = median * 1e6
            rows.append(row)
            print(line(row, isas), flush=True)
    return rows


def line(row, isas):
    times = " | ".join(f"{row['us'][i]:.2f}" for i in isas)
    ratio = ""
    if "vnni" in row["us"] and "amx-tiles" in row["us"]:
        ratio = f" | {row['us']['vnni'] / row['us']['amx-tiles']:.2f}x"
    gops = 2 * row["M"] * row["K"] * row["N"] / (min(row["us"].values()) * 1e-6) / 1e9
    return f"| {row['K']} | {row['N']} | {row['M']} | {times}{ratio} | {gops:.1f} |"


def crossover(rows, fast="amx-tiles", slow="vnni"):
    """{(K, N): smallest M from which `fast` wins at that M and every larger one (None:
    never)}, and the largest of these over the shapes (None if any shape never wins)."""
    per_shape = {}
    for K, N in sorted({(r["K"], r["N"]) for r in rows}):
        ms = sorted((r for r in rows if (r["K"], r["N"]) == (K, N)), key=lambda r: r["M"])
        best = None
        for r in reversed(ms):
            if r["us"][fast] < r["us"][slow]:
                best = r["M"]
            else:
                break
        per_shape[(K, N)] = best
    values = list(per_shape.values())
    overall = None if not values or None in values else max(values)
    return per_shape, overall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--isas", default=",".join(DEFAULT_ISAS), help="tables to time (isa= values)")
    ap.add_argument("--m", default=",".join(map(str, M_VALUES)), help="row counts")
    ap.add_argument("--shapes", help="KxN,... (default: the shipped models' layers, bench.kernel_cases)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, help="write the rows and the crossover as JSON here")
    args = ap.parse_args(argv)
    import pyfastdec
    from bench.kernel_cases import single_thread_everywhere

    single_thread_everywhere()
    isas = args.isas.split(",")
    shapes = ([tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes
              else MODEL_KN_VALUES)
    info = pyfastdec.cpu_info()
    print(f"CPU: {info['brand']}; detected {info['detected']}; int8 kernels: {info['kernels']['int8_gemm']}; "
          f"1 thread; microseconds per gemm_i8 call (median of {args.repeats})")
    print("| K | N | M | " + " | ".join(f"{i} us" for i in isas)
          + (" | vnni / amx-tiles" if {"vnni", "amx-tiles"} <= set(isas) else "") + " | best GOPS |")
    rows = measure(shapes, [int(m) for m in args.m.split(",")], isas, args.repeats)
    report = {"cpu": info, "isas": isas, "repeats": args.repeats, "rows": rows}
    if {"vnni", "amx-tiles"} <= set(isas):
        per_shape, overall = crossover(rows)
        print("\namx-tiles beats vnni from M = (per K x N): "
              + ", ".join(f"{K}x{N}: {m}" for (K, N), m in per_shape.items()))
        print(f"suggested kAmxMinRows (csrc/kernels/isa_amx.cc): {overall}")
        report["crossover"] = {f"{K}x{N}": m for (K, N), m in per_shape.items()}
        report["suggested_min_rows"] = overall
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
