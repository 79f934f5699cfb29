"""The lossless strategies on the shipped models and real sentences, in the default suite:
GAD and GAD++ (beta 1, tau 0) with models/en-de-drafter (which reads en-de's encoder)
give exactly greedy's outputs from models/en-de (int8, lexical shortlist, SSRU decoder)
on 64 Multi30k test sentences at batch sizes 1, 7 and 32; so does lossless BiLD with
models/en-de-little over models/en-de-big (at several fallback thresholds, and with the
draft-or-plain policy); so does blockwise on en-de's own proposal heads, with every
proposal verified, with caps that change per iteration and with the default policy, at 1
and 2 threads; IAD gives exactly greedy's outputs from models/uk-gec on 64
UA-GEC test sentences. The drafts are partly accepted and partly rejected, so a
verify/rollback bug changes outputs here (the full test sets: test_trained_models.py,
pytest -m slow)."""
from __future__ import annotations

from pathlib import Path

import pytest

from export.data import load_pairs
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import blockwise, gad, gad_plus, greedy, iad
from pyfastdec.decoding.bild import bild
from pyfastdec.decoding.policies import DraftOrPlain, FixedDraftLength
from pyfastdec.text import Tokenizer

MODELS = Path(__file__).resolve().parents[1] / "models"
N = 64


def encode(backend: NativeBackend, model_dir: Path, sentences: list[str]) -> list[list[int]]:
    tok = Tokenizer(model_dir / "spm.model")
    return [tok.encode(s) + [backend.tokens["eos"]] for s in sentences]


def in_batches(fn, sources, batch_size):
    outs, accepted, drafted = [], 0, 0
    for i in range(0, len(sources), batch_size):
        got, stats = fn(sources[i:i + batch_size])
        outs, accepted, drafted = outs + got, accepted + stats.accepted, drafted + stats.drafted
    return outs, accepted, drafted


def first_difference(got, expected) -> str:
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    return f"{len(differ)} of {len(expected)} outputs differ from greedy, first at sentence {differ[0] + 1}"


@pytest.fixture(scope="module")
def en_de():
    verifier = NativeBackend(MODELS / "en-de", threads=1, shortlist=True)
    assert verifier.shortlist is not None and verifier.config.quantization is not None  # int8
    drafter = NativeBackend(MODELS / "en-de-drafter", threads=1)
    sources = encode(verifier, MODELS / "en-de", [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[:N]])
    return verifier, drafter, sources, greedy(verifier, sources)[0]


@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_gad_on_the_shipped_models_is_greedy(en_de, batch_size):
    verifier, drafter, sources, expected = en_de
    assert len({tuple(o) for o in expected}) == N  # real, distinct translations
    outs, accepted, drafted = in_batches(lambda b: gad(verifier, drafter, b), sources, batch_size)
    assert outs == expected, first_difference(outs, expected)
    assert 0 < accepted < drafted
    outs, accepted_plus, _ = in_batches(lambda b: gad_plus(verifier, drafter, b, beta=1, tau=0.0), sources,
                                        batch_size)
    assert outs == expected, first_difference(outs, expected)
    assert accepted_plus == accepted


@pytest.fixture(scope="module")
def bild_pair():
    big = NativeBackend(MODELS / "en-de-big", threads=1, shortlist=True)
    little = NativeBackend(MODELS / "en-de-little", threads=1)
    assert little.shares_encoder and big.config.quantization is not None
    sources = encode(big, MODELS / "en-de-big", [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[:N]])
    return big, little, sources, greedy(big, sources)[0]


@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_bild_on_the_shipped_models_is_greedy(bild_pair, batch_size):
    big, little, sources, expected = bild_pair
    assert len({tuple(o) for o in expected}) == N
    for fallback in (little.config.bild["fallback"], 0.0, 0.9):
        outs, accepted, drafted = in_batches(lambda b: bild(big, little, b, fallback=fallback), sources, batch_size)
        assert outs == expected, first_difference(outs, expected)
        assert 0 < accepted < drafted
    policy = DraftOrPlain(run=3, probe_every=2)  # plain runs in between: the little model catches up
    outs, _, _ = in_batches(lambda b: bild(big, little, b, policy=policy), sources, batch_size)
    assert outs == expected, first_difference(outs, expected)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_blockwise_on_the_shipped_model_is_greedy(en_de, batch_size, threads):
    _, _, sources, expected = en_de
    verifier = NativeBackend(MODELS / "en-de", threads=threads, shortlist=True)
    k = verifier.proposal_heads
    assert k >= 2  # models/en-de ships with proposal heads
    for policy in (None, FixedDraftLength(k, [k, 1, 0, 2]), "auto"):
        outs, accepted, drafted = in_batches(lambda b: blockwise(verifier, b, policy=policy), sources, batch_size)
        assert outs == expected, first_difference(outs, expected)
        if policy is None:
            assert 0 < accepted < drafted


def uagec_test_head(n: int) -> list[str]:
    """The first n UA-GEC test sources (gec-only layer, documents in doc_id order: the
    first lines of export.uagec's test split), read straight from the ua-gec package."""
    pytest.importorskip("ua_gec", reason="the Ukrainian sentences come from the 'test' extra (ua-gec)")
    from export.uagec import document_pairs, package_data_root, read_metadata

    root, sources = package_data_root(), []
    for doc in (d for d in read_metadata(root) if d.partition == "test"):
        sources += [s for s, _ in document_pairs(root, "gec-only", doc, doc.annotators[0])]
        if len(sources) >= n:
            return sources[:n]
    raise AssertionError(f"{root}: fewer than {n} test sentences")


@pytest.mark.parametrize("batch_size", [1, 16])
def test_iad_on_the_shipped_correction_model_is_greedy(batch_size):
    backend = NativeBackend(MODELS / "uk-gec", threads=1)
    sources = encode(backend, MODELS / "uk-gec", uagec_test_head(N))
    expected = in_batches(lambda b: greedy(backend, b), sources, batch_size)[0]
    assert len({tuple(o) for o in expected}) == N
    outs, accepted, drafted = in_batches(lambda b: iad(backend, b), sources, batch_size)
    assert outs == expected, first_difference(outs, expected)
    assert 0 < accepted < drafted
