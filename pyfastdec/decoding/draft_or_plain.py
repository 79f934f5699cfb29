"""Whether a draft-then-verify strategy drafts at all, from measured costs (BiLD).

A little autoregressive drafter costs one little-model step per drafted token, so
drafting pays only where those steps plus one wider verification cost less per output
token than plain greedy steps of the big model: at batch 1 (a call is mostly fixed
overhead) it usually does; at batch 32 (compute-bound GEMMs) it may not. This policy
measures both, as seconds per output token of a row, and answers draft_and_verify's
plain_steps(): 0 (draft this iteration) or a run of plain greedy steps.

Costs are kept per batch-size bucket (1, 2-3, 4-7, ...: a Translator sees both batch 1
and large batches, whose costs differ by an order of magnitude), as exponential moving
averages; the first iterations of a bucket try drafting, then one plain run, and the
slower mode is probed again now and then so a changed machine load is noticed. Outputs
never depend on the choice: drafts are verified against the big model either way.
"""
from __future__ import annotations


class _Bucket:
    __slots__ = ("draft", "plain", "drafts", "plains", "since_probe")

    def __init__(self):
        self.draft = self.plain = 0.0  # seconds per row-token (EMA); valid once counted
        self.drafts = self.plains = 0
        self.since_probe = 0


class DraftOrPlain:
    """run: plain steps per run (a run is one decision); probe_every: decisions in the
    cheaper mode between two tries of the other; smoothing: the EMA's weight of a new
    measurement."""

    EXPLORE_DRAFTS = 2  # drafting iterations measured before the first plain run

    def __init__(self, run: int = 8, probe_every: int = 16, smoothing: float = 0.2):
        if run < 1 or probe_every < 1 or not 0 < smoothing <= 1:
            raise ValueError("DraftOrPlain: run and probe_every must be >= 1, smoothing in (0, 1]")
        self.run, self.probe_every, self.smoothing = run, probe_every, smoothing
        self.buckets: dict[int, _Bucket] = {}
        self.rows = 1
        self.chosen: list[str] = []  # recent decisions ("draft" / "plain"), for statistics and tests

    def _bucket(self, rows: int) -> _Bucket:
        return self.buckets.setdefault(max(rows, 1).bit_length(), _Bucket())

    def set_rows(self, rows: int) -> None:
        """The live rows of the next decision."""
        self.rows = rows

    def plain_steps(self) -> int:
        b = self._bucket(self.rows)
        if b.drafts < self.EXPLORE_DRAFTS:
            choice = "draft"
        elif b.plains == 0:
            choice = "plain"
        else:
            cheaper = "plain" if b.plain < b.draft else "draft"
            b.since_probe += 1
            if b.since_probe >= self.probe_every:
                b.since_probe, choice = 0, ("draft" if cheaper == "plain" else "plain")
            else:
                choice = cheaper
        self.chosen.append(choice)
        if len(self.chosen) > 20_000:
            del self.chosen[:10_000]
        return self.run if choice == "plain" else 0

    def _add(self, b: _Bucket, kind: str, per_token: float) -> None:
        count = getattr(b, kind + "s")
        old = getattr(b, kind)
        setattr(b, kind, per_token if count == 0 else old + self.smoothing * (per_token - old))
        setattr(b, kind + "s", count + 1)

    def drafted(self, rows: int, tokens: int, seconds: float) -> None:
        """A drafting iteration: little steps plus verification took `seconds` and gave
        `tokens` output tokens over `rows` rows."""
        if tokens > 0:
            self._add(self._bucket(rows), "draft", seconds / tokens)

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        if steps > 0:
            self._add(self._bucket(rows), "plain", seconds / (rows * steps))
