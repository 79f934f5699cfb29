"""The relative output length limit (issue 32 item 4; pyfastdec/decoding/limits.py) on the
shipped models:

- every strategy keeps every output within floor(F * len(source)) + 10 tokens, and
  reports the outputs cut there (hit_max_len), counted here from the lengths;
- with max_decoding_length the smaller limit wins; a target prefix counts in the output;
- the default factor changes no output that ends naturally: on Multi30k test_2016 (en-de,
  en-de-attn, en-de-big) and UA-GEC test (uk-gec), greedy and a lossless drafting
  strategy give, under the default limit, the outputs they give with no relative limit
  (an absolute cap far above any natural output), except outputs that loop; the first
  N sentences here, the whole sets with -m slow;
- stats.looping and `--stats` count the outputs that repeat a 1-3-gram 4+ times in a row,
  against a brute-force count written here from the pieces;
- the option's errors (API and command line) are one line naming it.
"""
from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from bench.data import multi30k_test, uagec_test
from pyfastdec import cli
from pyfastdec.api import Corrector, Translator

MODELS = Path(__file__).resolve().parents[1] / "models"
CAP = 400  # the "no relative limit" runs' absolute cap: far above any natural output of these sets
N = 200  # sentences per set in the default suite
LOOPER = "Thank you for contacting #PRS_ORG#, it was my pleasure to assist you today."  # issue 32: loops


def limit(src_len: int, factor: float = 2.5) -> int:
    """The rule, written out: len(source) counts EOS, the output does not."""
    return math.floor(factor * src_len) + 10


@pytest.fixture(scope="module")
def en_de():
    return Translator(MODELS / "en-de", drafter=MODELS / "en-de-drafter", threads=1)


@pytest.fixture(scope="module")
def sources(en_de):
    return [en_de.tokenizer.encode(s) for s in multi30k_test(40).sources + [LOOPER]]


# ----------------------------------------------------------------------------- the limit itself
@pytest.mark.parametrize("algo, options", [
    ("greedy", {}), ("beam", {"beam_size": 3}), ("greedy", {"sampling_topk": 5, "sampling_seed": 1}),
    ("blockwise", {}), ("gad", {}), ("gad++", {"beta": 3, "tau": 1.0}), ("iad", {})])
@pytest.mark.parametrize("factor", [0.5, 1.0, None])
def test_every_strategy_keeps_outputs_within_the_limit(en_de, sources, algo, options, factor):
    kw = {} if factor is None else {"max_length_factor": factor}
    outs, stats = en_de.translate(sources, algo=algo, return_stats=True, **kw, **options)
    limits = [limit(len(s) + 1, factor or 2.5) for s in sources]
    assert all(len(o) <= n for o, n in zip(outs, limits))
    cut = [i for i, (o, n) in enumerate(zip(outs, limits)) if len(o) == n]
    assert stats.hit_max_len == cut
    lossless = algo != "beam" and "sampling_topk" not in options
    assert cut or not (lossless or factor == 0.5)  # greedy loops on the last line; at 0.5 every strategy is cut
    if lossless:  # greedy's outputs under the same limit
        assert outs == en_de.translate(sources, algo="greedy", **kw)


def test_bild_keeps_outputs_within_the_limit():
    big = Translator(MODELS / "en-de-big", drafter=MODELS / "en-de-little", threads=1)
    src = [big.tokenizer.encode(s) for s in multi30k_test(30).sources + [LOOPER]]
    greedy = big.translate(src, algo="greedy", max_length_factor=0.5)
    for algo in ("bild", "bild-lossy"):
        outs, stats = big.translate(src, algo=algo, return_stats=True, max_length_factor=0.5)
        assert all(len(o) <= limit(len(s) + 1, 0.5) for o, s in zip(outs, src))
        assert stats.hit_max_len == [i for i, (o, s) in enumerate(zip(outs, src)) if len(o) == limit(len(s) + 1, 0.5)]
        if algo == "bild":
            assert outs == greedy


def test_alternatives_and_streams_take_the_factor(en_de, sources):
    limits = [limit(len(s) + 1, 0.5) for s in sources]
    alternatives = en_de.translate(sources, return_alternatives=True, num_hypotheses=3, max_length_factor=0.5)
    assert all(len(o) <= n for outs, n in zip(alternatives, limits) for o in outs)
    assert any(len(o) == n for outs, n in zip(alternatives, limits) for o in outs)
    short, long_prefix = en_de.tokenizer.encode("Hi"), en_de.tokenizer.encode("Vielen Dank " * 8)[:12]
    assert limit(len(short) + 1, 0.5) < len(long_prefix) < limit(len(short) + 1)
    assert en_de.translate([short], target_prefix=[long_prefix], return_alternatives=True, num_hypotheses=3,
                           max_length_factor=0.5) == [[long_prefix]]  # it fills its limit: no alternative
    streamed = list(en_de.translate_iterable(iter(sources), algo="greedy", max_length_factor=0.5))
    assert streamed == en_de.translate(sources, algo="greedy", max_length_factor=0.5)
    assert any(len(o) == n for o, n in zip(streamed, limits))


def test_the_smaller_of_two_given_limits_wins(en_de):
    src = [en_de.tokenizer.encode(LOOPER)]
    relative = limit(len(src[0]) + 1)
    assert len(en_de.translate(src, algo="greedy")[0]) == relative
    assert len(en_de.translate(src, algo="greedy", max_decoding_length=relative - 7)[0]) == relative - 7
    # max_decoding_length alone is the only limit, as CTranslate2's (no relative limit there)
    assert len(en_de.translate(src, algo="greedy", max_decoding_length=relative + 7)[0]) == relative + 7
    assert len(en_de.translate(src, algo="greedy", max_decoding_length=relative + 7,
                               max_length_factor=2.5)[0]) == relative


def test_a_target_prefix_counts_in_the_output(en_de):
    src = en_de.tokenizer.encode(LOOPER)
    prefix = en_de.tokenizer.encode("Vielen Dank")
    relative = limit(len(src) + 1)
    out = en_de.translate([src], algo="greedy", target_prefix=[prefix])[0]
    assert out[:len(prefix)] == prefix and len(out) == relative
    short = en_de.tokenizer.encode("Hi")  # a prefix longer than its relative limit comes back as it is, cut
    long_prefix = en_de.tokenizer.encode("Vielen Dank " * 8)
    assert len(long_prefix) > limit(len(short) + 1, 0.5)
    out, stats = en_de.translate([short], algo="greedy", target_prefix=[long_prefix], max_length_factor=0.5,
                                 return_stats=True)
    assert out == [long_prefix] and stats.hit_max_len == [0]


# ----------------------------------------------------------------------------- natural outputs never change
SETS = {"en-de": ("blockwise", "gad"), "en-de-attn": ("greedy",), "en-de-big": ("bild",), "uk-gec": ("iad",)}


def natural_outputs_unchanged(model: str, n: int | None) -> None:
    test = (uagec_test if model == "uk-gec" else multi30k_test)(n)
    drafter = {"en-de": MODELS / "en-de-drafter", "en-de-big": MODELS / "en-de-little"}.get(model)
    t = Corrector(MODELS / model, threads=1) if model == "uk-gec" else Translator(MODELS / model, drafter, threads=1)
    src = [t.tokenizer.encode(s)[:t.max_source_len - 1] for s in test.sources]
    guard = {"repetition_guard": False} if model == "uk-gec" else {}
    free, stats = t.translate(src, algo="greedy", max_decoding_length=CAP, max_length_factor=None,
                              return_stats=True, **guard)
    loops = set(stats.hit_max_len) | set(stats.looping)
    for algo in ("greedy",) + SETS[model]:
        outs, stats = t.translate(src, algo=algo, return_stats=True, **guard)
        for i, (o, f) in enumerate(zip(outs, free)):
            if i in stats.hit_max_len:  # cut: a loop, and the start of the output without the limit
                assert i in loops and o == f[:len(o)], (model, algo, i, t._target_tokenizer().decode(f))
            else:
                assert o == f, (model, algo, i)


@pytest.mark.parametrize("model", list(SETS))
def test_the_default_limit_changes_no_natural_output(model):
    natural_outputs_unchanged(model, N)


@pytest.mark.slow
@pytest.mark.parametrize("model", list(SETS))
def test_the_default_limit_changes_no_natural_output_of_the_whole_sets(model):
    natural_outputs_unchanged(model, None)


# ----------------------------------------------------------------------------- looping outputs counted
def loops_brute_force(pieces: list[str], least: int = 4) -> bool:
    """Some n-gram (n <= 3) `least` times in a row, at any offset, in one of three views:
    words without punctuation pieces, pieces without punctuation, punctuation pieces."""
    def punct(p):
        return not any(c.isalnum() for c in p.replace("\u2581", ""))

    plain = [p for p in pieces if not punct(p)]
    words, word = [], []
    for p in plain:
        if word and p.startswith("\u2581"):
            words.append(tuple(word))
            word = []
        word.append(p)
    words += [tuple(word)] if word else []

    def repeats(seq, only=lambda gram: True):
        return any(all(seq[i + k * n:i + (k + 1) * n] == seq[i:i + n] for k in range(least))
                   and only(seq[i:i + n]) for n in (1, 2, 3) for i in range(len(seq) - least * n + 1))
    return repeats(words) or repeats(plain) or repeats(pieces, lambda gram: all(map(punct, gram)))


def test_the_loop_check_is_the_brute_force_one_on_random_outputs(en_de):
    sp = en_de._target_tokenizer()
    alphabet = [sp.piece_id(p) for p in ("▁5", "▁der", "s", "ing", ",", ".", "▁Hund", "▁")]
    assert None not in alphabet
    rng = random.Random(32)
    check = en_de._loops()
    found = 0
    for _ in range(3000):
        ids = [rng.choice(alphabet[:rng.randint(2, len(alphabet))]) for _ in range(rng.randint(0, 16))]
        gram = [rng.choice(alphabet) for _ in range(rng.randint(1, 3))]
        at = rng.randint(0, len(ids))
        ids[at:at] = gram * rng.randint(0, 5)  # 3 or 4 copies in a row: loops or not, at every n
        expected = loops_brute_force([sp.piece(t) for t in ids])
        assert check.repeats(ids) == expected, [sp.piece(t) for t in ids]
        found += expected
    assert 100 < found < 2900  # both answers occur often
    five = sp.encode("Nummer 5 5 5 5")
    assert check.repeats(five) and not check.repeats(sp.encode("Nummer 5 5 5"))


def test_looping_outputs_are_counted(en_de):
    texts = multi30k_test(300).sources + [LOOPER, "I hope you have an excellent evening."]
    outs, stats = en_de.translate(texts, algo="greedy", return_stats=True)
    sp = en_de._target_tokenizer()
    expected = [i for i, o in enumerate(outs) if loops_brute_force([sp.piece(t) for t in sp.encode(o)])]
    assert stats.looping == expected and len(expected) >= 3  # the set has loops, the looper is one
    assert len(texts) - 2 in expected


def test_stats_on_the_command_line(tmp_path, capsys):
    lines = multi30k_test(60).sources + [LOOPER]
    src = tmp_path / "in.txt"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert cli.main(["translate", "-m", str(MODELS / "en-de"), "--threads", "1", "-i", str(src), "--stats",
                     "--algo", "greedy", "--max-length-factor", "0.1"]) == 0
    captured = capsys.readouterr()
    t = Translator(MODELS / "en-de", threads=1)
    sp = t._target_tokenizer()
    outs = captured.out.splitlines()
    looping = sum(loops_brute_force([sp.piece(i) for i in sp.encode(o)]) for o in outs)
    cut = sum(len(sp.encode(o)) >= limit(len(t.tokenizer.encode(s)) + 1, 0.1) for s, o in zip(lines, outs))
    assert looping >= 1 and cut >= 1 and cut != looping
    assert f"cut at the length limit: {cut}, with a looping output (a 1-3-gram 4+ times in a row): " \
           f"{looping}" in captured.err


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf"), "2", True])
def test_a_bad_factor_is_a_value_error_naming_it(en_de, value):
    with pytest.raises(ValueError, match=r"^max_length_factor must be a finite number > 0 \(output tokens per "
                                         r"source token; None: the default\), got "):
        en_de.translate(["A man."], max_length_factor=value)


def test_none_is_the_default_limit(en_de):
    src = [en_de.tokenizer.encode(LOOPER)]
    assert len(en_de.translate(src, algo="greedy", max_length_factor=None)[0]) == limit(len(src[0]) + 1)
    with pytest.raises(ValueError, match="max_length_factor must be"):
        Corrector(MODELS / "uk-gec", threads=1).correct(["Я йду."], max_length_factor=-2)


@pytest.mark.parametrize("command", ["translate", "correct", "bench"])
@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf", "nan", ""])
def test_a_bad_factor_on_the_command_line_is_one_line(capsys, command, value):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args([command, f"--max-length-factor={value}", "-i", "x"])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.fullmatch(rf"fastdec {command}: error: argument --max-length-factor: expected a finite number > 0 "
                        rf"\(output tokens per source token\), got '{value}'", last), last


def test_the_factor_reaches_translate(capsys):
    args = cli.build_parser().parse_args(["translate", "--max-length-factor", "1.5"])
    assert args.max_length_factor == 1.5
    options = cli.decode_options(args, Translator(MODELS / "en-de", threads=1).strategy)
    assert options.kwargs()["max_length_factor"] == 1.5 and "max length factor 1.5" in options.describe()
    args = cli.build_parser().parse_args(["correct"])
    assert "max_length_factor" not in cli.decode_options(args, Corrector(MODELS / "uk-gec", threads=1).strategy).kwargs()
