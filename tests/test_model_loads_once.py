"""Each model directory is read and sha256-checked (ModelDir.load) once per process: the
CLI hands the directories it checked to the Translator it builds, and a Translator takes
an already loaded ModelDir for model= and drafter= without loading it again."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyfastdec import Corrector, Translator
from pyfastdec import cli
from pyfastdec.api import load_checked
from pyfastdec.model_dir import ModelDir

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture
def loads(monkeypatch) -> list[Path]:
    """The directories ModelDir.load reads (each load hashes every file it checks)."""
    seen: list[Path] = []
    real = ModelDir.load.__func__

    def counted(cls, path):
        seen.append(Path(path).resolve())
        return real(cls, path)

    monkeypatch.setattr(ModelDir, "load", classmethod(counted))
    return seen


def test_translator_takes_loaded_directories(loads):
    model_dir, drafter_dir = load_checked(MODELS / "en-de", MODELS / "en-de-drafter", "translate", "int8")
    assert len(loads) == 2
    translator = Translator(model_dir, drafter_dir, threads=1)
    assert len(loads) == 2  # nothing read again
    assert translator.model_dir is model_dir and translator.drafter_dir is drafter_dir
    by_path = Translator(MODELS / "en-de", MODELS / "en-de-drafter", threads=1)
    assert translator.translate(["A man rides a bike."]) == by_path.translate(["A man rides a bike."])
    corrector = Corrector(load_checked(MODELS / "uk-gec", None, "correct", "int8")[0], threads=1)
    assert corrector.model_dir.path == MODELS / "uk-gec"


def test_translator_still_checks_a_loaded_pair(loads):
    """A loaded drafter is checked against the model as a path would be."""
    model_dir = ModelDir.load(MODELS / "en-de")
    gec = ModelDir.load(MODELS / "uk-gec")
    with pytest.raises(Exception, match="arch"):
        Translator(model_dir, gec, threads=1)


@pytest.mark.parametrize("drafter", [False, True])
def test_cli_translate_loads_each_directory_once(loads, tmp_path, capsys, drafter):
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\n\nThe dog sleeps.\n", encoding="utf-8")
    argv = ["translate", "-m", str(MODELS / "en-de"), "--threads", "1", "-i", str(src)]
    if drafter:
        argv += ["--drafter", str(MODELS / "en-de-drafter")]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.count("\n") == 3
    expected = [(MODELS / "en-de").resolve()] + ([(MODELS / "en-de-drafter").resolve()] if drafter else [])
    assert sorted(loads) == sorted(expected)


def test_cli_info_loads_each_directory_once(loads, capsys):
    assert cli.main(["info", "-m", str(MODELS / "en-de"), "--drafter", str(MODELS / "en-de-drafter")]) == 0
    assert "strategy of `fastdec translate" in capsys.readouterr().out
    assert sorted(loads) == sorted([(MODELS / "en-de").resolve(), (MODELS / "en-de-drafter").resolve()])
