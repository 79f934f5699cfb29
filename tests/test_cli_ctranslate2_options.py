"""fastdec translate's CTranslate2 options (--sampling-topp, --repetition-penalty,
--no-repeat-ngram-size, --min-decoding-length) give what Translator.translate gives
with the same options, in process and across --workers; bad values fail in one line."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import models, translator  # noqa: E402,F401  (fixtures)
from test_cli import model_args, write_lines  # noqa: E402
from export.tiny import synthetic_sentences  # noqa: E402
from pyfastdec import cli  # noqa: E402

RULES = dict(repetition_penalty=1.5, no_repeat_ngram_size=2, min_decoding_length=12)
FLAGS = ["--repetition-penalty", "1.5", "--no-repeat-ngram-size", "2", "--min-decoding-length", "12"]


@pytest.mark.parametrize("workers", [1, 2])
def test_rule_flags_give_the_apis_output(models, translator, tmp_path, workers):
    lines = synthetic_sentences(12, seed=5)
    want = translator.translate(lines, algo="greedy", **RULES)
    assert want != translator.translate(lines, algo="greedy")
    out = tmp_path / "out.txt"
    assert cli.main(["translate", *model_args(models, drafter=True), *FLAGS, "--workers", str(workers),
                     "-i", str(write_lines(tmp_path / "in.txt", lines)), "-o", str(out), "--no-progress"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == want


def test_sampling_topp_flag_gives_the_apis_output(models, translator, tmp_path):
    lines = synthetic_sentences(12, seed=6)
    want = translator.translate(lines, sampling_topk=0, sampling_topp=0.5, sampling_seed=4)
    out = tmp_path / "out.txt"
    assert cli.main(["translate", *model_args(models), "--sampling-topk", "0", "--sampling-topp", "0.5",
                     "--sampling-seed", "4", "-i", str(write_lines(tmp_path / "in.txt", lines)), "-o", str(out),
                     "--no-progress"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == want


@pytest.mark.parametrize("flags, message", [
    (["--sampling-topp", "1.5"], "argument --sampling-topp: expected a number in (0, 1], got '1.5'"),
    (["--repetition-penalty", "0"], "argument --repetition-penalty: expected a number > 0, got '0'"),
    (["--no-repeat-ngram-size", "-1"], "argument --no-repeat-ngram-size: expected an integer >= 0, got '-1'"),
])
def test_bad_flags_fail_in_one_line(models, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["translate", *model_args(models), *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.strip().splitlines()[-1] == f"fastdec translate: error: {message}"


def test_min_above_max_decoding_length_fails_in_one_line(models, tmp_path, capsys):
    code = cli.main(["translate", *model_args(models), "--min-decoding-length", "9", "--max-decoding-length", "3",
                     "-i", str(write_lines(tmp_path / "in.txt", ["a man"])), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err == "fastdec: error: min_decoding_length=9 exceeds max_decoding_length=3\n"
