"""Drafter training rows: BOS + gold prefix + k masks, targets = the next k tokens."""
import torch

from export.batching import Batch
from export.drafter_training import block_accuracy, block_batch, block_loss
from export.tiny import random_sources, tiny_model

torch.set_num_threads(1)
PAD, BOS, EOS, MASK = 0, 2, 3, 4


def test_block_batch_layout():
    model = tiny_model(arch="nat-drafter")
    ys = [[10, 11, 12, 13, 14], [20], [30, 31, 32]]
    t = 8
    tgt_out = torch.full((3, t), PAD)
    for r, y in enumerate(ys):
        tgt_out[r, : len(y) + 1] = torch.tensor(y + [EOS])
    batch = Batch(torch.tensor(random_sources(3)[0]).repeat(3, 1), tgt_out.clone(), tgt_out, 0, 0)
    k = 3
    seen_m = set()
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        ids, mask, pos, targets = block_batch(model, batch, k, gen)
        assert ids.shape == (3, t + k) and mask.shape == (3, 1, t + k, t + k)
        for r, y in enumerate(ys):
            full = y + [EOS]
            m = int(pos[r, 0]) - 1
            assert 0 <= m < len(full)
            seen_m.add((r, m))
            expect = [BOS] + full[:m] + [MASK] * k
            assert ids[r].tolist() == expect + [PAD] * (t + k - len(expect))
            gold = full[m : m + k]
            assert targets[r].tolist() == gold + [PAD] * (k - len(gold))
    assert len({m for r, m in seen_m if r == 0}) > 3  # prefix lengths really vary
    loss, n = block_loss(model, batch, k, 0.1, gen)
    assert loss.item() > 0 and n > 0


def test_block_accuracy_range():
    model = tiny_model(arch="nat-drafter")
    pairs = [(s[:-1], s[:-1][::-1]) for s in random_sources(5, seed=3)]
    acc = block_accuracy(model, pairs, 3)
    assert 0.0 <= acc <= 100.0
