"""Decoding to exactly L output tokens on pyfastdec and on CTranslate2, for speed
comparisons on random-weight models (bench.marian_base).

A random-weight model stops at arbitrary points, and each engine's int8 scheme makes it
stop at different ones; timing them as they stop would compare different amounts of
work. Both engines are therefore made to emit exactly L tokens per row, the same way:
EOS is never chosen, and decoding stops at the length limit.

- CTranslate2: `min_decoding_length = max_decoding_length = L` (its own options: below
  the minimum length it masks EOS's logit, at the maximum it stops).
- pyfastdec: `max_decoding_length = L` on a Translator whose model runs with EOS in its
  `suppress` list (export/FORMAT.md: the engine adds -inf to those output biases at
  load). The model directory format refuses EOS in `suppress`, since a real model would
  then always run to its limit; here that is the point, so the loaded, validated
  ModelDir is copied with EOS added in memory, nothing on disk changes. The cost is the
  same as CTranslate2's mask: one bias entry, and every greedy step still runs the full
  output layer and argmax over the vocabulary.

Both take sentencepiece pieces, so no engine's text handling (sentence splitting,
detokenisation) is timed: pyfastdec appends EOS to piece input itself; CTranslate2's
Marian models expect it in the pieces (its documented `convert_ids_to_tokens(encode())`
input), so it is appended here.
"""
from __future__ import annotations

import dataclasses
import os

from pyfastdec.api import Translator
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.result import DecodeStats
from pyfastdec.model_dir import ModelDir

CT2_MARIAN_EOS = "</s>"


def eos_suppressed(model_dir: ModelDir) -> ModelDir:
    """`model_dir` (validated) with its EOS added to config.suppress, in memory only."""
    cfg = model_dir.config
    eos = cfg.tokens["eos"]
    suppress = cfg.suppress if eos in cfg.suppress else cfg.suppress + (eos,)
    return dataclasses.replace(model_dir, config=dataclasses.replace(cfg, suppress=suppress))


class ForcedLengthTranslator(Translator):
    """pyfastdec's Translator whose greedy decoding emits exactly `length` tokens per row."""

    def __init__(self, model: str | os.PathLike, threads: int, compute_type: str = "int8"):
        super().__init__(model, threads=threads, compute_type=compute_type, shortlist=False)
        # Replaces the verifier built from the directory as stored (freed here), so the
        # timed calls go through Translator.translate unchanged.
        self.verifier = NativeBackend(eos_suppressed(self.model_dir), threads=self.threads, shortlist=False)

    def decode(self, batch: list[list[str]], length: int) -> tuple[list[list[str]], DecodeStats]:
        """Greedy over one batch of source pieces: (output pieces per row, stats)."""
        return self.translate(batch, algo="greedy", batch_size=len(batch), max_decoding_length=length,
                              return_stats=True)


def ct2_decode(translator, batch: list[list[str]], length: int, max_batch_size: int = 0) -> list[list[str]]:
    """CTranslate2 greedy over one batch of source pieces of a Marian model converted by
    TransformersConverter: exactly `length` output pieces per row. max_batch_size: its
    sub-batch size (with inter_threads > 1 its workers decode sub-batches in parallel)."""
    results = translator.translate_batch([pieces + [CT2_MARIAN_EOS] for pieces in batch], beam_size=1,
                                         min_decoding_length=length, max_decoding_length=length,
                                         max_batch_size=max_batch_size)
    return [r.hypotheses[0] for r in results]
