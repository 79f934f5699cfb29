"""A tiny verifier and drafter TRAINED for a few seconds on a synthetic task, for the
decoding tests.

Random models are no test of lossless decoding: they emit one token over and over
whatever the input, and a random drafter's drafts are never accepted, so a strategy that
keeps a rejected token in the verifier's cache, or accepts one token too many, still
returns greedy's (constant) output. The task here (translate()) has structure: outputs
mostly copy the source, as in correction or a close translation, with word
substitutions, deletions, doublings and swaps of neighbours (local reordering: what comes
next depends on context). A verifier trained briefly on it gives outputs that differ from
source to source and depend on what its decoder holds; IAD's copied drafts are partly
right; a drafter trained on the verifier's own greedy outputs gets some drafts right and
others wrong. Both models are imperfect on purpose (seconds of training): the tests assert
greedy = GAD = IAD, not task accuracy (tests/test_decoding_support.py checks the rest).

Training is seeded and single-threaded, so every run of the suite trains the same models
on the same machine; they are cached per process (the test modules share them).
"""
from __future__ import annotations

import copy
import random
from functools import lru_cache

import torch
import torch.nn.functional as F

from .batching import Batch
from .decode import greedy, pad_batch
from .drafter_training import block_loss
from .modeling import Seq2Seq
from .tiny import TINY_VOCAB, tiny_config
from .warm_start import init_from_teacher

FIRST_WORD = 5  # ids below are pad, unk, bos, eos, mask
EOS = 3
_WORDS = TINY_VOCAB - FIRST_WORD
# A fixed word-to-word mapping (a permutation of the word ids).
_MAP = {w: FIRST_WORD + ((w - FIRST_WORD) * 13 + 7) % _WORDS for w in range(FIRST_WORD, TINY_VOCAB)}


def task_sources(n: int, seed: int, max_words: int = 9) -> list[list[int]]:
    """n sources of 1..max_words word ids + EOS (the shape export.tiny.random_sources has)."""
    rng = random.Random(seed)
    return [[rng.randrange(FIRST_WORD, TINY_VOCAB) for _ in range(rng.randint(1, max_words))] + [EOS]
            for _ in range(n)]


def translate(src: list[int]) -> list[int]:
    """The task's reference output (no EOS): mostly a copy of the source, edited like a
    correction or a close translation: a multiple of 3 becomes another word (_MAP), a
    multiple of 7 is dropped, a multiple of 11 doubled, and a multiple of 5 swaps places
    with the word after it (local reordering: what comes next depends on context)."""
    words = [t for t in src if t != EOS]
    i = 0
    while i < len(words) - 1:
        if words[i] % 5 == 0:
            words[i], words[i + 1] = words[i + 1], words[i]
            i += 1
        i += 1
    out = []
    for w in words:
        if w % 7 == 0:
            continue
        out += [w, w] if w % 11 == 0 else [_MAP[w] if w % 3 == 0 else w]
    return out


def _batch(pairs: list[tuple[list[int], list[int]]], pad: int, bos: int) -> Batch:
    src = pad_batch([s for s, _ in pairs], pad)
    tgt_in = pad_batch([[bos] + t for _, t in pairs], pad)
    tgt_out = pad_batch([t + [EOS] for _, t in pairs], pad)
    return Batch(src, tgt_in, tgt_out, int((src != pad).sum()), int((tgt_out != pad).sum()))


def _train(model: Seq2Seq, pairs, steps: int, loss_fn, seed: int, lr: float, batch_size: int = 32) -> Seq2Seq:
    """Adam with warm-up and linear decay, written out: torch.optim's first use imports
    torch._dynamo (about 2 s), longer than the training itself."""
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    m1, m2 = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    b1, b2 = 0.9, 0.98
    model.train()
    for step in range(1, steps + 1):
        batch = _batch(rng.sample(pairs, batch_size), model.pad, model.bos)
        loss, n = loss_fn(model, batch)
        model.zero_grad(set_to_none=False)
        (loss / n).backward()
        rate = lr * min(1.0, step / 20) * max(0.1, 1 - step / steps)
        with torch.no_grad():
            for p, a, b in zip(params, m1, m2):
                a.lerp_(p.grad, 1 - b1)
                b.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                p.addcdiv_(a / (1 - b1 ** step), (b / (1 - b2 ** step)).sqrt_().add_(1e-8), value=-rate)
    return model.eval()


def _ar_loss(model: Seq2Seq, batch: Batch):
    logits = model(batch.src, batch.tgt_in)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.tgt_out.reshape(-1),
                           ignore_index=model.pad, reduction="sum")
    return loss, batch.n_tgt_tokens


def _quiet(model: Seq2Seq) -> Seq2Seq:
    """pad/unk/bos/mask are never outputs (an untrained corner of the task could pick them)."""
    with torch.no_grad():
        model.output.bias[[0, 1, 2, 4]] = -30.0
    return model


# Steps of 32 pairs. The SSRU verifier and the drafter start from the attention
# verifier's weights (export.warm_start: embeddings, encoder, cross-attention, FFNs), so
# they need a third of its steps.
VERIFIER_STEPS, WARM_STEPS, LR = 300, 100, 2e-2


@lru_cache(maxsize=None)
def _verifier(decoder_self: str) -> Seq2Seq:
    pairs = [(s, translate(s)) for s in task_sources(4000, seed=1000)]
    with _one_thread():
        torch.manual_seed(0)
        model = Seq2Seq(tiny_config(decoder_self=decoder_self))
        if decoder_self == "attention":
            return _quiet(_train(model, pairs, VERIFIER_STEPS, _ar_loss, 0, LR))
        init_from_teacher(model, _verifier("attention").state_dict())
        return _quiet(_train(model, pairs, WARM_STEPS, _ar_loss, 0, LR))


@lru_cache(maxsize=None)
def _drafter() -> Seq2Seq:
    verifier = _verifier("attention")
    sources = task_sources(1000, seed=2000)
    with _one_thread():
        # Distilled like the real drafter: it learns the verifier's own greedy outputs.
        pairs = [(s, o) for s, o in zip(sources, greedy(verifier, sources, batch_size=500))]
        torch.manual_seed(1)
        model = Seq2Seq(tiny_config(arch="nat-drafter"))
        init_from_teacher(model, verifier.state_dict())
        gen = torch.Generator().manual_seed(1)
        k = model.cfg.block_size
        return _quiet(_train(model, pairs, WARM_STEPS, lambda m, b: block_loss(m, b, k, 0.0, gen), 1, LR))


@lru_cache(maxsize=None)
def _shared(kind: str, host_self: str) -> Seq2Seq:
    """A model without an encoder over the verifier `host_self`'s encoder (export.
    train_shared's setup): "drafter", a NAT drafter, or "little", BiLD's one-layer
    autoregressive model (an SSRU decoder over the attention verifier and an attention
    decoder over the SSRU one, so both cache kinds roll back in both roles). Trained on
    the host's greedy outputs, the host frozen."""
    host = _verifier(host_self)
    sources = task_sources(1000, seed=3000)
    with _one_thread():
        pairs = [(s, o) for s, o in zip(sources, greedy(host, sources, batch_size=500))]
        torch.manual_seed(2)
        little_self = "ssru" if host_self == "attention" else "attention"
        cfg = tiny_config(arch="nat-drafter" if kind == "drafter" else "transformer",
                          decoder_self="attention" if kind == "drafter" else little_self)
        cfg.encoder_layers, cfg.encoder_shared = [], "sha256:" + "0" * 64  # the digest: set when written
        if kind == "little":
            cfg.decoder_layers = cfg.decoder_layers[:1]
        model = Seq2Seq(cfg)
        init_from_teacher(model, {k: v for k, v in host.state_dict().items() if not k.startswith("encoder.")})
        model.attach_host(host)
        if kind == "drafter":
            gen = torch.Generator().manual_seed(2)
            loss = lambda m, b: block_loss(m, b, cfg.block_size, 0.0, gen)  # noqa: E731
        else:
            loss = _ar_loss
        return _quiet(_train(model, pairs, WARM_STEPS, loss, 2, LR))


def trained_shared(kind: str, host_self: str = "attention") -> Seq2Seq:
    """A copy of _shared(kind, host_self), attached to its own copy of the host verifier."""
    model = copy.deepcopy(_shared(kind, host_self))
    return model.attach_host(copy.deepcopy(_verifier(host_self)))


def trained_verifier(decoder_self: str = "attention") -> Seq2Seq:
    """A tiny verifier (export.tiny.tiny_config shapes, attention or SSRU decoder) trained
    on translate(); a copy, so callers may change it."""
    return copy.deepcopy(_verifier(decoder_self))


def trained_drafter() -> Seq2Seq:
    """A tiny NAT drafter trained on the greedy outputs of trained_verifier("attention")
    (it drafts for the SSRU verifier too: both learnt the same task); a copy."""
    return copy.deepcopy(_drafter())


class _one_thread:
    """Single-threaded training: reproducible, and the machine's cores are shared."""

    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)
