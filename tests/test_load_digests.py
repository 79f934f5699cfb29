"""A BiLD pair hashes the big model's encoder once per load: `fastdec translate` checks the
pair (api.load_checked) and then builds its Translator from the very ModelDirs it checked,
so the little model's encoder.shared check must not hash the big encoder a second time
(ModelDir.digests). The digest is the one the little model recorded when it was built
(its config.json encoder.shared, written by export.build_models), and the output is what a
Translator loaded from the paths gives."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pyfastdec import Translator, cli
from pyfastdec.model_dir import ModelDir, encoder_digest
from pyfastdec.model_dir import shared_encoder

MODELS = Path(__file__).resolve().parents[1] / "models"
BIG, LITTLE = MODELS / "en-de-big", MODELS / "en-de-little"
SOURCES = ["A man rides a bike down the street.", "Two dogs play in the snow."]

pytestmark = pytest.mark.skipif(not (BIG.is_dir() and LITTLE.is_dir()), reason="models/en-de-big, en-de-little")


@pytest.fixture
def digest_calls(monkeypatch):
    """Every hash of an encoder's tensors (shared_encoder's tensors_digest), counted."""
    calls = []
    real = shared_encoder.tensors_digest

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(shared_encoder, "tensors_digest", counted)
    return calls


def test_the_cli_hashes_the_big_encoder_once_and_translates_as_bild_does(digest_calls, tmp_path, capsys):
    src, out = tmp_path / "in.en", tmp_path / "out.de"
    src.write_text("".join(s + "\n" for s in SOURCES))
    code = cli.main(["translate", "-m", str(BIG), "--drafter", str(LITTLE), "--algo", "bild", "--threads", "1",
                     "-i", str(src), "-o", str(out)])
    assert code == 0
    assert len(digest_calls) == 1, f"the big model's encoder was hashed {len(digest_calls)} times"
    reference = Translator(BIG, LITTLE, threads=1).translate(SOURCES, algo="bild")
    assert out.read_text().splitlines() == reference


def test_the_digest_is_the_one_the_little_model_recorded_and_is_kept_per_load(digest_calls):
    recorded = json.loads((LITTLE / "config.json").read_text())["encoder"]["shared"]
    big = ModelDir.load(BIG)
    assert encoder_digest(big) == recorded
    assert encoder_digest(big) == recorded
    assert len(digest_calls) == 1
    # A copy with another config is another network: its digest is computed afresh.
    shorter = dataclasses.replace(big, config=dataclasses.replace(big.config, max_source_len=64))
    assert encoder_digest(shorter) != recorded
    assert len(digest_calls) == 2
