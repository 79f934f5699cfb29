"""Train a seq2seq model from a recipe on CPU within a wall-clock budget.

    python -m export.train --recipe teacher-en-de --out /work/runs/teacher-en-de \
        --minutes 105 --threads 2

Everything goes to --out (outside the repo): spm.model, train.log lines on stdout,
checkpoints (epoch{N}.pt, last N kept, plus best.pt), averaged.pt and results.json.
Running the same command again resumes from the newest epoch checkpoint (model,
optimizer, step, RNG states and the time already spent).

Speed on CPU depends on three measured fixes: the cheap dropout mask and plain-matmul
attention in modeling.py, and fixed batch shapes per length bucket in batching.py.
bf16 autocast is a recipe switch: it helps only where oneDNN has AMX.
"""
from __future__ import annotations

import os

# Set before torch loads libgomp: with the default (active, spinning) wait policy a 2-thread
# step ran 3-4x slower whenever another process held one of the two cores (353 vs 1124
# tok/s measured); passive waiting costs nothing measurable on an idle machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F

from . import decode
from .batching import BucketBatcher
from .data import load_pairs
from .modeling import ModelConfig, Seq2Seq, count_parameters
from .recipes import get_recipe
from .vocab import TOKENS, load_vocab, train_vocab


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def build_model(recipe: dict, vocab_size: int) -> Seq2Seq:
    m = recipe["model"]
    cfg = ModelConfig.create(
        m["d_model"], m["heads"], m["ffn"], m["enc_layers"], m["dec_layers"], head_dim=m.get("head_dim"),
        arch=recipe["arch"], vocab_size=vocab_size, norm=m["norm"], decoder_self=m["decoder_self"],
        tokens=dict(TOKENS), max_source_len=recipe["max_len"], block_size=m.get("block_size"),
    )
    return Seq2Seq(cfg, recipe["dropout"], recipe["attn_dropout"], recipe["act_dropout"])


def lr_at(step: int, recipe: dict) -> float:
    """Linear warm-up to the peak, then inverse square root decay."""
    w = recipe["warmup"]
    step = max(step, 1)
    return recipe["lr"] * min(step / w, math.sqrt(w / step))


def bleu(model: Seq2Seq, sp, sources: list[str], refs: list[str]) -> tuple[float, list[str]]:
    src_ids = [sp.encode(s) + [model.eos] for s in sources]
    hyps = [sp.decode(h) for h in decode.greedy(model, src_ids, batch_size=128)]
    return sacrebleu.corpus_bleu(hyps, [refs]).score, hyps


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def epoch_checkpoints(out: Path) -> list[Path]:
    return sorted(out.glob("epoch*.pt"), key=lambda p: int(p.stem[5:]))


def save_checkpoint(path: Path, **payload) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # never leave a half-written checkpoint behind


def average_checkpoints(paths: list[Path]) -> dict:
    avg = None
    for p in paths:
        sd = torch.load(p, map_location="cpu", weights_only=False)["model"]
        if avg is None:
            avg = {k: v.detach().clone().double() for k, v in sd.items()}
        else:
            for k, v in sd.items():
                avg[k] += v.double()
    return {k: (v / len(paths)).float() for k, v in avg.items()}


def tokenize_pairs(sp, pairs, max_len):
    out, dropped = [], 0
    for s, t in pairs:
        si, ti = sp.encode(s), sp.encode(t)
        if len(si) + 1 > max_len or len(ti) + 1 > max_len:
            dropped += 1  # too long for the training shapes; reported, never silent
            continue
        out.append((si, ti))
    return out, dropped


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget (all runs of this --out)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many updates (0 = no limit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bf16", choices=["recipe", "on", "off"], default="recipe",
                    help="bf16 autocast (fast only with AMX); default: the recipe's choice")
    ap.add_argument("--log-every", type=int, default=20)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    recipe = get_recipe(args.recipe)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wall_start = time.time()

    # ---- data and vocabulary
    train_pairs = load_pairs("train", recipe["src"], recipe["tgt"], recipe["corpus"])
    val_pairs = load_pairs("val", recipe["src"], recipe["tgt"], recipe["corpus"])
    spm_path = out / "spm.model"
    if not spm_path.exists():
        log(f"training joint sentencepiece vocabulary ({recipe['vocab_size']}) -> {spm_path}")
        train_vocab([s for s, _ in train_pairs] + [t for _, t in train_pairs], spm_path, recipe["vocab_size"])
    sp = load_vocab(spm_path)
    train_ids, dropped = tokenize_pairs(sp, train_pairs, recipe["max_len"])
    log(f"train pairs {len(train_ids)} (dropped {dropped} longer than {recipe['max_len']} tokens); val {len(val_pairs)}")

    # ---- model, optimizer, resume
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    model = build_model(recipe, sp.vocab_size())
    opt = torch.optim.Adam(model.parameters(), lr=recipe["lr"], betas=tuple(recipe["betas"]), eps=recipe["eps"])
    log(f"model {recipe['arch']} params {count_parameters(model):,}; config {json.dumps(model.cfg.to_json())}")
    step, epoch, spent, best_bleu, history = 0, 0, 0.0, -1.0, []
    ckpts = epoch_checkpoints(out)
    if ckpts:
        state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, epoch, spent = state["step"], state["epoch"], state["spent_seconds"]
        best_bleu, history = state["best_bleu"], state["history"]
        set_rng_state(state["rng"])
        log(f"resumed from {ckpts[-1].name}: epoch {epoch}, step {step}, {spent / 60:.1f} min spent")

    batcher = BucketBatcher(train_ids, recipe["batch_tokens"], model.pad, model.bos, model.eos)
    log(f"{len(batcher.buckets)} length buckets; {len(batcher.epoch(0))} batches per epoch")
    budget = args.minutes * 60.0
    use_bf16 = recipe.get("bf16", False) if args.bf16 == "recipe" else args.bf16 == "on"
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16)
    log(f"bf16 autocast {'on' if use_bf16 else 'off'}; {args.threads} threads; budget {args.minutes:.0f} min")
    spm_bytes = spm_path.read_bytes()
    val_src, val_ref = [s for s, _ in val_pairs], [t for _, t in val_pairs]

    def checkpoint(name: str) -> Path:
        path = out / name
        save_checkpoint(path, model=model.state_dict(), optimizer=opt.state_dict(), step=step, epoch=epoch,
                        spent_seconds=spent, best_bleu=best_bleu, history=history, rng=rng_state(),
                        config=model.cfg.to_json(), recipe=args.recipe, spm=spm_bytes)
        return path

    out_of_time = False
    while not out_of_time and not (args.max_steps and step >= args.max_steps):
        epoch += 1
        model.train()
        run_start = time.time() - spent  # so that time.time() - run_start == total spent
        t_log, tok_log, loss_sum, loss_tok = time.time(), 0, 0.0, 0
        batches = batcher.epoch(args.seed * 100003 + epoch)
        for bi, (key, idx) in enumerate(batches):
            b = batcher.make(key, idx)
            for g in opt.param_groups:
                g["lr"] = lr_at(step + 1, recipe)
            with autocast:
                logits = model(b.src, b.tgt_in)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), b.tgt_out.view(-1),
                                   ignore_index=model.pad, label_smoothing=recipe["label_smoothing"], reduction="sum")
            opt.zero_grad(set_to_none=True)
            (loss / b.n_tgt_tokens).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["clip_norm"])
            opt.step()
            step += 1
            loss_sum += loss.item()
            loss_tok += b.n_tgt_tokens
            tok_log += b.n_tgt_tokens
            spent = time.time() - run_start
            if step % args.log_every == 0:
                now = time.time()
                rate = tok_log / (now - t_log)
                log(f"epoch {epoch} batch {bi + 1}/{len(batches)} step {step} loss/tok {loss_sum / loss_tok:.3f} "
                    f"lr {lr_at(step, recipe):.2e} tgt tok/s {rate:.0f} spent {spent / 60:.1f} min "
                    f"ETA {max(0.0, budget - spent) / 60:.1f} min")
                t_log, tok_log, loss_sum, loss_tok = now, 0, 0.0, 0
            if spent >= budget or (args.max_steps and step >= args.max_steps):
                out_of_time = True
                break
        if out_of_time and bi + 1 < len(batches):
            epoch -= 1  # a partial epoch is not a checkpointed epoch
            log(f"budget reached in epoch {epoch + 1} at step {step}")
            break
        t0 = time.time()
        val_bleu, _ = bleu(model, sp, val_src, val_ref)
        history.append({"epoch": epoch, "step": step, "val_bleu": val_bleu, "minutes": spent / 60})
        is_best = val_bleu > best_bleu
        best_bleu = max(best_bleu, val_bleu)
        spent += time.time() - t0
        path = checkpoint(f"epoch{epoch}.pt")
        if is_best:
            save_checkpoint(out / "best.pt", model=model.state_dict(), config=model.cfg.to_json(), step=step,
                            epoch=epoch, val_bleu=val_bleu, recipe=args.recipe, spm=spm_bytes)
        for old in epoch_checkpoints(out)[: -recipe["keep_checkpoints"]]:
            old.unlink()
        log(f"epoch {epoch} done: step {step} val BLEU {val_bleu:.2f} (best {best_bleu:.2f}) "
            f"eval {time.time() - t0:.0f}s -> {path.name}")
        if spent >= budget:
            out_of_time = True

    # ---- averaging and final evaluation
    results = {"recipe": args.recipe, "steps": step, "epochs": epoch, "history": history}
    keep = epoch_checkpoints(out)[-recipe["average_last"]:]
    evals = {}
    if keep:
        avg = average_checkpoints(keep)
        save_checkpoint(out / "averaged.pt", model=avg, config=model.cfg.to_json(), step=step, epoch=epoch,
                        averaged=[p.name for p in keep], recipe=args.recipe, spm=spm_bytes)
        evals["averaged"] = avg
        log(f"averaged {', '.join(p.name for p in keep)} -> averaged.pt")
    if (out / "best.pt").exists():
        evals["best"] = torch.load(out / "best.pt", map_location="cpu", weights_only=False)["model"]
    for name, sd in evals.items():
        model.load_state_dict(sd)
        res = {"val": bleu(model, sp, val_src, val_ref)[0]}
        for test in recipe["test_sets"]:
            pairs = load_pairs(test, recipe["src"], recipe["tgt"], recipe["corpus"])
            score, hyps = bleu(model, sp, [s for s, _ in pairs], [t for _, t in pairs])
            res[test] = score
            (out / f"{name}.{test}.{recipe['tgt']}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        results[name] = res
        log(f"final {name}: greedy BLEU " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    log(f"done in {(time.time() - wall_start) / 60:.1f} min wall clock")


if __name__ == "__main__":
    main()
