"""Shared by the GPU model's tests (test_gpu_reference.py on the reference ops, any CPU;
test_cuda_*.py on a GPU): real sentences, the CPU engine in float32 on the very weights
the GPU model loads, and the agreement rule between two greedy decodings.

Agreement rule (fp16 on the GPU may flip near-ties): two outputs agree if equal, or if at
the first position where they differ the reference's top-2 log-probs there are within
NEAR_TIE of each other (the reference could have gone either way). Only exact equality is
expected of the float32 reference ops; the rule is for CUDA's fp16.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from pyfastdec.backends.base import Want
from pyfastdec.backends.cuda import float_tensors
from pyfastdec.backends.native import NativeBackend, engine_config
from pyfastdec.model_dir import ModelDir
from pyfastdec.runtime import _engine

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
NEAR_TIE = 0.05  # nats between the reference's top-2 at the first differing position


def uk_gec_texts(count: int) -> list[str]:
    """The first `count` UA-GEC test sources: from the ua-gec package, or where it is not
    installed (the device machine) from the file FASTDEC_UAGEC_HEAD names, which
    tools/device/prepare.sh writes from the package here."""
    head = os.environ.get("FASTDEC_UAGEC_HEAD")
    if head and importlib.util.find_spec("ua_gec") is None:
        lines = Path(head).read_text(encoding="utf-8").splitlines()
        assert len(lines) >= count, f"{head}: {len(lines)} sentences, {count} asked for"
        return lines[:count]
    from test_real_sentences import uagec_test_head
    return uagec_test_head(count)


def sentences(model: str, count: int) -> list[list[int]]:
    """The first `count` test sentences of the model's task (Multi30k test 2016 English,
    or UA-GEC test sources for uk-gec), as ids + EOS."""
    from test_real_sentences import encode

    from export.data import load_pairs

    texts = (uk_gec_texts(count) if model == "uk-gec"
             else [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[:count]])
    backend = NativeBackend(MODELS / model, threads=1)
    return encode(backend, MODELS / model, texts)


def cpu_float32(model: str | Path, threads: int = 2) -> NativeBackend:
    """The CPU engine in float32 over the dequantised weights the GPU model loads (an int8
    directory's q * weight_scale), with the directory's shortlist."""
    backend = NativeBackend(MODELS / model if isinstance(model, str) else model, threads=threads)
    cfg = engine_config(backend.config)
    cfg["quantization"] = None
    backend._model = _engine.Model(cfg, float_tensors(backend.model_dir), {}, threads)
    return backend


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_gap(backend, source: list[int], prefix: list[int]) -> float:
    """The reference's log-prob gap between its top-2 after BOS + prefix."""
    bos = backend.tokens["bos"]
    state = backend.start(backend.encode([source]))
    out = backend.step(state, np.array([[bos] + list(prefix)]), Want(argmax=False, topk=2))
    lp = out.topk_logprobs[0, -1]
    return float(lp[0] - lp[1])


def agreement(reference, outputs_ref, outputs, sources) -> tuple[int, list[tuple[int, float]]]:
    """(equal outputs, [(row, top-2 gap) of each difference]); a difference with a gap
    above NEAR_TIE breaks the rule."""
    equal, gaps = 0, []
    for row, (a, b, s) in enumerate(zip(outputs_ref, outputs, sources)):
        at = first_difference(a, b)
        if at is None:
            equal += 1
        else:
            gaps.append((row, top2_gap(reference, s, a[:at])))
    return equal, gaps
