"""Random-initialised Hugging Face MarianMTModel checkpoints for the converter's tests,
with MarianTokenizer files (source.spm, target.spm, vocab.json) trained on the shared
Multi30k data, saved as `save_pretrained` saves them (transformers is a test dependency).

The vocabulary is built as transformers' convert_marian_to_pytorch lays it out: "</s>" 0,
"<unk>" 1, the pieces of the source and then the target sentencepiece model, "<pad>"
last (the decoder start token, a zero embedding row, banned from generation by
generation_config.json bad_words_ids as in the OPUS-MT checkpoints).
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

DATA = Path(os.environ.get("FASTDEC_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
MULTI30K = DATA / "multi30k"


def read_lines(name: str, n: int | None = None) -> list[str]:
    with gzip.open(MULTI30K / name, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return lines[:n] if n else lines


def train_spm(lines: list[str], prefix: Path, vocab_size: int) -> Path:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, num_threads=2,
                                   minloglevel=2)
    return Path(f"{prefix}.model")


def build_tokenizer_files(out: Path, src_vocab: int, tgt_vocab: int, lines: int = 29000,
                          total: int | None = None) -> dict[str, int]:
    """source.spm (en), target.spm (de) and vocab.json in `out`; returns the vocabulary.
    total: pad vocab.json with pieces no sentencepiece model produces up to this many
    entries (Multi30k is too small to train OPUS-MT's ~29k pieces per side, so the real
    58101-row embedding and output layer get rows for pieces never seen)."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    for name, lang, size in (("source", "en", src_vocab), ("target", "de", tgt_vocab)):
        model = train_spm(read_lines(f"train.{lang}.gz", lines), out / f"_{name}", size)
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
