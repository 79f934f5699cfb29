"""export.build_models end to end on a synthetic corpus with tiny recipes: teacher,
native-engine distillation, warm-started students and drafter, int8 + shortlist."""
import json
import re
import os
import struct

import torch

from export import train_shared
from export.build_models import DESCRIPTIONS, LITTLE_SHAPE, TASKS, Builder, choose_checkpoint
from export.rehash import rehash
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import blockwise, gad, greedy
from pyfastdec.decoding.bild import bild
from pyfastdec.model_dir import encoder_digest

from test_export_train import corpus  # noqa: F401  (fixture)

torch.set_num_threads(1)

TINY = {"teacher-en-de": "test-tiny", "en-de": "test-tiny-ssru", "en-de-attn": "test-tiny",
        "en-de-drafter": "test-tiny-drafter"}


def test_builds_the_en_de_family(corpus, tmp_path):  # noqa: F811
    runs, models = tmp_path / "runs", tmp_path / "models"
    builder = Builder(runs, models, threads=1, minutes={}, recipes=TINY, train_args=("--max-steps", "4"),
                      heads={"en-de": (2, 20)},
                      pruning={"en-de": ("enc_heads=0.5,enc_ffn=0.5,dec_heads=0.5,dec_ffn=0.5", 0.03, 0.02)},
                      shared_minutes={"en-de-drafter": 0.02})
    student = builder.build("en-de")
    # pruned before its shortlist and heads were made: half the heads and units of the
    # unpruned student (kept in runs/unpruned), which the tiny recipe gives 2 and 64
    unpruned = json.loads((runs / "unpruned" / "en-de" / "config.json").read_text())
    pruned = json.loads((student / "config.json").read_text())
    assert [l["heads"] for l in unpruned["encoder"]["layers"]] == [2]
    assert [(l["heads"], l["ffn"]) for l in pruned["encoder"]["layers"]] == [(1, 32)]
    assert (runs / "prune-en-de" / "report.md").exists()
    drafter = builder.build("en-de-drafter")
    n_train = len((runs / "distill" / "train.de").read_text().splitlines())
    assert n_train == 80  # one distilled line per training source
    for path in (student, drafter):
        config = json.loads((path / "config.json").read_text())
        assert config["quantization"]["weights"] == "int8"
        assert (path / "spm.model").read_bytes() == (runs / "test-tiny" / "spm.model").read_bytes()
    # the drafter reads the student's encoder (it stores none) and drafts with its shortlist
    assert json.loads((drafter / "config.json").read_text())["encoder"] == {"layers": [],
                                                                           "shared": encoder_digest(student)}
    assert not (drafter / "shortlist.bin").exists() and (runs / "separate" / "en-de-drafter").is_dir()
    heads = json.loads((student / "config.json").read_text())["heads"]
    # heads.verifier (checked at load against the weights, tests/test_train_heads_command.py)
    assert {k: v for k, v in heads.items() if k != "verifier"} == {"count": 2, "hidden": 32}
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", heads["verifier"])
    assert json.loads((runs / "heads-en-de" / "eval.json").read_text())["blockwise_check"]["equal_to_greedy"] == 8
    assert json.loads((drafter / "config.json").read_text())["block_size"] in (2, 3)  # chosen on val
    assert not list(models.glob("*.tmp"))
    # each described (config.json "description", checksums recorded again: the heads' verifier unchanged)
    for name, path in (("en-de", student), ("en-de-drafter", drafter)):
        config = NativeBackend(path, threads=1).model_dir.config
        assert (config.description, config.task) == (DESCRIPTIONS[name], TASKS.get(name))
    # the built pair works together: GAD gives the student's greedy output
    verifier, draft = NativeBackend(student, threads=1), NativeBackend(drafter, threads=1)
    src = [[5, 6, 7, 8, 3], [9, 10, 3]]
    assert gad(verifier, draft, src)[0] == greedy(verifier, src)[0]
    assert blockwise(verifier, src, policy=None)[0] == greedy(verifier, src)[0]
    # a second call finds everything built and trains nothing more
    steps = json.loads((runs / "test-tiny-ssru" / "results.json").read_text())["steps"]
    builder.build("en-de")
    assert json.loads((runs / "test-tiny-ssru" / "results.json").read_text())["steps"] == steps
    # a teacher checkpoint that changed (e.g. trained further) is re-written and re-distilled
    ckpt, _ = builder.teacher()
    os.utime(ckpt, ns=(ckpt.stat().st_atime_ns, ckpt.stat().st_mtime_ns + 10**9))
    builder.distilled()
    assert (runs / "distill" / "train.de.stale").exists()
    assert len((runs / "distill" / "train.de").read_text().splitlines()) == 80


def test_choose_checkpoint_takes_the_better_validation_score(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"averaged": {"val": 30.5}, "best": {"val": 31.0}}))
    assert choose_checkpoint(tmp_path) == tmp_path / "best.pt"
    (tmp_path / "results.json").write_text(json.dumps({"averaged": {"val": 32.0}, "best": {"val": 31.0}}))
    assert choose_checkpoint(tmp_path) == tmp_path / "averaged.pt"


def test_gec_shortlist_lets_every_source_piece_be_copied(tmp_path):
    import gzip

    import pytest
    spm = pytest.importorskip("sentencepiece")
    from pyfastdec.model_dir.shortlist import Shortlist

    # Correction-like pairs: the target respells one word, so "spav" is never copied and
    # IBM Model 1 alone would not list it among its own targets.
    words = ["mama", "myla", "ramu", "tato", "chytav", "knyhu", "kit", "spav"]
    src = [" ".join(words[(i + k) % len(words)] for k in range(4)) for i in range(64)]
    tgt = [line.replace("spav", "kit") for line in src]
    data, model = tmp_path / "ua-gec", tmp_path / "uk-gec"
    data.mkdir()
    model.mkdir()
    for name, lines in (("train.src.gz", src), ("train.tgt.gz", tgt)):
        with gzip.open(data / name, "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    (tmp_path / "both.txt").write_text("\n".join(src + tgt) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "both.txt"), model_prefix=str(model / "spm"), vocab_size=20, model_type="word",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, user_defined_symbols=["<mask>"], hard_vocab_limit=False,
        minloglevel=2)
    builder = Builder(tmp_path / "runs", tmp_path, threads=1, minutes={})
    assert builder.gec_shortlist(model, data) == model
    sl = Shortlist.load(model / "shortlist.bin")
    assert all(sl.translations(f)[0][0] == f for f in range(sl.vocab_size))
    assert sl.best == 20

def retrain_in_place(model_dir):
    """Other weights in the same directory, still a valid model: one int8 weight's lowest
    bit flipped, checksums recorded again."""
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    name = next(n for n, t in header.items() if n != "__metadata__" and t["dtype"] == "I8")
    at = 8 + size + header[name]["data_offsets"][0]
    data[at] ^= 1
    path.write_bytes(bytes(data))
    rehash(model_dir)


def test_builds_the_bild_pair_from_the_teacher(corpus, tmp_path, capsys):  # noqa: F811
    runs, models = tmp_path / "runs", tmp_path / "models"
    builder = Builder(runs, models, threads=1, minutes={}, recipes=TINY, train_args=("--max-steps", "4"),
                      shared_minutes={"en-de-little": 0.02})
    little = builder.build("en-de-little")  # builds en-de-big (the teacher in int8) first
    big = models / "en-de-big"
    teacher = json.loads((runs / "models" / "teacher-en-de" / "config.json").read_text())
    config = json.loads((big / "config.json").read_text())
    assert config["quantization"]["weights"] == "int8" and (big / "shortlist.bin").exists()
    assert config["encoder"] == teacher["encoder"] and config["decoder"] == teacher["decoder"]  # not pruned
    little_config = json.loads((little / "config.json").read_text())
    assert little_config["encoder"] == {"layers": [], "shared": encoder_digest(big)}
    assert [layer["heads"] for layer in little_config["decoder"]["layers"]] == [1]
    assert set(little_config["decoding"]) >= {"fallback", "lossy_fallback", "rollback"}  # chosen on val
    pair = NativeBackend(big, threads=1), NativeBackend(little, threads=1)
    src = [[5, 6, 7, 8, 3], [9, 10, 3]]
    assert bild(*pair, src, fallback=0.0)[0] == greedy(pair[0], src)[0]
    # built again from the same teacher checkpoint: not rewritten (its bytes, and so the runs over it, stay)
    written = (big / "model.safetensors").stat().st_mtime_ns
    assert builder.build("en-de-big") == big and (big / "model.safetensors").stat().st_mtime_ns == written
    # a host retrained in place (other weights, the same path) does not resume the run
    # trained over the old one (its greedy outputs are cached there, its encoder differs)
    run = runs / "little"
    recorded = json.loads((run / "run.json").read_text())
    assert recorded["host"] == str(big.resolve()) and recorded["host_files"] == train_shared.host_files(big)
    retrain_in_place(big)
    assert train_shared.main(["little", str(big), "--layers", "0", "--shape", LITTLE_SHAPE,
                              *builder._shared_data("en-de-little"), "--run", str(run),
                              "--out", str(tmp_path / "again")]) == 1
    assert "run.json: this run was started with other settings (host_files)" in capsys.readouterr().out
    # build_models sets such a run aside and trains anew over the new host
    builder.build("en-de-little")
    assert (runs / "little.stale" / "run.json").exists()
    assert json.loads((run / "run.json").read_text())["host_files"] == train_shared.host_files(big)
    assert json.loads((little / "config.json").read_text())["encoder"]["shared"] == encoder_digest(big)
