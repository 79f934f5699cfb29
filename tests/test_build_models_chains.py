"""export.build_models' chains: which files each stage of the En-De chain and of the general
chain reads (the stage commands replaced by recorders, nothing trained), and --from."""
import gzip
import json

import pytest
import torch

from export import build_models, compact_ckpt
from export.build_models import GENERAL, Builder
from export.recipes import RECIPES


def write_corpus(root, n):
    root.mkdir(parents=True)
    for split, count in (("train", n), ("val", 3)):
        for lang in ("en", "de"):
            with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(f"{root.name} {lang} {i}\n" for i in range(count)))


@pytest.fixture
def stages(tmp_path, monkeypatch):
    """Two corpora (multi30k: 30 train pairs, general: 50), a general recipe pair reading
    the second, and every stage command replaced by one that records its argv."""
    data = tmp_path / "data"
    write_corpus(data / "multi30k", 30)
    general = tmp_path / "general-en-de"
    write_corpus(general, 50)
    monkeypatch.setenv("FASTDEC_DATA", str(data))
    for name in ("teacher-en-de-general", "student-en-de-general"):  # as $FASTDEC_GENERAL_EN_DE sets them
        monkeypatch.setitem(RECIPES, name, dict(RECIPES[name], corpus=str(general)))
    calls = []

    def recorder(stage, make=None):
        def run(argv):
            calls.append((stage, list(argv)))
            if make:
                make(argv)
            return 0
        return run

    def after(argv, flag):
        return argv[argv.index(flag) + 1]

    def trained(argv):
        out = tmp_path.joinpath(after(argv, "--out"))
        out.mkdir(parents=True, exist_ok=True)
        (out / "averaged.pt").write_bytes(b"weights")
        (out / "results.json").write_text(json.dumps({"averaged": {"val": 1.0}, "history": [{"minutes": 1e9}]}))

    def directory(flag):
        return lambda argv: tmp_path.joinpath(after(argv, flag)).mkdir(parents=True, exist_ok=True)

    def distilled(argv):
        corpus = after(argv, "--corpus")
        n = sum(1 for _ in gzip.open(build_models.corpus_path("train", "en", corpus), "rt"))
        tmp_path.joinpath(after(argv, "--out")).write_text("x\n" * n)

    monkeypatch.setattr(build_models.train, "main", recorder("train", trained))
    monkeypatch.setattr(build_models.write, "main", recorder("write", directory("--out")))
    monkeypatch.setattr(build_models.distill, "main", recorder("distill", distilled))
    monkeypatch.setattr(build_models.prune, "main", recorder("prune", directory("--out")))
    monkeypatch.setattr(build_models.shortlist, "main", recorder("shortlist"))
    monkeypatch.setattr(build_models, "train_heads_main", recorder("heads", directory("--out")))
    monkeypatch.setattr(build_models, "describe", lambda model_dir, text, task=None: None)  # no config.json here
    return tmp_path, data / "multi30k", general, calls


def argument(calls, stage, flag):
    return [argv[argv.index(flag) + 1] for name, argv in calls if name == stage and flag in argv]


@pytest.mark.parametrize("model, corpus_dir, recipes", [
    ("en-de", "multi30k", ["teacher-en-de", "student-en-de-ssru"]),
    ("en-de-general", "general-en-de", ["teacher-en-de-general", "student-en-de-general"])])
def test_each_chain_reads_its_own_corpus(stages, model, corpus_dir, recipes):
    tmp_path, _, _, calls = stages
    corpus = tmp_path / ("data" if corpus_dir == "multi30k" else "") / corpus_dir
    n_train = 30 if corpus_dir == "multi30k" else 50
    Builder(tmp_path / "runs", tmp_path / "models", threads=1, minutes={}).build(model)
    assert argument(calls, "train", "--recipe") == recipes
    [corpus_arg] = argument(calls, "distill", "--corpus")
    assert build_models.corpus_path("train", "en", corpus_arg) == corpus / "train.en.gz"
    assert argument(calls, "distill", "--beam") == [str(5 if model == "en-de" else GENERAL.beam)]
    assert argument(calls, "shortlist", "--src") == [str(corpus / "train.en.gz")]
    assert argument(calls, "heads", "--sources") == [str(corpus / "train.en.gz")]
    assert argument(calls, "heads", "--held-out") == [str(n_train // 10)]
    distill_dir = "distill" if model == "en-de" else "distill-general"
    targets = str(tmp_path / "runs" / distill_dir / "train.de")
    assert argument(calls, "shortlist", "--tgt") == argument(calls, "prune", "--train-tgt") == [targets]
    assert argument(calls, "train", "--train-tgt") == [targets]
    assert argument(calls, "prune", "--recipe") == recipes[1:]


def test_the_general_chain_trains_on_the_device_given(stages):
    tmp_path, _, _, calls = stages
    Builder(tmp_path / "runs", tmp_path / "models", threads=1, minutes={}, device="cuda").build("en-de-general")
    assert argument(calls, "train", "--device") == ["cuda", "cuda"]
    calls.clear()
    Builder(tmp_path / "runs2", tmp_path / "models2", threads=1, minutes={}, device="cuda").build("en-de")
    assert argument(calls, "train", "--device") == []  # the caption chain stays on the CPU


def test_from_gives_the_general_chain_what_a_device_call_returned(stages):
    tmp_path, _, general, calls = stages
    ckpt = tmp_path / "teacher.pt"
    torch.save({"model": {"w": torch.ones(2, 3)}, "config": {}, "recipe": "teacher-en-de-general", "step": 7,
                "spm": b"spm"}, ckpt)
    compact_ckpt.pack(ckpt, tmp_path / "teacher")
    runs = tmp_path / "runs"
    builder = Builder(runs, tmp_path / "models", threads=1, minutes={}, from_={GENERAL.teacher: tmp_path / "teacher"})
    builder.build(GENERAL.teacher)
    kept = runs / "returned" / "teacher-en-de-general.pt"
    assert torch.load(kept, weights_only=False)["step"] == 7
    assert argument(calls, "write", "--ckpt") == [str(kept)] and argument(calls, "train", "--recipe") == []
    # returned distilled targets: used as they are, the teacher not run; a wrong count is refused
    targets = tmp_path / "train.de.gz"
    with gzip.open(targets, "wt", encoding="utf-8") as f:
        f.write("".join(f"Satz {i}\n" for i in range(50)))
    calls.clear()
    given = Builder(runs, tmp_path / "models", threads=1, minutes={}, from_={GENERAL.distill: targets})
    assert given.build(GENERAL.distill) == runs / "returned" / "distill-en-de-general.de"
    assert argument(calls, "distill", "--out") == []
    # a later command without --from finds both; a student --from skips training
    student = tmp_path / "student.pt"
    torch.save({"recipe": "student-en-de-general"}, student)
    Builder(runs, tmp_path / "models", threads=1, minutes={}, from_={"en-de-general": student}).build("en-de-general")
    assert argument(calls, "train", "--recipe") == [] and argument(calls, "distill", "--out") == []
    assert argument(calls, "write", "--ckpt") == [str(runs / "returned" / "en-de-general.pt")]
    assert argument(calls, "shortlist", "--tgt") == [str(runs / "returned" / "distill-en-de-general.de")]
    with gzip.open(targets, "wt", encoding="utf-8") as f:
        f.write("Satz\n")
    with pytest.raises(ValueError, match=r"1 lines, expected one per train source .* \(50\)"):
        Builder(runs, tmp_path / "models", threads=1, minutes={}, from_={GENERAL.distill: targets}).build(
            GENERAL.distill)
    # a folder (the teacher's compact checkpoint) given as distilled targets: refused, nothing kept
    set_aside = (runs / "returned" / "distill-en-de-general.de").read_bytes()
    with pytest.raises(ValueError, match=r"--from .*teacher: a folder \(expected distill-en-de-general's distilled"):
        Builder(runs, tmp_path / "models", threads=1, minutes={}, from_={GENERAL.distill: tmp_path / "teacher"}
                ).build(GENERAL.distill)
    assert (runs / "returned" / "distill-en-de-general.de").read_bytes() == set_aside


def test_from_is_refused_unless_exactly_one_named_target_takes_it(tmp_path, capsys):
    (tmp_path / "x.pt").write_bytes(b"")
    for names in (["en-de-general", "teacher-en-de-general"], ["en-de"]):
        with pytest.raises(SystemExit):
            build_models.main([*names, "--from", str(tmp_path / "x.pt"), "--runs", str(tmp_path)])
        assert "--from: " in capsys.readouterr().err


@pytest.mark.slow
def test_builds_the_general_student_end_to_end(tmp_path, monkeypatch):
    """The general chain with tiny recipes on a synthetic general set of 60 pairs (beside a
    Multi30k of 80 it must not read): teacher -> greedy distillation -> pruned int8
    student with its shortlist, proposal heads and description."""
    from export.tiny import synthetic_sentences
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import blockwise, greedy

    data, general = tmp_path / "data", tmp_path / "general"
    for root, splits in ((data / "multi30k", (("train", 80, 1), ("val", 12, 2))),
                         (general, (("train", 60, 5), ("val", 12, 6), ("newstest2019", 12, 7)))):
        root.mkdir(parents=True)
        for split, n, seed in splits:
            src = synthetic_sentences(n, seed=seed)
            for lang, lines in (("en", src), ("de", [" ".join(reversed(s.split())) for s in src])):
                with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in lines))
    monkeypatch.setenv("FASTDEC_DATA", str(data))
    tiny = dict(corpus=str(general), test_sets=["newstest2019"])
    monkeypatch.setitem(RECIPES, "tiny-general", dict(RECIPES["test-tiny"], **tiny))
    monkeypatch.setitem(RECIPES, "tiny-general-ssru", dict(RECIPES["test-tiny-ssru"], **tiny))
    runs, models = tmp_path / "runs", tmp_path / "models"
    builder = Builder(runs, models, threads=1, minutes={}, train_args=("--max-steps", "4"),
                      recipes={"teacher-en-de-general": "tiny-general", "en-de-general": "tiny-general-ssru"},
                      heads={"en-de-general": (2, 20)},
                      pruning={"en-de-general": ("enc_heads=0.5,enc_ffn=0.5,dec_heads=0.5,dec_ffn=0.5", 0.03, 0.02)})
    student = builder.build("en-de-general")
    assert len((runs / "distill-general" / "train.de").read_text().splitlines()) == 60  # the general sources
    assert json.loads((runs / "distill-general" / "train.de.json").read_text())["beam"] == GENERAL.beam
    assert (runs / "heads-en-de-general" / "eval.json").exists() and (student / "shortlist.bin").exists()
    model = NativeBackend(student, threads=1)
    config = model.model_dir.config
    assert config.quantization.weights == "int8" and config.heads.count == 2
    assert config.description == build_models.DESCRIPTIONS["en-de-general"] and config.task == "translation"
    assert [layer.heads for layer in config.encoder_layers] == [1]  # pruned from the tiny recipe's 2
    src = [[5, 6, 7, 8, 3], [9, 10, 3]]
    assert blockwise(model, src, policy=None)[0] == greedy(model, src)[0]
    assert not (runs / "distill").exists()  # the caption chain's folder untouched
