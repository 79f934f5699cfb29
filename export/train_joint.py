"""Fine-tune a verifier's decoder JOINTLY with its blockwise proposal heads (multi-token
objective), on the verifier's own greedy outputs, and write the result as a new model
directory.

    python -m export.train_joint /work/runs/heads-en-de3/model \
        --sources ../shared/data/multi30k/train.en.gz --run /work/runs/joint-en-de/run \
        --out /work/runs/joint-en-de/model --minutes 60

Frozen heads (export.train_heads) must predict tokens 2..K+1 ahead from a decoder state
that was trained only to predict the next one; Stern et al. (2018) found the heads agree
far more often when the model is fine-tuned together with them. Here the loss is

    CE(next token) + head_weight * mean_i CE(head i's token, i+1 places further on)

over the verifier's own greedy outputs (sequence-level self-distillation: the model
keeps producing what it produced, so its quality stays where it was while its decoder
states learn to carry the next K tokens). What trains (--train):
  decoder  the decoder layers, the output bias and the heads (default). The encoder and
           the tied embedding stay as they are, so the encoder runs forward only
           (about half the cost of a step), and source-side behaviour cannot drift.
  all      everything.
MODEL_DIR may have heads (they are the starting point) or not (--heads K fresh ones).

Stages, kept in --run so the same command continues where it stopped:
  1. greedy.txt   MODEL_DIR's greedy outputs of the sources (export.train_heads' stage 1;
                  a greedy.txt copied from a train_heads run of the same model and
                  sources is reused as it is);
  2. joint.pt     model + optimizer + position in the data, every --save-every steps
                  and at the end of the --minutes budget; log.txt;
  3. --out        the model directory: int8 (weights per output channel, activation
                  scales calibrated on the first 1,000 training pairs) if MODEL_DIR is
                  int8, MODEL_DIR's shortlist copied (same vocabulary), rehashed; then
                  blockwise against greedy of --out on the held-out sources, and the
                  greedy BLEU of MODEL_DIR and --out on --bleu-src/--bleu-ref if given.
Greedy outputs of --out differ from MODEL_DIR's (the decoder changed): --out is a new
model, and every lossless strategy on it returns ITS greedy output.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see export/train.py

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pyfastdec.model_dir import WEIGHTS_FILE, ModelDir

from .batching import BucketBatcher
from .calibrate import calibrate
from .modeling import Seq2Seq
from .train import lr_at, rng_state, save_checkpoint, set_rng_state
from .train_clock import TrainingClock
from .train_heads import check_blockwise, decode_greedy, fresh_heads, source_ids
from .writer import EMBED_SCALE, quantize_embedding, read_model_dir, write_model_dir

SETTINGS = ("model", "sources", "limit", "held_out", "train", "head_weight", "lr", "warmup", "batch_tokens",
            "dropout", "seed", "heads", "hidden")  # a run resumes only with the same ones


def log(run: Path, msg: str) -> None:
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    with open(run / "log.txt", "a") as f:
        f.write(line + "\n")


def training_model(model_dir: Path, dropout: float, heads: int, hidden: int) -> tuple[Seq2Seq, Path]:
    """The float32 model of model_dir (int8 weights dequantised) with dropout on, and
    heads: the directory's own, else `heads` fresh ones (identity at start)."""
    loaded, spm_file = read_model_dir(model_dir)
    if loaded.cfg.heads is None:
        fresh_heads(loaded, heads, hidden or loaded.cfg.d_model)
    model = Seq2Seq(loaded.cfg, dropout, dropout, dropout)
    model.load_state_dict(loaded.state_dict())
    return model, spm_file


def trainable(model: Seq2Seq, what: str) -> list[torch.nn.Parameter]:
    for p in model.parameters():
        p.requires_grad_(what == "all")
    if what == "decoder":
        for p in [*model.decoder.parameters(), *model.heads.parameters(), model.output.bias]:
            p.requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]


def joint_loss(model: Seq2Seq, batch, head_weight: float, frozen_encoder: bool) -> tuple[torch.Tensor, dict]:
    """Next-token CE + head_weight * mean over heads of their CE; head i at position t
    predicts target t+i+1 (tgt_out shifted left by i+1; past the end = ignored)."""
    if frozen_encoder:
        model.eval()  # no dropout on a part that does not train
        with torch.no_grad():
            memory, keep = model.encode(batch.src)
        model.train()
    else:
        memory, keep = model.encode(batch.src)
    states = model.decode_full(batch.tgt_in, memory, keep)  # [B,T,d]
    pad = model.pad
    main = F.cross_entropy(model.logits(states).flatten(0, 1), batch.tgt_out.flatten(), ignore_index=pad)
    k = model.cfg.heads[0]
    t = batch.tgt_out.shape[1]
    proposals = model.heads(states)  # [B,T,K,d]
    head_losses, correct = [], []
    for i in range(k):
        shift = i + 1
        if shift >= t:
            break
        target = batch.tgt_out[:, shift:]  # [B,T-shift]
        logits = model.logits(proposals[:, : t - shift, i])  # [B,T-shift,V]
        head_losses.append(F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad))
        real = target != pad
        correct.append(float((logits.argmax(-1) == target)[real].float().mean()) if real.any() else 0.0)
    heads = torch.stack(head_losses).mean() if head_losses else main.new_zeros(())
    return main + head_weight * heads, {"main": main.item(), "heads": heads.item(), "acc": correct}


def record_settings(run: Path, settings: dict) -> None:
    """run/run.json holds the settings of the run's first start; a later start with other
    ones (any key either start recorded) is refused: resuming another training would mix
    two runs. train_shared records its own keys (the host among them) through this."""
    recorded = run / "run.json"
    if recorded.exists():
        before = json.loads(recorded.read_text())
        changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if changed:
            raise ValueError(f"{recorded}: this run was started with other settings ({', '.join(changed)}); "
                             f"use another --run")
    recorded.write_text(json.dumps(settings, indent=2) + "\n")


def train(model: Seq2Seq, pairs: list[tuple[list[int], list[int]]], run: Path, args, settings: dict) -> None:
    """Train until the --minutes budget (all runs together) is spent, resuming run/joint.pt."""
    params = trainable(model, args.train)
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    batcher = BucketBatcher(pairs, args.batch_tokens, model.pad, model.bos, model.eos)
    schedule = {"lr": args.lr, "warmup": args.warmup}
    ckpt = run / "joint.pt"
    step, epoch, done_in_epoch, spent = 0, 1, 0, 0.0
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        step, epoch, done_in_epoch, spent = saved["step"], saved["epoch"], saved["done_in_epoch"], saved["spent"]
        set_rng_state(saved["rng"])
        log(run, f"resumed at step {step} (epoch {epoch}, batch {done_in_epoch}, {spent / 60:.1f} min spent)")
    else:
        torch.manual_seed(args.seed)  # dropout masks: a fresh run is reproducible

    def save() -> None:
        save_checkpoint(ckpt, model=model.state_dict(), optimizer=opt.state_dict(), step=step, epoch=epoch,
                        done_in_epoch=done_in_epoch, spent=spent, rng=rng_state(), settings=settings)

    budget = args.minutes * 60.0
    clock = TrainingClock(spent)  # wall time, less the time the process was stopped
    seen: dict = {}
    model.train()
    def more() -> bool:
        return spent < budget and not (args.steps and step >= args.steps)

    while more():
        batches = batcher.epoch(args.seed * 100003 + epoch)
        while done_in_epoch < len(batches) and more():
            for group in opt.param_groups:
                group["lr"] = lr_at(step + 1, schedule)
            loss, parts = joint_loss(model, batcher.make(*batches[done_in_epoch]), args.head_weight,
                                     args.train == "decoder")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step, done_in_epoch, spent = step + 1, done_in_epoch + 1, clock.tick()
            for key in ("main", "heads"):  # smoothed for the log
                seen[key] = 0.95 * seen[key] + 0.05 * parts[key] if key in seen else parts[key]
            seen["acc"] = [0.95 * a + 0.05 * b for a, b in zip(seen["acc"], parts["acc"])] \
                if "acc" in seen and len(seen["acc"]) == len(parts["acc"]) else parts["acc"]
            if step % args.log_every == 0:
                log(run, f"step {step} epoch {epoch} batch {done_in_epoch}/{len(batches)} "
                         f"loss next {seen['main']:.3f} heads {seen['heads']:.3f} head acc "
                         f"{' '.join(f'{a:.3f}' for a in seen['acc'])} lr {lr_at(step, schedule):.2e} "
                         f"{spent / 60:.1f}/{args.minutes:g} min")
            if step % args.save_every == 0:
                save()
        if done_in_epoch == len(batches):
            epoch, done_in_epoch = epoch + 1, 0
    save()
    model.eval()


FROZEN = ("encoder.", "embed.")  # what --train decoder leaves as it was


def write_result(model: Seq2Seq, model_dir: Path, spm_file: Path, out: Path, source_scales: dict | None,
                 pairs: list[tuple[list[int], list[int]]], frozen_encoder: bool) -> Path:
    """--out, written to a temporary directory first so no half-written model takes the name;
    int8 when MODEL_DIR is (source_scales: its activation multipliers, None if float32).
    With a frozen encoder, its stored tensors and activation scales are MODEL_DIR's own:
    re-quantising the dequantised weights moves their scales by an ulp, and scales
    calibrated on other sentences would change what the engine's encoder computes."""
    from safetensors.torch import load_file, save_file

    from .rehash import rehash

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    int8 = source_scales is not None
    scales = calibrate(model, pairs) if int8 else None
    if scales and frozen_encoder:
        scales = {n: source_scales[n] if n.startswith(FROZEN) else v for n, v in scales.items()}
    calibration = {"data": "the first training pairs (source, MODEL_DIR greedy output)", "sentences": len(pairs),
                   "batch_size": 16} if int8 else None
    write_model_dir(model, spm_file, tmp, act_scales=scales, int8=int8, calibration=calibration)
    if frozen_encoder:
        original = load_file(str(model_dir / WEIGHTS_FILE))
        written = load_file(str(tmp / WEIGHTS_FILE))
        frozen = {n: t for n, t in original.items() if n.startswith(FROZEN)}
        if written["embed.weight"].dtype == torch.int8 and frozen["embed.weight"].dtype != torch.int8:
            # MODEL_DIR stores its embedding float32: these are the int8 rows the engine
            # computes from it at load, so the frozen embedding stays exactly as it was.
            frozen["embed.weight"], frozen[EMBED_SCALE] = quantize_embedding(frozen["embed.weight"])
        save_file({n: frozen[n] if n.startswith(FROZEN) else t for n, t in written.items()},
                  str(tmp / WEIGHTS_FILE), metadata={"format": "fastdec", "version": "1"})
    if (model_dir / "shortlist.bin").exists():
        shutil.copyfile(model_dir / "shortlist.bin", tmp / "shortlist.bin")
    rehash(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def greedy_bleu(model_dir: Path, src_file: Path, ref_file: Path, threads: int) -> float:
    """sacreBLEU of the native greedy translations (the API's path: int8, shortlist)."""
    import sacrebleu

    from pyfastdec import Translator

    from .data import read_lines
    hyps = Translator(str(model_dir), threads=threads).translate(read_lines(src_file), algo="greedy")
    return sacrebleu.corpus_bleu(hyps, [read_lines(ref_file)]).score


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    ap.add_argument("--sources", required=True, type=Path, help="source sentences, one per line (.gz ok)")
    ap.add_argument("--run", type=Path, help="run directory (default: <out>.run)")
    ap.add_argument("--out", type=Path, help="model directory to write (default: MODEL_DIR-joint)")
    ap.add_argument("--minutes", type=float, default=60.0, help="training budget, all runs of this --run together")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many updates, all runs together "
                    "(0: only the --minutes budget)")
    ap.add_argument("--train", choices=["decoder", "all"], default="decoder")
    ap.add_argument("--head-weight", type=float, default=1.0)
    ap.add_argument("--heads", type=int, default=4, help="K, if MODEL_DIR has no heads")
    ap.add_argument("--hidden", type=int, default=0, help="hidden units per fresh head (default: d_model)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--batch-tokens", type=int, default=4000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N source lines (0: all)")
    ap.add_argument("--held-out", type=int, default=500, help="last N sources: evaluation only")
    ap.add_argument("--bleu-src", type=Path, help="test sources for the greedy BLEU of MODEL_DIR and --out")
    ap.add_argument("--bleu-ref", type=Path, help="their references")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        return run(args)
    except ValueError as err:  # bad input: one line naming the file or field
        print(f"export.train_joint: {err}")
        return 1


def run(args) -> int:
    torch.set_num_threads(args.threads)
    out = args.out or args.model_dir.with_name(args.model_dir.name + "-joint")
    run_dir = args.run or out.with_name(out.name + ".run")
    if min(args.minutes, args.steps, args.limit) < 0 or min(args.held_out, args.batch_tokens, args.heads) < 1:
        raise ValueError("--minutes, --steps and --limit must be >= 0; --held-out, --batch-tokens and --heads >= 1")
    if out.resolve() == args.model_dir.resolve():
        raise ValueError(f"--out {out}: must differ from MODEL_DIR (the result is a new model)")
    if not args.sources.is_file():
        raise ValueError(f"{args.sources}: file not found (--sources: one source sentence per line)")
    if (args.bleu_src is None) != (args.bleu_ref is None):
        raise ValueError("--bleu-src and --bleu-ref go together")
    model, spm_file = training_model(args.model_dir, args.dropout, args.heads, args.hidden)
    source_scales = model.cfg.quantization["activation_scales"] if model.cfg.quantization else None
    model.cfg.quantization = None  # the float model trains; --out is quantised afresh
    shortlist = (args.model_dir / "shortlist.bin").exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in SETTINGS if k not in ("model", "sources", "heads", "hidden")}
    settings.update(model=str(args.model_dir.resolve()), sources=str(args.sources.resolve()),
                    heads=model.cfg.heads[0], hidden=model.cfg.heads[1])
    record_settings(run_dir, settings)

    src = source_ids(args.sources, ModelDir.load(args.model_dir), args.limit or None)
    if len(src) <= args.held_out:
        raise ValueError(f"{args.sources}: {len(src)} sources (sentences), need more than --held-out {args.held_out}")
    outs = decode_greedy(args.model_dir, src, run_dir / "greedy.txt", shortlist, args.threads, batch=64)
    split = len(src) - args.held_out
    max_len = model.cfg.max_source_len
    pairs = [(src[i][:-1], outs[i]) for i in range(split) if len(outs[i]) + 1 <= max_len]
    log(run_dir, f"{len(pairs)} training pairs (MODEL_DIR's greedy outputs), {args.held_out} held out; "
                 f"training {args.train} + {model.cfg.heads[0]} heads, budget {args.minutes:.0f} min")
    train(model, pairs, run_dir, args, settings)

    write_result(model, args.model_dir, spm_file, out, source_scales, pairs[:1000], args.train == "decoder")
    report = {"written": str(out), "blockwise_check": check_blockwise(out, src[split:], shortlist, args.threads, 32)}
    if args.bleu_src:
        report["greedy_bleu"] = {"MODEL_DIR": greedy_bleu(args.model_dir, args.bleu_src, args.bleu_ref, args.threads),
                                 "out": greedy_bleu(out, args.bleu_src, args.bleu_ref, args.threads)}
    (run_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    log(run_dir, "eval: " + json.dumps(report))
    if report["blockwise_check"]["equal_to_greedy"] != args.held_out:
        print(f"export.train_joint: {out}: blockwise differs from greedy (a backend bug: report it)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
