"""Rewrite an int8 model directory so that it stores its tied embedding int8.

    python -m export.int8_embedding MODEL_DIR [--out OUT]

An int8 directory written before quantization.embedding existed stores `embed.weight`
float32 [V, d] (about half of model.safetensors); the engine quantises it per vocabulary
row at load. This stores those very rows instead: `embed.weight` int8 [V, d] and
`embed.weight_scale` float32 [V] by the engine's rule (pyfastdec/model_dir/int8_rows.py), with
config.json quantization.embedding "int8_per_row" (export/FORMAT.md). The result decodes
bit-identically to MODEL_DIR. Every other file (shortlist.bin, ...) and tensor is copied
as it is; the checksums are recorded anew (export.rehash).

OUT defaults to MODEL_DIR itself. Either way the new directory is written beside the
target and renamed over it only when complete (pyfastdec/model_dir/staging.py), so an interrupted
run leaves the old directory, never half of a new one.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from pyfastdec.model_dir.int8_rows import quantize_rows
from pyfastdec.model_dir import (CONFIG_FILE, EMBED_SCALE, QUANT_EMBEDDING, WEIGHTS_FILE, ModelDir, ModelDirError,
                                 load_config_json)
from pyfastdec.model_dir.staging import staged_dir

from .rehash import dump_config, rehash


def convert(model_dir: str | Path, out: str | Path | None = None) -> Path:
    """MODEL_DIR (int8, float32 embedding) -> OUT (default: MODEL_DIR) with an int8 embedding."""
    model_dir = Path(model_dir)
    out = Path(out) if out is not None else model_dir
    loaded = ModelDir.load(model_dir)  # validated, checksums included
    config_file = model_dir / CONFIG_FILE
    quant = loaded.config.quantization
    if quant is None:
        raise ModelDirError(f"{config_file}: quantization: null (expected an int8 model directory; "
                            f"a float32 model keeps its float32 embedding)")
    if quant.embedding == QUANT_EMBEDDING:
        raise ModelDirError(f"{config_file}: quantization.embedding: already {QUANT_EMBEDDING!r} "
                            f"(nothing to convert)")
    with safe_open(str(model_dir / WEIGHTS_FILE), "np") as f:
        metadata = f.metadata()
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    tensors["embed.weight"], tensors[EMBED_SCALE] = quantize_rows(tensors["embed.weight"])
    config = dict(load_config_json(config_file))
    config["quantization"] = dict(config["quantization"], embedding=QUANT_EMBEDDING)
    config.pop("checksum", None)
    with staged_dir(out) as tmp:
        for src in model_dir.iterdir():
            if src.name not in (CONFIG_FILE, WEIGHTS_FILE) and src.is_file():
                shutil.copy2(src, tmp / src.name)
        save_file({n: np.ascontiguousarray(t) for n, t in tensors.items()}, str(tmp / WEIGHTS_FILE),
                  metadata=metadata)
        shutil.copymode(model_dir / WEIGHTS_FILE, tmp / WEIGHTS_FILE)  # safetensors writes 0600
        (tmp / CONFIG_FILE).write_text(dump_config(config))
        rehash(tmp)  # loads the result: a directory pyfastdec refuses is never renamed into place
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    ap.add_argument("--out", type=Path, help="directory to write (default: MODEL_DIR, replaced)")
    args = ap.parse_args(argv)
    before = (args.model_dir / WEIGHTS_FILE).stat().st_size if (args.model_dir / WEIGHTS_FILE).is_file() else None
    try:
        out = convert(args.model_dir, args.out)
    except (ModelDirError, ValueError) as err:
        print(f"export.int8_embedding: {err}")
        return 1
    print(f"{out}: {WEIGHTS_FILE} {before} -> {(out / WEIGHTS_FILE).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
