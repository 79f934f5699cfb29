"""`fastdec convert marian` with int8 (calibrated and dynamic) and a shortlist from the
wheel, as a user runs it: the wheel built from this checkout, installed with --no-deps in
a fresh virtual environment without system site-packages, which sees only numpy and
sentencepiece besides it (linked from this environment, so no network is needed), and
run from a directory outside any checkout. Before the converters moved into the package
both failed there with "No module named 'export'". `python -m pyfastdec.convert` runs there too.

Slow: building the wheel compiles the engine (minutes)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from marian_checkpoints import build_tokenizer_files, read_lines, save_marian  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ("numpy", "sentencepiece")

pytestmark = [pytest.mark.slow]


def runtime_site(into: Path) -> Path:
    """A folder holding links to this environment's numpy and sentencepiece only."""
    into.mkdir()
    for name in RUNTIME:
        origin = Path(importlib.util.find_spec(name).origin).parent
        (into / name).symlink_to(origin)
        for extra in origin.parent.glob(f"{name}.libs"):  # auditwheel's vendored libraries
            (into / extra.name).symlink_to(extra)
    return into


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of this checkout, built from a copy of it: pip's in-tree build would leave
    build/ (and its CMake cache) in the checkout."""
    source = shutil.copytree(ROOT, tmp_path / "source", ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "*.so", "__pycache__", ".venv", ".pytest_cache"))
    wheels = tmp_path / "wheels"
    # This environment's build tools when it has them all; else pip fetches them (build
    # isolation). pybind11 alone, without scikit-build-core, failed the build.
    tools = ("pybind11", "scikit_build_core")
    isolation = ["--no-build-isolation"] if all(importlib.util.find_spec(m) for m in tools) else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(wheels),
                    str(source)], check=True, timeout=3000)
    return next(wheels.glob("pyfastdec-*.whl"))


def fresh_venv(tmp_path: Path) -> tuple[Path, dict, Path]:
    """(venv directory, environment, working directory outside any checkout): a virtual
    environment without system site-packages, and an environment with nothing of this
    one or of the checkout on the path (pip would take a pyfastdec found there as
    already installed)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    work = tmp_path / "elsewhere"
    work.mkdir()
    return env_dir, env, work


def test_int8_and_shortlist_conversion_from_the_wheel(tmp_path):
    wheel = build_wheel(tmp_path)
    env_dir, env, work = fresh_venv(tmp_path)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   timeout=600, cwd=work, env=env)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, cwd=work, env=env).stdout.strip()
    (Path(site) / "runtime.pth").write_text(str(runtime_site(tmp_path / "runtime")) + "\n")

    hf = tmp_path / "hf"
    vocab = build_tokenizer_files(hf, 400, 500, lines=5000)
    save_marian(hf, vocab, d_model=32, heads=4, ffn=64, layers=2, activation="swish", init_std=0.2, eos_bias=2.0)
    calib, src, tgt = tmp_path / "calib.en", tmp_path / "p.en", tmp_path / "p.de"
    calib.write_text("\n".join(read_lines("val.en.gz", 100)) + "\n", encoding="utf-8")
    src.write_text("\n".join(read_lines("val.en.gz", 300)) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(read_lines("val.de.gz", 300)) + "\n", encoding="utf-8")
    fastdec = str(env_dir / "bin" / "fastdec")
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True, cwd=work, env=env)
    assert probe.returncode != 0  # the fresh environment really has no torch
    for name, extra in (("static", ["--calibrate", str(calib)]), ("dynamic", [])):
        out = tmp_path / name
        done = subprocess.run([fastdec, "convert", "marian", str(hf), str(out), "--quantize", "int8", *extra,
                               "--shortlist", str(src), str(tgt)], capture_output=True, text=True, cwd=work,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        translated = subprocess.run([fastdec, "translate", "-m", str(out), "--threads", "1"], input="A man .\n",
                                    capture_output=True, text=True, cwd=work, env=env, timeout=300)
        assert translated.returncode == 0 and translated.stdout.count("\n") == 1, translated.stderr
        assert (out / "shortlist.bin").is_file()
    # The converters' own command line is the installed package's too (pyfastdec/convert/__main__.py).
    done = subprocess.run([str(python), "-m", "pyfastdec.convert", "--help"], capture_output=True, text=True, cwd=work,
                          env=env, timeout=300)
    assert done.returncode == 0 and "marian-npz-in" in done.stdout, done.stderr
