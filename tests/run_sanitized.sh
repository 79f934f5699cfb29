#!/usr/bin/env bash
# Builds the native extension with AddressSanitizer + UBSan into a temporary folder and
# runs the tests that exercise native code against it. The sanitizer runtimes must be
# preloaded because the Python interpreter itself is not instrumented; leak checking is
# off because CPython keeps its arenas until exit.
# Usage: bash tests/run_sanitized.sh [pytest args]   (default: the native-code tests)
set -euo pipefail
cd "$(dirname "$0")/.."

# Under build/ (ignored by git), so the incremental build survives between runs.
build=build/sanitize
mkdir -p "$build"
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT

# The GPU model over reference ops (_engine_gpuref) too: its host logic is C++ of its own.
cmake -S . -B "$build" -G Ninja -DFASTDEC_SANITIZE=ON -DFASTDEC_GPU_REFERENCE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython_EXECUTABLE="$(command -v python3)" \
  -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" > /dev/null
cmake --build "$build" --parallel
cp -r pyfastdec "$pkg/"
rm -f "$pkg"/pyfastdec/_engine*.so
cp "$build"/_engine*.so "$pkg/pyfastdec/"

tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_gemm_i8.py tests/test_gemm_f32.py tests/test_row_ops.py
                                 tests/test_cpu_dispatch.py)

export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# pytest's console script, not `python -m pytest`: the current directory must not
# shadow the instrumented package on sys.path.
(cd / && PYTHONPATH="$pkg" python3 -c "import pyfastdec; assert pyfastdec.__file__.startswith('$pkg'), pyfastdec.__file__")
PYTHONPATH="$pkg" pytest -p no:cacheprovider -q "${tests[@]}"
