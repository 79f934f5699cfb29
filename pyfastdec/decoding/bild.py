"""Big-little decoding (BiLD; Kim et al. 2023) over one shared encoder.

A little autoregressive model (config.json encoder.shared: it reads the big model's
encoder output, so one encoder pass serves both) decodes while it is confident: while
its top-1 probability stays at or above `fallback`. Then the big model runs ONE step
over every little token since the last check (draft_verify.py) and rolls back to the
first little token that is too far from its own distribution, continuing with its own
token there (or after the last little token, when none is rejected):
- rollback = 0 (lossless): a little token is kept only if it is the big model's argmax,
  so the output is exactly the big model's greedy output (speculative decoding with an
  autoregressive drafter);
- rollback = r > 0 (lossy, the paper's rule): a little token y is kept while the big
  model's cross-entropy against it, -log p_big(y), is at most r (or y is its argmax).
  p_big(y) >= exp(-r) puts y among the big model's floor(exp(r)) most likely tokens,
  which is how the step is asked for it (top-k); r is at most ln(64).
The little token at which confidence fell is not drafted: the big model's token takes
its place (the paper's fallback). A draft is also cut after `max_draft` tokens and at EOS.

Both models' states roll back exactly (KV caches and SSRU states are kept per position,
so truncating forgets every rejected token). The little model's state is synchronised
lazily from the accepted output: before drafting, it is fed, in one multi-token step,
whatever the big model accepted that it does not hold yet (its rejected token's
replacement, or the tokens of plain greedy runs).

Rows advance independently at batch > 1. A draft-or-plain policy (policies/draft_or_plain.py)
switches to plain greedy steps of the big model where drafting does not pay for itself
(little steps are sequential: at large batches they may cost more than they save). The
policy may decide a call whole: a call of one sentence drafts every iteration or runs
greedy, as its measurements of whole sentences say, and a call of many rows runs greedy
where plain steps have won at every batch size it will pass through.
"""
from __future__ import annotations

import math
import time

import numpy as np

from pyfastdec.backends.base import Backend, StepOut, Want

from .policies import DraftOrPlain
from .draft_verify import DraftSource, _prefix_length, accept_argmax, draft_and_verify
from .greedy import greedy
from .result import DecodeStats

MAX_ROLLBACK = math.log(64)  # the engine's largest top-k
DEFAULT_FALLBACK = 0.5
DEFAULT_ROLLBACK = 1.0  # nats; lossy BiLD's rollback when the little model's config.json gives none
DEFAULT_MAX_DRAFT = 10
_TOP1 = Want(argmax=False, topk=1)


def accept_rollback(rollback: float):
    """BiLD's rollback rule as an acceptance rule (draft_verify.AcceptRule): keep a little
    token while it is the big model's top-1 or its log-prob under the big model is at
    least -rollback; the big model's top-1 follows the kept tokens."""

    def accept(out: StepOut, drafts: np.ndarray, lengths: np.ndarray):
        ids, logp = out.topk_ids[:, :-1, :], out.topk_logprobs[:, :-1, :]
        hit = ids == drafts[:, :, None]
        close = (hit & (logp >= -rollback)).any(axis=2) | (ids[:, :, 0] == drafts)
        j = _prefix_length(close, lengths)
        return j, out.topk_ids[np.arange(len(j)), j, 0]

    return accept


class _LittleDrafts(DraftSource):
    """Drafts from the little model (a draft_verify.DraftSource). Per live row, `held`
    is how many positions of the little state are valid (BOS included): BOS followed by
    the first held - 1 accepted output tokens; the rest of the accepted output is fed
    at the next draft. Positions past `held` (rejected tokens, padding) are truncated
    before the next step."""

    def __init__(self, little: Backend, rows: int, fallback: float, max_draft: int, stats: DecodeStats,
                 policy: DraftOrPlain | None):
        self.little, self.max_draft, self.stats, self.policy = little, max_draft, stats, policy
        self.min_logprob = math.log(fallback) if fallback > 0 else -math.inf
        self.rows = rows
        self.bos, self.eos, self.pad = (little.tokens[t] for t in ("bos", "eos", "pad"))
        self.state = None  # made when the first draft is asked for (a batch never drafted costs no attach)
        self.host = None  # (big backend, its memory of all rows), until then
        self.live = np.arange(rows)  # input index of each live row
        self.held = np.zeros(rows, dtype=np.int64)
        self.after_catch_up = self.fed = self.held  # per row, set by propose
        self.started = 0.0  # when the current iteration's drafting began
        self.steady = False  # that iteration drafted as a drafting run does (no attach, short catch-up)
        self.measured = None  # (rows, tokens) of that iteration, timed when the next one starts

    def verifier_encoded(self, verifier: Backend, memory) -> None:
        self.host = (verifier, memory)

    def _start(self) -> None:
        """The little model's state over the live rows (none of their output fed yet)."""
        verifier, memory = self.host
        with self.stats.timing("drafter"):
            if len(self.live) < self.rows:  # rows finished in plain runs before the first draft
                memory = verifier.select(memory, self.live)
            self.state = self.little.start(self.little.attach(memory))
        self.host = None

    def plain_steps(self) -> int:
        if self.policy is None:
            return 0
        if self.measured is not None:  # the last drafting iteration ends here: all of it is its cost
            rows, tokens = self.measured
            self.policy.drafted(rows, tokens, time.perf_counter() - self.started)
            self.measured = None
        return self.policy.plain_steps(len(self.held))

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        self.policy.plain_ran(rows, steps, seconds)

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        self.started = started = time.perf_counter()
        fresh = self.state is None
        if fresh:
            self._start()
        else:  # positions past `held` (rejected tokens, padding) go before the catch-up
            self.state = self.little.truncate(self.state, self.held)
        # Catch up: feed what was accepted since the state's last valid position.
        pending = [[self.bos] + p if h == 0 else p[h - 1:] for p, h in zip(prefixes, self.held.tolist())]
        widths = np.array([len(t) for t in pending], dtype=np.int64)
        tokens = np.full((len(pending), int(widths.max())), self.pad, dtype=np.int64)
        for r, t in enumerate(pending):
            tokens[r, :len(t)] = t
        # 2: a fully accepted draft's last token and the big model's
        self.steady = not fresh and tokens.shape[1] <= 2
        self.after_catch_up = self.held + widths
        native = self.little.draft_greedy  # backends/base.py: None where the backend has no such loop
        if native is not None:  # the loop of _draft, in one engine call
            ids, counts, self.fed = native(self.state, tokens, widths, self.max_draft, self.min_logprob)
            drafts = [row[:n].tolist() for row, n in zip(ids, counts.tolist())]
        else:
            drafts = self._draft(tokens, widths)
        self.stats.drafter_s += time.perf_counter() - started
        return drafts

    def _draft(self, tokens: np.ndarray, widths: np.ndarray) -> list[list[int]]:
        """Catch-up step, then one little step per drafted token while confident; sets fed."""
        little, rows = self.little, len(widths)
        out = little.step(self.state, tokens, _TOP1)
        cand = out.topk_ids[np.arange(rows), widths - 1, 0].tolist()
        conf = out.topk_logprobs[np.arange(rows), widths - 1, 0].tolist()
        if widths.min() < tokens.shape[1]:  # padding positions must not precede the drafted tokens
            self.state = little.truncate(self.state, self.after_catch_up)
        drafts: list[list[int]] = [[] for _ in range(rows)]
        fed = [0] * rows
        active = list(range(rows))
        while True:
            feeding = []
            for r in active:
                if conf[r] < self.min_logprob:
                    continue  # fallback: the big model decides this position
                drafts[r].append(cand[r])
                if cand[r] != self.eos and len(drafts[r]) < self.max_draft:
                    feeding.append(r)
            active = feeding
            if not active:
                break
            step_tokens = np.full((rows, 1), self.pad, dtype=np.int64)
            for r in active:
                step_tokens[r, 0] = drafts[r][-1]
                fed[r] += 1
            out = little.step(self.state, step_tokens, _TOP1)
            cand = out.topk_ids[:, 0, 0].tolist()
            conf = out.topk_logprobs[:, 0, 0].tolist()
        self.fed = np.asarray(fed, dtype=np.int64)
        return drafts

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float, out) -> None:
        # Valid little positions: the catch-up, then the fed draft tokens the big model kept.
        self.held = self.after_catch_up + np.minimum(accepted, self.fed)
        if self.policy is not None and self.steady:
            self.measured = (len(accepted), int(accepted.sum()) + len(accepted))

    def keep(self, rows: np.ndarray) -> None:
        if self.state is not None:
            with self.stats.timing("drafter"):
                self.state = self.little.select(self.state, rows)
        self.held, self.live = self.held[rows], self.live[rows]


def check_little(big: Backend, little: Backend) -> None:
    """The little model must be autoregressive, read a shared encoder and speak the big
    model's vocabulary (which encoder: model_dir.check_shared_encoder, where directories
    are paired)."""
    name = little.model_dir.path if little.model_dir is not None else "the little model"
    if little.arch != "transformer":
        raise ValueError(f"BiLD: {name}: arch {little.arch!r} (expected an autoregressive "
                         f"'transformer' as the little model)")
    if not little.shares_encoder:
        raise ValueError(f"BiLD: {name}: config.json encoder.shared is absent (the little model must read the "
                         f"big model's encoder output)")
    if little.vocab_size != big.vocab_size or little.tokens != big.tokens:
        raise ValueError(f"BiLD: {name}: vocab_size/tokens {little.vocab_size}/{little.tokens} differ from the big "
                         f"model's {big.vocab_size}/{big.tokens}")


def bild(big: Backend, little: Backend, src_ids: list[list[int]], fallback: float = DEFAULT_FALLBACK,
         rollback: float = 0.0, max_draft: int = DEFAULT_MAX_DRAFT, max_len: int | None = None,
         policy: DraftOrPlain | None = None) -> tuple[list[list[int]], DecodeStats]:
    """BiLD outputs (ids without BOS/EOS, input order) and statistics; see the module
    docstring. fallback in [0, 1]: the little model drafts while its top-1 probability is
    at least this (0: always, up to max_draft); rollback in [0, ln 64]: 0 is lossless
    (= big's greedy). policy: switch to plain big-model steps where drafting does not pay
    (keep one across calls so it learns); None always drafts."""
    if not 0.0 <= fallback <= 1.0:
        raise ValueError(f"BiLD: fallback must be a probability in [0, 1], got {fallback}")
    if not 0.0 <= rollback <= MAX_ROLLBACK:
        raise ValueError(f"BiLD: rollback must be in [0, ln 64 = {MAX_ROLLBACK:.3f}] nats, got {rollback}")
    if int(max_draft) < 1:
        raise ValueError(f"BiLD: max_draft must be >= 1, got {max_draft}")
    check_little(big, little)
    stats = DecodeStats(sentences=len(src_ids))
    if not src_ids:
        return [], stats
    if rollback > 0:
        accept, want = accept_rollback(float(rollback)), Want(argmax=False, topk=int(math.exp(rollback)))
    else:
        accept, want = accept_argmax, Want(argmax=True)
    if policy is not None:
        policy.begin_call(len(src_ids))  # it may decide the whole call (policies/draft_or_plain.py)
    if policy is not None and policy.call_mode == "plain" and rollback == 0:
        # greedy itself, not draft_and_verify's plain steps: no setup, no drafting state
        outs, stats = greedy(big, src_ids, max_len)
    else:
        with stats.total():
            source = _LittleDrafts(little, len(src_ids), float(fallback), int(max_draft), stats, policy)
            outs = draft_and_verify(big, src_ids, source, accept, want, max_len, stats)
    if policy is not None:
        policy.end_call(stats.generated, stats.total_s - stats.encoder_s)
    return outs, stats
