"""pyfastdec.model_dir.checksums.directory_checksums: the one place that decides what a
model directory's config.json "checksum" lists (export.rehash and the converters write
it), checked against what the shipped models carry and what the loader requires."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pyfastdec.model_dir import ModelDirError, config_digest
from pyfastdec.model_dir.checksums import directory_checksums

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.name for p in (REPO / "models").iterdir() if (p / "config.json").is_file())


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", SHIPPED)
def test_directory_checksums_are_what_the_shipped_models_carry(name):
    """Same keys in the same order (config.json's text keeps it), the shortlist included
    wherever the model has one."""
    d = REPO / "models" / name
    config = json.loads((d / "config.json").read_text())
    assert list(directory_checksums(d, config).items()) == list(config["checksum"].items())


def test_a_marian_tokenizer_directory_lists_its_three_files(tmp_path):
    names = ("model.safetensors", "source.spm", "target.spm", "vocab.json")
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(bytes([i]) * 10)
    config = {"format": "fastdec", "tokenizer": "marian", "checksum": {"config": "stale"}}
    got = directory_checksums(tmp_path, config)
    assert got == {"config": config_digest(config), **{n: sha256(tmp_path / n) for n in names}}
    assert list(got) == ["config", *names]

    (tmp_path / "shortlist.bin").write_bytes(b"sl")
    assert list(directory_checksums(tmp_path, config)) == ["config", *names, "shortlist.bin"]


def test_a_missing_file_is_refused_in_one_line_naming_it(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"w")
    with pytest.raises(ModelDirError) as info:
        directory_checksums(tmp_path, {"format": "fastdec"})
    assert str(info.value) == f"{tmp_path / 'spm.model'}: (file): missing (expected a file of the model directory)"
