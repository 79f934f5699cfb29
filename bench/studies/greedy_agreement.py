"""Native engine against the PyTorch reference on a real test set: BLEU/chrF of greedy
decoding, the share of outputs token-identical to torch's, and decoding time.

    python -m bench.studies.greedy_agreement MODEL_DIR [MODEL_DIR ...] [--split test_2016_flickr]
        [--src en --tgt de] [--batch-size 32] [--threads 1]

The first directory's float weights are decoded by torch (export.torch_backend) as the
reference; every directory (float or int8) is decoded by the native engine.
"""
from __future__ import annotations

import argparse
import time

import sentencepiece as spm

from bench.quality import bleu_chrf, identical_share
from export.data import corpus_path, read_lines
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy


def decode_all(backend, sources, batch_size):
    outputs, start = [], time.perf_counter()
    for i in range(0, len(sources), batch_size):
        batch, _ = greedy(backend, sources[i:i + batch_size])
        outputs += batch
    return outputs, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from export.torch_backend import TorchBackend

    torch.set_num_threads(args.threads)
    lines = read_lines(corpus_path(args.split, args.src))
    refs = read_lines(corpus_path(args.split, args.tgt))
    sp = spm.SentencePieceProcessor(model_file=f"{args.models[0]}/spm.model")
    eos = sp.eos_id()
    sources = [sp.encode(line) + [eos] for line in lines]

    def report(name, outputs, seconds, reference=None):
        quality = bleu_chrf([sp.decode(o) for o in outputs], refs)
        same = "" if reference is None else \
            f", identical to torch {round(identical_share(outputs, reference) * len(outputs))}/{len(outputs)}"
        print(f"{name}: BLEU {quality['bleu']:.2f} chrF {quality['chrf']:.2f}, {seconds:.1f} s{same}", flush=True)

    reference, seconds = decode_all(TorchBackend.from_dir(args.models[0]), sources, args.batch_size)
    report(f"torch {args.models[0]}", reference, seconds)
    for path in args.models:
        outputs, seconds = decode_all(NativeBackend(path, threads=args.threads), sources, args.batch_size)
        report(f"native {path}", outputs, seconds, reference)


if __name__ == "__main__":
    main()
