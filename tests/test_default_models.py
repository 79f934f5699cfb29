"""The default models ship inside the package (pyproject.toml's wheel.packages table maps
models/<name> to pyfastdec/models/<name>), and the README's main job works with no model
argument."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the test extra installs tomli
    import tomli as tomllib

from pyfastdec import Translator
from pyfastdec.api import DEFAULT_MODELS, resolve_model

from child_python import NEUTRAL_CWD, child_env

REPO = Path(__file__).resolve().parents[1]
README_SENTENCE = "A man rides a bike down the street."


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wheel_ships_exactly_the_default_models_where_the_api_looks():
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]["packages"]
    models = {target: source for target, source in packages.items() if target != "pyfastdec"}
    assert models == {f"pyfastdec/models/{name}": f"models/{name}" for name in DEFAULT_MODELS.values()}


def test_installed_defaults_are_the_repository_models():
    for role, name in DEFAULT_MODELS.items():
        installed, committed = resolve_model(None, role), REPO / "models" / name
        for file in ("config.json", "model.safetensors", "spm.model"):
            assert digest(installed / file) == digest(committed / file), f"{installed / file} differs from {committed}"


def test_readme_main_job_prints_german():
    fastdec = shutil.which("fastdec")
    command = [fastdec, "translate"] if fastdec else [sys.executable, "-m", "pyfastdec.cli", "translate"]
    done = subprocess.run(command, input=README_SENTENCE + "\n", capture_output=True, text=True, timeout=120,
                          cwd=NEUTRAL_CWD, env=child_env())
    assert done.returncode == 0, done.stderr
    # the same translation as greedy decoding of the committed model (GAD is lossless)
    expected = Translator(REPO / "models" / "en-de").translate([README_SENTENCE], algo="greedy")
    assert done.stdout == expected[0] + "\n"
    assert "Mann" in done.stdout  # German: "A man ..." -> "Ein Mann ..."
