"""bench.iad_python on the shipped correction model (a few seconds): the replayed runs
give greedy's outputs, and a replay asked other tokens than the recorded run's stops
instead of timing another run.

    pytest bench/test_iad_python.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import iad_python
from pyfastdec.backends.base import Want

MODEL = Path(__file__).resolve().parent.parent / "models" / "uk-gec"
TEXTS = ["Я хочу пити каву з молоко.", "Він пішов до магазін.", "Мама мила раму.",
         "Сьогодні гарна погода, але завтра буде дощ.", "Це речення не має помилок.", "вона прийшла додому пізно"]


@pytest.fixture(scope="module")
def model():
    import sentencepiece as spm

    from pyfastdec.backends.native import NativeBackend

    if not (MODEL / "config.json").is_file():
        pytest.skip(f"{MODEL} not found")
    sp = spm.SentencePieceProcessor(model_file=str(MODEL / "spm.model"))
    return NativeBackend(MODEL, threads=1), [sp.encode(t) + [sp.eos_id()] for t in TEXTS]


@pytest.mark.parametrize("batch", [1, 4])
def test_replays_give_greedys_outputs(model, batch):
    from pyfastdec.decoding import greedy

    backend, sources = model
    batches = [sources[i:i + batch] for i in range(0, len(sources), batch)]
    outs, steps, times = iad_python.replayed_iad(backend, batches, repeats=2)
    assert [o for b in outs for o in b] == greedy(backend, sources)[0]
    assert steps >= len(batches) and len(times) == 2


def test_a_replay_asked_other_tokens_stops(model):
    backend, sources = model
    recorder = iad_python.Recorder(backend)
    state = recorder.start(recorder.encode(sources[:1]))
    recorder.step(state, np.array([[backend.tokens["bos"]]]), Want())
    replay = iad_python.Replay(recorder)
    with pytest.raises(RuntimeError, match="other tokens"):
        replay.step(None, np.array([[backend.tokens["eos"]]]), None)
