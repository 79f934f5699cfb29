"""Where IAD's time goes on a correction model (issue 16: "profile IAD at batch 1 and 32
and remove what is not the decoder"), split by component, per iteration and per sentence.

    python -m bench.iad_profile [--model models/uk-gec] [--sentences 300] [--threads 1]
        [--batches 1,32] [--repeats 3] [--corrector] [--cprofile N]

Two paths over the first N UA-GEC test sources:
- direct: pyfastdec.decoding.iad on a NativeBackend (as bench.run's rows), one
  SourceDraftLength for the run as Corrector keeps one; greedy beside it;
- corrector (--corrector): pyfastdec.Corrector(threads=...).correct(texts, batch_size),
  the user's path, whose extra cost is sentence splitting, tokenisation, the unit
  bookkeeping and detokenisation.

Nothing in pyfastdec/ is changed: the backend is wrapped (encode, start, step, truncate,
select timed apart) and a few functions are replaced, for the instrumented passes only,
by timed wrappers: the n-gram index (SourceNgrams.__init__), the re-entry search
(SourceNgrams.reentry), the draft-length policy (SourceDraftLength's iteration_started,
choose_lengths, verified, call_ended), the acceptance rule (accept_argmax), the draft cut
(draft_verify._cut), and on the Corrector path clean_text, sentence splitting,
Tokenizer.encode / decode. What no wrapper covers is the loop's own Python
(draft_verify.py: building the token array, the per-row bookkeeping, _keep_rows) or,
on the Corrector path, the API's own. Each wrapper costs a fraction of a microsecond
(measured and printed); uninstrumented passes give the true wall time, and the table's
shares are of the instrumented time.

Also printed: verifier work in token positions (committed tokens, rejected draft tokens,
padding of shorter drafts up to the batch's widest), and the step's own cost by width
(batch 1 and 32 rows, positions per row 1..64), which says what a verified position costs
against a plain step.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent


class Clock:
    """Seconds and calls per component name; the engine's own per-op times (its
    op_profile, csrc/kernels/op_profile.h) split into the encoder's and the rest's."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self.shapes = []  # (rows, width) of every step
        self.ops = {"encoder": defaultdict(float), "decoder": defaultdict(float)}

    def add(self, name: str, seconds: float):
        self.seconds[name] += seconds
        self.calls[name] += 1

    def clear(self):
        self.seconds.clear(), self.calls.clear(), self.shapes.clear()
        for ops in self.ops.values():
            ops.clear()

    def take_ops(self, into: str):
        """The engine's op times since the last take go to `into`."""
        from pyfastdec import kernels

        for op, (seconds, _) in kernels.op_profile_totals(True).items():
            self.ops[into][op] += seconds


class TimedBackend:
    """A backend whose protocol calls are timed one by one into `clock`."""

    def __init__(self, backend, clock: Clock):
        self._backend, self._clock = backend, clock

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def _timed(self, name, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self._clock.add(name, time.perf_counter() - t)
        return out

    def encode(self, src_ids):
        self._clock.take_ops("decoder")
        out = self._timed("encoder", self._backend.encode, src_ids)
        self._clock.take_ops("encoder")
        return out

    def start(self, memory):
        return self._timed("start", self._backend.start, memory)

    def step(self, state, tokens, want=None):
        self._clock.shapes.append(tokens.shape)
        if want is None:
            return self._timed("step", self._backend.step, state, tokens)
        return self._timed("step", self._backend.step, state, tokens, want)

    def truncate(self, state, held):
        return self._timed("truncate", self._backend.truncate, state, held)

    def select(self, state, rows):
        return self._timed("select", self._backend.select, state, rows)


def _timed_function(fn, name: str, clock: Clock):
    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.add(name, time.perf_counter() - t)
    return timed


@contextmanager
def patched(targets: list[tuple[object, str, str]], clock: Clock):
    """Replace attribute `attr` of each `owner` by a timed wrapper named `name`."""
    saved = []
    try:
        for owner, attr, name in targets:
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            saved.append((owner, attr, original))
            setattr(owner, attr, _timed_function(original, name, clock))
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def decoding_targets():
    from pyfastdec.decoding import draft_verify
    from pyfastdec.decoding.policies import SourceDraftLength

    iad_mod = importlib.import_module("pyfastdec.decoding.iad")  # the package exports the function as `iad`
    return [(iad_mod.SourceNgrams, "__init__", "n-gram index"),
            (iad_mod.SourceNgrams, "reentry", "re-entry search"),
            (SourceDraftLength, "iteration_started", "policy"),
            (SourceDraftLength, "choose_lengths", "policy"),
            (SourceDraftLength, "verified", "policy"),
            (SourceDraftLength, "call_ended", "policy"),
            (iad_mod, "accept_argmax", "accept"),
            (draft_verify, "_cut", "cut drafts")]


def api_targets():
    import pyfastdec.sentence_units as sentence_units
    import pyfastdec.text as text

    return [(sentence_units, "clean_text", "api: clean text"),
            (text, "split_sentences", "api: split sentences"),
            (text.Tokenizer, "encode", "api: tokenise"),
            (text.Tokenizer, "decode", "api: detokenise")]


def wrapper_cost(clock_calls: int = 20000) -> float:
    """Seconds one timed wrapper adds around a call (measured on a no-op)."""
    def noop():
        return None
    clock = Clock()
    wrapped = _timed_function(noop, "x", clock)
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(clock_calls):
            noop()
        plain = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(clock_calls):
            wrapped()
        best.append((time.perf_counter() - t - plain) / clock_calls)
    return min(best)


# ---------------------------------------------------------------- the two paths
def direct_runner(model: Path, threads: int, strategy: str, clock: Clock | None):
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import greedy, iad
    from pyfastdec.decoding.policies import SourceDraftLength

    backend = NativeBackend(model, threads=threads, shortlist=True)
    policy = SourceDraftLength(backend.config.max_source_len)
    verifier = backend if clock is None else TimedBackend(backend, clock)

    def run(batch):
        if strategy == "greedy":
            return greedy(verifier, batch)
        return iad(verifier, batch, policy=policy)
    return run


def corrector_runner(model: Path, threads: int, clock: Clock | None, algo: str = "iad"):
    from pyfastdec import Corrector
    from pyfastdec.decoding import strategies

    corrector = Corrector(model, threads=threads)
    if clock is not None:
        corrector.verifier = TimedBackend(corrector.verifier, clock)
    inner = strategies.iad

    def run(batch, batch_size):
        if algo != "iad":  # the same API path with another strategy (greedy: the reference)
            return corrector.translate(batch, algo=algo, batch_size=batch_size)
        if clock is None:
            return corrector.correct(batch, batch_size=batch_size)
        strategies.iad = _timed_function(inner, "decode call", clock)
        try:
            return corrector.correct(batch, batch_size=batch_size)
        finally:
            strategies.iad = inner
    return run


def alternating_passes(runs: dict, batches, repeats: int) -> dict[str, float]:
    """name -> median seconds of `repeats` passes over all batches, the runs alternating
    pass by pass (after one warm-up pass each) so the machine's drift hits all alike."""
    for run in runs.values():
        for b in batches:
            run(b)
    seconds = defaultdict(list)
    for _ in range(repeats):
        for name, run in runs.items():
            t = time.perf_counter()
            for b in batches:
                run(b)
            seconds[name].append(time.perf_counter() - t)
    return {name: statistics.median(s) for name, s in seconds.items()}


# ---------------------------------------------------------------- report
def _sum_stats(results) -> dict:
    out = defaultdict(float)
    for _, s in results:
        for name in ("iterations", "row_steps", "drafted", "accepted", "generated", "encoder_s", "verifier_s",
                     "total_s"):
            out[name] += getattr(s, name)
    return out


def breakdown(clock: Clock, instrumented_s: float, plain_s: float, sentences: int, iterations: int,
              corrector: bool) -> list[tuple[str, float]]:
    """(component, seconds per pass) rows, the loop's / API's own Python as the rest."""
    per_pass = {k: v for k, v in clock.seconds.items()}
    rows = []
    engine = ("encoder", "start", "step", "truncate", "select")
    python = ("n-gram index", "re-entry search", "policy", "accept", "cut drafts")
    for name in engine + python:
        rows.append((name, per_pass.get(name, 0.0)))
    covered = sum(per_pass.get(n, 0.0) for n in engine + python)
    if corrector:
        decode = per_pass.get("decode call", instrumented_s)
        rows.append(("loop Python (draft_verify, iad)", decode - covered))
        api_named = [n for n in per_pass if n.startswith("api: ")]
        for name in sorted(api_named):
            rows.append((name, per_pass[name]))
        rows.append(("api: other (units, batching, join, format)",
                     instrumented_s - decode - sum(per_pass[n] for n in api_named)))
    else:
        rows.append(("loop Python (draft_verify, iad)", instrumented_s - covered))
    return rows


@contextmanager
def engine_ops(clock: Clock):
    """The engine's per-op timer on (two clock reads per region, ~40 ns) while inside."""
    from pyfastdec import kernels

    kernels.op_profile(True)
    kernels.op_profile_totals(True)
    try:
        yield
    finally:
        clock.take_ops("decoder")
        kernels.op_profile(False)


def print_ops(clock: Clock, sentences: int, iterations: int) -> None:
    """Inside the engine: the step's (and start/truncate/select's) time by op."""
    ops = clock.ops["decoder"]
    total = sum(ops.values())
    if not total:
        return
    print(f"\ninside the decoder calls (engine op profile), {1e6 * total / max(iterations, 1):.1f} us / iteration:")
    print(", ".join(f"{op} {1e6 * t / max(iterations, 1):.1f} us ({100 * t / total:.0f}%)"
                    for op, t in sorted(ops.items(), key=lambda x: -x[1]) if t > 0))


def print_table(title: str, rows, instrumented_s: float, plain_s: float, sentences: int, iterations: int,
                note: str, scale: int = 1):
    """rows: (component, seconds summed over `scale` passes); instrumented_s, plain_s,
    sentences and iterations are per pass."""
    print(f"\n### {title}\n")
    print(f"uninstrumented {1e3 * plain_s:.1f} ms per pass, instrumented {1e3 * instrumented_s:.1f} ms "
          f"({sentences} sentences, {iterations} verifier calls per pass; {note})\n")
    print("| component | us / iteration | us / sentence | share |")
    print("|---|---:|---:|---:|")
    for name, s in rows:
        s /= scale
        print(f"| {name} | {1e6 * s / max(iterations, 1):.1f} | {1e6 * s / sentences:.1f} | "
              f"{100 * s / instrumented_s:.1f}% |")
    print(f"| total (instrumented) | {1e6 * instrumented_s / max(iterations, 1):.1f} | "
          f"{1e6 * instrumented_s / sentences:.1f} | 100% |")


def positions_report(clock: Clock, stats: dict, sentences: int) -> None:
    """Verifier work in token positions over the pass."""
    shapes = clock.shapes
    total = sum(r * w for r, w in shapes)
    verify = [(r, w) for r, w in shapes if w > 1]
    real_verify = sum(r for r, _ in verify) + stats["drafted"]
    padding = sum(r * w for r, w in verify) - real_verify
    rejected = stats["drafted"] - stats["accepted"]
    print(f"\nverifier positions per sentence: {total / sentences:.1f} (committed tokens "
          f"{stats['generated'] / sentences:.1f}, rejected draft tokens {rejected / sentences:.1f}, padding "
          f"{padding / sentences:.1f}); steps: {len(shapes)} ({len(verify)} verifying, "
          f"{len(shapes) - len(verify)} plain); mean width of verifying steps "
          f"{statistics.mean([w for _, w in verify]) if verify else 0:.1f}, rows per step "
          f"{statistics.mean([r for r, _ in shapes]):.1f}")


def step_cost_by_width(model: Path, threads: int, sources: list[list[int]], widths=(1, 2, 4, 8, 16, 32, 64),
                       repeats: int = 30) -> None:
    """The step's own time at batch 1 and 32 per positions per row (then truncated back
    to BOS), widths interleaved within each repeat so the machine's drift hits all alike."""
    from pyfastdec.backends.base import Want
    from pyfastdec.backends.native import NativeBackend

    backend = NativeBackend(model, threads=threads, shortlist=True)
    bos, want = backend.tokens["bos"], Want(argmax=True)
    print(f"\nstep cost by width (positions per row), us per call, median of {repeats} rounds (widths "
          "interleaved); per position in brackets\n")
    print("| rows | " + " | ".join(f"w={w}" for w in widths) + " | truncate |")
    print("|---:|" + "---:|" * (len(widths) + 1))
    for rows in (1, 32):
        batch = sources[:rows]
        state = backend.start(backend.encode(batch))
        backend.step(state, np.full((rows, 1), bos, dtype=np.int64), want)  # BOS held
        held = np.ones(rows, dtype=np.int64)
        tokens = {w: np.array([((s[:-1] or [bos]) * w)[:w] for s in batch], dtype=np.int64) for w in widths}
        times, trunc = defaultdict(list), []
        for _ in range(repeats):
            for w in widths:
                t = time.perf_counter()
                backend.step(state, tokens[w], want)
                t1 = time.perf_counter()
                state = backend.truncate(state, held)
                trunc.append(time.perf_counter() - t1)
                times[w].append(t1 - t)
        cells = [f"{1e6 * statistics.median(times[w]):.0f} ({1e6 * statistics.median(times[w]) / (rows * w):.1f})"
                 for w in widths]
        print(f"| {rows} | " + " | ".join(cells) + f" | {1e6 * statistics.median(trunc):.1f} |")


def _alternate_with_corrector(runs: dict, batches, texts: list[str], repeats: int) -> dict[str, float]:
    """alternating_passes over greedy, IAD (batches of ids) and the Corrector (all texts)."""
    wrapped = {"greedy": lambda _: [runs["greedy"](b) for b in batches],
               "iad": lambda _: [runs["iad"](b) for b in batches],
               "corrector": runs["corrector"], "corrector greedy": runs["corrector greedy"]}
    return alternating_passes(wrapped, [texts], repeats)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "uk-gec")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--corrector", action="store_true", help="also the Corrector(...).correct path")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="also a cProfile of one IAD pass per batch size, its N top functions by own time")
    ap.add_argument("--no-step-cost", action="store_true")
    ap.add_argument("--sort-by-length", action="store_true",
                    help="direct path: batch the sources longest first, as Corrector does (default: input order, "
                         "as bench.run does)")
    args = ap.parse_args(argv)

    from bench import data

    texts = data.uagec_test(args.sentences).sources
    ids = data.tokenize(texts, args.model / "spm.model")
    if args.sort_by_length:
        ids = sorted(ids, key=len, reverse=True)
    overhead = wrapper_cost()
    print(f"# IAD profile: {args.model}, {len(texts)} UA-GEC test sources, {args.threads} thread(s)")
    print(f"timed wrapper: {1e6 * overhead:.2f} us per wrapped call (included in the instrumented figures)")
    for batch_size in [int(b) for b in args.batches.split(",")]:
        batches = [ids[i:i + batch_size] for i in range(0, len(ids), batch_size)]
        runs = {s: direct_runner(args.model, args.threads, s, None) for s in ("greedy", "iad")}
        if args.corrector:
            corr = corrector_runner(args.model, args.threads, None)
            corr_greedy = corrector_runner(args.model, args.threads, None, algo="greedy")
            runs["corrector"] = lambda b: corr(b, batch_size)
            runs["corrector greedy"] = lambda b: corr_greedy(b, batch_size)
        # the Corrector takes the texts, all in one call (it batches them itself)
        plain = alternating_passes({k: v for k, v in runs.items() if k != "corrector"}, batches, args.repeats) \
            if not args.corrector else _alternate_with_corrector(runs, batches, texts, args.repeats)
        print(f"\n## batch {batch_size}: greedy {1e3 * plain['greedy']:.1f} ms, IAD {1e3 * plain['iad']:.1f} ms "
              f"per pass (uninstrumented medians): IAD {plain['greedy'] / plain['iad']:.2f}x greedy"
              + (f"; Corrector.correct {1e3 * plain['corrector']:.1f} ms, Corrector greedy "
                 f"{1e3 * plain['corrector greedy']:.1f} ms: {plain['corrector greedy'] / plain['corrector']:.2f}x"
                 if args.corrector else ""))
        # Instrumented passes, alternating too; figures summed over the repeats
        names = ["greedy", "iad"] + (["corrector"] if args.corrector else [])
        clocks = {name: Clock() for name in names}
        instrumented_runs = {s: direct_runner(args.model, args.threads, s, clocks[s]) for s in ("greedy", "iad")}
        if args.corrector:
            timed_corrector = corrector_runner(args.model, args.threads, clocks["corrector"])
            instrumented_runs["corrector"] = lambda b: timed_corrector(b, batch_size)
        inputs = {"greedy": batches, "iad": batches, "corrector": [texts]}
        for name in names:  # warm-up (the policy learns), not counted
            for b in inputs[name]:
                instrumented_runs[name](b)
            clocks[name].clear()
        seconds, results = defaultdict(float), defaultdict(list)
        for _ in range(args.repeats):
            for name in names:
                targets = decoding_targets() + (api_targets() if name == "corrector" else [])
                with patched(targets, clocks[name]), engine_ops(clocks[name]):
                    t = time.perf_counter()
                    results[name] += [instrumented_runs[name](b) for b in inputs[name]]
                    seconds[name] += time.perf_counter() - t
        n = len(ids) * args.repeats
        note = f"{args.repeats} instrumented passes, alternating, after a warm-up pass"
        for name in names:
            clock = clocks[name]
            if name == "corrector":
                iterations = len(clock.shapes)
                rows = breakdown(clock, seconds[name], plain[name], n, iterations, True)
                print_table(f"Corrector.correct, batch_size {batch_size}", rows, seconds[name] / args.repeats,
                            plain[name], len(texts), iterations // args.repeats,
                            note + f"; uninstrumented: {plain[name] / plain['iad']:.2f}x the direct IAD pass",
                            scale=args.repeats)
                print_ops(clock, n, iterations)
                continue
            stats = _sum_stats(results[name])
            iterations = int(stats["iterations"])
            rows = breakdown(clock, seconds[name], plain[name], n, iterations, False)
            print_table(f"direct {name}, batch {batch_size}", rows, seconds[name] / args.repeats, plain[name],
                        len(ids), iterations // args.repeats, note, scale=args.repeats)
            print(f"\niterations per sentence {stats['row_steps'] / n:.2f}, tokens per iteration "
                  f"{stats['generated'] / max(stats['row_steps'], 1):.2f}, drafted tokens kept "
                  f"{stats['accepted'] / max(stats['drafted'], 1):.0%}")
            positions_report(clock, stats, n)
            print_ops(clock, n, iterations)
        if args.cprofile:
            run = direct_runner(args.model, args.threads, "iad", None)
            for b in batches:
                run(b)
            prof = cProfile.Profile()
            prof.enable()
            for b in batches:
                run(b)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.cprofile)
            print(f"\ncProfile, IAD batch {batch_size} (own time; deterministic profiling inflates Python calls):")
            print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))
    if not args.no_step_cost:
        step_cost_by_width(args.model, args.threads, ids)


if __name__ == "__main__":
    main()
