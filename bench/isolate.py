"""Run one measurement in a fresh Python process.

Every engine gets a process of its own: CTranslate2's and onnxruntime's OpenMP pools,
torch's threads and pyfastdec's pool must not share a process (bench.engine measured
CTranslate2 4x slower beside torch), peak RSS (ru_maxrss) must be the engine's own, and
environment variables read at import (CT2_FORCE_CPU_ISA, OMP_NUM_THREADS) must be set
before the engine is imported. The spec and the result travel as JSON files.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _pyfastdec_home() -> Path:
    """The folder holding the pyfastdec this process imports (or would), without importing it."""
    spec = importlib.util.find_spec("pyfastdec")
    return Path(spec.origin).resolve().parent.parent if spec and spec.origin else REPO_ROOT


class MeasurementFailed(RuntimeError):
    """A measuring process exited non-zero or timed out; the message ends with its stderr tail."""


def run_isolated(module: str, spec: dict, env: dict | None = None, timeout: float | None = None
                 ) -> tuple[dict, str]:
    """Run `python -m module --measure SPEC --result OUT`; returns (result, stderr).

    The child must write its result as JSON to OUT. env: variables added to ours.
    """
    with tempfile.TemporaryDirectory(prefix="fastdec-bench-") as tmp:
        spec_file, result_file = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_file.write_text(json.dumps(spec))
        child_env = dict(os.environ, **(env or {}))
        # The child imports this checkout's bench/ and pyfastdec, wherever we were started.
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), child_env.get("PYTHONPATH")]))
        home = _pyfastdec_home()
        if home != REPO_ROOT:
            # We measure an installed pyfastdec (pytest over a `pip install .`, whose
            # conftest pins it): so does the child. Its folder goes first, and the
            # checkout, `python -m`'s working directory, is not put ahead of it
            # (PYTHONSAFEPATH: Python 3.11+, what CI runs; 3.10 ignores it).
            child_env["PYTHONPATH"] = os.pathsep.join([str(home), child_env["PYTHONPATH"]])
            child_env["PYTHONSAFEPATH"] = "1"
        try:
            done = subprocess.run([sys.executable, "-m", module, "--measure", str(spec_file),
                                   "--result", str(result_file)], env=child_env, cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            raise MeasurementFailed(f"timed out after {timeout:.0f} s") from err
        if done.returncode != 0 or not result_file.is_file():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise MeasurementFailed(f"exit code {done.returncode}:\n{tail}")
        return json.loads(result_file.read_text()), done.stderr
