"""export.train_shared's budgets and devices: a run stops at --steps (counted over every
run of the same --run directory, like --minutes), and once the host's greedy outputs are
in the run, the rest (training, agreement, writing) needs no native engine: that is how
a run is carried to a machine with an accelerator (--device cuda) and back."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from export import train_shared
from export.tiny import synthetic_sentences, tiny_model, tiny_spm
from export.writer import write_model_dir
from pyfastdec.model_dir import encoder_digest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A tiny float32 host directory and 60 source sentences (the last 10 held out)."""
    root = tmp_path_factory.mktemp("train-shared-budget")
    spm = tiny_spm(root / "spm.model")
    host_dir = write_model_dir(tiny_model(seed=3), spm, root / "host")
    sources = root / "sources.txt"
    sources.write_text("\n".join(synthetic_sentences(60, seed=9)) + "\n")
    return host_dir, sources


def args(host_dir: Path, sources: Path, run: Path, steps: int, *extra: str) -> list[str]:
    return ["little", str(host_dir), "--layers", "0", "--sources", str(sources), "--held-out", "10",
            "--run", str(run), "--out", str(run / "model"), "--minutes", "0.2", "--steps", str(steps),
            "--batch-tokens", "200", "--save-every", "2", "--log-every", "1", *extra]


def trained_steps(run: Path) -> int:
    return torch.load(run / "train.pt", map_location="cpu", weights_only=False)["step"]


def test_a_run_stops_at_its_step_budget_over_all_its_runs(host, tmp_path):
    host_dir, sources = host
    run = tmp_path / "run"
    assert train_shared.main(args(host_dir, sources, run, 5, "--device", "cpu")) == 0
    assert trained_steps(run) == 5
    logged = (run / "log.txt").read_text()
    assert "budget 0.2 min or 5 steps" in logged and "step 5 " in logged and "step 6 " not in logged
    # the same run with a larger budget continues from step 5, not from 0
    assert train_shared.main(args(host_dir, sources, run, 8)) == 0
    assert trained_steps(run) == 8
    assert "resumed at step 5" in (run / "log.txt").read_text()
    written = json.loads((run / "model" / "config.json").read_text())
    assert written["encoder"]["shared"] == encoder_digest(host_dir)


def test_a_run_with_its_greedy_outputs_trains_without_the_engine(host, tmp_path):
    """The greedy outputs are decoded here (native engine); a child in which the engine
    cannot be imported then trains, evaluates and writes the model from them."""
    host_dir, sources = host
    run = tmp_path / "run"
    assert train_shared.main(args(host_dir, sources, run, 2)) == 0
    greedy = (run / "greedy.txt").read_text()
    assert len(greedy.splitlines()) == 60
    child = ("import runpy, sys\n"
             "sys.modules['pyfastdec._engine'] = None  # importing it raises ImportError\n"
             f"sys.argv = ['train_shared', *{args(host_dir, sources, run, 4)!r}]\n"
             "runpy.run_module('export.train_shared', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert trained_steps(run) == 4 and (run / "greedy.txt").read_text() == greedy
    assert "resumed at step 2" in (run / "log.txt").read_text()
    # without the greedy outputs the engine is needed: the child fails for want of it
    (run / "greedy.txt").unlink()
    done = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode != 0 and "_engine" in done.stderr
