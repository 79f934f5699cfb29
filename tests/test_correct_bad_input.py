"""Issue 16, bad input to correction: text in another language or script, very long
paragraphs, lines that are only punctuation, and words mixing Latin and Cyrillic go
through the shipped uk-gec without crashes and without lost, merged or reordered lines,
in the API (IAD, checked against greedy of the same model) and in `fastdec correct`."""
from __future__ import annotations

import subprocess
import sys

import pytest

from child_python import NEUTRAL_CWD, child_env

from pyfastdec import Corrector, Translator

LONG = " ".join(["Я хочу пити каву з молоко, а він пішов до магазін і купив хліб."] * 40)  # ~40 sentences
LINES = [
    "The quick brown fox jumps over the lazy dog.",   # English
    "Der Hund läuft schnell über die Straße.",         # German
    "東京は日本の首都です。",                              # another script entirely
    "مرحبا بالعالم",                                   # right-to-left script
    "...",                                             # only punctuation
    "?!",
    "— «» ,,, ;;",
    "Я хочу пити каву з молоко.",                      # ordinary Ukrainian
    "Він купив iPhone і MacBook у магазині.",           # Latin words inside Ukrainian
    "Мiй кiт спить на вiкнi.",                          # Latin i inside Cyrillic words (homoglyphs)
    "Cлово з латинською C на початку.",
    LONG,
    "😀 🙂",                                            # emoji only
    "1234 5678",
]


@pytest.fixture(scope="module")
def corrector():
    return Corrector(threads=1)


def test_every_line_comes_back_in_order_and_iad_equals_greedy(corrector):
    corrected = corrector.correct(LINES, batch_size=4)
    assert len(corrected) == len(LINES)
    assert all(isinstance(c, str) for c in corrected)
    greedy = corrector.translate(LINES, algo="greedy", batch_size=4)
    assert corrected == greedy
    one_by_one = [corrector.correct([line])[0] for line in LINES]
    assert one_by_one == corrected  # no line depends on its neighbours: nothing merged or shifted
    # the long paragraph is split into sentences and rejoined: it keeps about its length
    assert 0.5 * len(LONG) < len(corrected[LINES.index(LONG)]) < 1.5 * len(LONG)
    ordinary = corrected[LINES.index("Я хочу пити каву з молоко.")]
    assert "каву" in ordinary
    # a line the model copies (greedy's ids are the source's) comes back as it was written
    tok, copies = corrector.tokenizer, 0
    for line, got in zip(LINES, corrected):
        ids = tok.encode(line)
        if line != LONG and corrector.translate([ids], algo="greedy")[0] == ids:
            assert got == line
            copies += 1
    assert copies >= 5


def test_text_the_model_cannot_read_comes_back_unchanged(corrector):
    """Sentences with pieces the vocabulary lacks (unk) are returned as they are: the
    model can only drop or replace them (it turned the Japanese line into a Ukrainian
    word). The other sentences of the same line are still corrected."""
    tok, unk = corrector.tokenizer, corrector.verifier.tokens["unk"]
    unreadable = [line for line in LINES if unk in tok.encode(line)]
    assert len(unreadable) >= 3  # Japanese, Arabic, the first emoji at least
    assert corrector.correct(unreadable) == unreadable
    mixed = "東京は日本の首都です。 Я хочу пити каву з молоко."
    got = corrector.correct([mixed])[0]
    assert got.startswith("東京は日本の首都です。 ")
    assert got[len("東京は日本の首都です。 "):] == corrector.correct(["Я хочу пити каву з молоко."])[0]
    # a long unreadable sentence cut into chunks comes back once, whole
    long = " ".join(["東京は日本の首都です"] * 300) + "。"  # 5 chunks of at most max_source_len
    assert corrector.correct([long]) == [long]
    # only correction keeps text as it is: a Translator still decodes what it cannot read
    assert Translator(threads=1).translate(["東京は日本の首都です。"])[0] != "東京は日本の首都です。"


def test_cli_keeps_one_output_line_per_input_line(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    # the child imports this process's pyfastdec (installed, with its engine), not the bare checkout
    out = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "correct", "-i", str(src), "--threads", "1"],
                         capture_output=True, text=True, check=True, timeout=600, env=child_env(),
                         cwd=NEUTRAL_CWD)
    lines = out.stdout.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(LINES)
    assert lines[:-1] == Corrector(threads=1).correct(LINES)
