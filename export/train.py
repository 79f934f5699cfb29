"""Train a seq2seq model from a recipe within a wall-clock budget, on the CPU or a GPU.

    python -m export.train --recipe teacher-en-de --out /work/runs/teacher-en-de \
        --minutes 105 --threads 2
    python -m export.train --recipe uk-gec-base-synth --out RUN --device cuda --minutes 6 \
        --checkpoint-minutes 2 --stop-after-minutes 7

--minutes is the budget of all runs of one --out together; --stop-after-minutes caps this
process alone (data loading included: a device call's slot), after which it stops the
same clean way: the partial epoch is evaluated and checkpointed, the last checkpoints
averaged, results.json written. --checkpoint-minutes also writes the running epoch's
checkpoint every that many minutes without evaluating, so a killed run loses at most that.
On --device cuda, bf16 autocast is on unless --bf16 off (the recipe's "bf16" is the CPU's
choice), and the CUDA RNG state is checkpointed with the CPU's: a resumed run repeats the
uninterrupted one's updates (bit for bit on the CPU; on a GPU as far as its kernels are
deterministic).

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
from .data import corpus_path, load_pairs, read_parallel
from .drafter_training import block_accuracy, block_loss
from .modeling import ModelConfig, Seq2Seq, count_parameters
from .recipes import get_recipe
from .train_clock import TrainingClock
from .vocab import TOKENS, load_vocab, train_vocab
from .warm_start import init_from_teacher


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


def score(model: Seq2Seq, sp, pairs: list[tuple[str, str]]) -> tuple[float, list[str] | None]:
    """Validation metric: greedy BLEU for AT models; for a drafter, the percentage of
    drafted tokens that equal the reference given gold prefixes (no hypotheses)."""
    if model.cfg.arch == "nat-drafter":
        ids = [(sp.encode(s), sp.encode(t)) for s, t in pairs]
        return block_accuracy(model, ids, model.cfg.block_size), None
    return bleu(model, sp, [s for s, _ in pairs], [t for _, t in pairs])


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # dropout on a GPU draws from its own generator
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def epoch_checkpoints(out: Path) -> list[Path]:
    return sorted(out.glob("epoch*.pt"), key=lambda p: int(p.stem[5:]))


def cpu_state(model: torch.nn.Module) -> dict:
    """The model's state_dict on the CPU: checkpoints load anywhere, map_location or not."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


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
    # One call per side (sentencepiece's own loop): ~370k synthetic pairs took minutes one by one.
    srcs, tgts = sp.encode([s for s, _ in pairs]), sp.encode([t for _, t in pairs])
    for si, ti in zip(srcs, tgts):
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
                    help="bf16 autocast (on a CPU fast only with AMX); default: on for cuda, else the recipe's choice")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the model trains")
    ap.add_argument("--batch-tokens", type=int, default=0, help="tokens per batch instead of the recipe's "
                    "(changes the batches, so a run keeps one value)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training forward pass (it compiles "
                    "again for new bucket shapes until it goes dynamic: for runs of hours, not a 5-minute device call)")
    ap.add_argument("--checkpoint-minutes", type=float, default=0.0,
                    help="also checkpoint the running epoch every this many training minutes (0: epoch ends only)")
    ap.add_argument("--no-test", action="store_true", help="final evaluation on val only, not the recipe's test "
                    "sets (a pretraining stage whose test figure nobody reads)")
    ap.add_argument("--stop-after-minutes", type=float, default=0.0,
                    help="stop cleanly after this many minutes of this process (0: no cap), whatever --minutes says")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--train-tgt", type=Path, help="training targets replacing the corpus ones (e.g. distilled), "
                    "line-aligned with the training sources")
    ap.add_argument("--init", type=Path, help="teacher checkpoint to start from (export/warm_start.py): its "
                    "sentencepiece model, embeddings, encoder and spread decoder layers; only on a fresh --out")
    args = ap.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); expected a GPU "
                 "machine, or --device cpu")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already fixed in this process (e.g. by an earlier call in tests)
        pass
    recipe = get_recipe(args.recipe)
    if args.batch_tokens:
        recipe["batch_tokens"] = args.batch_tokens
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wall_start = time.time()

    # ---- data and vocabulary
    if args.train_tgt:
        train_pairs = read_parallel(corpus_path("train", recipe["src"], recipe["corpus"]), args.train_tgt)
        log(f"training targets from {args.train_tgt}")
    else:
        train_pairs = load_pairs("train", recipe["src"], recipe["tgt"], recipe["corpus"])
    val_pairs = load_pairs("val", recipe["src"], recipe["tgt"], recipe["corpus"])
    spm_path = out / "spm.model"
    init_ckpt = torch.load(args.init, map_location="cpu", weights_only=False) if args.init else None
    if init_ckpt is not None and not spm_path.exists():  # a warm start must share the teacher's pieces
        spm_path.write_bytes(init_ckpt["spm"])
        log(f"sentencepiece vocabulary from {args.init}")
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
    model = build_model(recipe, sp.vocab_size()).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=recipe["lr"], betas=tuple(recipe["betas"]), eps=recipe["eps"])
    log(f"model {recipe['arch']} params {count_parameters(model):,}; config {json.dumps(model.cfg.to_json())}")
    step, epoch, spent, best_bleu, history = 0, 0, 0.0, -1.0, []
    block_gen = torch.Generator().manual_seed(args.seed)  # drafter prefix lengths and block sizes
    # A drafter trained on several block sizes drafts well at each, so its block size can
    # be chosen after training, on validation data (export/choose_block.py).
    block_sizes = recipe.get("block_sizes") or [model.cfg.block_size]
    skip_batches = 0  # batches of `epoch + 1` already trained (resuming a partial epoch)
    ckpts = epoch_checkpoints(out)
    if ckpts:
        state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)  # a run may move between devices
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, epoch, spent = state["step"], state["epoch"], state["spent_seconds"]
        best_bleu, history = state["best_bleu"], state["history"]
        set_rng_state(state["rng"])
        if "block_gen" in state:  # absent in checkpoints of older runs
            block_gen.set_state(state["block_gen"])
        skip_batches = state.get("batches_in_epoch", 0)
        if skip_batches:  # the checkpoint was written mid-epoch: finish that epoch first
            epoch -= 1
        where = f"inside epoch {epoch + 1} after batch {skip_batches}" if skip_batches else f"after epoch {epoch}"
        log(f"resumed from {ckpts[-1].name} {where}: step {step}, {spent / 60:.1f} min spent")
    elif init_ckpt is not None:
        copied, kept = init_from_teacher(model, init_ckpt["model"])
        log(f"initialised from {args.init}: {len(copied)} tensors copied, {len(kept)} kept random"
            + (f" ({', '.join(kept[:6])}{' ...' if len(kept) > 6 else ''})" if kept else ""))

    batcher = BucketBatcher(train_ids, recipe["batch_tokens"], model.pad, model.bos, model.eos)
    log(f"{len(batcher.buckets)} length buckets; {len(batcher.epoch(0))} batches per epoch")
    budget = args.minutes * 60.0
    if args.bf16 == "recipe":
        use_bf16 = device.type == "cuda" or recipe.get("bf16", False)
    else:
        use_bf16 = args.bf16 == "on"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
    forward = torch.compile(model) if args.compile else model  # the same parameters; state_dict names unchanged
    log(f"device {device}; bf16 autocast {'on' if use_bf16 else 'off'}; {args.threads} threads; "
        f"{recipe['batch_tokens']} tokens per batch; budget {args.minutes:.0f} min"
        + (f", this process {args.stop_after_minutes:.1f} min" if args.stop_after_minutes else ""))
    spm_bytes = spm_path.read_bytes()
    metric = "block acc" if recipe["arch"] == "nat-drafter" else "BLEU"

    def checkpoint(name: str, batches_in_epoch: int) -> Path:
        """batches_in_epoch: 0 when `epoch` is complete, else how many of its batches are done."""
        path = out / name
        save_checkpoint(path, model=cpu_state(model), optimizer=opt.state_dict(), step=step, epoch=epoch,
                        batches_in_epoch=batches_in_epoch, spent_seconds=spent, best_bleu=best_bleu,
                        history=history, rng=rng_state(), block_gen=block_gen.get_state(),
                        config=model.cfg.to_json(), recipe=args.recipe, spm=spm_bytes)
        return path

    out_of_time = False
    clock = TrainingClock(spent)  # wall time, less the time the process was stopped
    process_end = wall_start + args.stop_after_minutes * 60.0 if args.stop_after_minutes else math.inf
    last_checkpoint = spent
    run_tokens, run_seconds = 0, 0.0  # this process's training throughput (evaluations left out)
    while not out_of_time and not (args.max_steps and step >= args.max_steps):
        epoch += 1
        model.train()
        t_log, tok_log, loss_sum, loss_tok = time.time(), 0, 0.0, 0
        t_step = time.time()
        batches = batcher.epoch(args.seed * 100003 + epoch)
        done_batches = skip_batches
        for bi in range(skip_batches, len(batches)):
            b = batcher.make(*batches[bi]).to(device)
            for g in opt.param_groups:
                g["lr"] = lr_at(step + 1, recipe)
            with autocast:
                if model.cfg.arch == "nat-drafter":
                    k = block_sizes[int(torch.randint(len(block_sizes), (1,), generator=block_gen))]
                    loss, n_tok = block_loss(model, b, k, recipe["label_smoothing"], block_gen)
                else:
                    logits = forward(b.src, b.tgt_in)
                    loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), b.tgt_out.view(-1),
                                           ignore_index=model.pad, label_smoothing=recipe["label_smoothing"],
                                           reduction="sum")
                    n_tok = b.n_tgt_tokens
            opt.zero_grad(set_to_none=True)
            (loss / max(n_tok, 1)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["clip_norm"])
            opt.step()
            step += 1
            loss_sum += loss.detach().float()  # summed on the device: .item() every step would wait for the GPU
            loss_tok += n_tok
            tok_log += b.n_tgt_tokens
            run_tokens += b.n_tgt_tokens
            spent = clock.tick()
            if step % args.log_every == 0:
                now = time.time()
                rate = tok_log / (now - t_log)
                log(f"epoch {epoch} batch {bi + 1}/{len(batches)} step {step} loss/tok {float(loss_sum) / loss_tok:.3f} "
                    f"lr {lr_at(step, recipe):.2e} tgt tok/s {rate:.0f} spent {spent / 60:.1f} min "
                    f"ETA {max(0.0, budget - spent) / 60:.1f} min")
                t_log, tok_log, loss_sum, loss_tok = now, 0, 0.0, 0
            done_batches = bi + 1
            if spent >= budget or (args.max_steps and step >= args.max_steps) or time.time() >= process_end:
                out_of_time = True
                break
            if args.checkpoint_minutes and spent - last_checkpoint >= args.checkpoint_minutes * 60.0 \
                    and done_batches < len(batches):  # an epoch's end checkpoints anyway
                if device.type == "cuda":
                    torch.cuda.synchronize()
                run_seconds += time.time() - t_step
                checkpoint(f"epoch{epoch}.pt", done_batches)  # state before batch done_batches + 1; no evaluation
                log(f"checkpoint inside epoch {epoch} at batch {done_batches}/{len(batches)}, step {step}")
                last_checkpoint, t_step = spent, time.time()
        if device.type == "cuda":
            torch.cuda.synchronize()  # the queued steps belong to training time, not to the evaluation's
        run_seconds += time.time() - t_step
        skip_batches = 0
        partial = done_batches < len(batches)
        if partial:  # checkpointed like an epoch, so the last minutes count and can resume
            log(f"budget reached in epoch {epoch} at batch {done_batches}/{len(batches)}, step {step}")
        if clock.stalled_seconds:
            log(f"so far {clock.stalled_seconds / 60:.1f} min stopped, not charged")
        t0 = time.time()
        val_bleu, _ = score(model, sp, val_pairs)
        history = [h for h in history if h["epoch"] != epoch]  # a resumed partial epoch is replaced
        history.append({"epoch": epoch, "step": step, "val_bleu": val_bleu, "minutes": spent / 60,
                        "partial": partial})
        is_best = val_bleu > best_bleu
        best_bleu = max(best_bleu, val_bleu)
        spent = clock.add(time.time() - t0)  # the evaluation, charged whole (stops during it included)
        path = checkpoint(f"epoch{epoch}.pt", done_batches if partial else 0)
        last_checkpoint = spent
        if is_best:
            save_checkpoint(out / "best.pt", model=cpu_state(model), config=model.cfg.to_json(), step=step,
                            epoch=epoch, val_bleu=val_bleu, recipe=args.recipe, spm=spm_bytes)
        for old in epoch_checkpoints(out)[: -recipe["keep_checkpoints"]]:
            old.unlink()
        log(f"epoch {epoch}{' (partial)' if partial else ''} done: step {step} val {metric} {val_bleu:.2f} "
            f"(best {best_bleu:.2f}) "
            f"eval {time.time() - t0:.0f}s -> {path.name}")
        if spent >= budget or time.time() >= process_end:
            out_of_time = True

    # ---- averaging and final evaluation
    results = {"recipe": args.recipe, "metric": metric, "steps": step, "epochs": epoch, "history": history,
               "throughput": {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "threads": args.threads, "bf16": use_bf16, "batch_tokens": recipe["batch_tokens"],
                              "tgt_tokens": run_tokens, "train_seconds": round(run_seconds, 1),
                              "tgt_tokens_per_s": round(run_tokens / run_seconds) if run_seconds else None}}
    if run_seconds:
        log(f"throughput: {run_tokens / run_seconds:.0f} target tokens/s over {run_seconds:.0f} s of training "
            f"({device}, bf16 {'on' if use_bf16 else 'off'}, {recipe['batch_tokens']} tokens per batch)")
    keep = epoch_checkpoints(out)[-recipe["average_last"]:]
    evals = {}
    if keep:
        avg = average_checkpoints(keep)
        save_checkpoint(out / "averaged.pt", model=avg, config=model.cfg.to_json(), step=step, epoch=epoch,
                        averaged=[p.name for p in keep], recipe=args.recipe, spm=spm_bytes)
        evals["averaged"] = avg
        log(f"averaged {', '.join(p.name for p in keep)} -> averaged.pt")
    known_val = {}
    if (out / "best.pt").exists():
        best = torch.load(out / "best.pt", map_location="cpu", weights_only=False)
        evals["best"], known_val["best"] = best["model"], best["val_bleu"]  # scored when it was saved
    for name, sd in evals.items():
        model.load_state_dict(sd)
        res = {"val": known_val[name] if name in known_val else score(model, sp, val_pairs)[0]}
        for test in [] if args.no_test else recipe["test_sets"]:
            value, hyps = score(model, sp, load_pairs(test, recipe["src"], recipe["tgt"], recipe["corpus"]))
            res[test] = value
            if hyps is not None:
                (out / f"{name}.{test}.{recipe['tgt']}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        results[name] = res
        log(f"final {name}: {'greedy BLEU' if metric == 'BLEU' else metric} "
            + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    log(f"done in {(time.time() - wall_start) / 60:.1f} min wall clock")


if __name__ == "__main__":
    main()
