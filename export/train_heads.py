"""Train blockwise proposal heads on a frozen verifier (self-distillation), and write
them into a copy of its model directory.

    python -m export.train_heads models/en-de --sources train.en.gz --limit 10000 \
        --run /work/runs/heads-en-de --out /work/runs/heads-en-de/model --heads 4 --steps 1500

Head i at a decoder position must propose the token i+1 places after the verifier's own
next token there (export/FORMAT.md, *Proposal heads*), so the targets are the verifier's
OWN greedy outputs, not references: what the heads learn is exactly what blockwise
decoding accepts. The stages, each kept in the run directory (--run) so that running
the same command again continues where it stopped:
  1. greedy.txt   greedy outputs of the sources on the native engine (the verifier as
                  the API runs it: int8 or float32 as the directory is, its shortlist
                  if it has one), appended in chunks;
  2. states.f16   the final decoder state (the vector the output layer reads) at every
                  position of those outputs, BOS to the last token, teacher-forced
                  through the torch model of the directory (int8 activations simulated
                  in an int8 directory); float16, one memmap [positions, d_model];
  3. heads.pt     the heads (nothing else trains), Adam on cross-entropy over the full
                  vocabulary, checkpointed every --save-every steps; log.txt;
  4. eval.json    per-head top-1 accuracy against the greedy tokens on held-out
                  sentences (the last --held-out sources), and the mean tokens per
                  iteration blockwise decoding gets from them verifying all K proposals;
  5. --out        a copy of the model directory with the heads (int8 weights and
                  calibrated activation scales in an int8 directory), rehashed, then
                  decoded with blockwise on the held-out sentences against greedy.
Nothing of the model but the heads changes, so greedy outputs of --out equal those of
MODEL_DIR and every lossless strategy still returns them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pyfastdec.model_dir import CONFIG_FILE, WEIGHTS_FILE, load_config_json
from pyfastdec.text import Tokenizer, clean_text, sentence_units

from .data import read_lines
from .decode import pad_batch
from .distill import by_length, complete_lines
from .rehash import dump_config, rehash
from .writer import quantize_weight, read_model_dir

STAGE_KEYS = ("model", "sources", "limit", "shortlist")  # what greedy.txt and states.f16 depend on


# ----------------------------------------------------------------------------- 1. greedy outputs
def source_ids(sources: Path, spm_file: Path, eos: int, max_source_len: int, limit: int | None) -> list[list[int]]:
    """Sentencepiece ids + EOS of the sentences of the first `limit` lines, as the API
    decodes them (pyfastdec.text: control characters cleaned, one unit per sentence, a
    sentence longer than max_source_len cut between words), so the heads learn the
    states the Translator produces."""
    lines = read_lines(sources)[:limit] if limit else read_lines(sources)
    tokenizer = Tokenizer(spm_file)
    return [unit + [eos] for line in lines
            for sentence in sentence_units(clean_text(line), tokenizer, max_source_len - 1) for unit in sentence]


def decode_greedy(model_dir: Path, src: list[list[int]], out: Path, shortlist: bool, threads: int,
                  batch: int, chunk: int = 1024) -> list[list[int]]:
    """Greedy outputs of every source (ids, no EOS), one line each in `out`, continuing
    after the lines already there."""
    done = complete_lines(out)
    if done < len(src):  # the engine is imported only when there is decoding left (a run may train elsewhere)
        from pyfastdec.backends.native import NativeBackend
        from pyfastdec.decoding import greedy

        backend = NativeBackend(model_dir, threads=threads, shortlist=shortlist)
        while done < len(src):
            part = src[done:done + chunk]
            outs = by_length(lambda sources: greedy(backend, sources)[0], part, batch)
            with open(out, "a", encoding="utf-8") as f:
                f.write("".join(" ".join(map(str, o)) + "\n" for o in outs))
                f.flush()
                os.fsync(f.fileno())
            done += len(part)
            print(f"greedy: {done}/{len(src)} sentences", flush=True)
    lines = out.read_text().split("\n")[:len(src)]
    return [[int(t) for t in line.split()] for line in lines]


# ----------------------------------------------------------------------------- 2. decoder states
@torch.no_grad()
def cache_states(model, src: list[list[int]], outs: list[list[int]], path: Path, batch: int) -> np.memmap:
    """Final decoder states of [BOS] + output (one row per position) for every sentence,
    in a float16 memmap; `path`.json records how many sentences are done."""
    offsets = np.cumsum([0] + [len(o) + 1 for o in outs])
    d = model.cfg.d_model
    progress = path.with_name(path.name + ".json")
    done = json.loads(progress.read_text())["sentences"] if progress.exists() else 0
    states = np.memmap(path, dtype=np.float16, mode="r+" if path.exists() else "w+", shape=(int(offsets[-1]), d))
    while done < len(src):
        idx = list(range(done, min(done + batch, len(src))))
        tgt_in = pad_batch([[model.bos] + outs[i] for i in idx], model.pad)
        memory, keep = model.encode(pad_batch([src[i] for i in idx], model.pad))
        h = model.decode_full(tgt_in, memory, keep)
        for r, i in enumerate(idx):
            states[offsets[i]:offsets[i + 1]] = h[r, :len(outs[i]) + 1].numpy().astype(np.float16)
        done = idx[-1] + 1
        states.flush()
        progress.write_text(json.dumps({"sentences": done}))
        if done % (batch * 20) < batch or done == len(src):
            print(f"states: {done}/{len(src)} sentences", flush=True)
    return states


def targets(outs: list[list[int]], k: int, eos: int) -> np.ndarray:
    """int64 [positions, k]: at position t of a sentence (t = 0 is BOS), head i's target
    is the output token t + i + 2 (1-based, EOS after the last), -100 past EOS."""
    rows = []
    for o in outs:
        seq = np.asarray(o + [eos], dtype=np.int64)
        t = np.arange(len(seq))[:, None] + 1 + np.arange(k)[None, :]
        rows.append(np.where(t < len(seq), seq[np.minimum(t, len(seq) - 1)], -100))
    return np.concatenate(rows) if rows else np.zeros((0, k), dtype=np.int64)


# ----------------------------------------------------------------------------- 3. training
def fresh_heads(model, k: int, hidden: int):
    """K heads with fc2 = 0, so each starts as the identity (h = s) and learns a residual."""
    model.add_heads(k, hidden)
    with torch.no_grad():
        for head in model.heads:
            head.fc2.weight.zero_()
            head.fc2.bias.zero_()
    return model.heads


def train(model, states: np.ndarray, target: np.ndarray, train_rows: np.ndarray, run: Path, steps: int,
          batch: int, lr: float, seed: int, save_every: int) -> None:
    """Train model.heads (only) until `steps`, resuming from run/heads.pt."""
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(model.heads.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    ckpt, log = run / "heads.pt", run / "log.txt"
    step = 0
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=True)
        shape = {"heads": model.cfg.heads[0], "hidden": model.cfg.heads[1], "lr": lr, "batch": batch, "seed": seed}
        before = saved.get("settings", shape)
        if before != shape:  # resuming another training would mix two runs
            raise ValueError(f"{ckpt}: trained with {before}, this run asks for {shape} (use another --run)")
        model.heads.load_state_dict(saved["heads"])
        opt.load_state_dict(saved["optim"])
        step = saved["step"]
        print(f"train: resumed at step {step}", flush=True)
    model.heads.train()
    started, seen = time.time(), 0.0
    while step < steps:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)  # resumable: the batch of a step is fixed
        rows = train_rows[torch.randint(len(train_rows), (batch,), generator=g).numpy()]
        s = torch.from_numpy(states[np.sort(rows)].astype(np.float32))
        y = torch.from_numpy(target[np.sort(rows)])
        logits = model.proposal_logits(s)  # [B, K, V]
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        seen = 0.98 * seen + 0.02 * loss.item() if seen else loss.item()
        if step % save_every == 0 or step == steps:
            torch.save({"step": step, "heads": model.heads.state_dict(), "optim": opt.state_dict(),
                        "settings": {"heads": model.cfg.heads[0], "hidden": model.cfg.heads[1], "lr": lr,
                                     "batch": batch, "seed": seed}}, ckpt.with_suffix(".tmp"))
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
            line = f"step {step} loss {seen:.4f} ({time.time() - started:.0f} s)"
            with open(log, "a") as f:
                f.write(line + "\n")
            print("train: " + line, flush=True)
    model.heads.eval()


# ----------------------------------------------------------------------------- 4. evaluation
@torch.no_grad()
def evaluate(model, states: np.ndarray, target: np.ndarray, outs: list[list[int]], offsets: np.ndarray,
             sentences: range) -> dict:
    """Per-head top-1 accuracy on the given sentences, and the mean tokens per iteration
    blockwise decoding would commit with these heads verifying all K proposals (the
    decoding simulated on the greedy outputs: at each accepted position the leading
    correct proposals are kept, plus the verifier's token)."""
    k = target.shape[1]
    rows = np.arange(offsets[sentences.start], offsets[sentences.stop])
    correct = np.zeros((0, k), dtype=bool)
    for s in range(0, len(rows), 4096):
        part = rows[s:s + 4096]
        pred = model.proposal_logits(torch.from_numpy(states[part].astype(np.float32))).argmax(-1).numpy()
        correct = np.concatenate([correct, pred == target[part]])
    # The cached states must be the engine's: the output layer on them gives the greedy
    # tokens (all but a few that int8 rounding flips), else the heads learn other states.
    greedy_tokens = np.concatenate([np.asarray(outs[n] + [-1]) for n in sentences])  # -1: EOS comes after
    main = np.concatenate([model.logits(torch.from_numpy(states[part].astype(np.float32))).argmax(-1).numpy()
                           for part in np.array_split(rows, max(1, len(rows) // 4096))])
    eos_rows = greedy_tokens == -1
    state_agreement = float(np.mean(np.where(eos_rows, main == model.eos, main == greedy_tokens)))
    valid = target[rows] != -100
    accuracy = [float(correct[:, i][valid[:, i]].mean()) if valid[:, i].any() else 0.0 for i in range(k)]
    leading = np.cumprod(correct & valid, axis=1).sum(axis=1)  # proposals kept at each position
    tokens = iterations = 0
    for n in sentences:
        length, first = len(outs[n]) + 1, offsets[n] - offsets[sentences.start]  # tokens with EOS
        t, iterations, tokens = 0, iterations + 1, tokens + length  # the [BOS] step commits token 1
        while t + 1 < length:
            kept = int(leading[first + t])
            iterations += 1
            t += kept + 1
    return {"held_out_sentences": len(sentences), "positions": len(rows), "head_accuracy": accuracy,
            "states_agree_with_greedy": state_agreement,
            "mean_leading_correct": float(leading.mean()) if len(leading) else 0.0,
            "expected_tokens_per_iteration": tokens / max(iterations, 1)}


# ----------------------------------------------------------------------------- 5. the model directory
def write_heads(model_dir: Path, model, out: Path, pairs: list[tuple[list[int], list[int]]]) -> Path:
    """A copy of model_dir with model.heads in it (int8 + activation scales calibrated on
    `pairs` if model_dir is int8), rehashed."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from .calibrate import calibrate

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model_dir, tmp)
    config = dict(load_config_json(tmp / CONFIG_FILE))
    with safe_open(str(tmp / WEIGHTS_FILE), "pt") as f:
        metadata = f.metadata()
    tensors = {n: t for n, t in load_file(str(tmp / WEIGHTS_FILE)).items() if not n.startswith("heads.")}
    heads = {f"heads.{n}": t.detach().to(torch.float32).contiguous() for n, t in model.heads.state_dict().items()}
    quant = config.get("quantization")
    if quant:
        scales = {n: v for n, v in calibrate(model, pairs).items() if n.startswith("heads.")}
        kept = {n: v for n, v in quant["activation_scales"].items() if not n.startswith("heads.")}
        quant["activation_scales"] = {**kept, **scales}
        for name in scales:
            heads[f"{name}.weight"], heads[f"{name}.weight_scale"] = quantize_weight(heads[f"{name}.weight"])
    save_file({**tensors, **heads}, str(tmp / WEIGHTS_FILE), metadata=metadata)
    k, hidden = model.cfg.heads
    config["heads"] = {"count": k, "hidden": hidden}
    config.pop("checksum", None)
    (tmp / CONFIG_FILE).write_text(dump_config(config))
    rehash(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def check_blockwise(out: Path, src: list[list[int]], shortlist: bool, threads: int, batch: int) -> dict:
    """Blockwise (all K proposals verified) against greedy on the written directory."""
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import blockwise, greedy

    backend = NativeBackend(out, threads=threads, shortlist=shortlist)
    same = generated = row_steps = 0
    for s in range(0, len(src), batch):
        part = src[s:s + batch]
        outs, stats = blockwise(backend, part, policy=None)
        same += sum(a == b for a, b in zip(outs, greedy(backend, part)[0]))
        generated, row_steps = generated + stats.generated, row_steps + stats.row_steps
    return {"sentences": len(src), "equal_to_greedy": same, "mean_tokens_per_iteration": generated / max(row_steps, 1)}


# ----------------------------------------------------------------------------- command
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    ap.add_argument("--sources", required=True, type=Path, help="source sentences, one per line (.gz ok)")
    ap.add_argument("--run", type=Path, help="run directory (default: <out>.run)")
    ap.add_argument("--out", type=Path, help="model directory to write (default: MODEL_DIR-heads)")
    ap.add_argument("--heads", type=int, default=4, help="K, proposal heads")
    ap.add_argument("--hidden", type=int, default=0, help="H, hidden units per head (default: d_model)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=256, help="decoder positions per training step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N sources (0: all)")
    ap.add_argument("--held-out", type=int, default=500, help="last N sources: evaluation only")
    ap.add_argument("--no-shortlist", action="store_true", help="decode on the full vocabulary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        return run(args)
    except ValueError as err:  # bad input: one line naming the file or field
        print(f"export.train_heads: {err}")
        return 1


def run(args) -> int:
    torch.set_num_threads(args.threads)
    out = args.out or args.model_dir.with_name(args.model_dir.name + "-heads")
    run_dir = args.run or out.with_name(out.name + ".run")
    if args.heads < 1 or args.hidden < 0 or args.steps < 0 or args.batch < 1 or args.limit < 0 or args.held_out < 1:
        raise ValueError("--heads, --batch and --held-out must be >= 1; --hidden, --steps and --limit >= 0")
    if out.resolve() == args.model_dir.resolve():
        raise ValueError(f"--out {out}: must differ from MODEL_DIR (the heads go into a copy)")
    if not args.sources.is_file():  # before a run directory records these sources
        raise ValueError(f"{args.sources}: file not found (--sources: one source sentence per line)")
    model, spm_file = read_model_dir(args.model_dir)
    int8 = bool(model.cfg.quantization)
    shortlist = not args.no_shortlist and (args.model_dir / "shortlist.bin").exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    stage = {"model": str(args.model_dir.resolve()), "sources": str(args.sources.resolve()),
             "limit": args.limit, "shortlist": shortlist}
    recorded = run_dir / "run.json"
    if recorded.exists():
        before = json.loads(recorded.read_text())
        for key in STAGE_KEYS:
            if before.get(key) != stage[key]:
                raise ValueError(f"{recorded}: field '{key}' is {before.get(key)!r}, this run has {stage[key]!r} "
                                 f"(use another --run)")
    recorded.write_text(json.dumps(stage, indent=2) + "\n")

    src = source_ids(args.sources, spm_file, model.eos, model.cfg.max_source_len, args.limit or None)
    if len(src) <= args.held_out:
        raise ValueError(f"{args.sources}: {len(src)} sources (sentences), need more than --held-out {args.held_out}")
    outs = decode_greedy(args.model_dir, src, run_dir / "greedy.txt", shortlist, args.threads, batch=64)
    states_model = read_model_dir(args.model_dir, simulate_int8=int8)[0]  # the activations the engine sees
    states = cache_states(states_model, src, outs, run_dir / "states.f16", batch=64)
    offsets = np.cumsum([0] + [len(o) + 1 for o in outs])

    k, hidden = args.heads, args.hidden or model.cfg.d_model
    target = targets(outs, k, model.eos)
    torch.manual_seed(args.seed)
    fresh_heads(model, k, hidden)
    split = len(src) - args.held_out
    train(model, states, target, np.arange(offsets[split]), run_dir, args.steps, args.batch, args.lr,
          args.seed, args.save_every)
    report = evaluate(model, states, target, outs, offsets, range(split, len(src)))
    print("eval: " + json.dumps(report), flush=True)

    pairs = [(src[i][:-1], outs[i]) for i in range(min(split, 512))]
    write_heads(args.model_dir, model, out, pairs)
    report["written"] = str(out)
    report["blockwise_check"] = check_blockwise(out, src[split:], shortlist, args.threads, batch=32)
    (run_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print("blockwise: " + json.dumps(report["blockwise_check"]), flush=True)
    if report["blockwise_check"]["equal_to_greedy"] != len(src) - split:
        print(f"export.train_heads: {out}: blockwise differs from greedy (a backend bug: report it)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
