"""Bad input to the Python API raises a clear exception naming what is wrong: bytes
instead of text (a bare bytes object used to be iterated as ints), a lone surrogate
(used to surface as pybind11's RuntimeError), a shortlist.bin that is a directory or a
dangling link, and a max_source_len with no room for a token (used to pass load)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import models, translator  # noqa: E402,F401  (fixtures)
from pyfastdec.api import LongInputWarning, Translator  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError  # noqa: E402


@pytest.mark.parametrize("texts, message", [
    (b"a man .", "texts is bytes, expected a str or a list of str"),
    (bytearray(b"a man ."), "texts is bytearray, expected a str or a list of str"),
    (["a man .", b"the dog ."], "input 1 is bytes, expected str"),
    ([b"a man ."], "input 0 is bytes, expected str"),
    ([None], "input 0 is NoneType, expected str"),
    (None, "texts is NoneType, expected a str or a list of str$"),
    (42, "texts is int, expected a str or a list of str$"),
])
def test_non_text_input_is_a_type_error_naming_it(translator, texts, message):
    with pytest.raises(TypeError, match=message):
        translator.translate(texts, algo="greedy")


def test_a_lone_surrogate_is_a_value_error_naming_input_and_character(translator):
    with pytest.raises(ValueError, match=r"input 1: lone surrogate '\\ud800' at character 3 \(expected text "
                                         r"encodable as UTF-8\)"):
        translator.translate(["a man .", "the\ud800 dog ."], algo="greedy")
    with pytest.raises(ValueError, match="input 0: lone surrogate"):
        translator.translate("\udcff", algo="greedy")  # what errors="surrogateescape" makes of byte 0xff
    assert translator.translate(["a \U0001F600 man ."], algo="greedy")  # a real astral character is fine


@pytest.mark.parametrize("kind", ["directory", "dangling symbolic link"])
def test_a_broken_shortlist_is_a_model_dir_error_naming_the_file(models, tmp_path, kind):
    model = Path(shutil.copytree(models["verifier"], tmp_path / "model"))
    shortlist = model / "shortlist.bin"
    if kind == "directory":
        shortlist.mkdir()
    else:
        shortlist.symlink_to(tmp_path / "gone.bin")
    with pytest.raises(ModelDirError, match=f"{shortlist}: \\(file\\): a {kind} \\(expected a shortlist file"):
        Translator(model, threads=1, compute_type="float32")
    Translator(model, threads=1, compute_type="float32", shortlist=False)  # not looked at


def test_max_source_len_without_room_for_a_token_is_refused_at_load(models, tmp_path):
    value = 1
    model = Path(shutil.copytree(models["verifier"], tmp_path / "model"))
    config = model / "config.json"
    edited = dict(json.loads(config.read_text()), max_source_len=value)
    edited.pop("checksum", None)  # a hand-edited directory without checksums: the field rule speaks
    config.write_text(json.dumps(edited))
    with pytest.raises(ModelDirError, match=f"{config}: max_source_len: {value} \\(expected an integer >= 2"):
        ModelDir.load(model)
    config.write_text(json.dumps(dict(json.loads(config.read_text()), max_source_len=2)))
    tiny = Translator(model, threads=1, compute_type="float32")  # one token and EOS per chunk
    with pytest.warns(LongInputWarning, match="cut between words"):
        assert len(tiny.translate(["a man ."], algo="greedy")) > 0
