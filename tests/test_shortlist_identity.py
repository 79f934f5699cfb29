"""Shortlist builder's identity option (correction models): every source id lists itself
first, so copying any source piece is always a candidate.

The reference is the plain builder's own rows (checked against a textbook IBM Model 1
in test_shortlist.py) with the source id put in front and the rest cut to best - 1.
"""
import numpy as np
import pytest

from export.shortlist import build_shortlist, main
from test_shortlist import SPECIALS, synthetic_corpus

VOCAB = 40


@pytest.fixture(scope="module")
def corpus():
    # Targets are translations by a permutation g, so IBM Model 1 alone almost never
    # lists f among f's own targets: without the option a copy is mostly impossible.
    src, tgt, g = synthetic_corpus(n_sent=300, vocab_size=VOCAB, seed=7, noise=0.1)
    unseen = VOCAB - 1  # no source sentence holds it: an empty row without the option
    src = [[f for f in s if f != unseen] for s in src]
    return src, tgt, g, unseen


def test_without_identity_copies_are_missing(corpus):
    src, tgt, _, unseen = corpus
    plain = build_shortlist(src, tgt, VOCAB, frequent=3, best=4, iterations=4)
    missing = [f for f in range(VOCAB) if f not in plain.translations(f)[0].tolist()]
    assert len(missing) > VOCAB // 2 and unseen in missing
    assert plain.translations(unseen)[0].size == 0


@pytest.mark.parametrize("best", [1, 2, 4])
def test_every_row_is_the_id_then_its_best_other_targets(corpus, best):
    src, tgt, _, _ = corpus
    full = build_shortlist(src, tgt, VOCAB, frequent=3, best=VOCAB, iterations=4)
    sl = build_shortlist(src, tgt, VOCAB, frequent=3, best=best, iterations=4, identity=True)
    assert sl.best == best
    for f in range(VOCAB):
        targets, probs = sl.translations(f)
        others, other_probs = full.translations(f)
        keep = others != f
        expected = [f] + others[keep].tolist()[:best - 1]
        assert targets.tolist() == expected, f
        np.testing.assert_allclose(probs, [1.0] + other_probs[keep].tolist()[:best - 1], rtol=1e-6)
    assert sl.frequent.tolist() == full.frequent.tolist()


def test_candidates_hold_every_source_id(corpus):
    src, tgt, g, unseen = corpus
    sl = build_shortlist(src, tgt, VOCAB, frequent=0, best=2, iterations=4, identity=True)
    for sentence in src[:40] + [[unseen, 6]]:
        got = set(sl.candidates(sentence).tolist())
        assert set(sentence) <= got and SPECIALS <= got


def test_identity_needs_a_row(corpus):
    src, tgt, _, _ = corpus
    with pytest.raises(ValueError, match="identity needs best >= 1"):
        build_shortlist(src, tgt, VOCAB, best=0, identity=True)


def test_command_line_flag(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from pyfastdec.model_dir.shortlist import Shortlist
    # Correction-like pairs: the target is the source with one word respelled.
    words = ["mama", "myla", "ramu", "tato", "chytav", "knyhu", "kit", "spav"]
    rng = np.random.default_rng(3)
    src_lines, tgt_lines = [], []
    for _ in range(200):
        line = rng.choice(words, size=4).tolist()
        src_lines.append(" ".join(line))
        tgt_lines.append(" ".join("kit" if w == "spav" else w for w in line))
    (tmp_path / "train.src").write_text("\n".join(src_lines) + "\n")
    (tmp_path / "train.tgt").write_text("\n".join(tgt_lines) + "\n")
    (tmp_path / "both.txt").write_text("\n".join(src_lines + tgt_lines) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "both.txt"), model_prefix=str(tmp_path / "spm"),
        vocab_size=20, model_type="word", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        user_defined_symbols=["<mask>"], hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    args = ["--src", str(tmp_path / "train.src"), "--tgt", str(tmp_path / "train.tgt"),
            "--spm", str(tmp_path / "spm.model"), "--frequent", "0", "--best", "2"]
    assert main(args + ["--out", str(tmp_path / "plain.bin")]) == 0
    assert main(args + ["--out", str(tmp_path / "identity.bin"), "--identity"]) == 0
    (spav,) = sp.encode("spav")
    assert spav not in Shortlist.load(tmp_path / "plain.bin").translations(spav)[0].tolist()
    with_identity = Shortlist.load(tmp_path / "identity.bin")
    for f in range(sp.get_piece_size()):
        assert with_identity.translations(f)[0][0] == f
