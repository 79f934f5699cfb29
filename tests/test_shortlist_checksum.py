"""A model directory's shortlist.bin is part of its identity (issue 27, item 10): config.json
"checksum" lists it, so a shortlist of another model with the same vocabulary size (which
loads, and silently changes the output) is refused with one line naming the file.

The reference is the shipped models' own bytes: models/uk-gec has the vocabulary size of
models/en-de (8000) and its own shortlist; hashlib computes the digests independently.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from export.rehash import rehash
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.greedy import greedy
from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.text import load_tokenizer

MODELS = Path(__file__).resolve().parents[1] / "models"
SENTENCES = ["A man rides a bike down the street.", "Two dogs play in the snow.",
             "A woman in a red coat is reading a newspaper on a bench."]


def config_of(d: Path) -> dict:
    return json.loads((d / "config.json").read_text())


@pytest.fixture
def en_de(tmp_path) -> Path:
    d = tmp_path / "en-de"
    shutil.copytree(MODELS / "en-de", d)
    return d


def greedy_text(backend: NativeBackend) -> list[list[int]]:
    tokenizer = load_tokenizer(backend.model_dir)
    eos = backend.model_dir.config.tokens["eos"]
    out, _ = greedy(backend, [tokenizer.encode(s) + [eos] for s in SENTENCES], max_len=40)
    return out


def test_shipped_checksums_list_their_shortlists():
    for d in sorted(p.parent for p in MODELS.glob("*/config.json")):
        listed = config_of(d)["checksum"].get("shortlist.bin")
        if (d / "shortlist.bin").exists():
            assert listed == "sha256:" + hashlib.sha256((d / "shortlist.bin").read_bytes()).hexdigest(), d
        else:
            assert listed is None, d


def test_another_models_shortlist_is_refused(en_de):
    """uk-gec's shortlist has en-de's vocabulary size, so only the checksum tells them apart,
    and it matters: with it en-de's greedy output changes."""
    foreign = MODELS / "uk-gec" / "shortlist.bin"
    assert ModelDir.load(MODELS / "uk-gec").config.vocab_size == ModelDir.load(en_de).config.vocab_size
    own = greedy_text(NativeBackend(en_de, threads=1))
    assert greedy_text(NativeBackend(en_de, threads=1, shortlist=foreign)) != own  # an explicit file is the user's
    shutil.copyfile(foreign, en_de / "shortlist.bin")
    with pytest.raises(ModelDirError) as info:
        NativeBackend(en_de, threads=1)
    message = str(info.value)
    assert message.startswith(f"{en_de / 'shortlist.bin'}: (content): content is "
                              f"sha256:{hashlib.sha256(foreign.read_bytes()).hexdigest()}"), message
    assert "checksum.shortlist.bin" in message and "\n" not in message
    assert greedy_text(NativeBackend(en_de, threads=1, shortlist=False))  # the rest of the directory still loads


def test_unlisted_shortlist_is_refused_until_recorded(en_de):
    """A checksummed directory written before its checksum listed the shortlist (or one
    given a shortlist by hand) is refused until export.rehash records the file."""
    config = config_of(en_de)
    del config["checksum"]["shortlist.bin"]
    (en_de / "config.json").write_text(json.dumps(config, indent=2))
    with pytest.raises(ModelDirError, match=re.escape(f"{en_de / 'shortlist.bin'}: (file): not listed in ")
                       + r".*python -m pyfastdec\.training\.rehash DIR\)$"):
        NativeBackend(en_de, threads=1)
    rehash(en_de)
    assert NativeBackend(en_de, threads=1).shortlist is not None


def test_listed_shortlist_that_is_missing_is_refused(en_de):
    (en_de / "shortlist.bin").unlink()
    with pytest.raises(ModelDirError, match=re.escape(f"{en_de / 'shortlist.bin'}: (file): missing (expected")):
        NativeBackend(en_de, threads=1)
    assert NativeBackend(en_de, threads=1, shortlist=False).shortlist is None


def test_directory_without_checksum_keeps_any_shortlist(en_de):
    """Hand-built directories (no checksum field) load as before."""
    config = config_of(en_de)
    del config["checksum"]
    (en_de / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copyfile(MODELS / "uk-gec" / "shortlist.bin", en_de / "shortlist.bin")
    assert NativeBackend(en_de, threads=1).shortlist is not None


def test_export_shortlist_records_itself_in_a_model_directory(en_de, tmp_path):
    """export.shortlist --out DIR/shortlist.bin (how export.build_models adds one) updates
    DIR's checksum, so the directory it writes into keeps loading."""
    from export.shortlist import main

    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("A man rides a bike.\nTwo dogs play.\n")
    tgt.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n")
    assert main(["--src", str(src), "--tgt", str(tgt), "--spm", str(en_de / "spm.model"),
                 "--out", str(en_de / "shortlist.bin"), "--frequent", "8", "--best", "4"]) == 0
    assert config_of(en_de)["checksum"]["shortlist.bin"] == \
        "sha256:" + hashlib.sha256((en_de / "shortlist.bin").read_bytes()).hexdigest()
    assert NativeBackend(en_de, threads=1).shortlist.best == 4
