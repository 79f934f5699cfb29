"""Write a model directory from a training checkpoint.

    python -m export.write --ckpt /work/runs/teacher-en-de/averaged.pt --out models/teacher-en-de
    python -m export.write --ckpt ... --out models/teacher-en-de-int8 --int8 --calib val

The checkpoint (from export.train) carries the config, weights, sentencepiece model and
recipe name; --calib names the split of the recipe's corpus used to calibrate int8
activation multipliers (see export/calibrate.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from .calibrate import calibrate
from .data import load_pairs
from .modeling import ModelConfig, Seq2Seq
from .recipes import get_recipe
from .vocab import load_vocab
from .writer import write_model_dir


def load_checkpoint_model(path: str | Path) -> tuple[Seq2Seq, dict]:
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model = Seq2Seq(ModelConfig.from_json(ckpt["config"], where=f"{path}:config"))
    model.load_state_dict(ckpt["model"])
    return model.eval(), ckpt


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--calib", default="val", help="split used for activation calibration")
    ap.add_argument("--calib-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, ckpt = load_checkpoint_model(args.ckpt)
    scales, calibration = None, None
    if args.int8:
        recipe = get_recipe(ckpt["recipe"])
        tmp = args.out / ".spm.calib"
        args.out.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(ckpt["spm"])
        sp = load_vocab(tmp)
        tmp.unlink()
        pairs = load_pairs(args.calib, recipe["src"], recipe["tgt"], recipe["corpus"])
        ids = [(sp.encode(s), sp.encode(t)) for s, t in pairs]
        scales = calibrate(model, ids, args.calib_batch)
        calibration = {"data": f"{recipe['corpus']} {args.calib} {recipe['src']}-{recipe['tgt']}",
                       "sentences": len(ids), "batch_size": args.calib_batch}
    out = write_model_dir(model, ckpt["spm"], args.out, act_scales=scales, int8=args.int8, calibration=calibration)
    print(f"wrote {out} ({'int8' if args.int8 else 'float32'})")


if __name__ == "__main__":
    main()
