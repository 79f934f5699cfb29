"""Whether a draft-then-verify strategy drafts at all, from measured costs (BiLD).

A little autoregressive drafter costs one little-model step per drafted token, so
drafting pays only where those steps plus one wider verification cost less per output
token than plain greedy steps of the big model: at batch 1 (a call is mostly fixed
overhead) it usually does; at batch 32 (compute-bound GEMMs) it may not. This policy
measures both, as seconds per output token of a row, and answers draft_and_verify's
plain_steps(): 0 (draft this iteration) or a run of plain greedy steps.

Why not base.py's cost table: the little model, not the policy, decides how long a draft
is (while it stays confident), so there is no draft length to weigh and no line over
token rows to extrapolate; what can be compared is what each mode costs per output
token, as it runs. So the costs here are ratios of moving averages (seconds over
row-tokens) per mode, kept per batch-size bucket (1, 2-3, 4-7, ...: a Translator sees
both batch 1 and large batches, whose costs differ by an order of magnitude); the first
iterations of a bucket try drafting, then one plain run, and the slower mode is probed
again now and then so a changed machine load is noticed (every probe_every decisions,
twice as far apart after each probe that changed nothing, up to MAX_INTERVAL: a probe of
the dearer mode costs, and at batch 32 drafting can cost well over plain steps). A probe
of drafting lasts PROBE_DRAFTS iterations: the first one after plain steps pays a
switching cost (the little model catches up on every token the plain steps produced,
and at a call's first draft it attaches to the encoder output), which the caller leaves
out of the measured drafting cost (bild.py times steady iterations only); what is compared is drafting
as it runs once it runs; a bucket's first drafting iteration (scratch growth, cold
caches) is left out too. That per-iteration measurement is biased at batch 1: plain
runs cover the start of most sentences, so drafting is probed on sentence tails, and the
iteration that ends a sentence is never timed, so drafting looked dearer than it is and
the policy mostly ran plain steps.

So a call of ONE sentence (batch 1, what latency-bound users run) is decided whole: the
caller says where it begins and ends (begin_call, end_call), and the call drafts every
iteration or runs plain (BiLD then runs greedy itself) to its end. Each mode is measured
over whole sentences, start and end included, as seconds of decoding (the encoder left
out) per output token: after one warm-up call of each mode, the first EXPLORE_CALLS
calls of each alternate, then the cheaper mode runs and the other is probed on one call
every probe_every calls (twice as far apart after each probe that changed nothing).
bench/README.md has what this gives against the per-iteration policy.

A call of several rows is decided per iteration, with one exception: once plain steps
were measured cheaper in every bucket the call will pass through, it runs plain to its
end (greedy itself), and only one such call in probe_every is decided per iteration, to
keep measuring. Per-iteration decisions cost where drafting never pays (their probes,
the switch back to drafting and the loop's own overhead), which whole plain calls avoid.

Outputs never depend on the choice: drafts are verified against the big model either way.
"""
from __future__ import annotations

from .base import DraftPolicy


class _Bucket:
    __slots__ = ("seconds", "tokens", "drafts", "plains", "since_probe", "probing", "interval", "probed_from",
                 "warm")

    def __init__(self):
        # Per mode: moving averages of the seconds and of the row-tokens of a measurement;
        # their ratio is the cost per token (a mean of per-iteration ratios would be
        # dominated by iterations whose first drafted token was rejected).
        self.seconds = {"draft": 0.0, "plain": 0.0}
        self.tokens = {"draft": 0.0, "plain": 0.0}
        self.drafts = self.plains = 0
        self.since_probe = 0
        self.probing = 0  # drafting decisions left in the current probe
        self.interval = 0  # decisions between probes (set by the policy; doubles while probes change nothing)
        self.probed_from = ""  # the cheaper mode when the last probe began
        self.warm = False  # the bucket's first drafting measurement was seen (and left out)


class DraftOrPlain(DraftPolicy):
    """run: plain steps per run (a run is one decision); probe_every: decisions in the
    cheaper mode between two tries of the other; smoothing: the EMA's weight of a new
    measurement."""

    EXPLORE_DRAFTS = 4  # drafting iterations measured before the first plain run (after a warm-up one)
    PROBE_DRAFTS = 3  # drafting decisions per probe: the first pays the switch, the rest are measured

    def __init__(self, run: int = 8, probe_every: int = 16, smoothing: float = 0.2):
        if run < 1 or probe_every < 1 or not 0 < smoothing <= 1:
            raise ValueError("DraftOrPlain: run and probe_every must be >= 1, smoothing in (0, 1]")
        super().__init__()
        self.run, self.probe_every, self.smoothing = run, probe_every, smoothing
        self.buckets: dict[int, _Bucket] = {}
        self.calls = _Bucket()  # whole one-sentence calls (begin_call/end_call): their costs per mode
        self.calls.interval = probe_every
        self.calls_warmed: set[str] = set()  # modes whose first (unmeasured) call has run
        self.call_mode: str | None = None  # the mode of a call decided whole (under way), else None
        self.call_rows = 0  # the rows the call under way began with
        self.batch_calls_since_probe = 0  # calls of several rows run as plain since the last probe call

    MAX_INTERVAL = 1024  # decisions between probes at most

    def _bucket(self, rows: int) -> _Bucket:
        b = self.buckets.get(max(rows, 1).bit_length())
        if b is None:
            b = self.buckets[max(rows, 1).bit_length()] = _Bucket()
            b.interval = self.probe_every
        return b

    EXPLORE_CALLS = 4  # one-sentence calls measured per mode before the cheaper one is kept
    WHOLE_CALL = 1 << 30  # plain steps that run a call to its end

    def begin_call(self, rows: int) -> None:
        """A decoding call of `rows` rows begins: one row is decided whole (see the module
        docstring). More rows are decided per iteration, by plain_steps, unless plain steps
        were measured cheaper in every batch-size bucket the call will pass through (its
        rows finish one by one): then the call runs plain to its end too, except one call
        in probe_every, which is decided per iteration so the buckets stay measured."""
        self.call_rows = rows
        if rows == 1:
            self.call_mode = self._call_choice()
        elif not self._plain_everywhere(rows):
            self.call_mode = None
        else:
            self.batch_calls_since_probe += 1
            probe = self.batch_calls_since_probe >= self.probe_every
            if probe:
                self.batch_calls_since_probe = 0
            self.call_mode = None if probe else "plain"

    def _plain_everywhere(self, rows: int) -> bool:
        """Whether every bucket of 1..rows rows has explored both modes and found plain
        steps cheaper."""
        for size in range(1, rows.bit_length() + 1):
            b = self.buckets.get(size)
            if b is None or b.drafts < self.EXPLORE_DRAFTS or b.plains == 0 or \
                    self.cost(b, "plain") >= self.cost(b, "draft"):
                return False
        return True

    def end_call(self, tokens: int, seconds: float) -> None:
        """The call begun last has ended: `tokens` output tokens (EOS included) in `seconds`
        of decoding, the encoder left out."""
        mode, self.call_mode = self.call_mode, None
        if mode is None or tokens <= 0 or self.call_rows != 1:  # whole calls of one row are measured
            return
        if mode not in self.calls_warmed:  # a mode's first call pays one-time costs (scratch, cold caches)
            self.calls_warmed.add(mode)
            return
        self._add(self.calls, mode, seconds, tokens)

    def _call_choice(self) -> str:
        b = self.calls
        if len(self.calls_warmed) < 2:  # one warm-up call of each mode, drafting first
            choice = "plain" if "draft" in self.calls_warmed else "draft"
        elif b.drafts < self.EXPLORE_CALLS or b.plains < self.EXPLORE_CALLS:
            choice = "draft" if b.drafts <= b.plains else "plain"
        else:
            choice, _ = self._cheaper_or_probe(b)
        self.remember(choice)  # "draft" / "plain"
        return choice

    def _cheaper_or_probe(self, b: _Bucket) -> tuple[str, bool]:
        """The cheaper mode of `b`, or the other one when a probe is due: (mode, probe began)."""
        cheaper = "plain" if self.cost(b, "plain") < self.cost(b, "draft") else "draft"
        if b.probed_from:  # a probe just ended: a probe that changed nothing makes the next one later
            b.interval = min(2 * b.interval, self.MAX_INTERVAL) if cheaper == b.probed_from else self.probe_every
            b.probed_from = ""
        b.since_probe += 1
        if b.since_probe < b.interval:
            return cheaper, False
        b.since_probe, b.probed_from = 0, cheaper
        return ("draft" if cheaper == "plain" else "plain"), True

    def plain_steps(self, rows: int) -> int:
        """0 (draft this iteration) or the plain steps to run now, for `rows` live rows."""
        if self.call_mode is not None:  # a call decided whole
            return self.WHOLE_CALL if self.call_mode == "plain" else 0
        b = self._bucket(rows)
        if b.drafts < self.EXPLORE_DRAFTS:
            choice = "draft"
        elif b.plains == 0:
            choice = "plain"
        elif b.probing > 0:
            b.probing -= 1
            choice = "draft"
        else:
            choice, probe = self._cheaper_or_probe(b)
            if probe and choice == "draft":
                b.probing = self.PROBE_DRAFTS - 1
        self.remember(choice)  # "draft" / "plain"
        return self.run if choice == "plain" else 0

    @staticmethod
    def cost(b: _Bucket, kind: str) -> float:
        """Seconds per row-token of a mode in a bucket (its moving averages' ratio)."""
        return b.seconds[kind] / max(b.tokens[kind], 1e-12)

    def _add(self, b: _Bucket, kind: str, seconds: float, tokens: float) -> None:
        count = getattr(b, kind + "s")
        weight = 1.0 if count == 0 else self.smoothing
        b.seconds[kind] += weight * (seconds - b.seconds[kind])
        b.tokens[kind] += weight * (tokens - b.tokens[kind])
        setattr(b, kind + "s", count + 1)

    def drafted(self, rows: int, tokens: int, seconds: float) -> None:
        """A drafting iteration: little steps plus verification took `seconds` and gave
        `tokens` output tokens over `rows` rows."""
        if tokens > 0 and self.call_mode is None:  # a whole call is measured whole (end_call)
            b = self._bucket(rows)
            if b.drafts == 0 and not b.warm:  # the first drafting in a bucket pays one-time costs (scratch, caches)
                b.warm = True
                return
            self._add(b, "draft", seconds, tokens)

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        if steps > 0 and self.call_mode is None:
            self._add(self._bucket(rows), "plain", seconds, rows * steps)
