"""`fastdec train-heads MODEL_DIR --sources FILE --out NEW_DIR`: blockwise proposal heads
for any model directory (one converted from a Hugging Face Marian checkpoint included),
trained on the user's own source text against the model's own greedy outputs, written
into a copy of the directory (the stages: heads.py). Then `fastdec info -m NEW_DIR`
names blockwise and `fastdec translate -m NEW_DIR` runs it by default.

    fastdec train-heads opus-en-de --sources my-text.en --out opus-en-de-heads

The run directory (--run, default NEW_DIR.run) keeps every stage: running the same
command again after an interruption continues from its last checkpoint. Progress goes to
stderr. Needs torch: pip install "pyfastdec[train]". `python -m export.train_heads`, in a
checkout, is this command too.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.model_dir.heads_verifier import verifier_digest

STAGE_KEYS = ("model", "sources", "limit", "shortlist")  # what greedy.txt and states.f16 depend on
NEEDS = ("torch", "safetensors")  # the `train` extra


def build_parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    ap.add_argument("--sources", required=True, type=Path,
                    help="source text in the model's input language, one or more sentences per line (.gz ok); "
                         "thousands of lines or more")
    ap.add_argument("--out", type=Path, help="model directory to write; must not exist (default: MODEL_DIR-heads)")
    ap.add_argument("--run", type=Path, help="run directory: cache, checkpoints, log (default: <out>.run)")
    ap.add_argument("--heads", type=int, default=4, help="K, proposal heads (default 4)")
    ap.add_argument("--hidden", type=int, default=0, help="H, hidden units per head (default: d_model)")
    ap.add_argument("--steps", type=int, default=1000, help="training steps (default 1000)")
    ap.add_argument("--batch", type=int, default=256, help="decoder positions per training step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N source lines (0: all)")
    ap.add_argument("--held-out", type=int, default=500, help="last N sentences: evaluation only (default 500)")
    ap.add_argument("--no-shortlist", action="store_true", help="decode on the full vocabulary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=50, help="a progress line every N steps (default 50)")
    ap.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps (default 100)")
    ap.add_argument("--seed", type=int, default=1)
    return ap


def main(argv=None, prog: str = "fastdec train-heads") -> int:
    args = build_parser(prog).parse_args(argv)
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"{prog}: error: needs {' and '.join(missing)}, which this installation lacks: "
              f"pip install \"pyfastdec[train]\"", file=sys.stderr, flush=True)
        return 1
    try:
        return run(args, prog)
    except (ValueError, ModelDirError) as err:  # bad input: one line naming the file or field
        print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
        return 1


def check_model(model_dir: Path) -> ModelDir:
    """The directory loaded, if heads can ride on its decoder: an autoregressive model
    with its own encoder (the engine decodes it alone)."""
    loaded = ModelDir.load(model_dir)
    cfg, where = loaded.config, model_dir / "config.json"
    if cfg.arch != "transformer":
        raise ValueError(f"{where}: arch: {cfg.arch!r} (expected \"transformer\": proposal heads extend an "
                         f"autoregressive decoder; a GAD drafter drafts blocks itself)")
    if cfg.encoder_shared is not None:
        raise ValueError(f"{where}: encoder.shared: this model reads another model's encoder (a BiLD little model "
                         f"or drafter), so it does not decode alone (expected a translation or correction model)")
    return loaded


def check_args(args) -> tuple[Path, Path]:
    """(out, run directory), or a ValueError naming the option."""
    for name in ("heads", "batch", "held_out", "log_every", "save_every", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: expected an integer >= 1")
    for name in ("hidden", "steps", "limit"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name} {getattr(args, name)}: expected an integer >= 0")
    if not args.lr > 0:
        raise ValueError(f"--lr {args.lr}: expected a learning rate > 0")
    if not args.sources.exists():  # before a run directory records these sources
        raise ValueError(f"--sources {args.sources}: file not found (expected source text, one sentence or more "
                         f"per line)")
    if not args.sources.is_file():
        raise ValueError(f"--sources {args.sources}: not a file (expected source text, one sentence or more per line)")
    out = args.out or args.model_dir.with_name(args.model_dir.name + "-heads")
    if out.resolve() == args.model_dir.resolve():
        raise ValueError(f"--out {out}: must differ from MODEL_DIR (the heads go into a copy)")
    if out.exists():
        raise ValueError(f"--out {out}: already exists (expected a new directory: remove it, or name another, "
                         f"to train again; the run directory keeps what was done)")
    return out, args.run or out.with_name(out.name + ".run")


def record_stage(run_dir: Path, stage: dict, write: bool) -> None:
    """run.json: what the cached greedy outputs and states were made from. A rerun with
    another model, source file, limit or shortlist setting is refused: it would mix two
    runs. write=False only checks (before the sources are read)."""
    recorded = run_dir / "run.json"
    if recorded.exists():
        before = json.loads(recorded.read_text())
        for key in STAGE_KEYS:
            if before.get(key) != stage[key]:
                raise ValueError(f"{recorded}: field '{key}' is {before.get(key)!r}, this run has {stage[key]!r} "
                                 f"(use another --run)")
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps(stage, indent=2) + "\n")


def run(args, prog: str) -> int:
    out, run_dir = check_args(args)
    loaded = check_model(args.model_dir)

    import numpy as np
    import torch

    from . import heads as stages
    from .writer import read_model_dir

    torch.set_num_threads(args.threads)
    shortlist = not args.no_shortlist and (args.model_dir / "shortlist.bin").exists()
    stage = {"model": str(args.model_dir.resolve()), "sources": str(args.sources.resolve()), "limit": args.limit,
             "shortlist": shortlist}
    record_stage(run_dir, stage, write=False)
    src = stages.source_ids(args.sources, loaded, args.limit or None)
    if not src:
        raise ValueError(f"--sources {args.sources}: no text (expected source sentences, one or more per line)")
    if len(src) <= args.held_out:
        raise ValueError(f"--sources {args.sources}: {len(src)} sources (sentences), need more than --held-out "
                         f"{args.held_out} (the evaluation's; give more text or a smaller --held-out)")
    model = read_model_dir(args.model_dir)[0]
    int8 = bool(model.cfg.quantization)
    record_stage(run_dir, stage, write=True)

    outs = stages.decode_greedy(args.model_dir, src, run_dir / "greedy.txt", shortlist, args.threads, batch=64)
    states_model = read_model_dir(args.model_dir, simulate_int8=int8)[0]  # the activations the engine sees
    states = stages.cache_states(states_model, src, outs, run_dir / "states.f16", batch=64)
    offsets = np.cumsum([0] + [len(o) + 1 for o in outs])

    k, hidden = args.heads, args.hidden or model.cfg.d_model
    cut = stages.cut_at_limit(src, outs)
    target = stages.targets(outs, k, model.eos, cut)
    torch.manual_seed(args.seed)
    stages.fresh_heads(model, k, hidden)
    split = len(src) - args.held_out
    stages.train(model, states, target, np.arange(offsets[split]), run_dir, args.steps, args.batch, args.lr,
                 args.seed, args.save_every, args.log_every)
    report = stages.evaluate(model, states, target, outs, offsets, range(split, len(src)), cut)
    print("eval: " + json.dumps(report), file=sys.stderr, flush=True)

    pairs = [(src[i][:-1], outs[i]) for i in range(min(split, 512))]
    stages.write_heads(args.model_dir, model, out, pairs, verifier_digest(loaded))
    report["written"] = str(out)
    report["blockwise_check"] = stages.check_blockwise(out, src[split:], shortlist, args.threads, batch=32)
    (run_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    check = report["blockwise_check"]
    print(f"blockwise: {check['equal_to_greedy']}/{check['sentences']} held-out sentences equal to greedy, "
          f"{check['mean_tokens_per_iteration']:.2f} tokens per iteration; wrote {out}", file=sys.stderr, flush=True)
    if check["equal_to_greedy"] != check["sentences"]:
        print(f"{prog}: error: {out}: blockwise differs from greedy (a backend bug: report it)", file=sys.stderr)
        return 1
    return 0
