"""The engine's scratch grows with a call's rows and is kept between calls; after a
batch that grew it beyond SCRATCH_KEEP_BYTES, translate frees it (and glibc's free heap
pages), so a process is not left at one huge batch's high-water mark. Checked through
the engine's own byte count: RSS depends on the allocator and the machine.
Measured RSS (5000 Multi30k sentences, batch_size=5000, packaged en-de + drafter):
2412 MB after translate before this, 116 MB with it (143 MB with the default batch)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyfastdec import Translator
from pyfastdec.backends import native

TEXTS = ["A man rides a bike down the street.", "Two dogs play in the snow.",
         "A little girl in a pink dress is climbing stairs.", "People are walking."]


MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="module")
def translator():
    # The repository's int8 models (so the int8 activation scratch counts too), named by
    # path: a sanitizer run copies the package without its models.
    return Translator(MODELS / "en-de", drafter=MODELS / "en-de-drafter", threads=1)


def test_release_scratch_frees_only_above_keep_bytes(translator):
    backend = translator.verifier
    backend.encode([translator.tokenizer.encode(t) + [translator.eos] for t in TEXTS * 8])
    held = backend.scratch_bytes()
    assert held > 0
    assert backend.release_scratch(keep_bytes=held) == 0 and backend.scratch_bytes() == held
    assert backend.release_scratch(keep_bytes=held - 1) == held and backend.scratch_bytes() == 0


def test_translate_frees_scratch_after_a_huge_batch_only(translator, monkeypatch):
    engines = (translator.verifier, translator.drafter)
    # A fixed block: the drafter runs at every step whatever the draft-length policy learnt.
    usual = translator.translate(TEXTS, batch_size=1, algo="gad", block=4)
    small = [e.scratch_bytes() for e in engines]
    assert min(small) > 0
    # "Huge" scaled down: anything beyond twice what one-row batches keep.
    monkeypatch.setattr(native, "SCRATCH_KEEP_BYTES", 2 * max(small))
    freed = []
    for e in engines:
        release = e.release_scratch
        monkeypatch.setattr(e, "release_scratch", lambda release=release: freed.append(release()) or freed[-1])
    big = translator.translate(TEXTS * 16, batch_size=64, algo="gad", block=4)
    assert len(freed) == 2 and min(freed) > 2 * max(small)  # the big batch grew both past the limit...
    assert [e.scratch_bytes() for e in engines] == [0, 0]   # ...and both were freed
    assert big == usual * 16  # rows are independent of their batch, and regrown scratch is fine
    assert translator.translate(TEXTS, batch_size=1, algo="gad", block=4) == usual
    assert [e.scratch_bytes() for e in engines] == small    # the usual size stays allocated
