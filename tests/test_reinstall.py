"""`pip install .` works again in the same checkout, and so does an install with an extra:
the build keeps no CMake cache that points into pip's deleted build environment (issue
27: the second install failed at CMakeLists.txt:2 running that environment's ninja).

Slow (three builds of the engine): run with `pytest -m slow tests/test_reinstall.py`.
What runs is what a user runs: pip's default isolated build, in a fresh virtual
environment, on a copy of this checkout's files without its build products. `--no-deps`
keeps the extras' dependencies (Ray) off the network; pip still fetches the small build
requirements (scikit-build-core, pybind11, and cmake/ninja where the machine has none).
The new environment sees this interpreter's site-packages after its own (a .pth file),
for numpy and sentencepiece. Debug builds: the test is about installing, and -O0
compiles several times faster.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pyfastdec import Translator
from pyfastdec.api import DEFAULT_MODELS

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "A dog runs across the green field."
pytestmark = pytest.mark.slow


def fresh_checkout(dest: Path) -> Path:
    """The checkout's files as a fresh clone of the working tree has them: tracked and
    untracked-but-not-ignored files, so no build/, no compiled engine, no caches."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def new_venv(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True, capture_output=True)
    site = Path(subprocess.run([str(dest / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "outer_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return dest


def pip_install(venv: Path, checkout: Path, target: str) -> None:
    env = dict(os.environ, FASTDEC_BUILD_TYPE="Debug")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", target],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=1500)
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if "CMake Error" in line or "failed" in line][:10]
    assert done.returncode == 0, f"pip install {target} failed:\n" + "\n".join(errors) + "\n...\n" + output[-2000:]


def check_installed(venv: Path, cwd: Path, expected: str) -> None:
    """The installed package (not the checkout) translates with its shipped default models."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(cwd))}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import pyfastdec; print(pyfastdec.__file__)"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv), package
    for name in DEFAULT_MODELS.values():
        for file in ("config.json", "model.safetensors", "spm.model"):
            assert (package / "models" / name / file).read_bytes() == (REPO / "models" / name / file).read_bytes()
    done = subprocess.run([str(venv / "bin" / "fastdec"), "translate", "--algo", "greedy"], input=SENTENCE + "\n",
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected + "\n"


def test_install_twice_and_with_an_extra_in_one_checkout(tmp_path):
    checkout = fresh_checkout(tmp_path / "clone")
    venv = new_venv(tmp_path / "venv")
    expected = Translator(REPO / "models" / "en-de").translate([SENTENCE], algo="greedy")[0]
    for target in (".", ".", ".[ray]"):
        pip_install(venv, checkout, target)
        check_installed(venv, tmp_path, expected)
