"""The engine's kernels and its per-op timer, under public names.

Decoding never needs these (Translator and the backends call the engine themselves);
benchmarks and experiments do: bench/ times the GEMMs against numpy, torch and
onnxruntime, and profiles where a decoder step spends its time. They import from here,
not from the private `pyfastdec._engine`, so the compiled module's layout may change
without breaking them. Every name is the engine's own object (no wrapper, no extra
call cost to measure); its docstring gives the arguments.

Matrices (weights [N, K], packed at construction for the running ISA, or for `isa=`):
  Int8Matrix(weights_int8, scales_f32, *, columns=False, isa=None)
  Float32Matrix(weights_f32, *, isa=None)
  isa= takes "scalar", "avx2", "avx512", "vnni", "amx" (refused above the CPU), and two
  tables for tests and measurements: "amx-emulated" (the AMX GEMM on emulated tiles, any
  CPU) and "amx-tiles" (AMX tiles at every row count, no VNNI below amx_min_rows).
Products, C[M, N] = a[M, K] @ W.T (+ bias, relu), into `out` when given:
  gemm_i8(a, W, *, bias, relu, act_scale, out, pool)   activations quantised per call
  gemm_i8_columns(a, W, cols, offsets, *, bias, act_scale, pool)
                 row m computes only the columns cols[offsets[m]:offsets[m+1]]
                 (W built with columns=True): the shortlist's per-row output layer
  gemm_f32(a, W, *, bias, relu, out, pool)
Rows: argmax(x, *, isa, pool) (ties: the lowest index); time_argmax_ns(x, *, repeats,
  impl, isa): the median ns per argmax call, timed inside C++ ("fastdec" or
  "std_max_element").
ShortlistIndex(vocab_size, frequent, indptr, targets, first_fill_id): a shortlist.bin's
  candidate table as the engine holds it (pyfastdec.model_dir.shortlist.Shortlist has the fields).
ThreadPool(threads): intra-op threads for `pool=` (the caller counts as one).
Per-op timer of encode/step: op_profile(on=None) switches it (None: leaves it) and
  returns whether it is on; op_profile_totals(reset=False) is {op: (exclusive seconds,
  regions)} since the last reset.
"""
from __future__ import annotations

from pyfastdec.runtime import _engine  # runtime explains a missing engine

Int8Matrix = _engine.Int8Matrix
Float32Matrix = _engine.Float32Matrix
gemm_i8 = _engine.gemm_i8
gemm_i8_columns = _engine.gemm_i8_columns
gemm_f32 = _engine.gemm_f32
argmax = _engine.argmax
time_argmax_ns = _engine.time_argmax_ns
ShortlistIndex = _engine.ShortlistIndex
ThreadPool = _engine.ThreadPool
op_profile = _engine.op_profile
op_profile_totals = _engine.op_profile_totals

__all__ = ["Int8Matrix", "Float32Matrix", "gemm_i8", "gemm_i8_columns", "gemm_f32", "argmax", "time_argmax_ns",
           "ShortlistIndex", "ThreadPool", "op_profile", "op_profile_totals"]
