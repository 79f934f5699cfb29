"""export.gec_score: word-level edits (checked by applying them back and against an
independent recursive edit distance), and P / R / F0.5 per annotator and with the better
annotator per sentence, on hand-worked examples."""
from __future__ import annotations

import functools
import random

import pytest

from export.gec_score import _alignment, apply_edits, edits, main, score, words


def test_words_keep_apostrophes_and_hyphens_inside_and_split_punctuation():
    assert words("М'ясо, п’ять і будь-який мʼяч!") == ["М'ясо", ",", "п’ять", "і", "будь-який", "мʼяч", "!"]


def _distance(a: tuple, b: tuple) -> int:
    @functools.lru_cache(maxsize=None)
    def d(i: int, j: int) -> int:
        if i == len(a) or j == len(b):
            return len(a) - i + len(b) - j
        return min(d(i + 1, j + 1) + (a[i] != b[j]), d(i + 1, j) + 1, d(i, j + 1) + 1)
    return d(0, 0)


def test_edits_apply_back_and_are_minimal_on_random_sentences():
    rng = random.Random(7)
    for _ in range(400):
        src = [rng.choice("abcde") for _ in range(rng.randint(0, 9))]
        tgt = [rng.choice("abcde") for _ in range(rng.randint(0, 9))]
        found = edits(src, tgt)
        assert apply_edits(src, found) == tgt
        steps = _alignment(src, tgt)
        assert sum(op != "M" for op, _, _ in steps) == _distance(tuple(src), tuple(tgt))
        spans = sorted((s, e) for s, e, _ in found)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), "edits overlap"
        for s, e, r in found:
            assert (e > s) or r, "an empty edit"


def test_edits_of_a_ukrainian_correction():
    src = words("Я хочу пити каву з молоко.")
    tgt = words("Я хочу пити каву з молоком.")
    assert edits(src, tgt) == [(5, 6, ("молоком",))]
    src, tgt = words("Він пішов до магазін"), words("Він пішов до магазину .")
    assert edits(src, tgt) == [(3, 4, ("магазину", "."))]  # adjacent changes: one edit
    assert edits(words("a b c"), words("a c")) == [(1, 2, ())]
    assert edits(words("a c"), words("a b c")) == [(1, 1, ("b",))]


SRC = ["Я хочу пити каву з молоко.", "Він пішов до магазін.", "Все добре."]
REF1 = ["Я хочу пити каву з молоком.", "Він пішов до магазину.", "Все добре."]
REF2 = ["Я хочу пити кави з молоком.", "Він пішов у магазин.", "Усе добре."]


def test_copying_the_input_scores_zero():
    result = score(SRC, SRC, [REF1, REF2])
    for key in ("annotator 1", "annotator 2", "best annotator per sentence"):
        assert result[key]["f0.5"] == 0.0 and result[key]["precision"] == 1.0 and result[key]["recall"] == 0.0
    assert result["sentences changed %"] == 0.0


def test_the_reference_itself_scores_one_and_the_other_annotator_less():
    result = score(SRC, REF1, [REF1, REF2])
    assert result["annotator 1"]["f0.5"] == 1.0
    assert result["annotator 2"]["tp"] == 1  # молоко -> молоком: both annotators
    assert result["annotator 2"]["f0.5"] < 1.0
    assert result["best annotator per sentence"]["f0.5"] == 1.0
    assert result["sentences changed %"] == pytest.approx(200 / 3)


def test_best_annotator_is_chosen_per_sentence():
    # sentence 1 matches annotator 2 only, sentence 2 annotator 1 only
    hyps = ["Я хочу пити кави з молоком.", "Він пішов до магазину.", "Все добре."]
    result = score(SRC, hyps, [REF1, REF2])
    # sentence 1: two separate edits (каву -> кави, молоко -> молоком), both annotator 2's
    assert result["annotator 1"]["tp"] == 2 and result["annotator 1"]["fp"] == 1
    assert result["annotator 2"]["tp"] == 2 and result["annotator 2"]["fp"] == 1
    best = result["best annotator per sentence"]
    assert (best["tp"], best["fp"], best["fn"]) == (3, 0, 0)
    assert best["f0.5"] == 1.0


def test_precision_recall_f05_by_hand():
    # one right edit, one wrong edit, one missed edit: P = 1/2, R = 1/2, F0.5 = 1/2
    src = ["a b c d e"]
    ref = ["a B c D e"]
    hyp = ["a B c d E"]
    r = score(src, hyp, [ref])["annotator 1"]
    assert (r["tp"], r["fp"], r["fn"]) == (1, 1, 1)
    assert r["f0.5"] == pytest.approx(0.5)
    # P = 1, R = 1/2: F0.5 = 1.25 * 0.5 / (0.25 + 0.5) = 5/6
    r = score(["a b c d e"], ["a B c d e"], [ref])["annotator 1"]
    assert r["f0.5"] == pytest.approx(5 / 6)


def test_line_count_mismatch_is_a_clear_error(tmp_path, capsys):
    for name, lines in (("s", SRC), ("h", SRC[:2]), ("r", REF1)):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="the system output has 2 lines, the source has 3"):
        main(["--source", str(tmp_path / "s"), "--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r")])
