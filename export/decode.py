"""Reference decoding with the PyTorch models: greedy, beam search, drafter blocks.

Batched over sentences with padding masks; the decoder runs incrementally (KV cache or
SSRU state, see decoder_cache.DecoderCache). These are the references the native engine and
the decoding strategies are checked against, so clarity wins over speed.

Conventions shared with the engine: source ids are the sentencepiece ids followed by
EOS; the target starts with BOS at position 0; a hypothesis ends at EOS (not returned).
"""
from __future__ import annotations

import torch

from pyfastdec.decoding.limits import default_max_len  # noqa: F401  (one rule: the engine's default limit)
from pyfastdec.training.batches import pad_batch  # noqa: F401  (export/ imports it from here)

from .modeling import Seq2Seq


def _batches(n: int, order: list[int], batch_size: int):
    for i in range(0, n, batch_size):
        yield order[i : i + batch_size]


@torch.no_grad()
def greedy(model: Seq2Seq, sources: list[list[int]], batch_size: int = 64, max_len: int | None = None) -> list[list[int]]:
    """Greedy translations (ids without BOS/EOS) of source id lists (each ending in EOS)."""
    model.eval()
    device = model.output.bias.device  # a model trained on a GPU is evaluated there
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # similar lengths batch well
    results: list[list[int]] = [[] for _ in sources]
    for idx in _batches(len(sources), order, batch_size):
        src = pad_batch([sources[i] for i in idx], model.pad).to(device)
        memory, keep = model.encode(src)
        cache = model.start_cache(memory, keep)
        limits = torch.tensor([max_len or default_max_len(len(sources[i])) for i in idx], device=device)
        rows = torch.arange(len(idx), device=device)  # positions in idx of still-live rows
        out = [[] for _ in idx]
        tokens = torch.full((len(idx), 1), model.bos, dtype=torch.long, device=device)
        for t_step in range(int(limits.max())):
            h = model.decode_step(tokens, cache)
            nxt = model.logits(h[:, -1]).argmax(-1)
            done = (nxt == model.eos) | (limits[rows] <= t_step + 1)
            for r, t in zip(rows.tolist(), nxt.tolist()):
                if t != model.eos:
                    out[r].append(t)
            live = ~done
            if not bool(live.any()):
                break
            if not bool(live.all()):
                cache.select(live.nonzero().squeeze(1))
                rows, nxt = rows[live], nxt[live]
            tokens = nxt.unsqueeze(1)
        for r, i in enumerate(idx):
            results[i] = out[r]
    return results


@torch.no_grad()
def beam_search(model: Seq2Seq, sources: list[list[int]], beam: int = 5, batch_size: int = 16,
                max_len: int | None = None, length_penalty: float = 1.0, return_scores: bool = False):
    """Beam search with length normalisation: score = sum log p / len^length_penalty
    (len counts EOS). Finished hypotheses leave the beam; a sentence stops when its best
    finished score beats what any live hypothesis could still reach (scores only fall).
    Returns the best hypotheses, with return_scores also their normalised scores.
    """
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list[int]] = [[] for _ in sources]
    scores = [0.0 for _ in sources]
    for idx in _batches(len(sources), order, batch_size):
        for i, (score, hyp) in zip(idx, _beam_batch(model, [sources[i] for i in idx], beam, max_len, length_penalty)):
            results[i], scores[i] = hyp, score
    return (results, scores) if return_scores else results


def _beam_batch(model, sources, beam, max_len, alpha):
    b = len(sources)
    src = pad_batch(sources, model.pad)
    memory, keep = model.encode(src)
    # Every sentence gets `beam` rows; row s*beam + j is hypothesis j of sentence s.
    expand = torch.arange(b).repeat_interleave(beam)
    cache = model.start_cache(memory[expand], keep[expand])
    limits = [max_len or default_max_len(len(s)) for s in sources]
    limit = max(limits)
    scores = torch.full((b, beam), float("-inf"))
    scores[:, 0] = 0.0  # all rows start identical: only one may expand at step 0
    hyps = [[[] for _ in range(beam)] for _ in range(b)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    active = torch.ones(b, dtype=torch.bool)
    tokens = torch.full((b * beam, 1), model.bos, dtype=torch.long)
    vocab = model.cfg.vocab_size
    for step in range(limit):
        logp = torch.log_softmax(model.logits(model.decode_step(tokens, cache)[:, -1]).float(), -1)
        total = (scores.view(-1, 1) + logp).view(b, beam * vocab)
        top_scores, top_idx = total.topk(2 * beam, dim=-1)  # 2*beam: some may end at EOS
        new_scores = torch.full((b, beam), float("-inf"))
        parents = torch.zeros((b, beam), dtype=torch.long)
        new_tokens = torch.full((b, beam), model.pad, dtype=torch.long)
        new_hyps = [[[] for _ in range(beam)] for _ in range(b)]
        for s in range(b):
            if not active[s]:
                continue
            filled = 0
            for rank, (sc, ix) in enumerate(zip(top_scores[s].tolist(), top_idx[s].tolist())):
                if sc == float("-inf") or filled == beam:
                    break
                parent, tok = divmod(ix, vocab)
                seq = hyps[s][parent]
                if tok == model.eos:
                    # As in fairseq: an EOS candidate finishes only if it ranks within the
                    # beam; so beam 1 is exactly greedy.
                    if rank < beam:
                        finished[s].append((sc / (len(seq) + 1) ** alpha, seq))
                    continue
                new_scores[s, filled], parents[s, filled], new_tokens[s, filled] = sc, parent, tok
                new_hyps[s][filled] = seq + [tok]
                filled += 1
            best_done = max((f[0] for f in finished[s]), default=float("-inf"))
            # Live hypotheses can only lose log-prob; bound with the longest possible length.
            best_live = new_scores[s].max().item()
            bound = best_live / (limits[s] + 1) ** alpha if best_live < 0 else best_live
            if step == limits[s] - 1:  # out of length: live hypotheses count as finished
                for j in range(filled):
                    finished[s].append((new_scores[s, j].item() / (len(new_hyps[s][j]) + 1) ** alpha, new_hyps[s][j]))
                active[s] = False
            elif len(finished[s]) >= beam or filled == 0 or best_done >= bound:
                active[s] = False
        if not bool(active.any()):
            break
        scores, hyps = new_scores, new_hyps
        scores[~active] = float("-inf")
        rows = (torch.arange(b).unsqueeze(1) * beam + parents).view(-1)
        cache.select(rows)
        tokens = new_tokens.view(-1, 1)
    return [max(f, key=lambda x: x[0]) if f else (float("-inf"), []) for f in finished]


@torch.no_grad()
def draft_block(model: Seq2Seq, sources: list[list[int]], prefixes: list[list[int]], k: int | None = None):
    """Drafter prediction of the next k tokens after each accepted prefix.

    Returns (ids [B,k], logprobs [B,k]) of the argmax at each of the k mask positions.
    """
    model.eval()
    src = pad_batch(sources, model.pad)
    memory, keep = model.encode(src)
    logp = torch.log_softmax(model.draft_logits(memory, keep, prefixes, k).float(), -1)
    best = logp.max(-1)
    return best.indices, best.values
