"""Prunable groups of a Seq2Seq and slicing them away (Behnke & Heafield 2021; Edinburgh's
WMT22 submission, Bogoychev et al. 2022).

A group is everything one attention head or one FFN unit owns, so that removing it
removes exactly its contribution and nothing else:
- attention head j of a layer: rows j*hd .. (j+1)*hd-1 of q, k, v (weights and biases)
  and the same columns of o (o's bias stays: it belongs to no head);
- FFN unit i: row i of fc1 (weight and bias) and column i of fc2.
A decoder layer has one head count for its self- and cross-attention (export/FORMAT.md),
so decoder head j is one group over both: self head j (if the self sublayer is attention)
and cross head j. The SSRU, layer norms, embeddings and output bias are never pruned.

Zeroing a group makes the network compute exactly what it computes with the group sliced
out: a head with zero q/k/v rows has v = 0 and o's columns are zero, and a unit with zero
fc1 row and bias has act(0) = 0 for relu, swish and gelu alike. slice_model relies on this
(tests/test_prune.py checks it against the zeroed model).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from .modeling import LayerSpec, ModelConfig, MultiHeadAttention, Seq2Seq

KINDS = ("enc_heads", "enc_ffn", "dec_heads", "dec_ffn")


@dataclass
class GroupSet:
    """The groups of one kind in one layer: `count` heads or FFN units."""

    kind: str          # one of KINDS
    stack: str         # "encoder" | "decoder"
    layer: int
    count: int
    size: int          # parameters per group (the group-lasso weight is sqrt(size))
    modules: tuple     # the attentions (heads) or the FFN (units) it spans

    @property
    def name(self) -> str:
        return f"{self.stack}.layers.{self.layer}.{'heads' if self.kind.endswith('heads') else 'ffn'}"

    def _head_views(self):
        """Per attention: q/k/v weight [h, hd*d], biases [h, hd], o weight [d, h, hd]."""
        for attn in self.modules:
            h, hd = attn.heads, attn.head_dim
            for p in (attn.q, attn.k, attn.v):
                yield p.weight.view(h, -1), 1
                yield p.bias.view(h, hd), 1
            yield attn.o.weight.view(attn.o.weight.shape[0], h, hd), 0

    def _ffn_views(self):
        ffn = self.modules[0]
        yield ffn.fc1.weight, 1      # [f, d]: group i = row i
        yield ffn.fc1.bias[:, None], 1
        yield ffn.fc2.weight.t(), 1  # [f, d]: group i = column i of fc2

    def _views(self):
        return self._head_views() if self.kind.endswith("heads") else self._ffn_views()

    @torch.no_grad()
    def norms(self) -> torch.Tensor:
        """L2 norm of each group's parameters, [count]."""
        total = torch.zeros(self.count)
        for view, _ in self._views():
            if view.dim() == 3:  # o: [d, h, hd] -> per head
                total += view.pow(2).sum((0, 2))
            else:
                total += view.pow(2).flatten(1).sum(1)
        return total.sqrt()

    @torch.no_grad()
    def scale(self, factors: torch.Tensor) -> None:
        """Multiply each group's parameters by its factor (in place)."""
        for view, _ in self._views():
            if view.dim() == 3:
                view.mul_(factors[None, :, None])
            else:
                view.mul_(factors.view(-1, *([1] * (view.dim() - 1))))


def group_sets(model: Seq2Seq) -> list[GroupSet]:
    """Every prunable group set of the model, encoder first, layer by layer."""
    cfg = model.cfg
    d, hd = cfg.d_model, cfg.head_dim
    sets = []
    for i, layer in enumerate(model.encoder.layers if model.encoder is not None else []):  # None: shared
        h = layer.self_attn.heads
        sets.append(GroupSet("enc_heads", "encoder", i, h, 4 * hd * d + 3 * hd, (layer.self_attn,)))
        sets.append(GroupSet("enc_ffn", "encoder", i, cfg.encoder_layers[i].ffn, 2 * d + 1, (layer.ffn,)))
    for i, layer in enumerate(model.decoder.layers):
        attns = tuple(m for m in (getattr(layer, "self_attn", None), layer.cross_attn)
                      if isinstance(m, MultiHeadAttention))
        h = layer.cross_attn.heads
        sets.append(GroupSet("dec_heads", "decoder", i, h, len(attns) * (4 * hd * d + 3 * hd), attns))
        sets.append(GroupSet("dec_ffn", "decoder", i, cfg.decoder_layers[i].ffn, 2 * d + 1, (layer.ffn,)))
    return sets


def _slice_attention(attn: MultiHeadAttention, keep: torch.Tensor) -> None:
    hd = attn.head_dim
    rows = (keep[:, None] * hd + torch.arange(hd)).flatten()
    for name in ("q", "k", "v"):
        lin = getattr(attn, name)
        new = nn.Linear(lin.in_features, len(rows))
        new.weight.data, new.bias.data = lin.weight.data[rows].clone(), lin.bias.data[rows].clone()
        setattr(attn, name, new)
    new_o = nn.Linear(len(rows), attn.o.out_features)
    new_o.weight.data, new_o.bias.data = attn.o.weight.data[:, rows].clone(), attn.o.bias.data.clone()
    attn.o = new_o
    attn.heads = len(keep)


def _slice_ffn(ffn, keep: torch.Tensor) -> None:
    fc1 = nn.Linear(ffn.fc1.in_features, len(keep))
    fc1.weight.data, fc1.bias.data = ffn.fc1.weight.data[keep].clone(), ffn.fc1.bias.data[keep].clone()
    fc2 = nn.Linear(len(keep), ffn.fc2.out_features)
    fc2.weight.data, fc2.bias.data = ffn.fc2.weight.data[:, keep].clone(), ffn.fc2.bias.data.clone()
    ffn.fc1, ffn.fc2 = fc1, fc2


@torch.no_grad()
def slice_model(model: Seq2Seq, removed: dict[str, list[int]]) -> Seq2Seq:
    """A copy of `model` without the groups in `removed` (GroupSet.name -> group indices),
    with per-layer head counts and FFN sizes in its config. Every layer keeps at least
    one head and one unit (an empty sublayer has no representation in the format)."""
    out = copy.deepcopy(model)
    cfg: ModelConfig = out.cfg
    enc = [LayerSpec(s.heads, s.ffn) for s in cfg.encoder_layers]
    dec = [LayerSpec(s.heads, s.ffn) for s in cfg.decoder_layers]
    for gs in group_sets(out):
        gone = sorted(set(removed.get(gs.name, [])))
        if any(not 0 <= g < gs.count for g in gone):
            raise ValueError(f"{gs.name}: removed index outside 0..{gs.count - 1}: {gone}")
        keep = torch.tensor([g for g in range(gs.count) if g not in gone], dtype=torch.long)
        if len(keep) == 0:
            raise ValueError(f"{gs.name}: every group removed; a layer keeps at least one")
        spec = (enc if gs.stack == "encoder" else dec)[gs.layer]
        if gs.kind.endswith("heads"):
            for attn in gs.modules:
                _slice_attention(attn, keep)
            spec.heads = len(keep)
        else:
            _slice_ffn(gs.modules[0], keep)
            spec.ffn = len(keep)
    cfg.encoder_layers, cfg.decoder_layers = enc, dec
    cfg.__post_init__()
    return out


def group_lasso_prox(sets: list[GroupSet], strength: dict[str, float], lr: float,
                     removed: dict[str, set[int]]) -> None:
    """One proximal step of the penalty sum_g strength[kind] * sqrt(size_g) * ||theta_g||:
    theta_g *= max(0, 1 - lr * strength * sqrt(size_g) / ||theta_g||), which sets a group
    exactly to zero once the shrinkage exceeds its norm. Groups already removed are held
    at zero (their Adam updates would otherwise revive them)."""
    for gs in sets:
        lam = strength.get(gs.kind, 0.0)
        gone = removed.get(gs.name, set())
        if lam <= 0 and not gone:
            continue
        norms = gs.norms()
        factors = torch.ones(gs.count)
        if lam > 0:
            shrink = lr * lam * math.sqrt(gs.size)
            factors = torch.clamp(1.0 - shrink / norms.clamp(min=1e-12), min=0.0)
        for g in gone:
            factors[g] = 0.0
        gs.scale(factors)
