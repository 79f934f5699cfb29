"""export.gec_noise: synthetic errors are reproducible, each kind makes the change it
names (inflections checked against pymorphy3's lemma, an independent analysis), clean
sentences stay clean, and the written corpus keeps sources and targets line-aligned."""
from __future__ import annotations

import gzip
import random

import pytest

pymorphy3 = pytest.importorskip("pymorphy3", reason="the 'export' extra")

from export import gec_noise  # noqa: E402
from export.gec_noise import TOKEN, noise, write_corpus  # noqa: E402

SENTENCES = ["Наступного ранку, коли я сидів сам, дядько Том шастав у готелі.",
             "Я хочу пити каву з молоком.", "Він пішов до магазину — і повернувся.",
             "Ми знаємо, що вона прийде завтра.", "Діти граються в парку з м'ячем."]


def test_reproducible_and_different_seeds_differ():
    def run(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [noise(s, rng) for s in SENTENCES * 4]
    assert run(3) == run(3)
    assert run(3) != run(4)


def test_share_of_unchanged_sentences_is_about_p_clean():
    rng = random.Random(0)
    outs = [noise(s, rng) for s in SENTENCES * 400]
    unchanged = sum(o == s for o, s in zip(outs, SENTENCES * 400)) / len(outs)
    assert gec_noise.P_CLEAN - 0.03 <= unchanged < gec_noise.P_CLEAN + 0.15  # some tries change nothing
    assert all(o and "\n" not in o for o in outs)
    rng = random.Random(0)  # dropping the only mark must not leave an empty line
    assert all(noise(".", rng) for _ in range(200))


def test_inflection_keeps_the_lemma():
    morph = pymorphy3.MorphAnalyzer(lang="uk")
    rng = random.Random(1)
    for _ in range(60):
        s = rng.choice(SENTENCES)
        tokens = TOKEN.findall(s)
        before = list(tokens)
        assert gec_noise._inflection(tokens, rng)
        changed = [(x, y) for x, y in zip(before, tokens) if x != y]
        assert len(changed) == 1 and len(tokens) == len(before)
        old, new = changed[0]
        assert morph.parse(old.lower())[0].normal_form in {p.normal_form for p in morph.parse(new.lower())}


def test_each_kind_makes_its_change():
    rng = random.Random(2)
    s = TOKEN.findall("Ми знаємо, що вона прийде — і в нас буде свято.")
    t = list(s)
    assert gec_noise._euphony(t, rng) and sum(a != b for a, b in zip(s, t)) == 1
    t = list(s)
    assert gec_noise._order(t, rng) and sorted(w.lower() for w in t) == sorted(w.lower() for w in s) and t != s
    for _ in range(20):
        t = list(s)
        assert gec_noise._punctuation(t, rng)
        assert [w for w in t if w[0].isalnum()] == [w for w in s if w[0].isalnum()]  # words untouched
    for _ in range(20):
        t = list(s)
        if gec_noise._spelling(t, rng):
            diff = [(a, b) for a, b in zip(s, t) if a != b]
            assert len(diff) == 1 and abs(len(diff[0][0]) - len(diff[0][1])) <= 1


def test_corpus_is_line_aligned(tmp_path):
    pairs = write_corpus(SENTENCES, tmp_path, copies=3, seed=5)
    src = gzip.open(tmp_path / "train.src.gz", "rt", encoding="utf-8").read().splitlines()
    tgt = gzip.open(tmp_path / "train.tgt.gz", "rt", encoding="utf-8").read().splitlines()
    assert pairs == len(src) == len(tgt) == 15
    assert tgt == SENTENCES * 3
    assert sum(a != b for a, b in zip(src, tgt)) >= 8
