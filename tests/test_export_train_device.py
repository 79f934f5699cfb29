"""export.train's device, budget and resume behaviour (issue 29 item 2), on the CPU: a run
killed after a periodic checkpoint and resumed ends where an uninterrupted run ends;
--stop-after-minutes stops cleanly; --device cuda without a GPU is refused."""
import json

import pytest
import torch

import export.train as train
from export.train import main

from test_export_train import corpus  # noqa: F401  (the synthetic Multi30k-shaped corpus fixture)

torch.set_num_threads(1)
COMMON = ["--recipe", "test-tiny", "--threads", "1", "--log-every", "100"]


class Killed(Exception):
    """Stands for the process dying (a device call's timeout): nothing after it runs."""


def last_checkpoint(run):
    return torch.load(sorted(run.glob("epoch*.pt"), key=lambda p: int(p.stem[5:]))[-1], weights_only=False)


def test_killed_after_a_periodic_checkpoint_resumes_to_the_uninterrupted_run(corpus, monkeypatch):  # noqa: F811
    straight, killed = corpus / "straight", corpus / "killed"
    main(COMMON + ["--out", str(straight), "--max-steps", "25"])

    real_lr_at = train.lr_at

    def dies_at_step_7(step, recipe):  # called with the number of the update about to run
        if step == 7:
            raise Killed
        return real_lr_at(step, recipe)

    monkeypatch.setattr(train, "lr_at", dies_at_step_7)
    with pytest.raises(Killed):  # every update is past the 0-minute interval: a checkpoint after each
        main(COMMON + ["--out", str(killed), "--max-steps", "25", "--checkpoint-minutes", "1e-9"])
    state = last_checkpoint(killed)
    assert (state["step"], state["epoch"], state["batches_in_epoch"]) == (6, 1, 6)  # mid-epoch, no evaluation
    assert not (killed / "results.json").exists()
    monkeypatch.setattr(train, "lr_at", real_lr_at)
    main(COMMON + ["--out", str(killed), "--max-steps", "25"])

    a, b = last_checkpoint(killed), last_checkpoint(straight)
    assert a["step"] == b["step"] == 25 and a["epoch"] == b["epoch"]
    assert a["batches_in_epoch"] == b["batches_in_epoch"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert all(torch.equal(pa[k], pb[k]) for k in pb)
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])


def test_stop_after_minutes_stops_cleanly_and_resumes(corpus, monkeypatch):  # noqa: F811
    run = corpus / "run"
    clock = iter(range(0, 10**6, 1))  # time.time() for train: one second per call
    with monkeypatch.context() as patch:
        patch.setattr(train.time, "time", lambda: float(next(clock)))
        main(COMMON + ["--out", str(run), "--stop-after-minutes", str(30 / 60)])
    first = json.loads((run / "results.json").read_text())
    assert 0 < first["steps"] < 26  # stopped inside epoch 2 (13 batches each); --minutes (60) is far off
    assert first["history"][-1]["partial"] and (run / "averaged.pt").exists()
    assert first["throughput"]["tgt_tokens"] > 0 and first["throughput"]["device"] == "cpu"
    main(COMMON + ["--out", str(run), "--max-steps", str(first["steps"] + 3)])  # the same --out goes on
    second = json.loads((run / "results.json").read_text())
    assert second["steps"] == first["steps"] + 3 and [h["epoch"] for h in second["history"]][0] == 1


def test_cuda_without_a_gpu_is_refused(corpus, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as err:
        main(COMMON + ["--out", str(corpus / "run"), "--device", "cuda"])
    assert err.value.code == 2
    msg = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--device cuda" in msg and "no CUDA device" in msg and "--device cpu" in msg
