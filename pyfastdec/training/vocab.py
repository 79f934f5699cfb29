"""The joint sentencepiece vocabulary shared by source, target and output projection.

Ids are fixed because config.json and the C++ engine rely on them:
pad=0, unk=1, bos=2, eos=3, and the user-defined `<mask>` at 4 (the GAD drafter's
placeholder for tokens still to be predicted).
"""
from __future__ import annotations

import io
from pathlib import Path

import sentencepiece as spm

PAD, UNK, BOS, EOS, MASK = 0, 1, 2, 3, 4
TOKENS = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS, "mask": MASK}
MASK_PIECE = "<mask>"


def train_vocab(sentences: list[str], out_path: str | Path, vocab_size: int = 8000) -> spm.SentencePieceProcessor:
    """Train a unigram model on `sentences` (in the given order) and write it to out_path.

    Deterministic: every sentence is used (no sampling), no shuffling, one thread.
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=1.0,
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        user_defined_symbols=[MASK_PIECE],
        input_sentence_size=0,
        shuffle_input_sentence=False,
        seed_sentencepiece_size=1000000,
        num_threads=1,
        minloglevel=2,
    )
    Path(out_path).write_bytes(model.getvalue())
    sp = load_vocab(out_path)
    return sp


def load_vocab(path: str | Path) -> spm.SentencePieceProcessor:
    """Load a model and check that the special ids are the ones pyfastdec assumes."""
    sp = spm.SentencePieceProcessor(model_file=str(path))
    got = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id(),
           "mask": sp.piece_to_id(MASK_PIECE)}
    if got != TOKENS:
        raise ValueError(f"{path}: special token ids {got} differ from the expected {TOKENS}")
    return sp
