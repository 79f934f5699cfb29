"""Environment for tests that start a fresh Python: it must import the same pyfastdec as
the test process (the installed package with its compiled engine, or an in-place build),
never the bare source folder that `python -c` would find first in the working directory."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyfastdec

PACKAGE_ROOT = str(Path(pyfastdec.__file__).resolve().parents[1])
NEUTRAL_CWD = tempfile.gettempdir()  # outside the repository


def child_env(**overrides: str) -> dict[str, str]:
    """os.environ with PYTHONPATH leading to this process's pyfastdec, plus overrides."""
    env = dict(os.environ, **overrides)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    return env
