"""IAD's Python alone, per iteration: what the loop (draft_verify.py), the source drafts
(iad.py, source_ngrams.py) and the draft-length policy cost beside the engine.

    python -m bench.iad_python [--model models/uk-gec] [--sentences 200] [--batch 1]
        [--repeats 15] [--cprofile N]

bench.iad_profile splits a real run by component, but on a shared machine its figures
move by a third from run to run, and the policy's choices follow the clock, so two runs
do not even make the same iterations. Here the engine calls of one run are recorded
(the policy decides from a fixed cost model, so the run is the same every time) and the
run is repeated against the recording: every step returns its recorded output after
checking it was asked the same tokens, encode / truncate / select do nothing. What is
left is the Python of IAD (plus the replay's own check, a few us a step), timed as CPU
time of the process (less sensitive to other processes than wall time); the median and
the minimum of the repeats are printed. Outputs are checked equal to the recorded run's.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent


def cost_model(token_rows: int, drafted: bool) -> float:
    """A batch-1-like step cost for the policy (seconds): overhead plus work per row."""
    return 150e-6 + 6e-6 * token_rows + (40e-6 if drafted else 0.0)


class Recorder:
    """The backend, with every step's tokens and output kept."""

    def __init__(self, backend):
        self.backend, self.log = backend, []

    def step(self, state, tokens, want):
        out = self.backend.step(state, tokens, want)
        self.log.append((np.array(tokens), out))
        return out

    def __getattr__(self, name):  # encode, start, truncate, select, tokens ...: the backend's
        return getattr(self.backend, name)


class Replay:
    """The recorded steps, in order, without the engine."""

    def __init__(self, recorder: Recorder):
        self.log, self.next = recorder.log, 0
        self.tokens, self.vocab_size, self.arch = recorder.tokens, recorder.vocab_size, recorder.arch

    def encode(self, src_ids):
        return None

    def start(self, memory):
        return None

    def step(self, state, tokens, want):
        asked, out = self.log[self.next]
        self.next += 1
        if not np.array_equal(asked, tokens):
            raise RuntimeError(f"replay: step {self.next} was asked other tokens than the recorded run's")
        return out

    def truncate(self, state, lengths):
        return state

    def select(self, state, rows):
        return state


def replayed_iad(backend, batches: list[list[list[int]]], repeats: int, profile=None):
    """IAD over the batches once on `backend` (recorded), then `repeats` times against the
    recording: (outputs, steps, CPU seconds of each replay). profile: a cProfile.Profile
    to run over one more replay."""
    from pyfastdec.decoding import iad
    from pyfastdec.decoding.policies import SourceDraftLength

    k_max = backend.config.max_source_len

    def run(verifier):
        policy = SourceDraftLength(k_max, cost_model=cost_model)
        return [iad(verifier, b, policy=policy)[0] for b in batches]

    recorder = Recorder(backend)
    expected = run(recorder)
    steps, times = len(recorder.log), []
    for _ in range(repeats):
        replay = Replay(recorder)
        started = time.process_time()
        outs = run(replay)
        times.append(time.process_time() - started)
        if replay.next != steps:
            raise RuntimeError(f"replay: {replay.next} steps, the recorded run made {steps}")
        if outs != expected:
            raise RuntimeError("replay: the outputs differ from the recorded run's")
    if profile is not None:
        profile.enable()
        run(Replay(recorder))
        profile.disable()
    return expected, steps, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "uk-gec")
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cprofile", type=int, default=0, metavar="N", help="also a cProfile of one replay, N functions")
    args = ap.parse_args(argv)

    from bench import data
    from pyfastdec.backends.native import NativeBackend

    ids = data.tokenize(data.uagec_test(args.sentences).sources, args.model / "spm.model")
    batches = [ids[i:i + args.batch] for i in range(0, len(ids), args.batch)]
    backend = NativeBackend(args.model, threads=1, shortlist=True)
    profile = cProfile.Profile() if args.cprofile else None
    _, steps, times = replayed_iad(backend, batches, args.repeats, profile)
    print(f"# IAD's Python: {args.model.name}, {len(ids)} UA-GEC test sources, batch {args.batch}, "
          f"{steps} steps, {args.repeats} replays")
    print(f"{1e6 * statistics.median(times) / steps:.1f} us per iteration (CPU time, median; "
          f"min {1e6 * min(times) / steps:.1f})")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.cprofile)


if __name__ == "__main__":
    main()
