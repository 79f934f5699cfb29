"""Build pyfastdec: setuptools drives CMake, which builds the pybind11 extension
pyfastdec._engine with one translation unit per instruction set (see CMakeLists.txt).

Environment knobs (for developers; users need none):
  FASTDEC_BUILD_TYPE   Release (default) | Debug | RelWithDebInfo
  FASTDEC_SANITIZE     1 -> build with AddressSanitizer + UBSan
  FASTDEC_BUILD_JOBS   parallel compile jobs (default: CPU count)
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The default models (models/README.md) ship inside the wheel as pyfastdec/models/<name>,
# where pyfastdec.api.packaged_model_path looks for them. Kept in step with
# pyfastdec.api.DEFAULT_MODELS (tests/test_packaging.py checks both lists agree).
SHIPPED_MODELS = ("en-de", "en-de-drafter", "uk-gec")
MODEL_FILES = ("config.json", "model.safetensors", "spm.model", "shortlist.bin")


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


class BuildWithModels(build_py):
    """build_py that also copies the shipped model directories into the package."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent / "models"
        for name in SHIPPED_MODELS:
            source = root / name
            if not (source / "config.json").is_file():
                raise FileNotFoundError(f"{source}: default model missing; see models/README.md to rebuild it")
            target = Path(self.build_lib) / "pyfastdec" / "models" / name
            target.mkdir(parents=True, exist_ok=True)
            for file in MODEL_FILES:
                if (source / file).is_file():
                    shutil.copyfile(source / file, target / file)


setup(
    ext_modules=[CMakeExtension("pyfastdec._engine")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildWithModels},
)
