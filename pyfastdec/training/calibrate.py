"""Offline calibration of int8 activation multipliers (Edinburgh WMT22 recipe).

For the input A of every quantized linear, run the float model teacher-forced over a
calibration set in batches, record max|A| per batch, and store the multiplier
127 / (mean + 1.1 * std) of those maxima: a little above the typical maximum, so most
batches are not clipped while rare outliers do not waste the int8 range. The rule is
pyfastdec/convert/calibration.py's activation_multiplier, which `fastdec convert int8`
applies too.

A NAT drafter is run as GAD runs it: gold prefixes of length 0, k, 2k, ... followed by k
mask tokens, so its decoder's scales come from the inputs it sees at inference.

Proposal heads (heads.{i}.fc1 / fc2) run on the final decoder state of every real
(non-padding) target position: at inference they run at one accepted position per row,
which may be any of them. Every head's fc1 reads the same state, so all get the same
multiplier (the engine runs each head on its own, so it would take different ones).
"""
from __future__ import annotations

import torch

from pyfastdec.convert.calibration import activation_multiplier

from .batches import pad_batch
from .modeling import Seq2Seq
from .writer import quantized_linears


@torch.no_grad()
def calibrate(model: Seq2Seq, pairs: list[tuple[list[int], list[int]]], batch_size: int = 16) -> dict[str, float]:
    """pairs: (source ids, target ids), without BOS/EOS. Returns linear name -> multiplier."""
    model.eval()
    names = quantized_linears(model)
    modules = dict(model.named_modules())
    maxima: dict[str, list[float]] = {n: [] for n in names}
    current: dict[str, float] = {}

    def make_hook(name):
        def hook(_mod, args):
            current[name] = max(current.get(name, 0.0), float(args[0].abs().max()))
        return hook

    handles = [modules[n].register_forward_pre_hook(make_hook(n)) for n in names]
    drafter = model.cfg.arch == "nat-drafter"
    if drafter:  # one job per drafted block, as GAD asks for them
        k = model.cfg.block_size
        pairs = [(s, y[:m]) for s, t in pairs for y in [t + [model.eos]] for m in range(0, len(y), k)]
    try:
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # little padding per batch
        for i in range(0, len(order), batch_size):
            chunk = [pairs[j] for j in order[i : i + batch_size]]
            src = pad_batch([s + [model.eos] for s, _ in chunk], model.pad)
            current.clear()
            if drafter:
                memory, keep = model.encode(src)
                model.draft_logits(memory, keep, [prefix for _, prefix in chunk], k)
            else:
                tgt_in = pad_batch([[model.bos] + t for _, t in chunk], model.pad)
                memory, keep = model.encode(src)
                states = model.decode_full(tgt_in, memory, keep)
                model.logits(states)  # the same calls as model(src, tgt_in)
                if hasattr(model, "heads"):  # BOS and the targets by length: Marian's BOS is its pad id
                    lengths = torch.tensor([len(t) + 1 for _, t in chunk])
                    real = torch.arange(tgt_in.shape[1])[None, :] < lengths[:, None]
                    model.heads(states[real])
            for n in names:
                if n in current:
                    maxima[n].append(current[n])
    finally:
        for h in handles:
            h.remove()
    scales = {}
    for n in names:
        vals = torch.tensor(maxima[n], dtype=torch.float64)
        if vals.numel() == 0:
            raise ValueError(f"calibration never reached linear {n}")
        std = vals.std(unbiased=False) if vals.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
        # The package's rule; the mean and std stay torch's, whose float64 sums these
        # multipliers were always computed with.
        scales[n] = activation_multiplier(float(vals.mean()), float(std))
    return scales
