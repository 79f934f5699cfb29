"""config.json "description" (export/FORMAT.md): `fastdec info` says for each default model
what it was trained on and is good for; the field is one line of text, and changing it
changes no digest that names the network (heads.verifier, encoder.shared)."""
import json
import shutil

import pytest

from export.build_models import DESCRIPTIONS, describe
from pyfastdec import cli
from pyfastdec.api import DEFAULT_MODELS, packaged_model_path
from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.model_dir.config_parser import parse_config
from pyfastdec.model_dir.heads_verifier import verifier_digest
from pyfastdec.model_dir.shared_encoder import encoder_digest
from pyfastdec.training.rehash import dump_config, rehash

EN_DE = packaged_model_path("en-de")
pytestmark = pytest.mark.skipif(not EN_DE.is_dir(), reason=f"{EN_DE}: not installed")


def test_info_says_what_each_default_model_is_for(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for role, name in DEFAULT_MODELS.items():
        written = json.loads((packaged_model_path(name) / "config.json").read_text())["description"]
        assert f"default {role} model: {packaged_model_path(name)} (installed)\n  {written}\n" in out
    en_de = json.loads((EN_DE / "config.json").read_text())["description"]
    assert "29,000 English image captions" in en_de and "not for general text" in en_de and "OPUS-MT" in en_de
    assert cli.main(["info", "-m", str(EN_DE)]) == 0
    assert f"  description: {en_de}\n" in capsys.readouterr().out


def test_shipped_descriptions_are_build_models_ones():
    for name, text in DESCRIPTIONS.items():
        path = packaged_model_path(name)
        if path.is_dir():
            assert ModelDir.load(path).config.description == text, name


@pytest.mark.parametrize("value", ["", "  ", "two\nlines", 7, ["a"]])
def test_a_description_is_one_line_of_text(value):
    config = json.loads((EN_DE / "config.json").read_text())
    config.pop("checksum")
    config["description"] = value
    with pytest.raises(ModelDirError, match=r"config.json: description: .* \(expected one non-empty line of text\)"):
        parse_config(config, "config.json")


def test_a_new_description_keeps_the_network_digests(tmp_path):
    model = tmp_path / "en-de"
    shutil.copytree(EN_DE, model)
    config = json.loads((model / "config.json").read_text())
    config["heads"]["verifier"] = verifier_digest(ModelDir.load(model))  # as fastdec train-heads records it
    (model / "config.json").write_text(dump_config(config))
    rehash(model)
    before = encoder_digest(ModelDir.load(model))
    describe(model, "another description")
    # loads: checksums recorded again, and heads.verifier (checked at load) still names this network
    loaded = ModelDir.load(model)
    assert loaded.config.description == "another description" and loaded.config.heads is not None
    assert encoder_digest(loaded) == before  # en-de-drafter's encoder.shared still names it
