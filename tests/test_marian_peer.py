"""Marian itself (pymarian, the optional 'bench-marian' extra) on the converted shipped
en-de SSRU student: its greedy output equals our PyTorch reference under Marian's
semantics (tests/marian_reference.py: position frequencies, eps 1e-6, zero decoder
start) on real sentences, and agrees with pyfastdec's own greedy at the measured rate.
Slow: pymarian loads a ~600 MB library and the test decodes 60 sentences three times.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

pymarian = pytest.importorskip("pymarian", reason="needs the 'bench-marian' extra (pymarian)")
torch = pytest.importorskip("torch")

from export.decode import default_max_len, greedy  # noqa: E402
from export.writer import read_model_dir, write_float_twin  # noqa: E402
from pyfastdec.convert.marian_npz_export import to_marian_npz  # noqa: E402
from tests.marian_reference import marian_semantics  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FASTDEC_DATA", ROOT.parent / "shared" / "data"))
N = 60
# Measured (bench/README.md, "Marian"): Marian's zero decoder start makes our BOS-trained
# model drop its first word; 1 of 200 outputs is identical, 70 of 200 are ours minus
# leading words. The floor keeps the measurement honest without making it flaky.
MIN_IDENTICAL_WITH_OURS = 0


def marian_greedy(out: Path, lines: list[str]) -> list[str]:
    cli = (f"-m {out}/model.npz -v {out}/vocab.src.spm {out}/vocab.trg.spm --cpu-threads 1 --beam-size 1 "
           f"--allow-unk --mini-batch 1 --maxi-batch 1 --quiet")
    return pymarian.Translator(cli).translate(lines)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    src = DATA / "multi30k" / "test_2016_flickr.en.gz"
    if not src.is_file():
        pytest.skip(f"{src} not found")
    lines = [line.strip() for line in gzip.open(src, "rt")][:N]
    root = tmp_path_factory.mktemp("marian-peer")
    fp32 = Path(write_float_twin(ROOT / "models" / "en-de", root / "fp32"))
    return lines, fp32, to_marian_npz(fp32, root / "marian")


def test_marian_greedy_equals_reference_under_marian_semantics(shipped):
    import sentencepiece

    lines, fp32, out = shipped
    torch.set_num_threads(1)
    model, spm_file = read_model_dir(fp32)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    sources = [sp.encode(line) + [model.eos] for line in lines]
    with marian_semantics(model):
        reference = greedy(model, sources)
    theirs = marian_greedy(out, lines)
    # Runaway outputs stop at different limits (ours 2 * len + 10, Marian 3 * len): compare the rest.
    compared = [(sp.decode(r), m) for r, m, s in zip(reference, theirs, sources) if len(r) < default_max_len(len(s))]
    assert len(compared) >= 50
    assert [m for _, m in compared] == [r for r, _ in compared]


def test_marian_agrees_with_pyfastdec_at_the_measured_rate(shipped):
    from pyfastdec.api import Translator

    lines, fp32, out = shipped
    ours = [getattr(r, "text", r) for r in Translator(fp32, compute_type="float32", threads=1, shortlist=False)
            .translate(lines, algo="greedy")]
    theirs = marian_greedy(out, lines)
    identical = sum(a == b for a, b in zip(ours, theirs))
    suffix = sum(a != b and a.endswith(b) for a, b in zip(ours, theirs))
    assert identical >= MIN_IDENTICAL_WITH_OURS
    assert suffix >= N // 5  # the first-word signature of the decoder-start difference
