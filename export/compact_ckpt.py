"""A training checkpoint small enough to come back from a device call, and back again.

    python -m export.compact_ckpt pack RUN/averaged.pt OUT_DIR      # on the GPU machine
    python -m export.compact_ckpt unpack OUT_DIR RUN/returned.pt    # here: an export.write checkpoint
    python -m export.compact_ckpt newest RUN                        # RUN/last.pt: the newest epoch's model

A device call returns at most 8 files of 16 MiB, 64 MiB together, and the working tree
that travels to it holds at most 64 MiB, the repository included. uk-gec-base's weights
are 36M parameters: 143 MB in float32, 71 MB in bf16, with Adam's moments three times
that. So what comes back is the model alone, every 2-D weight stored int8 per row (a
float32 scale per row, scale = max|row| / 127) and every other tensor float32, split into
shards of at most SHARD_BYTES. The optimizer state does not come back: a later run starts
from these weights with `export.train --init` (a warm start), not a bit-for-bit resume.

Nothing is lost for the shipped model: it is int8 with per-row scales, and quantising the
dequantised rows again by that rule gives back the same int8 values (a row's largest
value is exactly 127 x its scale). meta.json holds the checkpoint's config, recipe, step,
epoch and sentencepiece model (base64), so `unpack` gives export.write what it reads.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
from pathlib import Path

import torch

from pyfastdec.training.writer import quantize_embedding

SHARD_BYTES = 15 * 2**20  # under the 16 MiB a returned file may have
PER_TENSOR = 1024  # torch.save's zip entry and pickle record per tensor, about (measured 500-900 bytes)
META = "meta.json"


def pack(ckpt_path: Path, out: Path) -> list[Path]:
    """Write shard{i}.pt files and meta.json for the checkpoint's model; the paths written."""
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict] = [{}]
    size = 0
    for name, tensor in ckpt["model"].items():
        # the engine's per-row int8 rule (model_dir/int8_rows.py): an unpacked model exports to the same int8
        entry = quantize_embedding(tensor) if tensor.dim() == 2 else (tensor.detach().float().clone(),)
        nbytes = sum(t.numel() * t.element_size() + PER_TENSOR for t in entry)
        if size and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = entry
        size += nbytes
    written = []
    for i, shard in enumerate(shards):
        path = out / f"shard{i}.pt"
        torch.save(shard, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)
        written.append(path)
    meta = {key: ckpt.get(key) for key in ("config", "recipe", "step", "epoch", "averaged", "val_bleu")}
    meta.update(source=ckpt_path.name, shards=len(shards), spm=base64.b64encode(ckpt["spm"]).decode("ascii"))
    (out / META).write_text(json.dumps(meta))
    written.append(out / META)
    return written


def unpack(folder: Path) -> dict:
    """The checkpoint dict (model float32, config, recipe, spm, ...) of a packed folder."""
    meta_path = folder / META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: no {META}; expected a folder written by export.compact_ckpt pack")
    meta = json.loads(meta_path.read_text())
    model = {}
    for i in range(meta["shards"]):
        path = folder / f"shard{i}.pt"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; {META} lists {meta['shards']} shards")
        for name, entry in torch.load(path, map_location="cpu", weights_only=True).items():
            model[name] = entry[0].float() * entry[1][:, None] if len(entry) == 2 else entry[0]
    ckpt = {key: value for key, value in meta.items() if key not in ("spm", "shards")}
    ckpt.update(model=model, spm=base64.b64decode(meta["spm"]))
    return ckpt


MODEL_KEYS = ("model", "config", "step", "epoch", "recipe", "spm")  # what export.write and pack read


def newest(run: Path) -> tuple[Path, Path]:
    """Write run/last.pt from the newest epoch{N}.pt of an export.train run, without its
    optimizer state: what a device call packs when its time ran out before averaging.
    (source, written)."""
    epochs = [p for p in run.glob("epoch*.pt") if p.stem[5:].isdigit()]
    if not epochs:
        raise FileNotFoundError(f"{run}: no epoch<N>.pt checkpoint; expected an export.train run directory")
    source = max(epochs, key=lambda p: int(p.stem[5:]))
    state = torch.load(source, map_location="cpu", weights_only=False)
    missing = [key for key in MODEL_KEYS if key not in state]
    if missing:
        raise KeyError(f"{source}: no {', '.join(missing)}; not an export.train checkpoint")
    out = run / "last.pt"
    torch.save({key: state[key] for key in MODEL_KEYS}, out.with_suffix(".tmp"))
    os.replace(out.with_suffix(".tmp"), out)
    return source, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="checkpoint -> int8 shards + meta.json")
    p.add_argument("ckpt", type=Path)
    p.add_argument("out", type=Path)
    u = sub.add_parser("unpack", help="shards + meta.json -> a checkpoint export.write reads")
    u.add_argument("folder", type=Path)
    u.add_argument("out", type=Path)
    n = sub.add_parser("newest", help="RUN/last.pt: the newest epoch checkpoint's model, no optimizer state")
    n.add_argument("run", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "newest":
        source, out = newest(args.run)
        print(f"{out.name} from {source.name}, step {torch.load(out, map_location='cpu', weights_only=False)['step']}")
        return 0
    if args.cmd == "pack":
        paths = pack(args.ckpt, args.out)
        print(f"packed {args.ckpt} -> {len(paths)} files, {sum(p.stat().st_size for p in paths) / 1e6:.1f} MB")
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(unpack(args.folder), args.out)
        print(f"unpacked {args.folder} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
