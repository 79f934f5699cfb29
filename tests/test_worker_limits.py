"""`fastdec translate --workers N` runs at most one worker process per CPU this process may
use (runtime.check_workers): past that, one line and exit 2 before any input is read or
model loaded, as too many --threads are refused. The CPUs are the affinity mask's, so
each check runs in a subprocess pinned to one CPU, whatever machine runs the suite."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from child_python import NEUTRAL_CWD, child_env

MODEL = Path(__file__).resolve().parents[1] / "models" / "en-de"

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs an affinity mask (Linux)")


def on_one_cpu(args: list[str]) -> subprocess.CompletedProcess:
    first = min(os.sched_getaffinity(0))
    return subprocess.run([sys.executable, "-m", "pyfastdec.cli", "translate", "-m", str(MODEL), "--algo", "greedy",
                           *args], preexec_fn=lambda: os.sched_setaffinity(0, {first}), cwd=NEUTRAL_CWD,
                          env=child_env(), capture_output=True, text=True, timeout=120)


def test_more_workers_than_cpus_is_one_line_before_anything_loads(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\nA dog runs.\n")
    refused = on_one_cpu(["--workers", "2", "-i", str(src), "-m", str(tmp_path / "no-model")])
    assert refused.returncode == 2
    assert refused.stderr == ("fastdec: error: --workers 2: at most 1 worker processes here (one per CPU this process "
                              "may use; each loads its own models, so more add memory and time, not speed)\n")
    assert refused.stdout == ""


def test_as_many_workers_as_cpus_run_and_give_the_one_process_output(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\nA dog runs.\n")
    one = on_one_cpu(["-i", str(src)])
    workers = on_one_cpu(["--workers", "1", "-i", str(src)])
    assert workers.returncode == one.returncode == 0, workers.stderr
    assert workers.stdout == one.stdout and one.stdout.count("\n") == 2
