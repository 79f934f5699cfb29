#!/usr/bin/env bash
# CI's compile check of the GPU model (csrc/cuda/), run by .ci/run after `pip install .`:
# configures CMake with FASTDEC_CUDA=ON in a temporary folder and builds
#   _engine_cuda    nvcc + cuBLAS: compiled and LINKED only (no GPU here: never imported),
#   _engine_gpuref  the same orchestration over the reference ops, which it copies into the
#                   installed package so that pytest runs tests/test_gpu_reference.py
#                   (tests/test_cuda_gpu.py stays skipped: _engine_cuda is not installed).
# Needs nvcc (/usr/local/cuda/bin, or CUDACXX) and cuBLAS: the toolkit's, else PyPI's
# nvidia-cublas, installed here into the given Python's environment (no dependencies: the
# headers and libraries are all the link needs; pip's cache keeps later runs short).
# It adds 1 to 2.5 minutes to a CI run on 2 cores (141 s wall, 58 s CPU, measured at load 7), plus the
# nvidia-cublas download (about 600 MB installed) the first time on a machine.
# Usage: bash tools/cuda_compile_check.sh PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:?usage: tools/cuda_compile_check.sh PYTHON}"
start=$SECONDS
if ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; else
    echo "tools/cuda_compile_check.sh: no nvcc on PATH, in /usr/local/cuda/bin or as CUDACXX; expected the CUDA" \
         "toolkit's compiler (CUDA 13) to compile csrc/cuda/" >&2
    exit 1
  fi
fi
if [ ! -e "$(dirname "$(readlink -f "$(command -v nvcc || echo "$CUDACXX")")")/../include/cublas_v2.h" ] &&
   ! "$py" -c "import nvidia, os, sys; sys.exit(not any(os.path.isfile(os.path.join(p, 'cu13', 'include', 'cublas_v2.h')) for p in nvidia.__path__))" 2>/dev/null; then
  "$py" -m pip install -q --no-deps "nvidia-cublas>=13,<14"
fi
# pip install . builds with pybind11 and CMake in an isolated environment: here they must
# be the environment's own.
"$py" -c "import pybind11" 2>/dev/null || "$py" -m pip install -q "pybind11>=2.11"
command -v cmake >/dev/null || "$py" -m pip install -q "cmake>=3.18"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
pybind11_dir="$("$py" -c 'import pybind11; print(pybind11.get_cmake_dir())')"
FASTDEC_CUDA=1 cmake -S . -B "$build" -DPython_EXECUTABLE="$py" -Dpybind11_DIR="$pybind11_dir" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$build/lib" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target _engine_cuda _engine_gpuref --parallel "$(nproc)"
# A shared module links with symbols left undefined (resolved at import): one of ours left
# undefined is a csrc/ file missing from the module's sources in CMakeLists.txt, which
# would otherwise show only when _engine_cuda is imported on a GPU.
for module in "$build"/lib/_engine_cuda*.so "$build"/lib/_engine_gpuref*.so; do
  missing="$(nm -D --undefined-only "$module" | awk '$1 == "U" {print $2}' | c++filt | { grep 'fastdec::' || true; } | paste -sd ';')"  # only grep may find nothing
  if [ -n "$missing" ]; then
    echo "tools/cuda_compile_check.sh: $(basename "$module") leaves undefined $missing; expected every csrc/" \
         "file it calls into among its sources in CMakeLists.txt (FASTDEC_GPU_SOURCES)" >&2
    exit 1
  fi
done
# From / : run from the checkout, `import pyfastdec` would find the source folder.
# FASTDEC_GPUREF_INTO=DIR puts the module there instead (a dry run that must not touch
# the environment's package).
package="${FASTDEC_GPUREF_INTO:-$(cd / && "$py" -c 'import os, pyfastdec; print(os.path.dirname(pyfastdec.__file__))')}"
cp "$build"/lib/_engine_gpuref*.so "$package/"
echo "tools/cuda_compile_check.sh: _engine_cuda compiled and linked, _engine_gpuref installed into $package" \
     "($((SECONDS - start)) s)"
