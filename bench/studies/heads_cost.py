"""What proposal heads add to a decoder step of the native engine.

    python -m bench.studies.heads_cost [--model models/en-de] [--work DIR] [--heads 4] [--hidden D]

Copies MODEL with K randomly initialised proposal heads of `hidden` units (default
d_model) written by export.writer (int8 like the model, the heads' activation scales
calibrated on 64 val sentences, the model's own scales kept), then times one step of
the native engine at 1 thread, batch 1 and 32 (test_2016_flickr sources, 8 tokens
already held per row), shortlist on and off: a greedy step (n = 1) and a verify step
of 4 drafts (n = 5), each without and with Want.proposals. Random heads cost what
trained ones do (the same GEMMs); the proposals themselves are meaningless here.
Median microseconds per step over `--repeats` steps, each rolled back with truncate.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

HELD = 8  # decoder positions per row before the timed step (BOS + 7 tokens)


def heads_copy(model_dir: Path, out: Path, heads: int, hidden: int | None) -> Path:
    """MODEL with random heads, int8 when MODEL is; its shortlist copied along."""
    import shutil

    import sentencepiece as spm
    import torch

    from export.calibrate import calibrate
    from export.data import corpus_path, read_lines
    from export.rehash import rehash
    from export.writer import read_model_dir, write_model_dir

    torch.manual_seed(0)
    model, spm_file = read_model_dir(model_dir)
    model.add_heads(heads, hidden or model.cfg.d_model)
    config = json.loads((model_dir / "config.json").read_text())
    quant = config["quantization"]
    scales = None
    if quant:
        sp = spm.SentencePieceProcessor(model_file=str(spm_file))
        pairs = [(sp.encode(s), sp.encode(t)) for s, t in
                 zip(read_lines(corpus_path("val", "en"))[:64], read_lines(corpus_path("val", "de"))[:64])]
        scales = dict(quant["activation_scales"])
        scales.update({k: v for k, v in calibrate(model, pairs).items() if k.startswith("heads.")})
    write_model_dir(model, spm_file, out, act_scales=scales, int8=bool(quant),
                    calibration=quant.get("calibration") if quant else None)
    if (model_dir / "shortlist.bin").is_file():
        shutil.copyfile(model_dir / "shortlist.bin", out / "shortlist.bin")
        rehash(out)  # the checksum lists the shortlist too (a foreign one is refused at load)
    return out


def time_step(backend, sources, n: int, proposals: bool, repeats: int) -> float:
    from pyfastdec.backends.base import Want

    rows = len(sources)
    state = backend.start(backend.encode(sources))
    backend.step(state, np.random.default_rng(0).integers(5, 100, (rows, HELD)), Want())
    tokens = np.random.default_rng(1).integers(5, 100, (rows, n))
    want = Want(proposals=np.full(rows, n - 1, dtype=np.int64)) if proposals else Want()
    held = np.full(rows, HELD, dtype=np.int64)
    times = []
    for _ in range(repeats + 3):
        start = time.perf_counter()
        backend.step(state, tokens, want)
        times.append(time.perf_counter() - start)
        backend.truncate(state, held)
    return float(np.median(times[3:])) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("models/en-de"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/fastdec-heads-cost"))
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args(argv)

    import sentencepiece as spm

    from export.data import corpus_path, read_lines
    from pyfastdec.backends.native import NativeBackend

    path = args.work / f"{args.model.name}-heads{args.heads}"
    if not (path / "config.json").is_file():
        heads_copy(args.model, path, args.heads, args.hidden)
    sp = spm.SentencePieceProcessor(model_file=str(path / "spm.model"))
    lines = read_lines(corpus_path("test_2016_flickr", "en"))
    print(f"{path}: K = {args.heads}, 1 thread, median us per step")
    print(f"{'batch':>5} {'shortlist':>9} {'n':>2} {'plain':>9} {'proposals':>9} {'extra':>7}")
    for shortlist in (True, False):
        backend = NativeBackend(path, threads=1, shortlist=shortlist)
        for batch in (1, 32):
            sources = [sp.encode(line) + [3] for line in lines[:batch]]
            for n in (1, 5):
                plain = time_step(backend, sources, n, False, args.repeats)
                heads = time_step(backend, sources, n, True, args.repeats)
                print(f"{batch:>5} {str(shortlist):>9} {n:>2} {plain:>9.1f} {heads:>9.1f} {heads / plain - 1:>+6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
