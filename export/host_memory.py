"""The frozen host encoder's output of each training sentence, computed once.

export.train_shared trains a decoder over another model's encoder, which never changes
(eval mode, no gradient). Encoding every batch again made the encoder the largest part
of a step for a deep host: the teacher's 6 layers of FFN 1024 cost about as much as the
output layer's 8,000-way softmax and several times the slim little decoder. Each
sentence is encoded at its first batch and its rows kept (float32: the same numbers a
fresh encoding gives, up to the rounding of another batch shape); ~0.5 GB for the 29,000
Multi30k training sentences.
"""
from __future__ import annotations

import torch

from .modeling import Seq2Seq


class HostMemory:
    def __init__(self, model: Seq2Seq):
        self.model = model  # a shared-encoder model (its encode runs the host's encoder)
        self.rows: dict[int, torch.Tensor] = {}  # sentence index -> [length + EOS, d_model]

    def encode(self, idx: list[int], src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(memory [B, S, d], keep [B, S]) of the batch of sentences `idx` whose padded ids
        are `src`, as model.encode(src) returns them (padding positions: zeros)."""
        keep = src != self.model.pad
        lengths = keep.sum(dim=1).tolist()
        missing = [r for r, i in enumerate(idx) if i not in self.rows]
        if missing:
            fresh, _ = self.model.encode(src[missing])
            for r, row in zip(missing, fresh):
                self.rows[idx[r]] = row[:lengths[r]].clone()
        memory = torch.zeros(src.shape[0], src.shape[1], self.model.cfg.d_model, device=src.device)
        for r, i in enumerate(idx):
            memory[r, :lengths[r]] = self.rows[i]
        return memory, keep
