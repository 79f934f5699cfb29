"""Build pyfastdec: setuptools drives CMake, which builds the pybind11 extension
pyfastdec._engine with one translation unit per instruction set (see CMakeLists.txt).

Environment knobs (for developers; users need none):
  FASTDEC_BUILD_TYPE   Release (default) | Debug | RelWithDebInfo
  FASTDEC_SANITIZE     1 -> build with AddressSanitizer + UBSan
  FASTDEC_BUILD_JOBS   parallel compile jobs (default: CPU count)
"""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name: str, source_dir: str = ".") -> None:
        super().__init__(name, sources=[])
        self.source_dir = str(Path(source_dir).resolve())


class CMakeBuild(build_ext):
    def build_extension(self, ext: CMakeExtension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_type = os.environ.get("FASTDEC_BUILD_TYPE", "Release")
        import pybind11

        cmake_args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={build_type}",
        ]
        if os.environ.get("FASTDEC_SANITIZE", "0") not in ("", "0"):
            cmake_args.append("-DFASTDEC_SANITIZE=ON")
        try:
            import ninja  # noqa: F401  (pip's ninja makes builds faster when present)
            cmake_args += ["-G", "Ninja"]
        except ImportError:
            pass
        build_dir = Path(self.build_temp) / ext.name
        build_dir.mkdir(parents=True, exist_ok=True)
        jobs = os.environ.get("FASTDEC_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", ext.source_dir, *cmake_args], cwd=build_dir, check=True)
        subprocess.run(["cmake", "--build", ".", "--parallel", jobs], cwd=build_dir, check=True)


setup(
    ext_modules=[CMakeExtension("pyfastdec._engine")],
    cmdclass={"build_ext": CMakeBuild},
)
