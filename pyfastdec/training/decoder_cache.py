"""The incremental decoder state of the PyTorch reference (modeling.py): per-layer
self-attention K/V (or SSRU c) per position and row, and the batch's cross-attention K/V,
with the roll-back (truncate) and row selection the decoding strategies need."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # modeling imports this module; the model is only a type here
    from .modeling import Seq2Seq


class LayerCache:
    """One decoder layer's self-attention K/V (or SSRU c) per position, per row.

    Rows may hold different numbers of positions (`lengths`), so new entries are
    scattered at each row's own offset; entries past a row's length are stale and masked.
    Keeping c for every position makes rolling an SSRU back as cheap as a KV cache.
    """

    def __init__(self, owner: "DecoderCache"):
        self.owner = owner
        self.k = self.v = self.c = None

    def _ensure(self, name, shape_tail, dtype):
        cap = self.owner.capacity
        cur = getattr(self, name)
        b = self.owner.lengths.shape[0]
        if cur is None:
            cur = torch.zeros((b, cap) + tuple(shape_tail), dtype=dtype)
        elif cur.shape[1] < cap:
            cur = torch.cat([cur, cur.new_zeros((b, cap - cur.shape[1]) + tuple(shape_tail))], 1)
        setattr(self, name, cur)
        return cur

    def write_kv(self, k, v):
        """k, v [B,H,n,hd] of the new positions -> full caches [B,H,Tcap,hd]."""
        b, h, n, hd = k.shape
        kc = self._ensure("k", (h, hd), k.dtype)
        vc = self._ensure("v", (h, hd), v.dtype)
        rows, pos = self.owner.write_index(n)
        kc[rows, pos] = k.transpose(1, 2)
        vc[rows, pos] = v.transpose(1, 2)
        return kc.transpose(1, 2), vc.transpose(1, 2)

    def ssru_state(self):
        d = self.owner.d_model
        cc = self._ensure("c", (d,), torch.float32)
        last = (self.owner.lengths - 1).clamp(min=0)
        state = cc[torch.arange(cc.shape[0]), last]
        return torch.where((self.owner.lengths > 0).unsqueeze(-1), state, torch.zeros_like(state))

    def write_ssru(self, cs):
        rows, pos = self.owner.write_index(cs.shape[1])
        self.c[rows, pos] = cs

    def select(self, rows):
        for name in ("k", "v", "c"):
            t = getattr(self, name)
            if t is not None:
                setattr(self, name, t[rows])


class DecoderCache:
    """Decoder state of a batch: per-layer caches, cross-attention K/V, per-row lengths.

    lengths[b] = number of decoder positions held for row b, BOS included.
    """

    def __init__(self, model: "Seq2Seq", memory: torch.Tensor, src_keep: torch.Tensor):
        self.d_model = model.cfg.d_model
        self.lengths = torch.zeros(memory.shape[0], dtype=torch.long)
        self.capacity = 0
        self.src_keep = src_keep
        self.cross = [layer.cross_attn.project_kv(memory) for layer in model.decoder.layers]
        self.layers = [LayerCache(self) for _ in model.decoder.layers]

    def reserve(self, n: int):
        need = int(self.lengths.max()) + n if self.lengths.numel() else n
        if need > self.capacity:
            self.capacity = max(need, 2 * self.capacity, 16)

    def write_index(self, n: int):
        rows = torch.arange(self.lengths.shape[0]).unsqueeze(1)
        return rows, self.lengths.unsqueeze(1) + torch.arange(n)

    def self_mask(self, n: int) -> torch.Tensor:
        """[B,1,n,Tcap]: new position i of row b (absolute lengths[b]+i) sees keys 0..lengths[b]+i."""
        _, pos = self.write_index(n)
        return (torch.arange(self.capacity).view(1, 1, -1) <= pos.unsqueeze(-1)).unsqueeze(1)

    def truncate(self, lengths: torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.long)
        if bool((lengths > self.lengths).any()) or bool((lengths < 0).any()):
            raise ValueError(f"truncate: lengths {lengths.tolist()} outside 0..{self.lengths.tolist()}")
        self.lengths = lengths.clone()

    def select(self, rows: torch.Tensor):
        """Keep only `rows` (in that order), in place."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        self.lengths = self.lengths[rows]
        self.src_keep = self.src_keep[rows]
        self.cross = [(k[rows], v[rows]) for k, v in self.cross]
        for layer in self.layers:
            layer.select(rows)

    def selected(self, rows: torch.Tensor) -> "DecoderCache":
        """A new cache holding `rows` of this one; this cache is left unchanged."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        new = object.__new__(DecoderCache)
        new.d_model, new.capacity = self.d_model, self.capacity
        new.lengths, new.src_keep = self.lengths[rows], self.src_keep[rows]
        new.cross = [(k[rows], v[rows]) for k, v in self.cross]
        new.layers = []
        for layer in self.layers:
            copy = LayerCache(new)
            for name in ("k", "v", "c"):
                t = getattr(layer, name)
                setattr(copy, name, None if t is None else t[rows])
            new.layers.append(copy)
        return new
