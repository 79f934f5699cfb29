"""Kernel benchmarks of the Foundation issue, one process, one thread, printed as a table.

    python -m bench.kernels [--repeats R] [--out FILE.json]
    python -m bench.kernels --shapes model --engines fastdec_int8,ort_int8 --no-argmax

--shapes model times the linear layers of the shipped models (d 256/512, ffn 1024/2048)
at M = 1, 16, 64, 256 instead of the Foundation issue's cases.

Times are medians over R timed batches (each batch long enough to read the clock
cheaply); the spread (min/max over batches) is reported so noise is visible. Ratios
compare engines measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from bench.kernel_cases import ARGMAX_LENGTHS, GEMM_ENGINES, KN_VALUES, M_VALUES, MODEL_KN_VALUES, \
    MODEL_M_VALUES, make_inputs, single_thread_everywhere


def time_call(fn, repeats, min_batch_seconds=2e-3):
    fn()
    calls = 1
    while True:  # calls per timed batch, so each batch lasts at least min_batch_seconds
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_batch_seconds:
            break
        calls *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return float(np.median(samples)), float(np.min(samples)), float(np.max(samples))


def run(repeats, shapes="foundation", engines=None, argmax=True):
    import pyfastdec
    from pyfastdec import kernels as fastdec

    blas = single_thread_everywhere()
    results = {"cpu": pyfastdec.cpu_info(), "numpy_blas": blas, "python": platform.python_version(),
               "threads": 1, "gemm": [], "argmax": []}
    kn_values, m_values = (MODEL_KN_VALUES, MODEL_M_VALUES) if shapes == "model" else (KN_VALUES, M_VALUES)
    chosen = {n: GEMM_ENGINES[n] for n in (engines or GEMM_ENGINES)}
    for K, N in kn_values:
        for M in m_values:
            a, w = make_inputs(M, K, N)
            row = {"M": M, "K": K, "N": N}
            for name, make in chosen.items():
                median, lo, hi = time_call(make(a, w), repeats)
                row[name] = {"seconds": median, "min": lo, "max": hi, "gops": 2 * M * K * N / median / 1e9}
            results["gemm"].append(row)
            print(format_gemm_row(row), flush=True)
    for n in ARGMAX_LENGTHS if argmax else []:
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        ours = fastdec.time_argmax_ns(x, repeats=max(repeats, 50) * 4)
        std = fastdec.time_argmax_ns(x, repeats=max(repeats, 50) * 4, impl="std_max_element")
        numpy_s, _, _ = time_call(lambda: x.argmax(), repeats)
        python_call_s, _, _ = time_call(lambda: fastdec.argmax(x), repeats)
        row = {"n": n, "fastdec_ns": ours, "std_max_element_ns": std, "numpy_ns": numpy_s * 1e9,
               "fastdec_python_call_ns": python_call_s * 1e9,
               "bandwidth_gb_s": n * 4 / ours}
        results["argmax"].append(row)
        print(f"argmax n={n:6d}: fastdec {ours:8.0f} ns ({row['bandwidth_gb_s']:.0f} GB/s) | "
              f"std::max_element {std:8.0f} ns ({std / ours:.1f}x) | numpy {numpy_s * 1e9:7.0f} ns "
              f"incl. call ({numpy_s * 1e9 / ours:.1f}x) | fastdec from Python {python_call_s * 1e9:.0f} ns",
              flush=True)
    return results


def format_gemm_row(row):
    if "fastdec_int8" not in row:  # a subset of engines: median and best-batch GOP/s
        ops = 2 * row["M"] * row["K"] * row["N"]
        return f"M={row['M']:3d} K={row['K']:4d} N={row['N']:4d}: " + " | ".join(
            f"{name} {v['gops']:5.0f} GOP/s (best {ops / v['min'] / 1e9:5.0f}) {v['seconds'] * 1e6:8.1f} us"
            for name, v in row.items() if isinstance(v, dict))
    ours = row["fastdec_int8"]
    parts = [f"M={row['M']:3d} K={row['K']:4d} N={row['N']:4d}: int8 {ours['seconds'] * 1e6:8.1f} us "
             f"{ours['gops']:5.0f} GOP/s"]
    for name in (n for n in ("ort_int8", "ort_matmulint", "fastdec_fp32", "numpy_fp32", "torch_fp32") if n in row):
        parts.append(f"{name} {row[name]['gops']:5.0f} ({row[name]['seconds'] / ours['seconds']:4.1f}x)")
    return " | ".join(parts)


def markdown(results) -> str:
    """The run as markdown tables: GOP/s per engine and our speed-up over each."""
    cpu = results["cpu"]
    lines = [f"CPU: {cpu['brand']}, kernels: {cpu['isa']}, 1 thread; numpy BLAS: "
             f"{', '.join(str(b.get('internal_api')) + ' ' + str(b.get('version')) for b in results['numpy_blas'])}",
             "", "| M | K | N | fastdec int8 | us | ort int8 (dyn. quant graph) | ort MatMulInteger | fastdec fp32 | numpy fp32 | torch fp32 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["gemm"]:
        ours = row["fastdec_int8"]
        cells = [f"{row[n]['gops']:.0f} ({row[n]['seconds'] / ours['seconds']:.1f}x)"
                 for n in ("ort_int8", "ort_matmulint", "fastdec_fp32", "numpy_fp32", "torch_fp32")]
        lines.append(f"| {row['M']} | {row['K']} | {row['N']} | {ours['gops']:.0f} | {ours['seconds'] * 1e6:.1f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "GOP/s; in brackets: how many times longer the peer takes than fastdec int8.", "",
              "| argmax n | fastdec (ns, in C++) | GB/s | std::max_element (ns) | ratio | numpy incl. call (ns) | ratio |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for a in results["argmax"]:
        lines.append(f"| {a['n']} | {a['fastdec_ns']:.0f} | {a['bandwidth_gb_s']:.0f} | {a['std_max_element_ns']:.0f} | "
                     f"{a['std_max_element_ns'] / a['fastdec_ns']:.1f}x | {a['numpy_ns']:.0f} | "
                     f"{a['numpy_ns'] / a['fastdec_ns']:.1f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", help="write every figure as JSON here")
    parser.add_argument("--markdown", help="write the tables as markdown here")
    parser.add_argument("--shapes", choices=("foundation", "model"), default="foundation",
                        help="foundation: the issue's cases; model: the shipped models' linear layers")
    parser.add_argument("--engines", help="comma-separated subset of: " + ", ".join(GEMM_ENGINES))
    parser.add_argument("--no-argmax", action="store_true", help="GEMMs only")
    args = parser.parse_args(argv)
    engines = args.engines.split(",") if args.engines else None
    for name in engines or []:
        if name not in GEMM_ENGINES:
            parser.error(f"--engines: unknown engine {name!r}; expected some of {', '.join(GEMM_ENGINES)}")
    if args.markdown and engines:
        parser.error("--markdown tables every engine: leave out --engines")
    results = run(args.repeats, args.shapes, engines, not args.no_argmax)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results))


if __name__ == "__main__":
    main()
