"""Tiny models and vocabularies for tests and smoke runs (seconds, no shared data).

Shapes are deliberately uneven per layer (different heads and FFN sizes) so tests
exercise the per-layer configuration that pruned models rely on.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from .modeling import LayerSpec, ModelConfig, Seq2Seq
from .vocab import train_vocab

TINY_VOCAB = 40
_WORDS = ("a man woman dog child girl boy red blue green ball street water park runs "
          "plays sits walks jumps in on with the near two three small big").split()


def synthetic_sentences(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + " ." for _ in range(n)]


def tiny_spm(path: str | Path, vocab_size: int = TINY_VOCAB) -> Path:
    train_vocab(synthetic_sentences(), path, vocab_size)
    return Path(path)


def tiny_config(arch: str = "transformer", decoder_self: str = "attention", norm: str = "pre",
                vocab_size: int = TINY_VOCAB, block_size: int | None = None) -> ModelConfig:
    return ModelConfig(
        arch=arch, d_model=16, head_dim=4, vocab_size=vocab_size, norm=norm,
        encoder_layers=[LayerSpec(2, 24), LayerSpec(4, 32)],
        decoder_layers=[LayerSpec(4, 16), LayerSpec(2, 40)],
        decoder_self=decoder_self, max_source_len=64,
        block_size=block_size if block_size is not None else (4 if arch == "nat-drafter" else None),
    )


def tiny_model(seed: int = 0, **kw) -> Seq2Seq:
    """A randomly initialised tiny model with a non-zero output bias and sharpened logits,
    so argmax ties (which would make equality tests flaky) are practically impossible."""
    torch.manual_seed(seed)
    model = Seq2Seq(tiny_config(**kw))
    with torch.no_grad():
        model.output.bias.normal_(0.0, 0.5)
        for name, p in model.named_parameters():
            if name.endswith("ln_ffn.bias") or name.endswith("final_ln.bias"):
                p.normal_(0.0, 0.2)
    return model.eval()


def random_sources(n: int, vocab_size: int = TINY_VOCAB, seed: int = 0, eos: int = 3) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, vocab_size) for _ in range(rng.randint(1, 9))] + [eos] for _ in range(n)]
