"""bench.cuda_bench in its dry mode (FASTDEC_BENCH_DRY=1: the GPU model on its reference
ops, HF in float32 on the CPU), on a tiny random Marian instead of the base-size one: each
system of the hf part (HF, the GPU model, the CPU engine) and each model of the strategies
part runs in a process of its own (bench/isolate.py), every lossless strategy gives its
model's greedy output, and cuda_bench.md keeps its tables."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import marian_checkpoints as mc  # noqa: E402

from bench import cuda_bench  # noqa: E402
from pyfastdec.backends.cuda import DeviceUnavailable, gpu_engine  # noqa: E402

pytestmark = pytest.mark.slow  # several fresh Pythons that import torch: about a minute on 2 cores


def test_every_system_runs_in_a_process_of_its_own(tmp_path, monkeypatch):
    try:
        gpu_engine("reference")
    except DeviceUnavailable as err:  # the reference ops are an optional build (_engine_gpuref)
        pytest.skip(str(err))
    work = tmp_path / "work"
    # A tiny model where build_hf looks for its checkpoint, so that it builds nothing but
    # the conversion (the base-size one takes minutes).
    vocab = mc.build_tokenizer_files(work / "hf", 150, 150, lines=400)
    mc.save_marian(work / "hf", vocab, d_model=32, heads=2, ffn=64, layers=1)
    monkeypatch.setenv("FASTDEC_BENCH_DRY", "1")  # the children's
    monkeypatch.setattr(cuda_bench, "DRY", True)  # this process imported the module already
    monkeypatch.setattr(cuda_bench, "OPS", "reference")
    out = tmp_path / "out"
    assert cuda_bench.main(["--out", str(out), "--work", str(work), "--batch1", "2", "--batch32", "3"]) == 0
    res = json.loads((out / "cuda_bench.json").read_text())
    assert "error" not in res["hf"] and isinstance(res["strategies"], list), res

    hf_pids = [res["hf"][name]["pid"] for name in cuda_bench.HF_SYSTEMS]
    assert len(set(hf_pids)) == 3 and os.getpid() not in hf_pids, hf_pids
    by_model: dict[str, set[int]] = {}
    for row in res["strategies"]:
        by_model.setdefault(row["model"], set()).add(row["pid"])
    assert sorted(by_model) == sorted(model for model, _, _ in cuda_bench.CASES)
    assert all(len(pids) == 1 for pids in by_model.values()), by_model  # greedy and its strategies: one process
    pids = [next(iter(p)) for p in by_model.values()]
    assert len(set(pids) | set(hf_pids)) == len(pids) + len(hf_pids) and os.getpid() not in pids

    assert all(row["equals_greedy"] for row in res["strategies"])  # every strategy there is lossless
    assert {(row["model"], row["algo"], row["batch"]) for row in res["strategies"]} == {
        (model, algo, batch) for model, _, algos in cuda_bench.CASES for algo in ["greedy", *algos]
        for batch in (1, 32)}
    md = (out / "cuda_bench.md").read_text()
    assert "| system | batch 1 ms (median) | batch 64 sentences/s |" in md
    assert "| model | algo | batch | s | speed-up | tokens/iteration | ms/verifier call | = greedy |" in md
