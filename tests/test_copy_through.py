"""Copy-through detokenization of correction output (pyfastdec/copy_through.py): text the
model copied comes back as the user wrote it, the model's edits are decoded.

Independent references:
- sentencepiece's own SentencePieceText (protobuf) for the pieces and their spans;
- the sentence itself for every sentence copied whole: real UA-GEC sentences with
  emoji, №, ³, …, „“, double spaces, Latin words and URLs, and every UA-GEC test
  sentence that sentencepiece's round trip changes;
- Tokenizer.decode of the same ids where the source round-trips unchanged (the case
  copy_through.source_of hands to plain decoding), on random edits of real sentences;
- on real uk-gec outputs, a word-level reconstruction written here: source words
  (split at whitespace) matched with output words (split at "▁" pieces) by their ids;
  a matched word is the user's text with the user's whitespace before it, any other
  word is Tokenizer.decode of its pieces after one space;
- Corrector.correct and `fastdec correct` against greedy decoding with the model's edit
  margin, rendered by copy-through.
"""
from __future__ import annotations

import random
import re
import subprocess
import sys
from difflib import SequenceMatcher
from pathlib import Path

import pytest

from child_python import NEUTRAL_CWD, child_env
from pyfastdec import Corrector
from pyfastdec.copy_through import CopyThrough, parse_pieces
from pyfastdec.decoding import greedy
from pyfastdec.text import Tokenizer, clean_text, cut_ids, sentences_with_ids

MODEL = Path(__file__).resolve().parents[1] / "models" / "uk-gec"

# Real UA-GEC test sentences whose text sentencepiece normalises: №, ³, …, emoji, "❤️"
# (with its variation selector), double spaces, Latin words, URLs, „“ (unk), ⅔.
TRICKY = [
    "Розглянемо типовий приклад в самому центрі міста на тихій вулиці Котлярській: будинок №4, конскрипційний № 808 "
    "2/4, триповерхова прибуткова будівля 1890-х рр. у стилі історизму.",
    "Вперше опубліковано в журналі: «The Behavioral and Brain Sciences», 1980, № 3, pp. 417–424.",
    "Місце проведення: Київська школа економіки, м. Київ, вул. Дмитрівська, 92-94, 4-й поверх, аудиторія №408.",
    "Я негайно йду додому, відкриваю музичний блокнот, загострюю свій улюблений твердий олівець №2 і атакую  музичні "
    "рядки.",
    "Масивний викид попелу в атмосферу мав об'єм 150 км³, він викликав вулканічну зиму в північній півкулі, яка "
    "відчувалася протягом кількох років.",
    "Червоний захід над Мукачівським замком, випадково підглянутий із залізничного мосту, ще більше переконує в тому, "
    "що у це місто потрібно повернутися…",
    "Воно підіймалося по моєму хребту, розрівнюючи плечі, підіймаючи високо мою голову…",
    "І не боятися цього❤️ усім любові",
    "А в нас якщо ти не в більшості, ти - неадекват😁.",
    "Це про вміння працювати 24/7, іноді без вихідних і ще якось намагатись вижити в цьому ритмі😅....",
    "Квартира дає такі переваги як мобільність та доступність на противагу заміського будинку, де навіть  щоб купити "
    "продукти потрібно буде послуговуватися транспортним засобом.",
    "Дякуючи вовняній пряжі, яку я купила у #ІринкаАгафонова  #СвітланаАндрійчук а також #ТМЯрослав витративши певний "
    "час, я зв'язала речі, які необхідні для передчасно народжених малят.",
    "Старий Мангум усним....., і англійською також не використовуючи латину  ніж прості посилання на Orgetorix, Rex "
    "Helvetii,які я сам використовував.",
    "Допис користувача IvanBannikov на https://habr.com/ru/post/405941/",
    "Переклад https://en.wikipedia.org/wiki/The_Power_of_Habit, досить непоганий.",
    "- сторінка оригіналу https://www.penguin.co.uk/b…/182131/what-are-you-looking-at/",
    "Отже, Я підняв пляшку \"Recurrection Bitters\" з мого ранця і пішов на схил до майорівського особняку, будинок в "
    "місті, з розкішною кришою і два виготовлені залізних собак на газоні.",
    "Вона була сформована у 1980 році американським філософом Джоном Роджерсом Серлом (John Rogers Searle) і вийшла "
    "вона статею „Minds, Brains, and Programs“ у журналі „The Behavioral and Brain Sciences“.",
    "Green Forest🌲- це не про англійську.",
    "Я прочитав десь ⅔ книжки, а за вікном було 5 ℃.",  # made here: expansions into several pieces
    "Authored by Pixabay\ufeff",  # a character the normaliser drops at the end
    "Кома\u200b\u200b  коли, і пробіл\u00a0нерозривний\u3000ідеографічний.",  # zero-width and other spaces
]
WORD = re.compile(r"(\s*)(\S+)")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(MODEL / "spm.model")


@pytest.fixture(scope="module")
def ct(tok):
    return CopyThrough(tok.sp)


def uagec_test_sources() -> list[str]:
    from export.data import read_lines
    from export.uagec import DataError, ensure_corpus
    try:
        return read_lines(ensure_corpus() / "test.src.gz")
    except DataError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def round_trip_changed(tok):
    """Every UA-GEC test sentence that encoding and decoding changes (115 of 2,696)."""
    changed = [s for s in uagec_test_sources() if tok.decode(tok.encode(s)) != s]
    assert len(changed) >= 100
    return changed


def copy_of(ct: CopyThrough, sentence: str) -> str:
    """The text copy-through writes for an output that copies the whole sentence."""
    source = ct.source.pieces(sentence)
    return ct.text(source, source.ids)


def normalised(tok: Tokenizer, text: str) -> str:
    return tok.decode(tok.encode(text))


# ----------------------------------------------------------------------------- source pieces
def test_pieces_and_spans_are_sentencepiece_own(tok, ct):
    pytest.importorskip("google.protobuf", reason="sentencepiece's proto output needs protobuf")
    for sentence in TRICKY:
        proto = tok.sp.encode(sentence, out_type="proto")
        expected = [(p.id, p.begin, p.end) for p in proto.pieces]
        assert parse_pieces(tok.sp.encode(sentence, out_type="serialized_proto")) == expected
        source = ct.source.pieces(sentence)
        assert source.ids == tok.encode(sentence)
        # byte offsets: the surface sentencepiece reports is the UTF-8 slice
        assert [source.raw[b:e].decode() for _, b, e in expected] == [p.surface for p in proto.pieces]


def test_a_copied_sentence_comes_back_byte_identical(ct, tok):
    assert sum(tok.decode(tok.encode(s)) != s for s in TRICKY) >= 15  # the round trip would change them
    for sentence in TRICKY + [" " + TRICKY[0] + " ", "\ufeff" + TRICKY[1] + "  "]:
        assert copy_of(ct, sentence) == sentence


def test_every_round_trip_changed_uagec_sentence_copied_comes_back(ct, round_trip_changed):
    differ = [s for s in round_trip_changed if copy_of(ct, s) != s]
    assert not differ, differ[:3]


def test_a_normalised_source_gives_what_decoding_gives(ct, tok):
    """Random edits (insertions, deletions, substitutions, a cut start) of sentences that
    round-trip unchanged: copy-through writes Tokenizer.decode's text, which is why
    source_of leaves such sentences to plain decoding."""
    rng = random.Random(5)
    sentences = [s for s in uagec_test_sources()[:1500] if tok.decode(tok.encode(s)) == s]
    assert len(sentences) > 1400
    vocab = tok.sp.GetPieceSize()
    for sentence in sentences:
        source = ct.source.pieces(sentence)
        assert ct.source_of(sentence, source.ids) is None
        for _ in range(3):
            out = list(source.ids)
            for _ in range(rng.randint(0, 4)):
                k, op = rng.randrange(len(out) + 1), rng.random()
                if op < 0.4:
                    out.insert(k, rng.randrange(5, vocab))
                elif out and op < 0.7:
                    del out[min(k, len(out) - 1)]
                elif out:
                    out[min(k, len(out) - 1)] = rng.randrange(5, vocab)
            if rng.random() < 0.2:
                out = out[rng.randrange(len(out) + 1):]
            assert ct.text(source, out) == tok.decode(out), (sentence, out)


def test_edits_differ_from_decoding_only_where_sentencepiece_normalises(ct, tok, round_trip_changed):
    """The same random edits on sentences that do change: the text differs from decoding's
    only by what the normaliser maps to the same thing."""
    rng = random.Random(6)
    for sentence in round_trip_changed + TRICKY:
        source = ct.source.pieces(sentence)
        if tok.sp.unk_id() in source.ids:
            continue  # a copied unknown character vs " ⁇ ": not a normalisation (copied whole: above)
        for _ in range(5):
            out = list(source.ids)
            k = rng.randrange(len(out))
            out[k:k + rng.randint(0, 2)] = [rng.randrange(5, tok.sp.GetPieceSize())] * rng.randint(0, 2)
            got = ct.text(source, out)
            assert normalised(tok, got) == normalised(tok, tok.decode(out)), (sentence, out, got)


def test_a_character_split_into_several_pieces_is_copied_whole_or_decoded(ct, tok):
    sentence = "Я прочитав десь ⅔ книжки, а за вікном було 5 ℃."
    source = ct.source.pieces(sentence)
    pieces = [tok.piece(t) for t in source.ids]
    two, slash, three = pieces.index("▁2"), pieces.index("⁄"), pieces.index("3")
    assert (two + 1, two + 2) == (slash, three)
    assert ct.text(source, source.ids) == sentence
    out = list(source.ids)
    out[slash] = tok.piece_id("/")  # an edit inside "⅔": the whole character is decoded
    assert ct.text(source, out) == "Я прочитав десь 2/3 книжки, а за вікном було 5 ℃."
    del out[two:slash + 1]  # only the last piece of "⅔" left: not the character
    assert ct.text(source, out) == "Я прочитав десь3 книжки, а за вікном було 5 ℃."
    degree = pieces.index("°")
    out = source.ids[:degree + 1]  # "℃" is "°" "C": cut between them, the degree sign is decoded
    assert ct.text(source, out) == "Я прочитав десь ⅔ книжки, а за вікном було 5 °"


def test_words_at_the_edges(ct, tok):
    sentence = "№4  це   дім…"
    source = ct.source.pieces(sentence)
    ids = source.ids
    word = tok.encode("Ось")
    assert ct.text(source, word + ids) == "Ось №4  це   дім…"  # the first word gets its space back
    assert ct.text(source, ids[2:]) == "це   дім…"  # a copy starting the output loses its whitespace
    assert ct.text(source, ids[:2] + word + ids[2:]) == "№4 Ось  це   дім…"
    assert ct.text(source, ids[:-1] + [tok.piece_id("!")]) == "№4  це   дім!"
    assert ct.text(source, ids[:-1] + tok.encode("!")) == "№4  це   дім !"  # "▁!"
    assert ct.text(source, []) == ""


def test_a_sentence_cut_into_chunks_copies_each_chunk(ct, tok):
    words = [w for s in TRICKY[:8] for w in s.split()]
    sentence = " ".join(words)
    source = ct.source.pieces(sentence)
    chunks = cut_ids(source.ids, 40, tok.starts_word)
    assert len(chunks) > 3
    parts, start = [], 0
    for chunk in chunks:
        part = source.slice(start, start + len(chunk))
        assert part.ids == chunk
        parts.append(ct.text(part, chunk))
        start += len(chunk)
    assert " ".join(parts) == sentence


# ----------------------------------------------------------------------------- real model outputs
def word_level(tok: Tokenizer, sentence: str, out: list[int]) -> str:
    """The reference reconstruction of the module docstring (word by word)."""
    source = [(space, word, tuple(tok.encode(word))) for space, word in WORD.findall(sentence)]
    words: list[list[int]] = []
    for t in out:
        if tok.starts_word(t) or not words:
            words.append([t])
        else:
            words[-1].append(t)
    matcher = SequenceMatcher(None, [w[2] for w in source], [tuple(w) for w in words], autojunk=False)
    text = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            text += [space + word for space, word, _ in source[i1:i2]]
        else:
            text += [" " + tok.decode(w) for w in words[j1:j2]]
    return "".join(text).lstrip()


def word_level_applies(tok: Tokenizer, sentence: str, out: list[int]) -> bool:
    """Whether the word-level reference must agree with copy-through: every source word
    the model edited is text sentencepiece writes back unchanged, after one space (else
    copy-through keeps the user's characters in the copied part of the word, or the
    user's whitespace before it, where the word-level reference decodes)."""
    source = WORD.findall(sentence)
    words = [tuple(tok.encode(w)) for _, w in source]
    out_words, current = [], []
    for t in out:
        if tok.starts_word(t) and current:
            out_words.append(tuple(current))
            current = []
        current.append(t)
    out_words += [tuple(current)] if current else []
    matcher = SequenceMatcher(None, words, out_words, autojunk=False)
    matched = {i + k for i, _, n in matcher.get_matching_blocks() for k in range(n)}
    return all(tok.decode(tok.encode(w)) == w and (i == 0 or space == " ")
               for i, (space, w) in enumerate(source) if i not in matched)


@pytest.fixture(scope="module")
def corrector():
    return Corrector(threads=1)


@pytest.fixture(scope="module")
def outputs(corrector, tok, round_trip_changed):
    """(sentence, greedy ids with the model's edit margin) for the tricky sentences and
    every round-trip-changed UA-GEC test sentence that the splitter keeps whole."""
    limit = corrector.max_source_len - 1
    sentences = [s for s in TRICKY + round_trip_changed  # those the API decodes whole, as one sentence
                 if len(sentences_with_ids(clean_text(s), tok, limit)) == 1 and len(tok.encode(s)) <= limit]
    margin = corrector.model_dir.config.edit_margin
    src = [tok.encode(s) + [corrector.eos] for s in sentences]
    outs = [o for i in range(0, len(src), 32)
            for o in greedy(corrector.verifier, src[i:i + 32], edit_margin=margin)[0]]
    return list(zip(sentences, [[int(t) for t in o] for o in outs]))


def test_real_outputs_keep_the_users_text_outside_the_edits(ct, tok, outputs):
    unk = tok.sp.unk_id()
    copied = edited = checked = 0
    for sentence, out in outputs:
        got = ct.text(ct.source.pieces(sentence), out)
        assert normalised(tok, got) == normalised(tok, tok.decode(out)), sentence
        if out == tok.encode(sentence):
            copied += 1
            assert got == sentence
            continue
        edited += 1
        if unk not in tok.encode(sentence) and word_level_applies(tok, sentence, out):
            checked += 1
            assert got == word_level(tok, sentence, out), sentence
    assert copied >= 40 and edited >= 40 and checked >= 30, (copied, edited, checked)
    # the round trip changed every one of them: plain decoding loses the user's text
    assert sum(tok.decode(out) != ct.text(ct.source.pieces(s), out) for s, out in outputs) >= 80


def test_corrector_writes_copy_through_text_of_greedy_output(corrector, ct, outputs):
    sentences = [s for s, _ in outputs]
    unk = corrector.verifier.tokens["unk"]
    expected = [s if unk in corrector.tokenizer.encode(s) else ct.text(ct.source.pieces(s), out)
                for s, out in outputs]  # sentences with unk come back as they are
    got = corrector.correct(sentences, batch_size=8, repetition_guard=False)  # greedy's loops too
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differ, [(sentences[i], got[i], expected[i]) for i in differ[:2]]
    assert corrector.translate(sentences, algo="greedy", repetition_guard=False) == got
    # copied sentences are the user's, character for character
    assert sum(g == s for g, s in zip(got, sentences)) >= 40


def test_corrector_paragraph_and_long_line(corrector, ct, tok, outputs):
    sentences = [s for s, _ in outputs][:12]
    singles = corrector.correct(sentences)
    assert corrector.correct(["  ".join(sentences[:6])]) == [" ".join(singles[:6])]
    # one sentence too long for the model (no sentence ends inside), cut into chunks
    words = [w.rstrip(".!?…") or "-" for s in TRICKY[:6] for w in s.split()]
    line = " ".join(words)
    source = ct.source.pieces(line)
    limit = corrector.max_source_len - 1
    chunks = cut_ids(source.ids, limit, tok.starts_word)
    assert len(chunks) >= 2
    margin = corrector.model_dir.config.edit_margin
    outs = greedy(corrector.verifier, [c + [corrector.eos] for c in chunks], edit_margin=margin)[0]
    expected, start = [], 0
    for chunk, out in zip(chunks, outs):
        expected.append(ct.text(source.slice(start, start + len(chunk)), out))
        start += len(chunk)
    with pytest.warns(UserWarning, match="exceeds the model's max_source_len"):
        got = corrector.correct([line], repetition_guard=False)[0]  # a chunk loops: see below
    assert got == " ".join(expected)
    assert {"№4,", "км³,"} <= set(got.split())
    # with the repetition guard, each chunk whose output loops comes back as its own source
    # text, the others as corrected (loops_in_text: test_repetition_guard.py's own check)
    from test_repetition_guard import loops_in_text

    sources, start = [], 0
    for chunk in chunks:
        sources.append(ct.text(source.slice(start, start + len(chunk)), chunk))
        start += len(chunk)
    looping = [k for k, (s, e) in enumerate(zip(sources, expected)) if loops_in_text(s, e)]
    assert looping and len(looping) < len(chunks)
    with pytest.warns(UserWarning, match="exceeds the model's max_source_len"):
        guarded, stats = corrector.correct([line], return_stats=True)
    assert guarded[0] == " ".join(s if k in looping else e for k, (s, e) in enumerate(zip(sources, expected)))
    assert stats.loops_reverted == len(looping)


def test_token_outputs_and_translation_are_not_copied_through(corrector):
    sentence = TRICKY[0]
    ids = corrector.tokenizer.encode(sentence)
    margin = corrector.model_dir.config.edit_margin
    out = greedy(corrector.verifier, [ids + [corrector.eos]], edit_margin=margin)[0][0]
    assert corrector.correct([ids]) == [[int(t) for t in out]]
    pieces = [corrector.tokenizer.piece(t) for t in ids]
    assert corrector.correct([pieces]) == [[corrector.tokenizer.piece(t) for t in out]]


def test_cli_correct_writes_the_users_text(corrector, outputs, tmp_path):
    sentences = [s for s, _ in outputs][:24]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "correct", "-i", str(src), "--threads", "1"],
                         capture_output=True, timeout=600, env=child_env(), cwd=NEUTRAL_CWD)
    assert run.returncode == 0, run.stderr.decode()
    lines = run.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and lines[:-1] == corrector.correct(sentences)
    assert sum(a == b for a, b in zip(lines, sentences)) >= 5
