"""Upper bounds of the size options (beam size, n-best, draft block, batch size, GAD++
beta, CLI workers): one table that the API (Translator.translate raises ValueError) and
the CLI (argparse refuses the value before anything loads; --help states the bound)
both read, so they never disagree.

Why each bound:
- beam_size <= 32: beam search asks the engine for the top 2 * beam_size candidates per
  row (decoding/beam.py) and the engine's top-k is bounded by ENGINE_MAX_TOPK.
- n_best <= beam_size: a beam of B keeps at most B hypotheses.
- beta <= 64: GAD++ asks the engine for the verifier's top-beta.
- block <= 32: a draft of k tokens makes the verifier score k + 1 positions per row and
  the drafter attend over k masks, so memory grows with k (measured on the packaged
  En-De at batch 1000: 0.9 GB at k = 16, 1.6 GB at k = 32, 2.6 GB at k = 64; k = 20000
  at batch 1 takes 3.6 GB), while acceptance falls geometrically with the position: the
  GAD paper's longest block is 25, and our drafters are trained for 4 to 10.
- batch_size <= 1024: memory is per row (KV caches, logits); 1000 sentences in one
  batch take 0.4 GB greedy, and larger batches gain no speed on a CPU.
- workers <= 256: each worker process loads its own copy of the models.
Threads are bounded where the native thread pool is created (runtime.py), not here.
"""
from __future__ import annotations

import operator

ENGINE_MAX_TOPK = 64  # kMaxTopK in csrc/bind_model.cc; tests/test_size_limits.py checks the engine agrees

MAX_BEAM_SIZE = ENGINE_MAX_TOPK // 2
MAX_N_BEST = MAX_BEAM_SIZE
MAX_BETA = ENGINE_MAX_TOPK
MAX_BLOCK = 32
MAX_BATCH_SIZE = 1024
MAX_WORKERS = 256


def check_size(name: str, value, maximum: int) -> int:
    """`value` as an int in [1, maximum]; TypeError for a non-integer, ValueError naming
    `name` and the bound otherwise."""
    try:
        number = operator.index(value)  # ints and numpy integers; not floats, strings or None
    except TypeError:
        raise TypeError(f"{name} must be an integer in [1, {maximum}], got {value!r}") from None
    if isinstance(value, bool) or not 1 <= number <= maximum:
        raise ValueError(f"{name} must be in [1, {maximum}], got {value!r}")
    return number
