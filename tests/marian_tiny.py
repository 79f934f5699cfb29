"""Tiny Marian-trained models and Marian's own greedy outputs, the test data of the
Marian .npz reader (tests/test_convert_marian_npz_in.py).

`python -m tests.marian_tiny [OUT_DIR]` (needs pymarian, the 'bench-marian' extra; ~1 min
on 2 cores) regenerates tests/data/marian_tiny/:
- vocab.spm: sentencepiece with Marian's own id conventions (eos 0, unk 1, no bos;
  marian-dev sentencepiece_vocab.cpp), 500 pieces, identity normalisation (keeps the file
  at ~7 KB), trained on the first 4,000 Multi30k en+de training pairs;
- post.npz: `marian --type transformer --transformer-decoder-autoreg rnn --dec-cell ssru
  --tied-embeddings-all`, post-norm (dan), relu: the Bergamot students' layout;
- pre.npz: the same with pre-norm (n / da / top n) and swish (Marian's default activation);
  both d=16, 4 heads, FFN 32, 2+2 layers, 300 updates;
- sources.txt: the first N_SENTENCES of Multi30k test_2016_flickr.en;
- {post,pre}.greedy.txt: pymarian.Translator greedy (beam 1, default options) on them.
"""
from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FASTDEC_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "tests" / "data" / "marian_tiny"
N_TRAIN, N_SENTENCES, VOCAB = 4000, 60, 500
MODELS = {
    "post": "--transformer-ffn-activation relu --transformer-postprocess dan",
    "pre": "--transformer-ffn-activation swish --transformer-preprocess n --transformer-postprocess da "
           "--transformer-postprocess-top n",
}


def _lines(name: str, n: int) -> list[str]:
    with gzip.open(DATA / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


def train_vocab(work: Path) -> Path:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        input=f"{work / 'train.en'},{work / 'train.de'}", model_prefix=str(work / "vocab"), vocab_size=VOCAB,
        bos_id=-1, eos_id=0, unk_id=1, normalization_rule_name="identity", character_coverage=1.0,
        model_type="unigram", shuffle_input_sentence=False, minloglevel=2)
    (work / "vocab.model").rename(work / "vocab.spm")
    return work / "vocab.spm"


def train_model(work: Path, name: str) -> Path:
    import pymarian

    cli = (f"--type transformer --dim-emb 16 --enc-depth 2 --dec-depth 2 --transformer-heads 4 "
           f"--transformer-dim-ffn 32 --transformer-decoder-autoreg rnn --dec-cell ssru --tied-embeddings-all "
           f"--train-sets {work}/train.en {work}/train.de --vocabs {work}/vocab.spm {work}/vocab.spm "
           f"--dim-vocabs {VOCAB} {VOCAB} --model {work}/{name}.npz --after-batches 300 --mini-batch 32 "
           f"--maxi-batch 10 --learn-rate 0.003 --disp-freq 100 --save-freq 1000 --valid-freq 100000 "
           f"--cpu-threads 1 --devices 0 --seed 1 --max-length 60 --overwrite --no-restore-corpus "
           f"--quiet {MODELS[name]}")
    if pymarian.Trainer(cli).train() != 0:
        raise RuntimeError(f"marian training of {name} failed")
    return work / f"{name}.npz"


def marian_greedy(npz: Path, vocab: Path, lines: list[str]) -> list[str]:
    import pymarian

    cli = f"-m {npz} -v {vocab} {vocab} --beam-size 1 --cpu-threads 1 --mini-batch 1 --maxi-batch 1 --quiet"
    return pymarian.Translator(cli).translate(lines)


def generate(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    try:
        (work / "train.en").write_text("\n".join(_lines("train.en.gz", N_TRAIN)) + "\n", encoding="utf-8")
        (work / "train.de").write_text("\n".join(_lines("train.de.gz", N_TRAIN)) + "\n", encoding="utf-8")
        shutil.copyfile(train_vocab(work), out / "vocab.spm")
        sources = _lines("test_2016_flickr.en.gz", N_SENTENCES)
        (out / "sources.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
        for name in MODELS:
            shutil.copyfile(train_model(work, name), out / f"{name}.npz")
            outputs = marian_greedy(out / f"{name}.npz", out / "vocab.spm", sources)
            (out / f"{name}.greedy.txt").write_text("\n".join(outputs) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
