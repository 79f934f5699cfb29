"""The command-line path: train checkpoint -> export.write (float and int8) -> evaluate."""
import gzip
import json

import torch

from export import evaluate, train, write
from export.tiny import synthetic_sentences
from export.writer import read_model_dir

torch.set_num_threads(1)


def test_checkpoint_to_model_directories(tmp_path, monkeypatch, capsys):
    root = tmp_path / "data" / "multi30k"
    root.mkdir(parents=True)
    for split, n in (("train", 40), ("val", 10), ("test_2016_flickr", 10)):
        src = synthetic_sentences(n, seed=len(split))
        for lang, lines in (("en", src), ("de", src)):
            with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(l + "\n" for l in lines))
    monkeypatch.setenv("FASTDEC_DATA", str(tmp_path / "data"))
    run = tmp_path / "run"
    train.main(["--recipe", "test-tiny", "--out", str(run), "--threads", "1", "--max-steps", "3"])
    write.main(["--ckpt", str(run / "averaged.pt"), "--out", str(tmp_path / "f32")])
    write.main(["--ckpt", str(run / "averaged.pt"), "--out", str(tmp_path / "i8"), "--int8", "--calib", "val"])
    f32, _ = read_model_dir(tmp_path / "f32")
    i8, _ = read_model_dir(tmp_path / "i8", simulate_int8=True)
    assert i8.cfg.quantization["calibration"]["sentences"] == 10
    avg = torch.load(run / "averaged.pt", weights_only=False)["model"]
    assert all(torch.equal(f32.state_dict()[k], avg[k]) for k in avg)
    capsys.readouterr()
    evaluate.main(["--model", str(tmp_path / "i8"), "--src", "en", "--tgt", "de", "--split", "val", "--simulate-int8"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["simulate_int8"] and 0.0 <= result["bleu"] <= 100.0
