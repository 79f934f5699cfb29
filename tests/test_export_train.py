"""export.train end to end on a synthetic corpus: checkpoints, resume, averaging, results."""
import gzip
import json

import pytest
import torch

from export.tiny import synthetic_sentences
from export.train import main

torch.set_num_threads(1)


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    root = tmp_path / "data" / "multi30k"
    root.mkdir(parents=True)
    for split, n, seed in (("train", 80, 1), ("val", 12, 2), ("test_2016_flickr", 12, 3)):
        src = synthetic_sentences(n, seed=seed)
        for lang, lines in (("en", src), ("de", [" ".join(reversed(s.split())) for s in src])):
            with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(l + "\n" for l in lines))
    monkeypatch.setenv("FASTDEC_DATA", str(tmp_path / "data"))
    return tmp_path


@pytest.mark.parametrize("recipe", ["test-tiny-ssru", "test-tiny-drafter"])
def test_train_other_architectures(recipe, corpus):
    out = corpus / "run"
    main(["--recipe", recipe, "--out", str(out), "--threads", "1", "--max-steps", "8"])
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 8 and set(res["averaged"]) == {"val", "test_2016_flickr"}
    assert res["metric"] == ("block acc" if "drafter" in recipe else "BLEU")


def test_train_checkpoints_resumes_and_averages(corpus):
    recipe = "test-tiny"
    out = corpus / "run"
    common = ["--recipe", recipe, "--out", str(out), "--threads", "1", "--log-every", "5"]
    main(common + ["--max-steps", "8"])  # stops inside epoch 1 (~11 batches per epoch)
    first = json.loads((out / "results.json").read_text())
    assert first["epochs"] == 1 and first["steps"] == 8 and first["history"][-1]["partial"]
    assert {"averaged", "best"} <= set(first)
    assert len(list(out.glob("epoch*.pt"))) <= 2  # keep_checkpoints
    main(common + ["--max-steps", "25"])  # resumes from the newest epoch checkpoint
    second = json.loads((out / "results.json").read_text())
    assert second["steps"] == 25 and second["epochs"] > first["epochs"]
    epochs = [h["epoch"] for h in second["history"]]
    assert epochs == list(range(1, len(epochs) + 1))  # history continues, no epoch repeated
    ckpt = torch.load(out / "averaged.pt", weights_only=False)
    assert ckpt["config"]["arch"] == ("nat-drafter" if "drafter" in recipe else "transformer")
    # Resuming (mid-epoch included) gives exactly the weights of an uninterrupted run.
    straight = corpus / "straight"
    main(["--recipe", recipe, "--out", str(straight), "--threads", "1", "--max-steps", "25"])
    resumed = sorted(out.glob("epoch*.pt"))[-1].name
    a = torch.load(out / resumed, weights_only=False)["model"]
    b = torch.load(straight / resumed, weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
