"""Training batches, loss and accuracy for the GAD block drafter ("nat-drafter").

Each training row shows the drafter the source, a random-length gold prefix and k mask
tokens, and asks for the next k target tokens (Xia et al. 2022, trained on distilled
targets). Layout per row, for target y' = y + [EOS] and prefix length m drawn uniformly
from 0..len(y')-1: [BOS, y'_1..y'_m, <mask> x k, pad...]; the targets at the k mask
positions are y'_{m+1..m+k}, padded (ignored) past EOS. The input length is the target
bucket length + k, so shapes stay fixed per bucket like AT training.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .batching import Batch
from .decode import pad_batch
from .modeling import Seq2Seq


def block_batch(model: Seq2Seq, batch: Batch, k: int, gen: torch.Generator):
    """-> (ids [B, T+k], self_mask [B,1,T+k,T+k], positions [B,k], targets [B,k])."""
    tgt = batch.tgt_out  # y + EOS, pad-padded to the bucket length T
    b, t = tgt.shape
    lengths = (tgt != model.pad).sum(1)  # len(y')
    m = (torch.rand(b, generator=gen).to(tgt.device) * lengths).long()  # 0 .. len(y') - 1
    padded = torch.cat([tgt, tgt.new_full((b, k), model.pad)], 1)  # [B, T+k]
    shifted = torch.cat([tgt.new_full((b, 1), model.bos), padded[:, :-1]], 1)  # column j holds y'_j
    cols = torch.arange(t + k, device=tgt.device).unsqueeze(0)
    ids = torch.where(cols <= m.unsqueeze(1), shifted, torch.full_like(shifted, model.pad))  # BOS + prefix
    masks = (cols > m.unsqueeze(1)) & (cols <= (m + k).unsqueeze(1))
    ids = torch.where(masks, torch.full_like(ids, model.mask_id), ids)
    steps = torch.arange(k, device=tgt.device)
    positions = (m + 1).unsqueeze(1) + steps
    targets = padded.gather(1, m.unsqueeze(1) + steps)
    return ids, model.block_mask(m, k, t + k), positions, targets


def block_loss(model: Seq2Seq, batch: Batch, k: int, label_smoothing: float, gen: torch.Generator,
               encoded=None):
    """(summed label-smoothed loss, number of target tokens) for one batch. encoded:
    (memory, keep) of batch.src when already known (a frozen host's, export/host_memory.py)."""
    ids, mask, positions, targets = block_batch(model, batch, k, gen)
    memory, keep = encoded if encoded is not None else model.encode(batch.src)
    h = model.decode_full(ids, memory, keep, mask)
    h = h[torch.arange(h.shape[0], device=h.device).unsqueeze(1), positions]
    logits = model.logits(h).float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=model.pad,
                           label_smoothing=label_smoothing, reduction="sum")
    return loss, int((targets != model.pad).sum())


@torch.no_grad()
def block_accuracy(model: Seq2Seq, pairs: list[tuple[list[int], list[int]]], k: int, batch_size: int = 64) -> float:
    """Percentage of drafted tokens equal to the reference, over every block start m
    (prefix = gold y'_1..y'_m, m = 0, k, 2k, ...), up to and including EOS."""
    model.eval()
    right = total = 0
    jobs = []
    for s, t in pairs:
        y = t + [model.eos]
        jobs += [(s, y[:m], y[m : m + k]) for m in range(0, len(y), k)]
    for i in range(0, len(jobs), batch_size):
        chunk = jobs[i : i + batch_size]
        memory, keep = model.encode(pad_batch([s + [model.eos] for s, _, _ in chunk], model.pad))
        pred = model.draft_logits(memory, keep, [p for _, p, _ in chunk], k).argmax(-1)
        for row, (_, _, gold) in enumerate(chunk):
            right += sum(int(a == b) for a, b in zip(pred[row].tolist(), gold))
            total += len(gold)
    return 100.0 * right / max(total, 1)
