"""The Corrector's repetition guard (pyfastdec/repetition_guard.py): a looping correction
comes back as its input. The n-gram runs against a brute-force count; the guard on the
shipped uk-gec against a text-level loop check of its own (words and characters of the
decoded text, not pieces), on real UA-GEC test sentences."""
import random
import re
from pathlib import Path

import pytest

from pyfastdec import cli
from pyfastdec.api import Corrector, Translator
from pyfastdec.repetition_guard import LOOP_COPIES, LoopCheck, runs, words
from pyfastdec.text import split_sentences

from test_real_sentences import uagec_test_head

MODELS = Path(__file__).resolve().parents[1] / "models"


def brute_runs(seq, max_n=3):
    """Per n-gram, the most copies in a row, counted from every start."""
    found = {}
    for n in range(1, max_n + 1):
        for i in range(len(seq) - n + 1):
            gram, copies = tuple(seq[i:i + n]), 1
            while tuple(seq[i + copies * n:i + (copies + 1) * n]) == gram:
                copies += 1
            if copies > 1:
                found[gram] = max(found.get(gram, 0), copies)
    return found


def test_runs_match_a_brute_force_count():
    rng = random.Random(7)
    for _ in range(400):
        seq = [rng.randrange(3) for _ in range(rng.randrange(0, 25))]
        assert runs(seq) == brute_runs(seq), seq


PIECES = {100: "▁a", 101: "▁b", 102: "▁c", 5: "x", 6: ",", 7: "▁:", 8: "▁—"}


class Pieces:
    """A tokenizer's two calls LoopCheck makes, over PIECES."""

    def piece(self, t: int) -> str:
        return PIECES[t]

    def starts_word(self, t: int) -> bool:
        return PIECES[t].startswith("\u2581")


def test_loops_need_three_copies_more_than_the_source_has():
    a, b, c, x, comma, colon, dash = 100, 101, 102, 5, 6, 7, 8
    check = LoopCheck(Pieces())
    assert check.loops([a, b, c], [a, b, a, b, a, b, c])  # "a b" x3 (words)
    assert not check.loops([a, b, c], [a, b, a, b, c])  # two copies: not a loop
    assert not check.loops([a, b, a, b, a, b], [a, b, a, b, a, b])  # the source repeats as much
    assert check.loops([a, b, a, b, a, b], [a, b, a, b, a, b, a, b])  # ... but not this much
    assert check.loops([c, c, c, a], [a, a, a, c])  # another n-gram's run allows nothing
    assert check.loops([a, x, b], [a, x, x, x, b])  # a word mangled into a loop of pieces
    # commas between repeated words are an edit, not a loop: "a a a" -> "a, a, a,"
    assert not check.loops([a, a, a, b], [a, comma, a, comma, a, comma, b])
    assert check.loops([a, a, b], [a, comma, a, comma, a, comma, b])  # ... unless the words loop
    # punctuation alone can loop: ": : : :" (its own view), and "— —" in the source allows two
    assert check.loops([a, colon, b], [a, colon, colon, colon, colon, b])
    assert not check.loops([a, dash, dash, b], [a, dash, dash, b])
    assert words([a, x, x, b, c, x], check.starts_word) == [(a, x, x), (b,), (c, x)]
    assert check.punctuation(comma) and check.punctuation(dash) and not check.punctuation(x)
    assert LOOP_COPIES == 3


WORD, TOKEN = re.compile(r"\w+"), re.compile(r"\w+|[^\w\s]")
IN_WORD = re.compile(r"(\w{1,6})\1\1")


def loops_in_text(source: str, output: str) -> bool:
    """Independent of pieces: a run of 3+ copies of a 1-3 word n-gram of the text's words
    (punctuation left out), or of punctuation marks next to each other, that the source does
    not have as long; or more character loops inside words ("огоогоого") than the source has."""
    def marks_only(gram):
        return all(not t[0].isalnum() and t[0] != "_" for t in gram)

    checks = ((WORD, lambda gram: True), (TOKEN, marks_only))
    for tokens, counts in checks:
        src, out = brute_runs(tokens.findall(source)), brute_runs(tokens.findall(output))
        if any(k >= 3 and k > src.get(g, 1) and counts(g) for g, k in out.items()):
            return True
    return len(IN_WORD.findall(output)) > len(IN_WORD.findall(source))


@pytest.fixture(scope="module")
def corrected():
    # one sentence per input, so that a reverted input is a whole reverted unit
    sources = [s for line in uagec_test_head(400) for s in split_sentences(line)]
    corrector = Corrector(MODELS / "uk-gec", threads=1)
    free, free_stats = corrector.correct(sources, repetition_guard=False, return_stats=True)
    guarded, stats = corrector.correct(sources, return_stats=True)
    return sources, free, free_stats, guarded, stats


def test_a_looping_correction_comes_back_as_its_input(corrected):
    sources, free, free_stats, guarded, stats = corrected
    reverted = [i for i, (f, g) in enumerate(zip(free, guarded)) if f != g]
    assert len(reverted) >= 3  # the shipped model loops on some of these sentences
    assert free_stats.loops_reverted == 0 and stats.loops_reverted == len(reverted)
    for i in reverted:
        assert guarded[i] == sources[i]  # exactly as written (copy-through)
        assert loops_in_text(sources[i], free[i]), (sources[i], free[i])


def test_corrections_that_do_not_loop_are_kept(corrected):
    sources, free, _, guarded, _ = corrected
    kept = [i for i, (f, g) in enumerate(zip(free, guarded)) if f == g]
    assert sum(free[i] != sources[i] for i in kept) > 100  # real corrections went through
    # what the text check calls a loop, the guard reverted (the converse: the test above)
    assert not [i for i in kept if free[i] != sources[i] and loops_in_text(sources[i], free[i])]


def test_the_guard_is_a_correction_rule_only():
    translator = Translator(MODELS / "en-de", threads=1)
    with pytest.raises(ValueError, match="repetition_guard=True: .*Corrector"):
        translator.translate(["A dog runs."], repetition_guard=True)
    corrector = Corrector(MODELS / "uk-gec", threads=1)
    with pytest.raises(ValueError, match="'greedy' and 'iad' only"):
        corrector.translate(["Він пішов до магазін."], algo="beam", beam_size=2, repetition_guard=True)
    with pytest.raises(ValueError, match="target_prefix"):
        corrector.translate(["Він пішов до магазін."], target_prefix=["Він"], repetition_guard=True)
    with pytest.raises(TypeError, match="True, False or None"):
        corrector.correct(["Він пішов до магазін."], repetition_guard="yes")


def test_cli_keeps_looping_corrections_only_when_asked(corrected, tmp_path, capsys):
    sources, free, _, _, _ = corrected
    looping = next(i for i, (f, g) in enumerate(zip(free, corrected[3])) if f != g)
    lines = [sources[looping], "Він пішов до магазін."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for flag in ([], ["--no-repetition-guard"]):
        out = tmp_path / f"out{len(flag)}.txt"
        code = cli.main(["correct", "-m", str(MODELS / "uk-gec"), "--threads", "1", *flag, "-i",
                         str(tmp_path / "in.txt"), "-o", str(out), "--no-progress", "--stats"])
        assert code == 0
        outputs[bool(flag)] = out.read_text(encoding="utf-8").splitlines()
        err = capsys.readouterr().err
        assert ("looping corrections dropped: 1 " in err) == (not flag), err
    assert outputs[False][0] == sources[looping] and outputs[True][0] == free[looping]
    assert outputs[False][1] == outputs[True][1]
