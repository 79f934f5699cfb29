"""The joint vocabulary: fixed special ids and byte-identical retraining."""
import pytest

from export.tiny import synthetic_sentences
from export.vocab import TOKENS, load_vocab, train_vocab


def test_special_ids_and_determinism(tmp_path):
    lines = synthetic_sentences(200)
    a = train_vocab(lines, tmp_path / "a.model", 40)
    train_vocab(lines, tmp_path / "b.model", 40)
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    assert (a.pad_id(), a.unk_id(), a.bos_id(), a.eos_id()) == (0, 1, 2, 3)
    assert a.piece_to_id("<mask>") == TOKENS["mask"] == 4
    assert a.vocab_size() == 40
    # <mask> is a user-defined symbol: it is never split, and plain text never yields it.
    assert a.encode("<mask>")[-1] == 4
    assert 4 not in a.encode(" ".join(lines[:20]))


def test_load_vocab_refuses_other_ids(tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(synthetic_sentences(200)), model_prefix=str(tmp_path / "x"),
                                   vocab_size=30, minloglevel=2)  # default ids: unk=0, bos=1, eos=2
    with pytest.raises(ValueError, match=r"x\.model: special token ids"):
        load_vocab(tmp_path / "x.model")
