"""Sequence-level knowledge distillation: translate a split's sources with the teacher.

    python -m export.distill --model /work/runs/models/teacher-en-de \
        --src en --tgt de --split train --beam 5 --out /work/runs/distill/train.de

A model directory is decoded by the native engine (pyfastdec's beam search; ~30x the
torch reference's speed here), a training checkpoint by the torch reference
(--engine overrides). The torch reference runs on --device: on a GPU (--device cuda) with
--beam 1 it decodes greedily (export/decode.py greedy: beam 1 is exactly greedy) in
batches of --batch sentences, which is how a device call distils 151k sentences in
minutes (tools/device/train_general_student.sh).

Output line i is the beam translation of source line i, so the file pairs with the
original source file. It is written in chunks, each appended and fsync'ed whole; running
the same command again continues after the last complete line (a torn last line from a
crash is cut off first). A line whose translation comes out empty gets the reference
target instead (an empty line would be refused by export.data); such lines are counted
in <out>.json next to the output.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from pyfastdec.training.batches import by_length, complete_lines  # noqa: F401  (export/ imports them from here)

from .data import load_pairs
from .decode import beam_search, greedy
from .vocab import load_vocab


def load_teacher(path: Path):
    """A model directory (config.json ...) or a training checkpoint (.pt); returns (model, spm)."""
    if path.is_dir():
        from .writer import read_model_dir

        model, spm_file = read_model_dir(path)
        return model, load_vocab(spm_file)
    from .write import load_checkpoint_model

    model, ckpt = load_checkpoint_model(path)
    with tempfile.TemporaryDirectory() as tmp:  # the checkpoint carries the spm model's bytes
        spm_file = Path(tmp) / "spm.model"
        spm_file.write_bytes(ckpt["spm"])
        return model, load_vocab(spm_file)


def native_translator(model_dir: Path, threads: int, beam: int, batch: int):
    """Beam search on the native engine (full vocabulary), batches of similar lengths."""
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding.beam import beam_search as native_beam

    backend = NativeBackend(model_dir, threads=threads, shortlist=False)

    def best(sources: list[list[int]]) -> list[list[int]]:
        return [nbest[0].tokens for nbest in native_beam(backend, sources, beam_size=beam, nbest=1)[0]]

    return lambda ids: by_length(best, ids, batch)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, type=Path, help="model directory or training checkpoint")
    ap.add_argument("--src", required=True)
    ap.add_argument("--tgt", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--corpus", default="multi30k")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="sentences per beam-search batch")
    ap.add_argument("--chunk", type=int, default=256, help="sentences per appended chunk")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", choices=["auto", "native", "torch"], default="auto",
                    help="auto: native for a model directory, torch for a checkpoint")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the torch engine decodes")
    ap.add_argument("--stop-after", type=int, default=0, help="stop after this many new lines (0 = all)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    engine = args.engine if args.engine != "auto" else ("native" if args.model.is_dir() else "torch")
    if engine == "native" and not args.model.is_dir():
        raise ValueError(f"{args.model}: the native engine reads a model directory, not a checkpoint "
                         "(write one with python -m export.write)")
    if args.device != "cpu" and (engine != "torch" or args.beam != 1):
        raise ValueError(f"--device {args.device}: decodes with --engine torch and --beam 1 (greedy) only; "
                         f"got --engine {engine} --beam {args.beam}")
    model, sp = load_teacher(args.model)
    if engine == "native":
        translate = native_translator(args.model, args.threads, args.beam, args.batch)
    elif args.beam == 1:
        model = model.to(args.device)
        translate = lambda ids: greedy(model, ids, batch_size=args.batch)  # noqa: E731
    else:
        translate = lambda ids: beam_search(model, ids, beam=args.beam, batch_size=args.batch)  # noqa: E731
    pairs = load_pairs(args.split, args.src, args.tgt, args.corpus)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta_path = args.out.with_name(args.out.name + ".json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"reference_fallbacks": []}
    done = complete_lines(args.out)
    if done > len(pairs):
        raise ValueError(f"{args.out}: {done} lines, more than the {len(pairs)} sources of {args.split}")
    meta.update(model=str(args.model), split=args.split, corpus=args.corpus, src=args.src, tgt=args.tgt, beam=args.beam)
    start, new = time.time(), 0
    print(f"{args.out}: {done}/{len(pairs)} lines already done", flush=True)
    while done < len(pairs) and not (args.stop_after and new >= args.stop_after):
        n = min(args.chunk, len(pairs) - done)
        if args.stop_after:
            n = min(n, args.stop_after - new)
        chunk = pairs[done : done + n]
        ids = [sp.encode(s) + [model.eos] for s, _ in chunk]
        hyps = translate(ids)
        lines = []
        for offset, ((_, ref), hyp) in enumerate(zip(chunk, hyps)):
            text = sp.decode(hyp).replace("\n", " ").strip()
            if not text:
                text = ref
                meta["reference_fallbacks"].append(done + offset + 1)  # 1-based line number
            lines.append(text)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        done, new = done + n, new + n
        meta["lines"] = done
        meta_path.write_text(json.dumps(meta, indent=1))
        rate = new / (time.time() - start)
        print(f"{done}/{len(pairs)} lines, {rate:.1f} sent/s, ETA {(len(pairs) - done) / rate / 60:.1f} min", flush=True)
    print(f"{args.out}: {done}/{len(pairs)} lines; {len(meta['reference_fallbacks'])} reference fallbacks", flush=True)


if __name__ == "__main__":
    main()
