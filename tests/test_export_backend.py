"""The torch reference backend: incremental stepping equals full-sequence forwards."""
import numpy as np
import pytest
import torch

from export.modeling import SSRU
from export.tiny import random_sources, tiny_model
from export.torch_backend import TorchBackend
from pyfastdec.backends.base import Backend, Want

torch.set_num_threads(1)
BOS, EOS = 2, 3
AR_KINDS = [dict(), dict(norm="post"), dict(decoder_self="ssru"), dict(decoder_self="ssru", norm="post")]
IDS = ["attn-pre", "attn-post", "ssru-pre", "ssru-post"]


def full_logprobs(model, src, tgt_in):
    """Non-incremental reference: one forward over the whole target prefix."""
    from export.decode import pad_batch

    with torch.no_grad():
        logits = model(pad_batch([src], 0), torch.tensor([tgt_in]))
    return torch.log_softmax(logits.float(), -1)[0].numpy()


def test_backend_satisfies_protocol():
    assert isinstance(TorchBackend(tiny_model()), Backend)


@pytest.mark.parametrize("kind", AR_KINDS, ids=IDS)
def test_greedy_steps_equal_full_forward_argmax(kind):
    model = tiny_model(**kind)
    be = TorchBackend(model)
    srcs = random_sources(3, seed=1)
    state = be.start(be.encode(srcs))
    tokens = np.full((3, 1), BOS)
    hyps = [[BOS] for _ in srcs]
    for _ in range(12):
        out = be.step(state, tokens, Want(argmax=True))
        tokens = out.argmax[:, -1:]
        for h, t in zip(hyps, tokens[:, 0]):
            h.append(int(t))
    for src, hyp in zip(srcs, hyps):
        ref = full_logprobs(model, src, hyp[:-1]).argmax(-1)
        assert ref.tolist() == hyp[1:]


@pytest.mark.parametrize("kind", AR_KINDS, ids=IDS)
def test_step_n_equals_n_single_steps(kind):
    be = TorchBackend(tiny_model(**kind))
    srcs = random_sources(2, seed=2)
    mem = be.encode(srcs)
    seq = np.array([[BOS, 7, 9, 11, 5, 6], [BOS, 12, 8, 8, 20, 30]])
    one = be.start(mem)
    singles = [be.step(one, seq[:, i : i + 1], Want(logprobs=True)).logprobs for i in range(seq.shape[1])]
    block = be.step(be.start(mem), seq, Want(logprobs=True)).logprobs
    np.testing.assert_allclose(block, np.concatenate(singles, 1), atol=1e-5)


@pytest.mark.parametrize("kind", AR_KINDS, ids=IDS)
def test_truncate_then_step_equals_never_appended(kind):
    be = TorchBackend(tiny_model(**kind))
    mem = be.encode(random_sources(2, seed=3))
    want = Want(argmax=True, topk=3, ids=np.array([[5, 6], [7, 8]]), logprobs=True)
    # Row 0 keeps BOS 10 11 (3 positions), row 1 keeps BOS 12 (2): different lengths per row.
    rolled = be.start(mem)
    be.step(rolled, np.array([[BOS, 10, 11, 30, 31], [BOS, 12, 33, 34, 35]]), Want())
    be.truncate(rolled, np.array([3, 2]))
    got = be.step(rolled, np.array([[20, 21], [22, 23]]), want)
    for row, prefix, new in [(0, [BOS, 10, 11], [20, 21]), (1, [BOS, 12], [22, 23])]:
        fresh_be = be.select(mem, np.array([row]))
        fresh = be.start(fresh_be)
        be.step(fresh, np.array([prefix]), Want())
        ref = be.step(fresh, np.array([new]), Want(argmax=True, topk=3, ids=want.ids[row : row + 1], logprobs=True))
        np.testing.assert_allclose(got.logprobs[row], ref.logprobs[0], atol=1e-5)
        np.testing.assert_array_equal(got.argmax[row], ref.argmax[0])
        np.testing.assert_array_equal(got.topk_ids[row], ref.topk_ids[0])
        np.testing.assert_allclose(got.id_logprobs[row], ref.id_logprobs[0], atol=1e-5)
    assert rolled.lengths.tolist() == [5, 4]


def test_want_fields_are_consistent():
    be = TorchBackend(tiny_model())
    state = be.start(be.encode(random_sources(2, seed=4)))
    out = be.step(state, np.array([[BOS, 9, 10], [BOS, 11, 12]]),
                  Want(argmax=True, topk=4, ids=np.array([[9, 10, 11], [5, 5, 5]]), logprobs=True))
    assert out.argmax.shape == (2, 3) and out.topk_ids.shape == (2, 3, 4) and out.logprobs.shape == (2, 3, be.vocab_size)
    np.testing.assert_array_equal(out.topk_ids[..., 0], out.argmax)
    np.testing.assert_allclose(np.exp(out.logprobs).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out.id_logprobs[0], out.logprobs[0, [0, 1, 2], [9, 10, 11]], atol=1e-6)
    assert be.step(state, np.array([[5], [6]]), Want(argmax=False)).argmax is None


def test_select_reorders_rows_and_leaves_original():
    be = TorchBackend(tiny_model(decoder_self="ssru"))
    mem = be.encode(random_sources(3, seed=5))
    state = be.start(mem)
    be.step(state, np.array([[BOS, 5], [BOS, 6], [BOS, 7]]), Want())
    sub = be.select(state, np.array([2, 0]))
    a = be.step(sub, np.array([[9], [9]]), Want(logprobs=True)).logprobs
    b = be.step(state, np.array([[9], [9], [9]]), Want(logprobs=True)).logprobs
    np.testing.assert_allclose(a, b[[2, 0]], atol=1e-6)


def test_ssru_incremental_equals_full_sequence():
    torch.manual_seed(0)
    ssru = SSRU(8)
    x = torch.randn(3, 10, 8)
    h_full, c_full = ssru(x)
    h1, c1 = ssru(x[:, :4])
    h2, c2 = ssru(x[:, 4:], c1[:, -1])
    torch.testing.assert_close(torch.cat([h1, h2], 1), h_full)
    torch.testing.assert_close(torch.cat([c1, c2], 1), c_full)
    # The recurrence itself, written out for one step.
    w, wf, bf = ssru.w.weight, ssru.wf.weight, ssru.wf.bias
    f0 = torch.sigmoid(x[:, 0] @ wf.T + bf)
    torch.testing.assert_close(c_full[:, 0], (1 - f0) * (x[:, 0] @ w.T))
    f1 = torch.sigmoid(x[:, 1] @ wf.T + bf)
    torch.testing.assert_close(c_full[:, 1], f1 * c_full[:, 0] + (1 - f1) * (x[:, 1] @ w.T))
    torch.testing.assert_close(h_full, torch.relu(c_full))


def test_drafter_block_shapes_and_masking():
    model = tiny_model(arch="nat-drafter")
    be = TorchBackend(model)
    srcs = random_sources(3, seed=6)
    mem = be.encode(srcs)
    prefixes = [[], [7, 8, 9], [10]]
    d = be.draft(mem, prefixes, 4)
    assert d.ids.shape == (3, 4) and d.logprobs.shape == (3, 4)
    assert d.ids.dtype == np.int64 and (d.logprobs <= 0).all()
    assert be.draft(mem, prefixes).ids.shape == (3, model.cfg.block_size)
    # Batched drafting equals drafting each row alone (padding never leaks in).
    for r in range(3):
        alone = be.draft(be.select(mem, np.array([r])), [prefixes[r]], 4)
        np.testing.assert_array_equal(alone.ids[0], d.ids[r])
        np.testing.assert_allclose(alone.logprobs[0], d.logprobs[r], atol=1e-5)
    with pytest.raises(ValueError, match="no incremental decoder"):
        be.start(mem)


def test_drafter_mask_lets_prefix_be_cached():
    m = model = tiny_model(arch="nat-drafter")
    mask = m.block_mask(torch.tensor([2]), 3, 7)[0, 0]  # BOS p1 p2 M M M pad
    expect = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1, 0],
        [1, 0, 0, 0, 0, 0, 0],
    ], dtype=torch.bool)
    assert torch.equal(mask, expect)
    # Prefix hidden states do not depend on the block size (engine may cache them).
    src = torch.tensor([random_sources(1, seed=7)[0]])
    mem, keep = model.encode(src)
    with torch.no_grad():
        hs = []
        for k in (2, 5):
            ids, lens = model.block_inputs([[7, 8]], k, 2, 4, 0)
            hs.append(model.decode_full(ids, mem, keep, model.block_mask(lens, k, ids.shape[1]))[0, :3])
    torch.testing.assert_close(hs[0], hs[1])
