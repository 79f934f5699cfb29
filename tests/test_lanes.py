"""Translator(inter_threads=N) (pyfastdec/lanes.py): N copies of the engines decode a
call's batches at once. On the shipped models and real sentences every algorithm gives
what one lane gives (greedy's outputs for the lossless ones, the same n-best scores and
seeded samples), in input order; the lanes run at the same time; an error in one lane is
raised once the others stop; bad values are refused in one line."""
from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref
from pathlib import Path

import pytest

from export.data import load_pairs
from pyfastdec import Corrector, Translator, lanes
from test_real_sentences import uagec_test_head

MODELS = Path(__file__).resolve().parents[1] / "models"
SOURCES = [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[:40]]


@pytest.fixture(scope="module")
def pair():
    """One lane and three lanes of en-de (proposal heads, shortlist) with its drafter."""
    one = Translator(MODELS / "en-de", MODELS / "en-de-drafter", threads=1)
    three = Translator(MODELS / "en-de", MODELS / "en-de-drafter", threads=1, inter_threads=3)  # more lanes than this machine's 2 CPUs: allowed
    return one, three


@pytest.mark.parametrize("options", [
    dict(algo="greedy"), dict(algo="blockwise"), dict(algo="gad"), dict(algo="gad++", beta=3, tau=1.0, block=4),  # lossy: a fixed block, or timings steer it
    dict(beam_size=4, n_best=2, return_scores=True),
    dict(sampling_topk=10, sampling_temperature=0.8, sampling_seed=7),
    dict(algo="greedy", target_prefix=["Ein"] * len(SOURCES)),
])
def test_every_algorithm_gives_what_one_lane_gives(pair, options):
    one, three = pair
    expected, stats_one = one.translate(SOURCES, batch_size=4, return_stats=True, **options)
    got, stats = three.translate(SOURCES, batch_size=4, return_stats=True, **options)
    assert got == expected
    made = three._lanes.lanes
    assert len(made) == 3  # ten batches: every lane made, each with engines of its own
    assert len({id(b) for b in three._lanes.backends()}) == 6
    if options.get("algo") == "blockwise":  # and a cost policy of its own, learning from its own calls
        assert len({id(lane._heads_policy) for lane in made if lane._heads_policy is not None}) == 3
    assert (stats.sentences, stats.generated) == (stats_one.sentences, stats_one.generated)
    if options.get("algo") in ("blockwise", "gad"):  # lossless: greedy's outputs
        assert got == one.translate(SOURCES, batch_size=4, algo="greedy")


def test_iad_on_the_correction_model_gives_greedy(pair):
    sources = uagec_test_head(24)
    corrector = Corrector(MODELS / "uk-gec", threads=1, inter_threads=2)
    expected = Corrector(MODELS / "uk-gec", threads=1).translate(sources, batch_size=3, algo="greedy")
    assert corrector.correct(sources, batch_size=3) == expected
    assert corrector.translate(sources, batch_size=3, algo="greedy") == expected


def test_lanes_decode_at_the_same_time_and_one_batch_needs_no_copy(monkeypatch):
    t = Translator(MODELS / "en-de", threads=1, inter_threads=2)
    assert t.translate(SOURCES[:4], batch_size=4) and len(t._lanes.lanes) == 1  # one batch: no copy made
    running, most = set(), []
    real = Translator._decode_batch

    def watched(self, units, opts):
        running.add(threading.get_ident())
        most.append(len(running))
        time.sleep(0.05)  # long enough for the other lane to start its own batch
        try:
            return real(self, units, opts)
        finally:
            running.discard(threading.get_ident())

    monkeypatch.setattr(Translator, "_decode_batch", watched)
    assert t.translate(SOURCES[:8], batch_size=2) == Translator(MODELS / "en-de", threads=1).translate(
        SOURCES[:8], batch_size=2)
    assert max(most) == 2 and len(t._lanes.lanes) == 2


def test_an_error_in_a_lane_is_raised_after_the_others_stop(monkeypatch):
    t = Translator(MODELS / "en-de", threads=1, inter_threads=2)
    real, started = Translator._decode_batch, []

    def failing(self, units, opts):
        started.append(len(units))
        if len(started) == 2:
            raise MemoryError("std::bad_alloc")
        time.sleep(0.02)
        return real(self, units, opts)

    monkeypatch.setattr(Translator, "_decode_batch", failing)
    with pytest.raises(MemoryError, match="bad_alloc"):
        t.translate(SOURCES, batch_size=2)  # 20 batches
    assert len(started) < 20  # the lanes stopped claiming batches
    monkeypatch.setattr(Translator, "_decode_batch", real)
    assert t.translate(SOURCES[:6], batch_size=2) == Translator(MODELS / "en-de", threads=1).translate(
        SOURCES[:6], batch_size=2)  # and the translator still works


def test_threads_default_is_shared_out_over_the_lanes(monkeypatch):
    monkeypatch.setattr(lanes, "default_threads", lambda: 4)
    assert lanes.lane_threads(None, 2) == 2 and lanes.lane_threads(None, 8) == 1 and lanes.lane_threads(3, 2) == 3


@pytest.mark.parametrize("value, message", [
    (0, "inter_threads=0: expected a positive integer"),
    ("two", "inter_threads='two': expected a positive integer"),
    (10**6, "inter_threads=1000000: at most"),
])
def test_bad_values_are_refused_before_the_model_loads(value, message, monkeypatch):
    monkeypatch.setattr(lanes, "model_backends", lambda *a: pytest.fail("an engine was built"))
    with pytest.raises(ValueError, match=message):
        Translator(MODELS / "nonexistent", threads=1, inter_threads=value)  # refused before the path is read


def test_the_gpu_backend_runs_one_lane():
    with pytest.raises(ValueError, match="inter_threads=2: the cuda backend runs one lane; pass inter_threads=1"):
        lanes.check_inter_threads(2, "cuda", None)
    assert lanes.check_inter_threads(1, "cuda", None) == 1


def test_a_draft_policy_object_is_not_shared_by_lanes():
    from pyfastdec.decoding.policies import FixedDraftLength
    with pytest.raises(ValueError, match="one draft_policy object cannot learn for 2 lanes at once"):
        Translator(MODELS / "en-de", MODELS / "en-de-drafter", threads=1, inter_threads=2,
                   draft_policy=FixedDraftLength(4, [4]))


def test_a_lane_made_after_the_first_call_learns_its_own_costs():
    t = Translator(MODELS / "en-de", threads=1, inter_threads=2)
    t.translate(SOURCES[:4], batch_size=4, algo="blockwise")  # one batch: the owner's policy, no copy yet
    assert t._heads_policy is not None and len(t._lanes.lanes) == 1
    t.translate(SOURCES, batch_size=4, algo="blockwise")
    assert len(t._lanes.lanes) == 2 and t._lanes.lanes[1]._heads_policy not in (None, t._heads_policy)


def test_an_interrupt_waits_for_the_other_lanes():
    """Ctrl-C while lane 0 waits for another lane's batch: the interrupt comes out once
    that lane has finished; no lane outlives the call (one still in the engine when the
    interpreter exits aborts the process)."""
    t = Translator(MODELS / "en-de", threads=1, inter_threads=2)
    real, release = Translator._decode_batch, threading.Event()

    def held(self, units, opts):
        if threading.current_thread() is not threading.main_thread():
            release.wait(5)  # the other lane is still at work when the interrupt comes
        return real(self, units, opts)

    Translator._decode_batch = held
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        threading.Timer(0.6, release.set).start()
        with pytest.raises(KeyboardInterrupt):
            t.translate(SOURCES[:4], batch_size=2)
        assert release.is_set()  # raised only after the other lane was let go
        assert not [th for th in threading.enumerate() if th.name.startswith("fastdec-lane")]
    finally:
        Translator._decode_batch = real


def test_a_translator_is_freed_by_del_and_makes_no_more_copies_than_batches():
    t = Translator(MODELS / "en-de", threads=1, inter_threads=3)
    t.translate(SOURCES[:8], batch_size=4)  # two batches: one copy is enough
    assert len(t._lanes.lanes) == 2
    gone = weakref.ref(t)
    gc.disable()  # freed by reference counting, not left to the cycle collector
    try:
        del t
        assert gone() is None
    finally:
        gc.enable()
