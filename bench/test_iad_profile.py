"""bench.iad_profile's instrumentation on the shipped correction model (a few seconds):
the timed wrappers change no output and are removed afterwards, and what they count
agrees with the strategy's own statistics.

    pytest bench/test_iad_profile.py
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from bench import iad_profile

MODEL = Path(__file__).resolve().parent.parent / "models" / "uk-gec"
TEXTS = ["Я хочу пити каву з молоко.", "Він пішов до магазін.", "Мама мила раму.",
         "Сьогодні гарна погода, але завтра буде дощ.", "Це речення не має помилок.", "вона прийшла додому пізно"]


@pytest.fixture(scope="module")
def sources():
    import sentencepiece as spm

    if not (MODEL / "config.json").is_file():
        pytest.skip(f"{MODEL} not found")
    sp = spm.SentencePieceProcessor(model_file=str(MODEL / "spm.model"))
    return [sp.encode(t) + [sp.eos_id()] for t in TEXTS]


def test_wrappers_change_nothing_and_are_removed(sources):
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import draft_verify, greedy, iad
    from pyfastdec.decoding.policies import SourceDraftLength

    iad_mod = importlib.import_module("pyfastdec.decoding.iad")
    before = {(id(owner), attr): (owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr))
              for owner, attr, _ in iad_profile.decoding_targets()}
    backend = NativeBackend(MODEL, threads=1)
    expected, _ = greedy(backend, sources)
    plain, _ = iad(backend, sources, policy=None)
    clock = iad_profile.Clock()
    with iad_profile.patched(iad_profile.decoding_targets(), clock), iad_profile.engine_ops(clock):
        assert iad_mod.SourceNgrams.reentry is not before[(id(iad_mod.SourceNgrams), "reentry")]
        outs, stats = iad(iad_profile.TimedBackend(backend, clock), sources,
                          policy=SourceDraftLength(backend.config.max_source_len))
    assert outs == plain == expected
    after = {(id(owner), attr): (owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr))
             for owner, attr, _ in iad_profile.decoding_targets()}
    assert after == before
    assert draft_verify._cut is before[(id(draft_verify), "_cut")]
    assert SourceDraftLength.verified is before[(id(SourceDraftLength), "verified")]
    # what the wrappers counted, against DecodeStats
    assert len(clock.shapes) == clock.calls["step"] == stats.iterations
    assert sum(rows for rows, _ in clock.shapes) == stats.row_steps
    positions = sum(rows * width for rows, width in clock.shapes)
    assert positions >= stats.row_steps + stats.drafted  # padding of shorter drafts comes on top
    assert clock.calls["n-gram index"] == len(sources) and clock.calls["encoder"] == 1
    assert clock.seconds["encoder"] > 0 and clock.seconds["step"] > 0
    assert sum(clock.ops["decoder"].values()) > 0 and sum(clock.ops["encoder"].values()) > 0


def test_breakdown_adds_up_to_the_pass():
    clock = iad_profile.Clock()
    for name, seconds in (("encoder", 0.2), ("step", 0.5), ("policy", 0.1), ("re-entry search", 0.05)):
        clock.add(name, seconds)
    rows = dict(iad_profile.breakdown(clock, 1.0, 0.9, 10, 20, corrector=False))
    assert rows["loop Python (draft_verify, iad)"] == pytest.approx(0.15)
    assert sum(rows.values()) == pytest.approx(1.0)
    clock.add("decode call", 0.95)
    clock.add("api: tokenise", 0.01)
    rows = dict(iad_profile.breakdown(clock, 1.0, 0.9, 10, 20, corrector=True))
    assert rows["loop Python (draft_verify, iad)"] == pytest.approx(0.10)
    assert rows["api: other (units, batching, join, format)"] == pytest.approx(0.04)
    assert sum(rows.values()) == pytest.approx(1.0)
