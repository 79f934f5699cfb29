"""The stages of `fastdec train-heads` (heads_command.py): blockwise proposal heads
trained on a frozen verifier (self-distillation) and written into a copy of its model
directory.

Head i at a decoder position must propose the token i+1 places after the verifier's own
next token there (export/FORMAT.md, *Proposal heads*), so the targets are the verifier's
OWN greedy outputs, not references: what the heads learn is exactly what blockwise
decoding accepts. The stages, each kept in the run directory so that running the same
command again continues where it stopped:
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
                  calibrated activation scales in an int8 directory) and config.json
                  heads.verifier, the digest of the model they were trained for,
                  rehashed, then decoded with blockwise on the held-out sentences
                  against greedy.
Nothing of the model but the heads changes, so greedy outputs of --out equal those of
MODEL_DIR and every lossless strategy still returns them.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pyfastdec.decoding.limits import default_max_len
from pyfastdec.model_dir import CONFIG_FILE, QUANT_DYNAMIC_ACTIVATIONS, WEIGHTS_FILE, ModelDir, load_config_json
from pyfastdec.text import clean_text, load_tokenizer, sentence_units

from .batches import by_length, complete_lines, pad_batch
from .rehash import dump_config, rehash
from .writer import quantize_weight, quantized_linears


# ----------------------------------------------------------------------------- 1. greedy outputs
def read_sources(path: Path) -> list[str]:
    """The non-blank lines of a (gzip or plain) UTF-8 text file: the user's own text, in
    which blank lines separate paragraphs rather than being sentences."""
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as err:
                    raise ValueError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
                                     f"--sources must be UTF-8 text") from None
                if text.strip():
                    lines.append(text)
    except (OSError, EOFError) as err:  # a directory, no permission, a truncated gzip stream
        raise ValueError(f"--sources {path}: cannot read it ({err}; expected a UTF-8 text file, .gz ok)") from None
    return lines


def source_ids(sources: Path, model_dir: ModelDir, limit: int | None) -> list[list[int]]:
    """Token ids + EOS of the sentences of the first `limit` non-blank lines, as the API
    decodes them (pyfastdec.text: the model's own tokenizer, control characters cleaned,
    one unit per sentence, a sentence longer than max_source_len cut between words), so
    the heads learn the states the Translator produces."""
    lines = read_sources(sources)
    lines = lines[:limit] if limit else lines
    tokenizer, cfg = load_tokenizer(model_dir), model_dir.config
    eos = cfg.tokens["eos"]
    return [unit + [eos] for line in lines
            for sentence in sentence_units(clean_text(line), tokenizer, cfg.max_source_len - 1) for unit in sentence]


class Clock:
    """Progress lines on stderr: `stage: done/total unit, elapsed, ETA` (the ETA from the
    rate of this run, so a resumed stage does not count what an earlier run did)."""

    def __init__(self, stage: str, total: int, done: int, unit: str):
        self.stage, self.total, self.first, self.unit = stage, total, done, unit
        self.start = time.perf_counter()

    def line(self, done: int, extra: str = "") -> str:
        spent = time.perf_counter() - self.start
        rate = (done - self.first) / spent if spent > 0 else 0.0
        eta = f"{(self.total - done) / rate:.0f} s" if rate > 0 else "?"
        text = f"{self.stage}: {done}/{self.total} {self.unit}{extra}, {spent:.0f} s, ETA {eta}"
        print(text, file=sys.stderr, flush=True)
        return text


def decode_greedy(model_dir: Path, src: list[list[int]], out: Path, shortlist: bool, threads: int,
                  batch: int, chunk: int = 1024) -> list[list[int]]:
    """Greedy outputs of every source (ids, no EOS), one line each in `out`, continuing
    after the lines already there."""
    done = complete_lines(out)
    if done < len(src):  # the engine is imported only when there is decoding left (a run may train elsewhere)
        from pyfastdec.backends.native import NativeBackend
        from pyfastdec.decoding import greedy

        backend = NativeBackend(model_dir, threads=threads, shortlist=shortlist)
        clock = Clock("greedy", len(src), done, "sentences")
        while done < len(src):
            part = src[done:done + chunk]
            outs = by_length(lambda sources: greedy(backend, sources)[0], part, batch)
            with open(out, "a", encoding="utf-8") as f:
                f.write("".join(" ".join(map(str, o)) + "\n" for o in outs))
                f.flush()
                os.fsync(f.fileno())
            done += len(part)
            clock.line(done)
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
    clock = Clock("states", len(src), done, "sentences")
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
            clock.line(done)
    return states


def targets(outs: list[list[int]], k: int, eos: int, cut: list[bool] | None = None) -> np.ndarray:
    """int64 [positions, k]: at position t of a sentence (t = 0 is BOS), head i's target
    is the output token t + i + 2 (1-based, EOS after the last), -100 past EOS. An output
    `cut` at its length limit has no EOS (the verifier would have gone on): -100 past its
    last token, so the heads do not learn to end a runaway output."""
    rows = []
    for n, o in enumerate(outs):
        seq = np.asarray(o if cut and cut[n] else o + [eos], dtype=np.int64)
        t = np.arange(len(o) + 1)[:, None] + 1 + np.arange(k)[None, :]
        rows.append(np.where(t < len(seq), seq[np.minimum(t, len(seq) - 1)], -100))  # len(seq) >= 1: a cut has >= 10
    return np.concatenate(rows) if rows else np.zeros((0, k), dtype=np.int64)


def cut_at_limit(src: list[list[int]], outs: list[list[int]]) -> list[bool]:
    """Which greedy outputs stopped at the default length limit instead of at EOS."""
    return [len(o) >= default_max_len(len(s)) for s, o in zip(src, outs)]


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
          batch: int, lr: float, seed: int, save_every: int, log_every: int) -> None:
    """Train model.heads (only) until `steps`, resuming from run/heads.pt; a progress
    line on stderr every `log_every` steps, one in log.txt at every checkpoint."""
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
        print(f"train: resumed at step {step}", file=sys.stderr, flush=True)
    model.heads.train()
    started, seen = time.time(), 0.0
    clock = Clock("train", steps, step, "steps")
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
        if step % log_every == 0 or step == steps:
            clock.line(step, f", loss {seen:.4f}")
        if step % save_every == 0 or step == steps:
            torch.save({"step": step, "heads": model.heads.state_dict(), "optim": opt.state_dict(),
                        "settings": {"heads": model.cfg.heads[0], "hidden": model.cfg.heads[1], "lr": lr,
                                     "batch": batch, "seed": seed}}, ckpt.with_suffix(".tmp"))
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
            line = f"step {step} loss {seen:.4f} ({time.time() - started:.0f} s)"
            with open(log, "a") as f:
                f.write(line + "\n")
    model.heads.eval()


# ----------------------------------------------------------------------------- 4. evaluation
@torch.no_grad()
def evaluate(model, states: np.ndarray, target: np.ndarray, outs: list[list[int]], offsets: np.ndarray,
             sentences: range, cut: list[bool]) -> dict:
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
    # -1: EOS comes after; -2: nothing, the output was cut at its length limit
    greedy_tokens = np.concatenate([np.asarray(outs[n] + [-2 if cut[n] else -1]) for n in sentences])
    main = np.concatenate([model.logits(torch.from_numpy(states[part].astype(np.float32))).argmax(-1).numpy()
                           for part in np.array_split(rows, max(1, len(rows) // 4096))])
    eos_rows = greedy_tokens == -1
    agree = np.where(eos_rows, main == model.eos, main == greedy_tokens)
    state_agreement = float(np.mean(agree[greedy_tokens != -2]))
    valid = target[rows] != -100
    accuracy = [float(correct[:, i][valid[:, i]].mean()) if valid[:, i].any() else 0.0 for i in range(k)]
    leading = np.cumprod(correct & valid, axis=1).sum(axis=1)  # proposals kept at each position
    tokens = iterations = 0
    for n in sentences:
        length, first = len(outs[n]) + (not cut[n]), offsets[n] - offsets[sentences.start]  # tokens with EOS
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
def write_heads(model_dir: Path, model, out: Path, pairs: list[tuple[list[int], list[int]]], verifier: str) -> Path:
    """A copy of model_dir with model.heads in it (int8 + activation scales calibrated on
    `pairs` if model_dir is int8) and heads.verifier = `verifier` (verifier_digest of
    model_dir, which the caller has loaded already), rehashed."""
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
        if quant.get("activations") != QUANT_DYNAMIC_ACTIVATIONS:  # dynamic: inputs scaled per row at run time
            scales = {n: v for n, v in calibrate(model, pairs).items() if n.startswith("heads.")}
            kept = {n: v for n, v in quant["activation_scales"].items() if not n.startswith("heads.")}
            quant["activation_scales"] = {**kept, **scales}
        for name in (n for n in quantized_linears(model) if n.startswith("heads.")):
            heads[f"{name}.weight"], heads[f"{name}.weight_scale"] = quantize_weight(heads[f"{name}.weight"])
    save_file({**tensors, **heads}, str(tmp / WEIGHTS_FILE), metadata=metadata)
    k, hidden = model.cfg.heads
    config["heads"] = {"count": k, "hidden": hidden, "verifier": verifier}
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
