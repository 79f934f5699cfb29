"""Batching helpers shared by the training code here and export/: padded id tensors,
decoding in batches of similar length, and appending to a text file across interrupted
runs."""
from __future__ import annotations

from pathlib import Path

import torch


def pad_batch(seqs: list[list[int]], pad: int) -> torch.Tensor:
    length = max((len(s) for s in seqs), default=1)
    out = torch.full((len(seqs), max(length, 1)), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def by_length(decode_batch, ids: list[list[int]], batch: int) -> list[list[int]]:
    """decode_batch (a list of sources -> their outputs) over batches of sources of
    similar length (little padding), the outputs in input order."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[list[int]] = [[] for _ in ids]
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        for i, o in zip(rows, decode_batch([ids[i] for i in rows])):
            out[i] = o
    return out


def complete_lines(out: Path) -> int:
    """Number of complete lines in `out`; a torn last line is cut off."""
    if not out.exists():
        return 0
    data = out.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(out, "r+b") as f:
            f.truncate(end)
    return data[:end].count(b"\n")
