#!/usr/bin/env bash
# Issue 31 on the device's AMX host, in ONE device call (about 6 minutes): build the
# engine in place, run the int8 tests on the AMX kernels, then the issue's benchmarks,
# every result under $OUT. Every step runs under its own time limit and records its exit
# status in $OUT/summary.txt; a failing step does not stop the next.
#
#   bash tools/device/amx_prepare.sh             # here, once: build/device (wheels, UA-GEC)
#   run(command="bash tools/device/amx_check.sh", carry=["build/device"], timeout_s=480)
#   AMX_DRY_RUN=1 OUT=/tmp/amx-out bash tools/device/amx_check.sh   # here: no AMX, small sizes
#
# Steps and their outputs ($OUT/<step>.txt each, JSON where named):
#   env       python, CPU flags (amx_tile/amx_int8), installed packages
#   deps      packages missing on the device installed offline from build/device/wheels
#   build     tools/build_inplace.py (16 cores)
#   info      fastdec info: detected and chosen ISA, the int8 kernel
#   tests     FASTDEC_ISA=amx: the int8 kernel tests (test_gemm_i8*.py, test_shortlist_union.py,
#             test_cpu_dispatch.py) and the shipped models' lossless strategies (test_amx_models.py);
#             tests.xml
#   gemm      bench.amx_gemm: the models' GEMM shapes at M = 1, 2, 4, 8, 16, 64, 256, vnni
#             against amx-tiles and amx, and the suggested kAmxMinRows; amx_gemm.json
#   verify_amx, verify_vnni   bench.verify_cost at batch 1, t(n)/t(1) for n = 1..16, on the
#             AMX kernels and on VNNI's; verify_{amx,vnni}.json
#   strategies_amx, strategies_vnni   bench.amx_strategies: greedy, blockwise, GAD, IAD and
#             BiLD at batch 1 with their default policies; strategies_{amx,vnni}.json
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
ROOT=$PWD
PY=${PYTHON:-$(command -v python3 || command -v python)}
export PY ROOT
DRY=${AMX_DRY_RUN:-0}
SITE=$ROOT/build/device/site
export SITE
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export FASTDEC_UAGEC=${FASTDEC_UAGEC:-$ROOT/build/device/uagec}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export FASTDEC_THREADS=1
T0=$(date +%s)

# The whole script stays within BUDGET seconds (the device call's limit is 600 s): a
# step gets at most what is left, and none starts with under 10 s left.
BUDGET=${AMX_BUDGET_S:-520}

# step NAME LIMIT_S COMMAND...: output to $OUT/NAME.txt, status to summary.txt.
step() {
  local name=$1 limit=$2 s rc left
  shift 2
  s=$(date +%s)
  left=$(( BUDGET - (s - T0) ))
  if [ "$left" -lt 10 ]; then
    echo "$name skipped: the script's budget of ${BUDGET}s is spent" | tee -a "$OUT/summary.txt"
    return 0
  fi
  [ "$limit" -le "$left" ] || limit=$left
  if declare -F "$1" > /dev/null; then  # a function of this script: timeout needs a program
    timeout "$limit" bash -c "$(declare -f "$1"); $*" > "$OUT/$name.txt" 2>&1
  else
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  fi
  rc=$?
  printf '%-16s rc=%-3s %4ss (limit %ss, %ss since start)\n' "$name" "$rc" "$(( $(date +%s) - s ))" \
    "$limit" "$(( $(date +%s) - T0 ))" | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || tail -n 15 "$OUT/$name.txt" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  return 0
}

env_report() {
  "$PY" -V; nproc; uname -r
  grep -m1 "model name" /proc/cpuinfo
  echo "AMX flags: $(grep -m1 -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  "$PY" -m pip list 2>/dev/null | grep -iE "^(numpy|torch|sentencepiece|pybind11|pytest|ctranslate2|cmake|ninja|threadpoolctl) "
  command -v cmake ninja make c++ || true
}

deps() {  # offline: only what is missing, into build/device/site (on PYTHONPATH)
  local missing=()
  for mod in numpy sentencepiece pytest pybind11 threadpoolctl; do
    "$PY" -c "import $mod" 2>/dev/null || missing+=("$mod")
  done
  echo "missing: ${missing[*]:-none}"
  local have=()  # numpy has no wheel there (16 MB per Python): reported, not installed
  for mod in "${missing[@]}"; do
    ls "$ROOT/build/device/wheels/$mod"-* > /dev/null 2>&1 && have+=("$mod")
  done
  [ ${#have[@]} = 0 ] && return 0
  "$PY" -m pip install --no-index --find-links "$ROOT/build/device/wheels" --target "$SITE" "${have[@]}"
}

if [ "$DRY" = 1 ]; then  # this CPU has no AMX: the emulated table, small sizes
  TEST_ISA=""; GEMM_ARGS=(--isas avx2,amx-emulated --m 1,2,17 --shapes 256x256 --repeats 2)
  VERIFY_ARGS=(--rounds 3 --max-n 8 --models en-de-attn); STRAT_ARGS=(--sentences 5); AMX_ISA=amx-emulated
  BASE_ISA=scalar
else
  TEST_ISA=amx; GEMM_ARGS=(); VERIFY_ARGS=(--rounds 100 --max-n 16); STRAT_ARGS=(--sentences 100)
  AMX_ISA=amx; BASE_ISA=vnni
fi

: > "$OUT/summary.txt"
echo "amx_check: $(date -u +%FT%TZ), dry run $DRY, python $PY" | tee -a "$OUT/summary.txt"
step env 20 env_report
step deps 60 deps
step build 150 "$PY" tools/build_inplace.py
step info 30 "$PY" -m pyfastdec.cli info
"$PY" -c "import json, pyfastdec; print(json.dumps(pyfastdec.cpu_info(), indent=1))" > "$OUT/cpu_info.json" 2>&1
step tests 120 env FASTDEC_ISA="$TEST_ISA" "$PY" -m pytest -q -rs -p no:cacheprovider \
  --junitxml="$OUT/tests.xml" tests/test_gemm_i8_amx.py tests/test_gemm_i8.py tests/test_gemm_i8_rounding.py \
  tests/test_gemm_i8_shared_columns.py tests/test_shortlist_union.py tests/test_cpu_dispatch.py \
  tests/test_amx_models.py
step gemm 90 "$PY" -m bench.amx_gemm "${GEMM_ARGS[@]}" --out "$OUT/amx_gemm.json"
step verify_amx 60 env FASTDEC_ISA="$AMX_ISA" "$PY" -m bench.verify_cost --batches 1 "${VERIFY_ARGS[@]}" \
  --out "$OUT/verify_amx.json"
step verify_vnni 60 env FASTDEC_ISA="$BASE_ISA" "$PY" -m bench.verify_cost --batches 1 "${VERIFY_ARGS[@]}" \
  --out "$OUT/verify_vnni.json"
step strategies_amx 60 env FASTDEC_ISA="$AMX_ISA" "$PY" -m bench.amx_strategies "${STRAT_ARGS[@]}" \
  --out "$OUT/strategies_amx.json"
step strategies_vnni 60 env FASTDEC_ISA="$BASE_ISA" "$PY" -m bench.amx_strategies "${STRAT_ARGS[@]}" \
  --out "$OUT/strategies_vnni.json"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$OUT/summary.txt"
