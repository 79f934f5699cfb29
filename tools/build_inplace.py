"""Builds the engine, pyfastdec._engine, into the checkout's pyfastdec/ folder, for the
Python that runs this script, so that code run from the repository root (or with the
checkout on PYTHONPATH) imports it: the fast loop for changing csrc/.

    python tools/build_inplace.py      # needs pybind11 in that Python, cmake and ninja or make on PATH

FASTDEC_BUILD_TYPE (Release, Debug, RelWithDebInfo), FASTDEC_SANITIZE=1, FASTDEC_CUDA=1 and
FASTDEC_GPU_REFERENCE=1 work as for `pip install` (CMakeLists.txt reads them; the last two
add pyfastdec._engine_cuda and pyfastdec._engine_gpuref, README "GPU (CUDA) build"). The CMake cache, build/inplace-<python>, is
this interpreter's and points at nothing temporary, so it stays valid between runs
(pip's build environments are deleted after each build: a cache pointing into one breaks
the next build; pip itself builds in a fresh temporary folder every time).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fail(message: str) -> None:
    sys.exit(f"tools/build_inplace.py: {message}")


def main() -> None:
    try:
        import pybind11
    except ImportError:
        fail(f"pybind11 is not installed in {sys.executable}; expected it there: "
             f"{sys.executable} -m pip install pybind11")
    if shutil.which("cmake") is None:
        fail("cmake is not on PATH; expected CMake 3.18 or newer (pip install cmake)")
    build = ROOT / "build" / f"inplace-{sysconfig.get_config_var('SOABI')}"
    configure = ["cmake", "-S", str(ROOT), "-B", str(build),
                 f"-DPython_EXECUTABLE={sys.executable}",
                 f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                 f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={ROOT / 'pyfastdec'}",
                 # Given every time: a knob set for one run must not stay in the cache.
                 f"-DCMAKE_BUILD_TYPE={os.environ.get('FASTDEC_BUILD_TYPE') or 'Release'}",
                 *(f"-D{knob}={'OFF' if os.environ.get(knob, '0') in ('', '0') else 'ON'}"
                   for knob in ("FASTDEC_SANITIZE", "FASTDEC_CUDA", "FASTDEC_GPU_REFERENCE"))]
    if shutil.which("ninja") is not None and not (build / "CMakeCache.txt").is_file():
        configure += ["-G", "Ninja"]  # the generator is fixed at the first configure
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    for command in (configure, ["cmake", "--build", str(build), "--parallel", jobs]):
        if subprocess.run(command).returncode != 0:
            fail(f"{' '.join(command[:2])} failed (its output is above); build folder {build}")
    print(f"built {next((ROOT / 'pyfastdec').glob('_engine' + sysconfig.get_config_var('EXT_SUFFIX')))}")


if __name__ == "__main__":
    main()
