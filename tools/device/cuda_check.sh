#!/usr/bin/env bash
# ONE device call for issue 30 (an H100 / H200 machine with CUDA 13 nvcc, CMake, ninja,
# pybind11, PyTorch and transformers; no network). Prepared so that device minutes go to
# running: tools/device/prepare.sh ran here first, and the call carries build/device:
#
#   run(command="bash tools/device/cuda_check.sh", carry=["build/device"], timeout_s=420)
#
# Steps, each with its own time limit so that one failing still lets the next report:
#   1. build in place with FASTDEC_CUDA=1 (the CPU engine, _engine_gpuref, _engine_cuda)
#   2. the GPU tests: tests/test_cuda_gpu.py and tests/test_device_option.py
#   3. bench/cuda_bench.py (HF vs GPU greedy, strategy speed-ups)
# Everything lands in $OUT: env.txt, build.log, tests.log, junit.xml, bench.log,
# cuda_bench.json, cuda_bench.md, and summary.txt (each step's exit status and seconds).
# FASTDEC_CHECK_STEPS=build,tests (say) runs only those steps (default: all three).
# CUDA_BENCH_COUNTS replaces the bench's sentence counts (default "--batch1 50 --batch32 256"),
# CUDA_BENCH_LIMIT its time limit in seconds (default 170).
# Dry run here (no GPU: the bench alone, on the reference ops, tiny counts; HF's base-size
# model in float32 on 2 busy cores takes ~10 s a sentence, hence the longer limit):
#   FASTDEC_CHECK_STEPS=bench FASTDEC_BENCH_DRY=1 CUDA_BENCH_COUNTS="--batch1 3 --batch32 8" \
#     CUDA_BENCH_LIMIT=900 OUT=/tmp/cuda-dry PYTHON=/work/venv/bin/python bash tools/device/cuda_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:?OUT must name the folder the results go to}"
PY="${PYTHON:-python3}"
STEPS="${FASTDEC_CHECK_STEPS:-build,tests,bench}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export FASTDEC_UAGEC_HEAD="$PWD/build/device/uagec_test_head.txt"
summary="$OUT/summary.txt"
: >"$summary"

step() {  # name, time limit (s), log file, command...
  local name=$1 limit=$2 log=$3
  shift 3
  case ",$STEPS," in *",$name,"*) ;; *) echo "$name: skipped" >>"$summary"; return 0 ;; esac
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  echo "$name: rc=$rc seconds=$((SECONDS - start)) (limit $limit)" | tee -a "$summary"
  return $rc
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -2
  "$PY" -c "import sys, torch, transformers, pybind11; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'pybind11', pybind11.__version__)"
  nproc
  ls build/device 2>&1
} >"$OUT/env.txt" 2>&1

export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"  # CMake's CUDA language needs nvcc
if step build 150 build.log env FASTDEC_CUDA=1 "$PY" tools/build_inplace.py; then
  step tests 150 tests.log "$PY" -m pytest tests/test_cuda_gpu.py tests/test_device_option.py -q -rs -s \
    -p no:cacheprovider --junitxml="$OUT/junit.xml"
  # shellcheck disable=SC2086  # the counts are several words
  step bench "${CUDA_BENCH_LIMIT:-170}" bench.log "$PY" -m bench.cuda_bench --out "$OUT" --work /tmp/bench-cuda \
    ${CUDA_BENCH_COUNTS:---batch1 50 --batch32 256}
else
  tail -40 "$OUT/build.log"
fi
cat "$summary"
tail -5 "$OUT/tests.log" 2>/dev/null
cat "$OUT/cuda_bench.md" 2>/dev/null
exit 0
