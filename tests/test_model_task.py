"""config.json "task" (export/FORMAT.md): "translation" or "correction", what a model was
trained to do. `fastdec correct` and Corrector refuse a translation model, before any
output is written, naming the field; a correction model still translates (greedy, beam);
a directory without the field (an imported model) is not checked. The shipped models
carry export.build_models.TASKS, and the field changes no digest that names the network."""
import json
import shutil
from pathlib import Path

import pytest

from export.build_models import TASKS
from pyfastdec import Corrector, Translator, cli
from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.model_dir.config_parser import parse_config
from pyfastdec.model_dir.heads_verifier import verifier_digest
from pyfastdec.model_dir.shared_encoder import encoder_digest
from pyfastdec.training.rehash import rehash

MODELS = Path(__file__).resolve().parents[1] / "models"
REFUSAL = r'config.json: task: "translation": correcting needs a correction model'


def test_the_shipped_models_say_what_they_do():
    for path in sorted(p for p in MODELS.iterdir() if (p / "config.json").is_file()):
        written = json.loads((path / "config.json").read_text()).get("task")
        assert written == TASKS.get(path.name), path.name  # drafters: none
    assert {TASKS[n] for n in ("en-de", "en-de-attn", "uk-gec")} == {"translation", "correction"}


def test_correct_refuses_a_translation_model_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("A man runs.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    out.write_text("yesterday's output\n", encoding="utf-8")
    assert cli.main(["correct", "-m", str(MODELS / "en-de"), "-i", str(src), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{MODELS / 'en-de' / 'config.json'}: task: \"translation\"" in err and "fastdec translate" in err
    assert out.read_text(encoding="utf-8") == "yesterday's output\n"
    with pytest.raises(ModelDirError, match=REFUSAL):
        Corrector(MODELS / "en-de-attn", threads=1)


def test_a_correction_model_still_translates(capsys):
    sources = ["Я піти додому вчора.", "Це є добре книга."]
    expected = Corrector(MODELS / "uk-gec", threads=1).translate(sources, algo="greedy")
    assert Translator(MODELS / "uk-gec", threads=1).translate(sources, algo="greedy") == expected


def test_a_model_without_the_field_is_not_checked(tmp_path):
    model = tmp_path / "imported"
    shutil.copytree(MODELS / "en-de-attn", model)
    config = json.loads((model / "config.json").read_text())
    config.pop("task")
    (model / "config.json").write_text(json.dumps(config))
    rehash(model)
    assert Corrector(model, threads=1).correct(["A man runs."]) == \
        Translator(MODELS / "en-de-attn", threads=1).translate(["A man runs."], algo="greedy")


@pytest.mark.parametrize("value", ["summarization", "Translation", "", 1, None])
def test_task_is_one_of_two_words(value):
    config = json.loads((MODELS / "en-de" / "config.json").read_text())
    config.pop("checksum")
    config["task"] = value
    if value is None:  # JSON null: as absent
        assert parse_config(config, "config.json").task is None
        return
    with pytest.raises(ModelDirError, match=r'config.json: task: .* \(expected "translation" or "correction"\)'):
        parse_config(config, "config.json")


def test_the_task_changes_no_network_digest(tmp_path):
    model = tmp_path / "en-de"
    shutil.copytree(MODELS / "en-de", model)
    before = ModelDir.load(model)
    digests = verifier_digest(before), encoder_digest(before)
    rehash(model, {"task": "correction"})
    after = ModelDir.load(model)  # loads: heads.verifier, checked at load, still names this network
    assert after.config.task == "correction"
    assert (verifier_digest(after), encoder_digest(after)) == digests
