"""Lines of several sentences are decoded sentence by sentence, nothing lost or reordered,
and lines of control characters are empty (issue 10, items 1 and 8).

On the shipped models and real text: paragraphs are made by joining consecutive real
sentences (Multi30k test_2016_flickr English for models/en-de, the UA-GEC test sources
for models/uk-gec). The reference is independent of the API's splitting and joining:
the backend's greedy (or beam search) on each sentence alone, decoded, space-joined.
Sentences are also counted in and out with text.split_sentences.
"""
from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

from child_python import NEUTRAL_CWD, child_env
from export.data import corpus_path, read_lines
from pyfastdec import Corrector, Translator
from pyfastdec.copy_through import CopyThrough
from pyfastdec.decoding import beam_search, greedy
from pyfastdec.text import clean_text, split_sentences

CONTROL_LINES = ["\x00", "\x1b\x1b", "\x00 \x1b\t\x7f\x85\x9b", "\x1b\x00\x1b"]  # C0, DEL, C1
# Nothing visible either (issue 27, item 16): ZWJ / ZWNJ, U+2060-2062, soft hyphens, bidi
# marks, BOM, private use, the noncharacters U+FFFE/FFFF, bare combining marks, mixtures.
INVISIBLE_LINES = ["\u200d", "\u200c\u200d", "\u2060\u2061\u2062", "\u00ad\u00ad",
                   "\u200e\u200f\u202a\u202e\u2066\u2069\u061c", "\ufeff", "\ue000\uf8ff\U000f0000",
                   "\ufffe\uffff", "\u0301", "\u0308\u0301\u20dd", " \u200d \u0301\x00\u00ad "]
PARAGRAPH_SENTENCES = 120  # real sentences spread over paragraphs of 2-6
LONG_PARAGRAPH = 36  # sentences in the paragraph that exceeds max_source_len


# ----------------------------------------------------------------------------- the splitter
@pytest.mark.parametrize("text, sentences", [
    ("A dog runs. A cat sleeps. A bird sings.", ["A dog runs.", "A cat sleeps.", "A bird sings."]),
    ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
    ("Use e.g. a fork, i.e. a tool. Then eat.", ["Use e.g. a fork, i.e. a tool.", "Then eat."]),
    ("J. R. R. Tolkien wrote it. So did I. Then we left.",
     ["J. R. R. Tolkien wrote it.", "So did I.", "Then we left."]),  # "I." is no initial
    ("It costs 3.5 euros. Fine.", ["It costs 3.5 euros.", "Fine."]),
    ("See No. 5 today. No. Not today.", ["See No. 5 today.", "No.", "Not today."]),
    ('He said "Stop." Then "Why?" (Really.) Yes…  ok',
     ['He said "Stop."', 'Then "Why?"', "(Really.)", "Yes…", "ok"]),
    ("A sign says E.S.E. Electronics. It is red.", ["A sign says E.S.E. Electronics.", "It is red."]),
    ("Т. Шевченко жив на вул. Хрещатик. Це зробив я. Потім пішов!",
     ["Т. Шевченко жив на вул. Хрещатик.", "Це зробив я.", "Потім пішов!"]),
    ("Wait... what?!  Yes.", ["Wait...", "what?!", "Yes."]),
    ("一。二！三", ["一。", "二！", "三"]),
    ("  no stop at the end  ", ["no stop at the end"]),
    # punctuation glued to the next sentence (issue 27, item 15) ...
    ("A dog runs.A cat sleeps.A bird sings.", ["A dog runs.", "A cat sleeps.", "A bird sings."]),
    ("He left!Why?Who knows…Nobody.", ["He left!", "Why?", "Who knows…", "Nobody."]),
    ('He said "Stop."Then left.', ['He said "Stop."', "Then left."]),
    ("Привіт.Як справи?Добре.", ["Привіт.", "Як справи?", "Добре."]),
    # ... but not inside abbreviations, numbers, names, addresses and file names
    ("The U.S.A.Is big. Mr.Smith and e.g.Mary came.", ["The U.S.A.Is big.", "Mr.Smith and e.g.Mary came."]),
    ("It costs 3.5 euros.Version 2.0.Beta ships.", ["It costs 3.5 euros.", "Version 2.0.Beta ships."]),
    ("Edit config.json and README.TXT now.", ["Edit config.json and README.TXT now."]),
    ("Mail john.Smith@Example.com or see www.Example.com today.",
     ["Mail john.Smith@Example.com or see www.Example.com today."]),
    ("Open https://example.org/A.Page and C:\\Dir.Files now.", ["Open https://example.org/A.Page and C:\\Dir.Files now."]),
    ("Call Foo.Bar.baz in code.", ["Call Foo.Bar.baz in code."]),
])
def test_split_sentences_rules(text, sentences):
    assert split_sentences(text) == sentences
    assert "".join("".join(sentences).split()) == "".join(text.split())  # nothing lost, nothing moved


def test_glued_sentences_are_translated_one_by_one(en_de, flickr):
    """`printf 'A dog runs.A cat sleeps.A bird sings.' | fastdec translate` lost the second and
    third sentence: given them as one, the model translates the first and drops the rest.
    Glued, real sentences translate as each does alone."""
    sentences, ref = flickr
    for group in paragraphs(sentences[:30], seed=27):
        glued = "".join(group)
        assert split_sentences(glued) == group
        assert en_de.translate(glued, algo="greedy") == " ".join(ref[s] for s in group)


def test_clean_text_turns_every_control_character_into_a_space():
    assert clean_text("A\x00dog\x1bruns\x7f.\x85\x9b") == "A dog runs .  "
    assert clean_text("Tab\tand\u00a0nbsp, “quotes”") == "Tab and\u00a0nbsp, “quotes”"  # only Cc is touched
    assert all(not clean_text(line).strip() for line in CONTROL_LINES)


# ----------------------------------------------------------------------------- real data
def one_sentence_each(lines: list[str]) -> list[str]:
    """The lines that the splitter sees as exactly one sentence ending in . ! or ?: the
    material of paragraphs whose sentences can be counted back."""
    return [s for s in lines if len(split_sentences(s)) == 1 and s.rstrip()[-1:] in ".!?"]


def paragraphs(sentences: list[str], seed: int) -> list[list[str]]:
    """Consecutive sentences grouped 2-6 at a time."""
    rng, groups, i = random.Random(seed), [], 0
    while i + 1 < len(sentences):
        n = rng.randint(2, 6)
        groups.append(sentences[i:i + n])
        i += n
    return groups


def alone(t: Translator, sentences: list[str], decode=greedy) -> dict[str, str]:
    """Each sentence decoded alone on the verifier backend (batch of one), as text: a
    translation decoded, a correction written by copy-through (copy_through.py, checked
    against its own references in tests/test_copy_through.py)."""
    copy = CopyThrough(t.tokenizer.sp) if isinstance(t, Corrector) else None
    out = {}
    for s in sentences:
        ids, _ = decode(t.verifier, [t.tokenizer.encode(s) + [t.eos]])
        out[s] = copy.text(copy.source.pieces(s), ids[0]) if copy else t.tokenizer.decode(ids[0])
    return out


def well_formed(text: str) -> bool:
    """A translation that the splitter counts as one sentence (the model sometimes runs to
    max_len without a final stop, and such output cannot be counted back)."""
    return len(split_sentences(text)) == 1 and text.rstrip()[-1:] in ".!?"


@pytest.fixture(scope="module")
def en_de():
    return Translator(threads=1)


@pytest.fixture(scope="module")
def flickr(en_de):
    """(sentences, their translations alone) of the first real English test sentences."""
    sentences = one_sentence_each(read_lines(corpus_path("test_2016_flickr", "en")))[:PARAGRAPH_SENTENCES + 60]
    return sentences, alone(en_de, sentences)


@pytest.mark.parametrize("algo", ["greedy", "gad"])
def test_paragraphs_translate_sentence_by_sentence(en_de, flickr, algo):
    sentences, ref = flickr
    groups = paragraphs(sentences[:PARAGRAPH_SENTENCES], seed=1)
    outs = en_de.translate([" ".join(g) for g in groups], algo=algo, batch_size=4)
    assert outs == [" ".join(ref[s] for s in g) for g in groups]
    countable = [(g, o) for g, o in zip(groups, outs) if all(well_formed(ref[s]) for s in g)]
    assert len(countable) >= len(groups) // 2
    assert [len(split_sentences(o)) for _, o in countable] == [len(g) for g, _ in countable]


def test_a_36_sentence_paragraph_keeps_all_36(en_de, flickr):
    sentences, ref = flickr
    chosen = [s for s in sentences if well_formed(ref[s])][:LONG_PARAGRAPH]
    text = " ".join(chosen)
    assert len(en_de.tokenizer.encode(text)) + 1 > 2 * en_de.max_source_len  # far too long as one unit
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every sentence fits: nothing is cut, nothing warned
        out = en_de.translate(text)
    assert out == " ".join(ref[s] for s in chosen)
    assert len(split_sentences(out)) == LONG_PARAGRAPH


@pytest.mark.parametrize("batch_size", [1, 3])
def test_order_is_kept_across_mixed_paragraphs_singles_and_empty_lines(en_de, flickr, batch_size):
    sentences, ref = flickr
    groups = paragraphs(sentences[PARAGRAPH_SENTENCES:PARAGRAPH_SENTENCES + 30], seed=2)
    singles = sentences[PARAGRAPH_SENTENCES + 30:PARAGRAPH_SENTENCES + 40]
    texts, want = [], []
    for k, g in enumerate(groups):  # paragraph, single sentence, control-character line, ...
        texts += [" ".join(g), singles[k % len(singles)], CONTROL_LINES[k % len(CONTROL_LINES)]]
        want += [" ".join(ref[s] for s in g), ref[singles[k % len(singles)]], ""]
    assert en_de.translate(texts, algo="greedy", batch_size=batch_size) == want


def test_scores_of_a_paragraph_average_over_all_its_sentences(en_de, flickr):
    sentences, ref = flickr
    group = sentences[:3]
    scored = en_de.translate(group, algo="greedy", return_scores=True)  # one sentence each
    text, score = en_de.translate(" ".join(group), algo="greedy", return_scores=True)
    assert text == " ".join(ref[s] for s in group)
    # a per-token average: each sentence weighs its output length, EOS included
    lengths = [len(greedy(en_de.verifier, [en_de.tokenizer.encode(s) + [en_de.eos]])[0][0]) + 1 for s in group]
    assert score == pytest.approx(sum(s * n for (_, s), n in zip(scored, lengths)) / sum(lengths), abs=1e-5)


@pytest.mark.parametrize("first, last", [(3, 5), (3, 6)])
def test_n_best_of_a_paragraph_joins_the_kth_hypotheses_of_its_sentences(en_de, flickr, first, last):
    sentences, _ = flickr
    group = sentences[first:last]
    per_sentence = [beam_search(en_de.verifier, [en_de.tokenizer.encode(s) + [en_de.eos]], beam_size=3, nbest=2)
                    [0][0] for s in group]
    hyps = en_de.translate(" ".join(group), algo="beam", beam_size=3, n_best=2, return_scores=True)
    # Beam search may finish a sentence with fewer than n_best hypotheses (up to n_best,
    # as documented): the paragraph has as many as its sentence with the fewest.
    depth = min(len(p) for p in per_sentence)
    assert len(hyps) == depth
    assert [t for t, _ in hyps] == [" ".join(en_de.tokenizer.decode(p[k].tokens) for p in per_sentence)
                                    for k in range(depth)]
    for k, (_, score) in enumerate(hyps):
        n = [len(p[k].tokens) + 1 for p in per_sentence]
        np.testing.assert_allclose(score, sum(p[k].score * m for p, m in zip(per_sentence, n)) / sum(n),
                                   rtol=1e-5)


def test_control_character_lines_are_empty_without_running_the_model(en_de, flickr):
    sentences, ref = flickr
    outs, stats = en_de.translate(CONTROL_LINES, algo="greedy", return_stats=True)
    assert outs == [""] * len(CONTROL_LINES) and stats.generated == 0 and stats.iterations == 0
    s = sentences[0]
    words = s.split()
    for glue in ("\x00", "\x1b", "\x00\x1b\x85"):  # inside text a control character separates words
        assert en_de.translate(glue.join(words) + glue) == ref[s]


@pytest.mark.parametrize("model", ["translator", "corrector"])
def test_invisible_lines_are_empty_without_running_the_model(en_de, model):
    """Each of these lines used to come back as invented text ("Ein Mann." for a bare
    combining mark). A sentence of them after a real one adds nothing to it either."""
    t = en_de if model == "translator" else Corrector(threads=1)
    run = t.translate if model == "translator" else t.correct
    outs, stats = run(INVISIBLE_LINES, return_stats=True)
    assert outs == [""] * len(INVISIBLE_LINES) and stats.generated == 0 and stats.iterations == 0
    line = "A dog runs." if model == "translator" else "Собака біжить."
    assert run([line + " \u200d\u0301\ufeff "]) == run([line])


def test_invisible_characters_inside_text_do_not_change_a_translation(en_de, flickr):
    """Invisible characters the tokenizer reads as <unk> (ZWJ, soft hyphen, word joiner,
    bidi controls, private use) or as a space inside a word (LRM, BOM), inside or after
    real sentences: the translation is the visible text's own (they used to add invented
    words: "Ein Hund rennt mit einem schleudert." for "A dog runs." + ZWSP + ZWJ). ZWSP
    and ZWNJ, word separators in the scripts that use them, are left to sentencepiece."""
    sentences, ref = flickr
    rng = random.Random(5)
    marks = ["\u200d", "\u00ad", "\u2060", "\u202e", "\u200e", "\ufeff", "\ue000", "\ufffe"]
    for s in sentences[:24]:
        chars = list(s)
        for _ in range(3):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(marks))
        assert en_de.translate(["".join(chars)], algo="greedy") == [ref[s]], "".join(chars)
    words = sentences[0].split()  # a word separator stays one: "A\u200bman" is "A man"
    assert en_de.translate(["\u200b".join(words)], algo="greedy") == [ref[sentences[0]]]
    corrector = Corrector(threads=1)  # a correction keeps what it cannot read as written
    line = "Собака\u200d біжить."
    assert corrector.correct([line]) == [line]


# ----------------------------------------------------------------------------- correction
@pytest.fixture(scope="module")
def uagec_paragraphs():
    """Paragraphs of consecutive UA-GEC test source sentences (learner text), each group
    within one document."""
    pytest.importorskip("ua_gec", reason="the UA-GEC test text comes from the ua-gec package")
    from export.uagec import document_pairs, package_data_root, read_metadata

    root = package_data_root()
    groups = []
    for doc in (d for d in read_metadata(root) if d.partition == "test"):
        sources = one_sentence_each([s for s, _ in document_pairs(root, "gec-only", doc, doc.annotators[0])])
        groups += paragraphs(sources, seed=len(groups))
        if len(groups) >= 12:
            return groups[:12]
    return groups


def test_correct_works_sentence_by_sentence(uagec_paragraphs):
    corrector = Corrector(threads=1)
    margin = corrector.model_dir.config.edit_margin  # the model's own edit margin applies by default
    ref = alone(corrector, [s for g in uagec_paragraphs for s in g], lambda b, src: greedy(b, src, edit_margin=margin))
    outs = corrector.correct([" ".join(g) for g in uagec_paragraphs] + CONTROL_LINES, batch_size=4)
    assert outs == [" ".join(ref[s] for s in g) for g in uagec_paragraphs] + [""] * len(CONTROL_LINES)
    counted = [(g, o) for g, o in zip(uagec_paragraphs, outs) if all(well_formed(ref[s]) for s in g)]
    assert len(counted) >= len(uagec_paragraphs) // 2
    assert [len(split_sentences(o)) for _, o in counted] == [len(g) for g, _ in counted]


# ----------------------------------------------------------------------------- the command
def test_cli_translates_paragraphs_sentence_by_sentence(flickr):
    sentences, ref = flickr
    groups = paragraphs(sentences[:40], seed=3)
    long_one = [s for s in sentences if well_formed(ref[s])][:LONG_PARAGRAPH]
    lines = [" ".join(g) for g in groups] + CONTROL_LINES + [" ".join(long_one), ""]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    run = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "translate", "--threads", "1", "--batch-size", "3",
                          "--no-progress"], input=data, capture_output=True, cwd=NEUTRAL_CWD,
                         env=child_env(FASTDEC_THREADS="1"), timeout=300)
    assert run.returncode == 0, run.stderr.decode()
    assert b"warning" not in run.stderr
    out = run.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[:-1] == ([" ".join(ref[s] for s in g) for g in groups] + [""] * len(CONTROL_LINES)
                       + [" ".join(ref[s] for s in long_one), ""])
    assert len(split_sentences(out[-3])) == LONG_PARAGRAPH
