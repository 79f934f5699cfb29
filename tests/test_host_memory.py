"""export/host_memory.py: the frozen host encoder's rows, kept per training sentence, give
what encoding the batch afresh gives, whatever batch and padding a sentence comes in."""
import torch

from export.batching import BucketBatcher
from export.host_memory import HostMemory
from export.tiny_task import task_sources, trained_shared, translate

torch.set_num_threads(1)


def test_kept_rows_equal_a_fresh_encoding_in_any_batch():
    model = trained_shared("little").eval()
    pairs = [(s[:-1], translate(s)) for s in task_sources(60, seed=3)]
    batcher = BucketBatcher(pairs, 120, model.pad, model.bos, model.eos)
    memory = HostMemory(model)
    calls = []
    encode = model.host.encode
    model.host.encode = lambda src: calls.append(src.shape[0]) or encode(src)
    try:
        for epoch in range(3):  # other batch compositions each epoch: rows come from other batches
            for key, idx in batcher.epoch(epoch):
                batch = batcher.make(key, idx)
                got, keep = memory.encode(idx, batch.src)
                want, want_keep = encode(batch.src)
                assert torch.equal(keep, want_keep)
                assert torch.allclose(got[keep], want[keep], atol=1e-5), (epoch, idx)
                assert not got[~keep].any()  # padding is zeros, never another sentence's rows
    finally:
        model.host.encode = encode
    assert sum(calls) == len(pairs)  # each sentence encoded once, at its first batch
    # a different padding of the same sentence reads the same rows
    (key, idx), = [b for b in batcher.epoch(0) if len(b[1]) > 1][:1]
    wider = torch.nn.functional.pad(batcher.make(key, idx).src, (0, 5), value=model.pad)
    got, keep = memory.encode(idx, wider)
    want, _ = encode(wider)
    assert got.shape == want.shape and torch.allclose(got[keep], want[keep], atol=1e-5)
