"""Random-initialised Hugging Face MarianMTModel checkpoints for the converter's tests,
with MarianTokenizer files (source.spm, target.spm, vocab.json) trained on Multi30k: by
default on the evaluation sets that ship in the repository's data/ (so the tests run on a
fresh clone), or on the training corpus (the team's shared folder) where a caller asks.

The vocabulary is built as transformers' convert_marian_to_pytorch lays it out: "</s>" 0,
"<unk>" 1, the pieces of the source and then the target sentencepiece model, "<pad>"
last (the decoder start token, a zero embedding row, banned from generation by
generation_config.json bad_words_ids as in the OPUS-MT checkpoints).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from export.data import corpus_path

# The Multi30k sets in <repo>/data/multi30k (data/README.md): 2,014 sentences per side,
# enough for sentencepiece models of up to ~2,300 pieces.
SHIPPED_SPLITS = ("val", "test_2016_flickr")


def read_lines(name: str, n: int | None = None) -> list[str]:
    """The first n lines of Multi30k's `name` (e.g. "val.en.gz"), found as export.data
    finds corpora: the repository's data/ first, then the shared folder."""
    split, lang, _ = name.rsplit(".", 2)
    with gzip.open(corpus_path(split, lang), "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return lines[:n] if n else lines


def train_spm(lines: list[str], prefix: Path, vocab_size: int) -> Path:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, num_threads=2,
                                   minloglevel=2)
    return Path(f"{prefix}.model")


def build_tokenizer_files(out: Path, src_vocab: int, tgt_vocab: int, lines: int | None = None,
                          total: int | None = None, splits: tuple[str, ...] = SHIPPED_SPLITS) -> dict[str, int]:
    """source.spm (en), target.spm (de) and vocab.json in `out`; returns the vocabulary.
    The sentencepiece models learn the first `lines` sentences (all if None) of `splits`
    (("train",) needs the shared training corpus). total: pad vocab.json with pieces no
    sentencepiece model produces up to this many entries (Multi30k is too small to train
    OPUS-MT's ~29k pieces per side, so the real 58101-row embedding and output layer get
    rows for pieces never seen)."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    for name, lang, size in (("source", "en", src_vocab), ("target", "de", tgt_vocab)):
        text = [line for split in splits for line in read_lines(f"{split}.{lang}.gz")][:lines]
        model = train_spm(text, out / f"_{name}", size)
        model.rename(out / f"{name}.spm")
        (out / f"_{name}.vocab").unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(out / f"{name}.spm"))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and piece not in vocab:
                vocab[piece] = len(vocab)
    while total is not None and len(vocab) < total - 1:
        vocab[f"\u2581unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return vocab


def save_marian(out: Path, vocab: dict[str, int], d_model: int, heads: int, ffn: int, layers: int,
                activation: str = "swish", seed: int = 0, init_std: float = 0.02, eos_bias: float = 0.0):
    """A random MarianMTModel over `vocab`, saved with its tokenizer into `out` (which
    holds the tokenizer files already). Returns (model, tokenizer)."""
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    pad = vocab["<pad>"]
    config = MarianConfig(vocab_size=len(vocab), d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                          encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                          decoder_ffn_dim=ffn, max_position_embeddings=512, pad_token_id=pad,
                          decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
                          activation_function=activation, scale_embedding=True, init_std=init_std)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        # A bias toward EOS makes random models end sentences at varied lengths.
        model.final_logits_bias[0, 0] = eos_bias
    model.generation_config.bad_words_ids = [[pad]]  # as the OPUS-MT checkpoints ship it
    model.save_pretrained(out)
    tokenizer = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"))
    tokenizer.save_pretrained(out)
    return model, tokenizer
