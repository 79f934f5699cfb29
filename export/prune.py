"""Structured pruning of a model directory: group lasso, slicing, fine-tuning, int8.

    python -m export.prune models/en-de --recipe student-en-de-ssru \
        --train-tgt /work/runs/prune/distill.train.de --run /work/runs/prune/en-de \
        --keep enc_heads=0.5,enc_ffn=0.3,dec_heads=0.75,dec_ffn=0.5 \
        --lasso-minutes 15 --finetune-minutes 12

Stages, each resumable from its checkpoints in --run (a session may end any time):
1. **lasso**: training on the recipe's data (--train-tgt: distilled targets) with a
   group-lasso penalty over attention heads and FFN units (export/prune_groups.py),
   applied as its proximal step after every Adam step (groups whose gradient does not
   hold them up shrink to exact zeros). The strength (--strength, per sqrt(group size))
   ramps up linearly over the first --ramp of the stage. Removal is gradual: in
   --rounds rounds, evenly spread from the end of the ramp to 80 % of the stage, each
   kind's lowest norm / sqrt(size) groups (zero ones first) are removed up to k/rounds
   of its --keep target and held at zero, so the rest of the network adapts between
   rounds and for the last 20 %. The report counts the "forced" removals: groups not yet
   at zero when removed. Every layer keeps at least one head and --min-ffn units.
   Budgets are CPU minutes (process time).
   Why gradual: with one strong penalty (strength 3, removal when a kind's zeros reach
   the target) every FFN unit and head of the en-de student shrank together (their
   norms start within 10 % of each other) and the kinds collapsed within 50 steps: val
   BLEU 0.75 after the stage.
2. **slice**: the removed (zeroed) groups are cut out (per-layer head counts and FFN sizes).
3. **finetune**: the sliced model trains on the same data, learning rate decaying
   linearly to 0 over --finetune-minutes.
4. **write**: int8 weights calibrated on the recipe's val split (export/calibrate.py),
   the source directory's shortlist.bin copied, report.json + report.md of what was
   removed per layer, val BLEU (torch greedy) before and after.

Proposal heads of the source model (config "heads") are kept through the stages but not
trained (they read the final decoder state, which fine-tuning changes): retrain them on
the pruned model with export.train_heads, or drop them with --drop-heads.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see export/train.py

import argparse
import copy
import json
import math
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .batching import BucketBatcher
from .calibrate import calibrate
from .data import corpus_path, load_pairs, read_parallel
from .drafter_training import block_loss
from .prune_groups import KINDS, group_lasso_prox, group_sets, slice_model
from .recipes import get_recipe
from .train import log, rng_state, save_checkpoint, score, set_rng_state, tokenize_pairs
from .vocab import load_vocab
from .writer import read_model_dir, write_model_dir

DEFAULT_KEEP = {"enc_heads": 0.5, "enc_ffn": 0.3, "dec_heads": 0.75, "dec_ffn": 0.5}


def parse_keep(text: str) -> dict[str, float]:
    keep = dict(DEFAULT_KEEP)
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        if name not in KINDS:
            raise SystemExit(f"--keep: unknown kind {name!r} (known: {', '.join(KINDS)})")
        try:
            keep[name] = float(value)
        except ValueError:
            raise SystemExit(f"--keep: {name}={value!r} is not a number") from None
        if not 0 < keep[name] <= 1:
            raise SystemExit(f"--keep: {name}={value} is not in (0, 1]")
    return keep


def layer_floor(gs, min_ffn: int) -> int:
    """Groups a layer keeps at least: one head, or min_ffn FFN units (all if it has fewer)."""
    return 1 if gs.kind.endswith("heads") else min(min_ffn, gs.count)


def removal_targets(sets, keep: dict[str, float], min_ffn: int) -> dict[str, int]:
    """How many groups of each kind to remove: round(count * (1 - keep)), within what the
    per-layer minimums allow."""
    out = {}
    for kind in KINDS:
        mine = [gs for gs in sets if gs.kind == kind]
        total = sum(gs.count for gs in mine)
        floor = sum(layer_floor(gs, min_ffn) for gs in mine)
        out[kind] = min(round(total * (1 - keep[kind])), total - floor)
    return out


def remove_lowest(sets, kind: str, removed: dict[str, set[int]], want: int, min_ffn: int) -> int:
    """Add groups of `kind` to `removed` until `want` of them are: the lowest
    norm / sqrt(size) first (groups the penalty drove to zero come first), never taking a
    layer below its minimum. Returns how many of those added were not yet zero."""
    have = sum(len(removed.get(gs.name, ())) for gs in sets if gs.kind == kind)
    cands = []
    for gs in sets:
        if gs.kind != kind:
            continue
        norms = gs.norms() / math.sqrt(gs.size)
        gone = removed.get(gs.name, set())
        cands += [(float(norms[g]), gs, g) for g in range(gs.count) if g not in gone]
    cands.sort(key=lambda c: c[0])
    forced = 0
    for norm, gs, g in cands:
        if have >= want:
            break
        gone = removed.setdefault(gs.name, set())
        if gs.count - len(gone) <= layer_floor(gs, min_ffn):
            continue
        gone.add(g)
        have += 1
        forced += norm > 0
    return forced


def make_step(model, recipe, block_gen, block_sizes):
    def loss_of(b):
        if model.cfg.arch == "nat-drafter":
            k = block_sizes[int(torch.randint(len(block_sizes), (1,), generator=block_gen))]
            return block_loss(model, b, k, recipe["label_smoothing"], block_gen)
        logits = model(b.src, b.tgt_in)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), b.tgt_out.view(-1),
                               ignore_index=model.pad, label_smoothing=recipe["label_smoothing"], reduction="sum")
        return loss, b.n_tgt_tokens
    return loss_of


class Stage:
    """A training stage with a budget of CPU minutes (process time: a shared machine's
    contention changes its wall-clock length, not its number of steps), checkpointed for
    resumption every few minutes in <run>/<name>.pt."""

    def __init__(self, name: str, run: Path, model, recipe: dict, lr: float, minutes: float,
                 batcher: BucketBatcher, seed: int, block_sizes, save_minutes: float = 3.0):
        self.name, self.path, self.model, self.recipe = name, run / f"{name}.pt", model, recipe
        self.lr, self.budget, self.batcher, self.seed = lr, minutes * 60, batcher, seed
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(recipe["betas"]), eps=recipe["eps"])
        self.step, self.spent, self.extra = 0, 0.0, {}
        self.block_gen = torch.Generator().manual_seed(seed)
        self.loss_of = make_step(model, recipe, self.block_gen, block_sizes)
        self.save_every = save_minutes * 60

    def resume(self) -> bool:
        if not self.path.exists():
            return False
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.spent, self.extra = state["step"], state["spent"], state["extra"]
        set_rng_state(state["rng"])
        self.block_gen.set_state(state["block_gen"])
        log(f"{self.name}: resumed at step {self.step}, {self.spent / 60:.1f} of {self.budget / 60:.0f} min")
        return True

    def save(self) -> None:
        save_checkpoint(self.path, model=self.model.state_dict(), optimizer=self.opt.state_dict(),
                        step=self.step, spent=self.spent, extra=self.extra, rng=rng_state(),
                        block_gen=self.block_gen.get_state(), config=self.model.cfg.to_json())

    def done(self) -> bool:
        return self.spent >= self.budget

    def run(self, lr_at, after_step=None, log_every: int = 20) -> None:
        """Train until the budget is spent. lr_at(fraction of budget spent) -> lr;
        after_step(fraction, lr) runs after every optimizer step (the proximal step)."""
        self.model.train()
        start, last_save = time.process_time() - self.spent, time.time()
        loss_sum, tok_sum, epoch = 0.0, 0, self.step // max(1, len(self.batcher.epoch(0)))
        while not self.done():
            batches = self.batcher.epoch(self.seed * 100003 + epoch)
            offset = self.step % len(batches)
            for key, idx in batches[offset:]:
                frac = self.spent / self.budget
                lr = lr_at(frac)
                for g in self.opt.param_groups:
                    g["lr"] = lr
                loss, n_tok = self.loss_of(self.batcher.make(key, idx))
                self.opt.zero_grad(set_to_none=True)
                (loss / max(n_tok, 1)).backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe["clip_norm"])
                self.opt.step()
                self.step += 1
                if after_step is not None:
                    after_step(frac, lr)
                loss_sum, tok_sum = loss_sum + loss.item(), tok_sum + n_tok
                self.spent = time.process_time() - start
                if self.step % log_every == 0:
                    log(f"{self.name}: step {self.step} loss/tok {loss_sum / max(tok_sum, 1):.3f} lr {lr:.2e} "
                        f"{self.spent / 60:.1f}/{self.budget / 60:.0f} min")
                    loss_sum, tok_sum = 0.0, 0
                if time.time() - last_save > self.save_every:
                    self.save()
                    last_save = time.time()
                if self.done():
                    break
            epoch += 1
        self.save()


def layer_table(cfg_before, cfg_after) -> list[dict]:
    rows = []
    for stack, before, after in (("encoder", cfg_before.encoder_layers, cfg_after.encoder_layers),
                                 ("decoder", cfg_before.decoder_layers, cfg_after.decoder_layers)):
        for i, (b, a) in enumerate(zip(before, after)):
            rows.append({"layer": f"{stack}.{i}", "heads": [b.heads, a.heads], "ffn": [b.ffn, a.ffn]})
    return rows


def report_markdown(report: dict) -> str:
    lines = ["| layer | heads before -> after | FFN before -> after |", "| --- | ---: | ---: |"]
    for row in report["layers"]:
        lines.append(f"| {row['layer']} | {row['heads'][0]} -> {row['heads'][1]} | {row['ffn'][0]} -> {row['ffn'][1]} |")
    lines.append("")
    lines.append(f"parameters {report['parameters'][0]:,} -> {report['parameters'][1]:,}; forced removals "
                 f"{report['forced']}; val {report['metric']} source {report['val_bleu']['source']:.2f}, after lasso "
                 f"{report['val_bleu']['lasso']:.2f}, sliced {report['val_bleu']['sliced']:.2f}, "
                 f"fine-tuned {report['val_bleu']['finetuned']:.2f}")
    return "\n".join(lines) + "\n"


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path, help="model directory to prune (int8 weights are dequantised)")
    ap.add_argument("--recipe", required=True, help="export.recipes name: data, label smoothing, batch shapes")
    ap.add_argument("--train-tgt", type=Path, help="training targets line-aligned with the recipe's train sources "
                    "(distilled); default: the corpus targets")
    ap.add_argument("--run", required=True, type=Path, help="checkpoints, logs and the report")
    ap.add_argument("--out", type=Path, help="pruned model directory to write (default: <run>/model)")
    ap.add_argument("--keep", default="", help="kept share per kind, e.g. enc_heads=0.5,enc_ffn=0.3 "
                    f"(defaults {','.join(f'{k}={v}' for k, v in DEFAULT_KEEP.items())})")
    ap.add_argument("--min-ffn", type=int, default=32, help="FFN units every layer keeps")
    ap.add_argument("--strength", type=float, default=0.3, help="group-lasso strength (per sqrt(group size))")
    ap.add_argument("--ramp", type=float, default=0.2, help="share of the lasso stage over which strength ramps up")
    ap.add_argument("--rounds", type=int, default=10, help="removal rounds, evenly from the end of the ramp to 80 %% "
                    "of the lasso stage")
    ap.add_argument("--lasso-minutes", type=float, default=15.0, help="CPU minutes of the group-lasso stage")
    ap.add_argument("--finetune-minutes", type=float, default=12.0, help="CPU minutes of fine-tuning")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch-tokens", type=int, default=2000, help="target tokens per batch (smaller than the "
                    "recipe's: more, cheaper steps for a short budget)")
    ap.add_argument("--drop-heads", action="store_true", help="leave the proposal heads out of the pruned model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    recipe = get_recipe(args.recipe)
    keep = parse_keep(args.keep)
    run: Path = args.run
    run.mkdir(parents=True, exist_ok=True)
    out = args.out or run / "model"

    source, spm_file = read_model_dir(args.model_dir)
    sp = load_vocab(spm_file)
    if args.drop_heads and hasattr(source, "heads"):
        del source.heads
        source.cfg.heads = None
    cfg_before, params_before = copy.deepcopy(source.cfg), count_params(source)
    if args.train_tgt:
        train_pairs = read_parallel(corpus_path("train", recipe["src"], recipe["corpus"]), args.train_tgt)
    else:
        train_pairs = load_pairs("train", recipe["src"], recipe["tgt"], recipe["corpus"])
    val_pairs = load_pairs("val", recipe["src"], recipe["tgt"], recipe["corpus"])
    train_ids, dropped = tokenize_pairs(sp, train_pairs, recipe["max_len"])
    log(f"{args.model_dir}: train pairs {len(train_ids)} (dropped {dropped}), val {len(val_pairs)}")
    batcher = BucketBatcher(train_ids, args.batch_tokens, source.pad, source.bos, source.eos)
    block_sizes = recipe.get("block_sizes") or [source.cfg.block_size]
    report_path = run / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"val_bleu": {}}

    def val_bleu(model, key: str, step: int = 0) -> float:
        """Scored once per stage state: a later run with a larger budget (more steps) scores again."""
        stamps = report.setdefault("val_steps", {})
        if key not in report["val_bleu"] or stamps.get(key, 0) != step:
            report["val_bleu"][key] = score(model, sp, val_pairs)[0]
            stamps[key] = step
            report_path.write_text(json.dumps(report, indent=2))
        log(f"val {'block acc' if model.cfg.arch == 'nat-drafter' else 'BLEU'} {key}: {report['val_bleu'][key]:.2f}")
        return report["val_bleu"][key]

    val_bleu(source, "source")
    warm = 50  # steps of linear warm-up: a fresh Adam on a trained model

    # ---- 1. lasso
    model = source
    sets = group_sets(model)
    targets = removal_targets(sets, keep, args.min_ffn)
    lasso = Stage("lasso", run, model, recipe, args.lr, args.lasso_minutes, batcher, args.seed, block_sizes)
    resumed = lasso.resume()
    extra = lasso.extra
    if not resumed:
        extra.update(removed={}, forced={}, round=0)
    removed = {name: set(v) for name, v in extra["removed"].items()}

    rounds_at = [args.ramp + (0.8 - args.ramp) * k / args.rounds for k in range(1, args.rounds + 1)]

    def remove_round(k: int) -> None:
        """Round k of args.rounds: k / rounds of every kind's target removed."""
        for kind in KINDS:
            want = round(targets[kind] * k / args.rounds)
            extra["forced"][kind] = extra["forced"].get(kind, 0) + remove_lowest(sets, kind, removed, want,
                                                                                  args.min_ffn)
        extra["round"] = k
        log(f"lasso: removal round {k}/{args.rounds} at step {lasso.step}: " + ", ".join(
            f"{kind} {sum(len(removed.get(gs.name, ())) for gs in sets if gs.kind == kind)}/{targets[kind]}"
            for kind in KINDS))

    def prox(frac: float, lr: float) -> None:
        strength = min(1.0, frac / args.ramp) * args.strength
        group_lasso_prox(sets, {k: strength for k in KINDS if targets[k] > 0}, lr, removed)
        while extra.get("round", 0) < args.rounds and frac >= rounds_at[extra.get("round", 0)]:
            remove_round(extra.get("round", 0) + 1)
        extra["removed"] = {name: sorted(v) for name, v in removed.items()}

    if not lasso.done():
        lasso.run(lambda frac: args.lr * min(1.0, (lasso.step + 1) / warm), prox)
    while extra.get("round", 0) < args.rounds:  # a stage that ended early still removes every target
        remove_round(extra.get("round", 0) + 1)
    extra["removed"] = {name: sorted(v) for name, v in removed.items()}
    group_lasso_prox(sets, {}, 0.0, removed)  # the removed groups exactly zero
    lasso.save()
    val_bleu(model, "lasso", lasso.step)

    # ---- 2. slice
    sliced = slice_model(model, extra["removed"])
    val_bleu(sliced, "sliced", lasso.step)

    # ---- 3. finetune
    fine = Stage("finetune", run, sliced, recipe, args.lr, args.finetune_minutes, batcher, args.seed + 1, block_sizes)
    fine.resume()
    if not fine.done():
        fine.run(lambda frac: args.lr * min(1.0, (fine.step + 1) / warm) * max(0.0, 1.0 - frac))
    sliced.eval()
    val_bleu(sliced, "finetuned", fine.step)

    # ---- 4. write
    calib = [(sp.encode(s), sp.encode(t)) for s, t in val_pairs]
    scales = calibrate(sliced, calib, 16)
    calibration = {"data": f"{Path(recipe['corpus']).name} val {recipe['src']}-{recipe['tgt']}",
                   "sentences": len(calib), "batch_size": 16}
    if out.exists():
        shutil.rmtree(out)
    shortlist = args.model_dir / "shortlist.bin"
    if shortlist.exists():  # in place before the writer's checksum, which lists it (a foreign one is refused)
        out.mkdir(parents=True)
        shutil.copyfile(shortlist, out / "shortlist.bin")
    write_model_dir(sliced, spm_file, out, act_scales=scales, int8=True, calibration=calibration)
    report.update(source=str(args.model_dir), metric="block acc" if sliced.cfg.arch == "nat-drafter" else "BLEU",
                  keep=keep, targets=targets, forced=extra["forced"],
                  removed=extra["removed"], layers=layer_table(cfg_before, sliced.cfg),
                  parameters=[params_before, count_params(sliced)],
                  lasso={"steps": lasso.step, "minutes": lasso.spent / 60, "strength": args.strength,
                         "ramp": args.ramp},
                  finetune={"steps": fine.step, "minutes": fine.spent / 60}, lr=args.lr,
                  batch_tokens=args.batch_tokens)
    report_path.write_text(json.dumps(report, indent=2))
    (run / "report.md").write_text(report_markdown(report))
    log(f"wrote {out}\n{report_markdown(report)}")


if __name__ == "__main__":
    main()
