"""Train a decoder that reads another model's encoder output: a GAD block drafter with
no encoder of its own (`drafter`), or BiLD's little autoregressive model (`little`).

    python -m export.train_shared drafter models/en-de --init models/en-de-drafter \
        --sources ../shared/data/multi30k/train.en.gz --run /work/runs/shared-drafter \
        --out /work/runs/shared-drafter/model --minutes 40
    python -m export.train_shared little models/en-de-big --layers 0 \
        --sources ../shared/data/multi30k/train.en.gz --run /work/runs/little \
        --out /work/runs/little/model --steps 18300 --minutes 240 [--device cuda]

HOST_DIR is the model whose encoder the new decoder reads (GAD's verifier, BiLD's big
model). Its encoder stays frozen, bit for bit: the new model directory stores none of
it, only the digest of the host's encoder (config.json encoder.shared,
pyfastdec.model_dir.encoder_digest), so pyfastdec can refuse to pair it with another
host. One encoder pass then serves both models (distilled Whisper's shared encoder).

Training data is the host's own greedy outputs of --sources (self-distillation: the
drafted or little tokens are judged against exactly those), so what is learnt is what
the verifier accepts.
- drafter: random-length prefixes of the host's output and k mask tokens, k drawn per
  batch from --block-sizes (export/drafter_training.py); the decoder, output bias and
  embedding start from --init (a drafter with its own encoder: its decoder reads a
  different memory at first and learns the host's).
- little: next-token cross-entropy; the decoder starts from the host's decoder layers
  --layers (e.g. "0": the host's first layer and final norm), the embedding and bias
  from the host.
What trains: the decoder layers and the output bias; the embedding stays as initialised.

Training stops at --steps or after --minutes, whichever comes first, counted over every
run of the same --run, on --device (any torch device; a run may continue on another).
Stages, kept in --run so the same command continues where it stopped: greedy.txt (the
host's greedy outputs; once complete, the rest needs no native engine), train.pt
(model, optimizer, position; every --save-every steps and at the end), log.txt, then
--out (int8 when the host is, activation scales calibrated on the first 1,000 training
pairs) and report.json (held-out agreement with the host's greedy outputs).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see export/train.py

import argparse
import json
import random
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from pyfastdec.model_dir import ModelDir, encoder_digest, file_digest

from .batching import BucketBatcher
from .calibrate import calibrate
from .drafter_training import block_accuracy, block_loss
from .host_memory import HostMemory
from .modeling import LayerSpec, ModelConfig, Seq2Seq
from .train import lr_at, rng_state, save_checkpoint, set_rng_state
from .train_clock import TrainingClock
from .train_heads import decode_greedy, source_ids
from .train_joint import log, record_settings
from .writer import read_model_dir, write_model_dir

SETTINGS = ("kind", "host", "init", "layers", "shape", "sources", "limit", "held_out", "block_sizes", "lr", "warmup",
            "batch_tokens", "dropout", "label_smoothing", "seed")


def host_files(host_dir: Path) -> str:
    """What identifies a host for a run: its config.json (activation scales, checksums),
    weights and shortlist, not only its path. A host retrained in place (a new teacher) has
    other greedy outputs, cached in the run, and another encoder."""
    parts = [file_digest((host_dir / name).read_bytes()) for name in ("config.json", "model.safetensors",
                                                                       "shortlist.bin")
             if (host_dir / name).exists()]
    return file_digest(" ".join(parts).encode())


def student_config(kind: str, host: ModelConfig, init: ModelConfig, layers: list[int], block: int) -> ModelConfig:
    """The new model's config: the host's vocabulary and width, no encoder layers (it
    reads the host's), the decoder of --init (drafter) or the host's layers `layers`."""
    cfg = ModelConfig.from_json(host.to_json())
    cfg.encoder_layers, cfg.quantization, cfg.heads = [], None, None
    cfg.encoder_shared = "sha256:" + "0" * 64  # set to the host's digest when written
    if kind == "drafter":
        cfg.arch, cfg.block_size, cfg.decoder_self = "nat-drafter", block, "attention"
        cfg.decoder_layers = [LayerSpec(s.heads, s.ffn) for s in init.decoder_layers]
        cfg.tokens = dict(init.tokens)
    else:
        cfg.decoder_layers = [LayerSpec(host.decoder_layers[i].heads, host.decoder_layers[i].ffn) for i in layers]
    cfg.__post_init__()
    return cfg


def build_student(kind: str, host: Seq2Seq, init: Seq2Seq, layers: list[int], block: int,
                  dropout: float) -> Seq2Seq:
    cfg = student_config(kind, host.cfg, init.cfg, layers, block)
    student = Seq2Seq(cfg, dropout, dropout, dropout)
    source = init.state_dict()
    state = {"embed.weight": source["embed.weight"], "output.bias": source["output.bias"]}
    picked = range(len(cfg.decoder_layers)) if kind == "drafter" else layers
    for new, old in enumerate(picked):
        prefix = f"decoder.layers.{old}."
        state.update({f"decoder.layers.{new}." + k[len(prefix):]: v for k, v in source.items() if k.startswith(prefix)})
    state.update({k: v for k, v in source.items() if k.startswith("decoder.final_ln.")})
    student.load_state_dict(state)
    return student.attach_host(host)


def slimmed(student: Seq2Seq, shape: str) -> Seq2Seq:
    """The student with at most HEADS heads and FFN units per decoder layer (shape
    "HEADS,FFN"; 0: keep all), the groups with the largest parameter norms kept
    (export.prune_groups): a little model streams fewer weight bytes per step, which at
    batch 1 is what a step costs."""
    from .prune_groups import group_sets, slice_model

    heads, ffn = (int(v) for v in shape.split(","))
    removed = {}
    for gs in group_sets(student):
        want = heads if gs.kind == "dec_heads" else ffn
        if want and want < gs.count:
            removed[gs.name] = gs.norms().argsort(descending=True)[want:].tolist()
    host = student.host
    return slice_model(student, removed).attach_host(host) if removed else student


def trainable(model: Seq2Seq) -> list[torch.nn.Parameter]:
    for p in model.parameters():
        p.requires_grad_(False)
    params = [*model.decoder.parameters(), model.output.bias]
    for p in params:
        p.requires_grad_(True)
    return params


def next_token_loss(model: Seq2Seq, batch, label_smoothing: float, encoded=None) -> tuple[torch.Tensor, int]:
    """encoded: (memory, keep) of batch.src when already known (HostMemory)."""
    memory, keep = encoded if encoded is not None else model.encode(batch.src)
    logits = model.logits(model.decode_full(batch.tgt_in, memory, keep))
    loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.pad,
                           label_smoothing=label_smoothing, reduction="sum")
    return loss, int((batch.tgt_out != model.pad).sum())


@torch.no_grad()
def next_token_accuracy(model: Seq2Seq, pairs, batch_size: int = 64) -> float:
    """Percentage of positions (EOS included) where the model's argmax after the host's
    greedy prefix is the host's next token: the little model's agreement with the big one."""
    from .decode import pad_batch

    model.eval()
    device = model.output.bias.device
    right = total = 0
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        memory, keep = model.encode(pad_batch([s + [model.eos] for s, _ in chunk], model.pad).to(device))
        tgt_in = pad_batch([[model.bos] + t for _, t in chunk], model.pad).to(device)
        tgt_out = pad_batch([t + [model.eos] for _, t in chunk], model.pad).to(device)
        pred = model.logits(model.decode_full(tgt_in, memory, keep)).argmax(-1)
        real = tgt_out != model.pad
        right += int((pred == tgt_out)[real].sum())
        total += int(real.sum())
    return 100.0 * right / max(total, 1)


def train(model: Seq2Seq, pairs, run: Path, args, settings: dict) -> None:
    """Until the --minutes budget (all runs together) is spent or --steps are done,
    resuming run/train.pt."""
    params = trainable(model)
    device = model.output.bias.device
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    batcher = BucketBatcher(pairs, args.batch_tokens, model.pad, model.bos, model.eos)
    schedule = {"lr": args.lr, "warmup": args.warmup}
    ckpt = run / "train.pt"
    step, epoch, done_in_epoch, spent = 0, 1, 0, 0.0
    gen = torch.Generator().manual_seed(args.seed)
    if ckpt.exists():  # map_location: a run may continue on another device than it started on
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        step, epoch, done_in_epoch, spent = saved["step"], saved["epoch"], saved["done_in_epoch"], saved["spent"]
        set_rng_state(saved["rng"])
        gen.set_state(saved["gen"])
        log(run, f"resumed at step {step} (epoch {epoch}, batch {done_in_epoch}, {spent / 60:.1f} min spent)")
    else:
        torch.manual_seed(args.seed)

    def save() -> None:
        save_checkpoint(ckpt, model=model.state_dict(), optimizer=opt.state_dict(), step=step, epoch=epoch,
                        done_in_epoch=done_in_epoch, spent=spent, rng=rng_state(), gen=gen.get_state(),
                        settings=settings)

    host_memory = HostMemory(model)
    budget, clock, smoothed = args.minutes * 60.0, TrainingClock(spent), None
    steps = args.steps or float("inf")
    blocks = [int(k) for k in args.block_sizes.split(",")]
    model.train()
    while spent < budget and step < steps:
        batches = batcher.epoch(args.seed * 100003 + epoch)
        while done_in_epoch < len(batches) and spent < budget and step < steps:
            for group in opt.param_groups:
                group["lr"] = lr_at(step + 1, schedule)
            key, idx = batches[done_in_epoch]
            batch = batcher.make(key, idx).to(device)
            if args.kind == "drafter":  # one block size per batch, as the seed recipe draws them
                k = blocks[random.Random(args.seed * 7919 + step).randrange(len(blocks))]
                loss, n = block_loss(model, batch, k, args.label_smoothing, gen, host_memory.encode(idx, batch.src))
            else:
                loss, n = next_token_loss(model, batch, args.label_smoothing, host_memory.encode(idx, batch.src))
            opt.zero_grad(set_to_none=True)
            (loss / max(n, 1)).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step, done_in_epoch, spent = step + 1, done_in_epoch + 1, clock.tick()
            value = loss.item() / max(n, 1)
            smoothed = value if smoothed is None else 0.95 * smoothed + 0.05 * value
            if step % args.log_every == 0:
                log(run, f"step {step} epoch {epoch} batch {done_in_epoch}/{len(batches)} loss {smoothed:.3f} "
                         f"lr {lr_at(step, schedule):.2e} {spent / 60:.1f}/{args.minutes:g} min")
            if step % args.save_every == 0:
                save()
        if done_in_epoch == len(batches):
            epoch, done_in_epoch = epoch + 1, 0
    save()
    model.eval()


def agreement(model: Seq2Seq, kind: str, pairs) -> dict:
    """Held-out agreement with the host's greedy outputs (float32 model)."""
    if kind == "drafter":
        return {f"block_accuracy_k{k}": round(block_accuracy(model, pairs, k), 2) for k in (4, 8)}
    return {"next_token_accuracy": round(next_token_accuracy(model, pairs), 2)}


def write_result(model: Seq2Seq, host_dir: Path, spm_file: Path, out: Path, int8: bool, pairs) -> Path:
    """--out via a temporary directory (no half-written model takes the name), its
    encoder.shared set to the host's encoder digest."""
    from .rehash import rehash

    model.cfg.encoder_shared = encoder_digest(host_dir)
    model.cpu().host.cpu()  # calibration and the writer read weights as numpy arrays
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    scales = calibrate(model, pairs) if int8 else None
    calibration = {"data": "the first training pairs (source, host greedy output)", "sentences": len(pairs),
                   "batch_size": 16} if int8 else None
    write_model_dir(model, spm_file, tmp, act_scales=scales, int8=int8, calibration=calibration)
    rehash(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["drafter", "little"])
    ap.add_argument("host", type=Path, metavar="HOST_DIR")
    ap.add_argument("--sources", required=True, type=Path, help="source sentences, one per line (.gz ok)")
    ap.add_argument("--run", required=True, type=Path, help="run directory (checkpoints, logs, greedy outputs)")
    ap.add_argument("--out", required=True, type=Path, help="model directory to write")
    ap.add_argument("--init", type=Path, help="drafter: a NAT drafter directory whose decoder is the start (required)")
    ap.add_argument("--layers", default="0", help="little: the host's decoder layers to start from (e.g. 0 or 0,1)")
    ap.add_argument("--shape", default="0,0", help="little: HEADS,FFN at most per decoder layer, the host layer's "
                    "strongest heads and FFN units kept (0: all)")
    ap.add_argument("--minutes", type=float, default=30.0, help="training budget, all runs of this --run together")
    ap.add_argument("--steps", type=int, default=0,
                    help="stop after this many optimizer steps (all runs together) if --minutes last that long; "
                         "0: --minutes alone. Steps are the same on any device, minutes are not")
    ap.add_argument("--block-sizes", default="4,6,8,10", help="drafter: block sizes, one drawn per batch")
    ap.add_argument("--block-size", type=int, default=8, help="drafter: block_size written in config.json")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--batch-tokens", type=int, default=4000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--label-smoothing", type=float, default=None,
                    help="default: 0.1 for the drafter (its recipe), 0 for the little model, whose "
                         "confidence decides BiLD's fallback")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N source lines (0: all)")
    ap.add_argument("--held-out", type=int, default=500, help="last N sources: evaluation only")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu",
                    help="torch device that trains (e.g. cuda); a run may stop on one device and continue on "
                         "another. The host's greedy outputs are decoded by the native engine, on the CPU")
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        return run(args)
    except ValueError as err:  # bad input: one line naming the file or field
        print(f"export.train_shared: {err}")
        return 1


def run(args) -> int:
    torch.set_num_threads(args.threads)
    if args.kind == "drafter" and args.init is None:
        raise ValueError("drafter: --init DIR (a NAT drafter whose decoder is the starting point) is required")
    if args.label_smoothing is None:
        args.label_smoothing = 0.1 if args.kind == "drafter" else 0.0
    if not args.sources.is_file():
        raise ValueError(f"{args.sources}: file not found (--sources: one source sentence per line)")
    host, spm_file = read_model_dir(args.host)
    init = read_model_dir(args.init)[0] if args.init else host
    if init.cfg.vocab_size != host.cfg.vocab_size or init.cfg.d_model != host.cfg.d_model:
        raise ValueError(f"{args.init}: vocab_size/d_model {init.cfg.vocab_size}/{init.cfg.d_model} differ from the "
                         f"host's {host.cfg.vocab_size}/{host.cfg.d_model} ({args.host})")
    layers = [int(i) for i in args.layers.split(",")]
    if args.kind == "little" and not all(0 <= i < len(host.cfg.decoder_layers) for i in layers):
        raise ValueError(f"--layers {args.layers}: the host has decoder layers 0..{len(host.cfg.decoder_layers) - 1}")
    int8 = host.cfg.quantization is not None
    student = build_student(args.kind, host, init, layers, args.block_size, args.dropout)
    if args.kind == "little":
        student = slimmed(student, args.shape)
    args.run.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in SETTINGS if k not in ("host", "init", "sources")}
    settings.update(host=str(args.host.resolve()), init=str(args.init.resolve()) if args.init else None,
                    sources=str(args.sources.resolve()), host_files=host_files(args.host))
    record_settings(args.run, settings)

    src = source_ids(args.sources, ModelDir.load(args.host), args.limit or None)
    if len(src) <= args.held_out:
        raise ValueError(f"{args.sources}: {len(src)} sources (sentences), need more than --held-out {args.held_out}")
    shortlist = (args.host / "shortlist.bin").exists()
    outs = decode_greedy(args.host, src, args.run / "greedy.txt", shortlist, max(args.threads, 1), batch=64)
    split = len(src) - args.held_out
    max_len = host.cfg.max_source_len
    pairs = [(src[i][:-1], outs[i]) for i in range(split) if len(outs[i]) + 1 <= max_len]
    held = [(src[i][:-1], outs[i]) for i in range(split, len(src))]
    log(args.run, f"{args.kind}: {len(pairs)} training pairs (the host's greedy outputs), {len(held)} held out; "
                  f"{sum(p.numel() for p in trainable(student))} trainable parameters; budget {args.minutes:g} min"
                  + (f" or {args.steps} steps" if args.steps else ""))
    student.to(args.device).host.to(args.device)  # the host is not a submodule: it moves on its own
    before = agreement(student.eval(), args.kind, held)
    train(student, pairs, args.run, args, settings)
    after = agreement(student, args.kind, held)
    log(args.run, f"held-out agreement with the host: before {before}, after {after}")
    write_result(student, args.host, spm_file, args.out, int8, pairs[:1000])
    report = {"written": str(args.out), "held_out_before": before, "held_out_after": after}
    (args.run / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(args.run, f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
