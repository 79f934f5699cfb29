"""The `fastdec` command: in process through main([...]) (files, stdin, capsys), and as a
real subprocess (`python -m pyfastdec.cli`, run outside the repository with
PYTHONPATH set explicitly) for stdin -> stdout, worker processes, broken pipes and info.
Outputs are checked against the Python API on the same model."""
from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import SHORT_SOURCE, models, sentences, translator  # noqa: E402,F401  (fixtures)
from child_python import child_env  # noqa: E402
from pyfastdec import cli, cpu_info  # noqa: E402
from pyfastdec.decoding import strategies  # noqa: E402
from pyfastdec.decoding.policies import FixedDraftLength  # noqa: E402
from pyfastdec.jobs import workers  # noqa: E402

TEXTS = sentences(6, seed=21)


@pytest.fixture(autouse=True)
def fixed_draft_lengths(monkeypatch):
    """The CLI's translators draft with the default policy, which decides from measured
    times: in process, it cycles through every path instead (subprocesses pass --block)."""
    monkeypatch.setattr(strategies, "AdaptiveDraftLength", lambda k_max: FixedDraftLength(k_max, [k_max, 0, 1]))
LINES = [TEXTS[0], "", TEXTS[1], TEXTS[2], "", "", TEXTS[3], TEXTS[4], TEXTS[5]]  # empty lines inside


def model_args(models, drafter: bool = False) -> list[str]:
    args = ["-m", str(models["verifier"]), "--threads", "1", "--compute-type", "float32"]
    return args + (["--drafter", str(models["drafter"])] if drafter else [])


def expected(translator, lines: list[str]) -> str:
    return "".join(t + "\n" for t in translator.translate(lines, algo="greedy"))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def fake_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def run_cli(args: list[str], tmp_path: Path, stdin: bytes = b"", **kw) -> subprocess.CompletedProcess:
    env = child_env(FASTDEC_THREADS="1")
    return subprocess.run([sys.executable, "-m", "pyfastdec.cli", *args], input=stdin, capture_output=True,
                          cwd=tmp_path, env=env, timeout=120, **kw)


def interrupt_the_second_block(patch) -> None:
    """Ctrl-C after the first block: workers.translate_block raises KeyboardInterrupt at its second call."""
    real, calls = workers.translate_block, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    patch.setattr(workers, "translate_block", interrupted)


# ----------------------------------------------------------------------------- in process
@pytest.mark.parametrize("algo", ["greedy", "gad", "iad"])
def test_file_to_file_one_line_per_line(models, translator, tmp_path, capsys, algo):
    src = write_lines(tmp_path / "in.txt", LINES)
    out = tmp_path / "out.txt"
    code = cli.main(["translate", *model_args(models, drafter=True), "--algo", algo, "--batch-size", "2",
                     "-i", str(src), "-o", str(out), "--no-progress"])
    assert code == 0
    assert out.read_text(encoding="utf-8") == expected(translator, LINES)
    assert capsys.readouterr().out == ""


def test_stdin_to_stdout_default_algo_with_stats(models, translator, monkeypatch, capsys):
    fake_stdin(monkeypatch, "".join(line + "\r\n" for line in LINES).encode())  # CRLF input too
    assert cli.main(["translate", *model_args(models, drafter=True), "--stats"]) == 0
    out, err = capsys.readouterr()
    assert out == expected(translator, LINES)
    assert re.search(r"9 lines in .* s: [\d.]+ lines/s, [\d.]+ tokens/s .*mean accepted tokens per "
                     r"iteration [\d.]+", err)


def test_last_line_without_newline_and_empty_input(models, translator, monkeypatch, capsys):
    fake_stdin(monkeypatch, (TEXTS[0] + "\n" + TEXTS[1]).encode())
    assert cli.main(["translate", *model_args(models)]) == 0
    assert capsys.readouterr().out == expected(translator, TEXTS[:2])
    fake_stdin(monkeypatch, b"")
    assert cli.main(["translate", *model_args(models)]) == 0
    assert capsys.readouterr().out == ""


def test_nbest_format(models, translator, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", [TEXTS[0], "", TEXTS[1]])
    assert cli.main(["translate", *model_args(models), "--n-best", "2", "--beam-size", "3", "-i", str(src)]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    ref = translator.translate([TEXTS[0], "", TEXTS[1]], algo="beam", beam_size=3, n_best=2, return_scores=True)
    want = [(i, text, score) for i, hyps in enumerate(ref) for text, score in hyps]
    assert [(int(i), text) for i, text, _, _ in rows] == [(i, text) for i, text, _ in want]
    # Marian's format: 'I ||| TEXT ||| F0= LOGPROB ||| SCORE' (6 significant digits, as C++ prints)
    assert [float(score) for _, _, _, score in rows] == pytest.approx([score for _, _, score in want], rel=1e-5)
    assert all(f0.startswith("F0= ") for _, _, f0, _ in rows)
    assert [int(i) for i, _, _, _ in rows].count(1) == 1  # an empty line has one (empty) hypothesis


def test_long_sentence_is_cut_with_a_warning_naming_the_line(models, tmp_path, capsys):
    parts = ["a man runs .", "the girl sits .", "two dogs ."]  # fit one by one: no warning
    long_sentence = "two big red dogs run in the green park with a small girl near the blue water"
    src = write_lines(tmp_path / "in.txt", ["a dog .", "", " ".join(parts), long_sentence])
    short = ["-m", str(models["short"]), "--threads", "1", "--compute-type", "float32"]
    assert cli.main(["translate", *short, "-i", str(src)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4
    assert re.search(rf"fastdec: warning: line 4: a sentence of \d+ source tokens exceeds the model's "
                     rf"max_source_len {SHORT_SOURCE}; cut between words into \d+ parts", err)
    assert "line 3" not in err


def test_in_place_output_keeps_the_input_whole_until_the_job_is_done(models, translator, tmp_path, capsys,
                                                                    monkeypatch):
    """-i f -o f (`fastdec correct -i essay.txt -o essay.txt`): interrupted after its first
    block, f is still the whole input, not that block's output with the rest lost; done, f
    is the output, with f's permissions."""
    lines = sentences(20, seed=27)
    f = write_lines(tmp_path / "f.txt", lines)
    f.chmod(0o640)
    with monkeypatch.context() as patch:
        interrupt_the_second_block(patch)
        assert cli.main(["translate", *model_args(models), "--batch-size", "1", "-i", str(f), "-o", str(f)]) == 130
    assert f.read_text(encoding="utf-8") == "".join(line + "\n" for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    assert cli.main(["translate", *model_args(models), "--batch-size", "1", "-i", str(f), "-o", str(f)]) == 0
    assert f.read_text(encoding="utf-8") == expected(translator, lines)
    assert f.stat().st_mode & 0o777 == 0o640 and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_invalid_utf8_in_a_file_names_the_line_and_writes_nothing(models, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"a man .\n\nthe dog \xff\xfe runs .\n")
    out = tmp_path / "out.txt"
    assert cli.main(["translate", *model_args(models), "-i", str(src), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"fastdec: error: {src}: line 3: invalid UTF-8 at byte 9 of the line\n"
    assert not out.exists()


def test_invalid_utf8_on_stdin_keeps_the_whole_lines_before_it(models, translator, monkeypatch, capsys):
    fake_stdin(monkeypatch, b"a man .\nthe dog .\n\xc3(\nlast\n")
    assert cli.main(["translate", *model_args(models), "--batch-size", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == expected(translator, ["a man .", "the dog ."])
    assert "line 3: invalid UTF-8" in err


def test_interrupt_exits_130_after_whole_lines(models, tmp_path, capsys, monkeypatch):
    src = write_lines(tmp_path / "in.txt", sentences(20, seed=22))
    interrupt_the_second_block(monkeypatch)
    assert cli.main(["translate", *model_args(models), "--batch-size", "1", "-i", str(src)]) == 130
    out, err = capsys.readouterr()
    assert out.count("\n") == 8 and out.endswith("\n")  # the first block of 8 lines, nothing after it
    assert "interrupted" in err


def test_errors_are_one_clear_line(models, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", ["a man ."])
    cases = [
        (["translate", "-m", str(tmp_path / "nope"), "-i", str(src)], "no such directory"),
        (["translate", *model_args(models), "-i", str(tmp_path / "missing.txt")], "cannot read input"),
        (["translate", *model_args(models), "--drafter", str(models["drafter38"]), "-i", str(src)],
         "vocab_size: 38 differs"),
        (["translate", "-m", str(models["int8"]), "--compute-type", "float32", "-i", str(src)], "int8 weights"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("fastdec: error: ") and message in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate", "--no-such-flag"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("flags, message", [
    (["--algo", "gad"], "algo 'gad' needs a drafter"),
    (["--algo", "bild"], "algo 'bild' needs a little model"),
    (["--beta", "3"], "beta=3, tau=0.0: acceptance thresholds apply to algo 'gad++' only"),
    (["--block", "4"], "block=4: a draft block size applies to algo 'gad' and 'gad++' only"),
    (["--max-decoding-length", "3", "--min-decoding-length", "5"], "min_decoding_length=5 exceeds"),
])
def test_options_the_api_refuses_are_usage_errors_before_any_output(models, tmp_path, capsys, flags, message):
    """Combinations that only translate's own checks refuse end as argparse's refusals do
    (exit 2), before -o is opened: an existing output file is left as it was."""
    src = write_lines(tmp_path / "in.txt", ["a man ."])
    out = tmp_path / "out.txt"
    out.write_text("yesterday's output\n", encoding="utf-8")
    assert cli.main(["translate", *model_args(models), *flags, "-i", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastdec: error: ") and message in err and err.count("\n") == 1, err
    assert out.read_text(encoding="utf-8") == "yesterday's output\n"


def test_an_error_before_the_first_line_leaves_the_output_file_as_it_was(models, translator, tmp_path, capsys,
                                                                         monkeypatch):
    """An error while the first block decodes (the engine out of memory), after -o was
    opened: an existing file keeps its content, a new one is not left behind. A job that
    ends replaces the old content whole, with nothing when there is no input line."""
    src = write_lines(tmp_path / "in.txt", ["a man ."])
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    yesterday = "yesterday's output, longer than today's\n" * 20
    old.write_text(yesterday, encoding="utf-8")

    def out_of_memory(*args):
        raise MemoryError("std::bad_alloc")

    with monkeypatch.context() as patch:
        patch.setattr(workers, "translate_block", out_of_memory)
        for out in (old, new):
            assert cli.main(["translate", *model_args(models), "-i", str(src), "-o", str(out)]) == 1
            assert "out of memory" in capsys.readouterr().err
    assert old.read_text(encoding="utf-8") == yesterday and not new.exists()
    assert cli.main(["translate", *model_args(models), "-i", str(src), "-o", str(old), "--no-progress"]) == 0
    assert old.read_text(encoding="utf-8") == expected(translator, ["a man ."])
    empty = write_lines(tmp_path / "empty.txt", [])
    assert cli.main(["translate", *model_args(models), "-i", str(empty), "-o", str(old)]) == 0
    assert old.read_bytes() == b""


def test_in_place_through_a_symlink_writes_the_file_it_names_and_follows_no_leftover(models, translator,
                                                                                      tmp_path, capsys):
    """-i link -o link rewrites the file the link names (the link stays a link), through a
    new temporary name: a leftover of the old fixed name, a link to another file, is not
    written through. Done, the file keeps its owner and permissions."""
    lines = sentences(3, seed=28)
    f = write_lines(tmp_path / "f.txt", lines)
    f.chmod(0o640)
    (tmp_path / "link.txt").symlink_to("f.txt")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    (tmp_path / "f.txt.fastdec-tmp").symlink_to("victim.txt")
    if os.geteuid() == 0:  # root rewrites another user's file: the owner stays
        os.chown(f, 65534, 65534)
    link = str(tmp_path / "link.txt")
    assert cli.main(["translate", *model_args(models), "-i", link, "-o", link]) == 0
    assert (tmp_path / "link.txt").is_symlink() and f.read_text(encoding="utf-8") == expected(translator, lines)
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt", "f.txt.fastdec-tmp", "link.txt", "victim.txt"]
    assert f.stat().st_mode & 0o777 == 0o640
    if os.geteuid() == 0:
        assert (f.stat().st_uid, f.stat().st_gid) == (65534, 65534)


def test_in_place_is_for_regular_files_only():
    """-i /dev/null -o /dev/null reads and writes the device: it is not rewritten in place
    (a rename over it would replace the device node)."""
    from pyfastdec.jobs.lines import InputLines
    assert not InputLines("/dev/null", "/dev/null").is_output


def test_an_error_on_stdin_leaves_nothing_where_a_symlink_points(models, tmp_path, monkeypatch, capsys):
    """-o LINK to a file that does not exist: a job that fails before its first line
    removes the file it created there, and leaves the link as it was."""
    (tmp_path / "dl").symlink_to("target.txt")
    fake_stdin(monkeypatch, b"\xff\n")
    assert cli.main(["translate", *model_args(models), "-o", str(tmp_path / "dl")]) == 2
    assert "invalid UTF-8" in capsys.readouterr().err
    assert (tmp_path / "dl").is_symlink() and not (tmp_path / "target.txt").exists()


def test_workers_refuse_options_as_one_process_does(models, tmp_path, capsys):
    """--workers N: an option combination translate refuses is the same usage error (exit
    2) from the worker that finds it, and the output file stays as it was."""
    src = write_lines(tmp_path / "in.txt", ["a man .", "a dog ."])
    out = tmp_path / "out.txt"
    out.write_text("yesterday's output\n", encoding="utf-8")
    assert cli.main(["translate", *model_args(models), "--beta", "3", "--workers", "2", "-i", str(src),
                     "-o", str(out)]) == 2
    assert "acceptance thresholds apply to algo 'gad++' only" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "yesterday's output\n"


def test_correct_runs_iad(models, translator, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", LINES)
    # this toy model loops on some lines: the guard, on by default, would revert them
    assert cli.main(["correct", "-m", str(models["verifier"]), "--threads", "1", "--compute-type", "float32",
                     "-i", str(src), "--stats", "--no-repetition-guard"]) == 0
    out, err = capsys.readouterr()
    assert out == expected(translator, LINES) and "lines/s" in err


def test_correct_with_an_infinite_edit_margin_never_edits(models, tmp_path, capsys):
    """--edit-margin inf keeps every source token, as Corrector(edit_margin=inf) does: the
    output is the input, as written; nan and negative margins are refused."""
    lines = [line for line in LINES if line]
    src = write_lines(tmp_path / "in.txt", lines)
    assert cli.main(["correct", "-m", str(models["verifier"]), "--threads", "1", "--compute-type", "float32",
                     "-i", str(src), "--edit-margin", "inf"]) == 0
    assert capsys.readouterr().out == "".join(line + "\n" for line in lines)
    for bad in ("nan", "-1", "x"):
        with pytest.raises(SystemExit) as refused:
            cli.main(["correct", "-m", str(models["verifier"]), "-i", str(src), "--edit-margin", bad])
        assert refused.value.code == 2 and "--edit-margin: expected a" in capsys.readouterr().err


def test_progress_bar_on_request(models, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", LINES)
    assert cli.main(["translate", *model_args(models), "-i", str(src), "--progress"]) == 0
    assert re.search(r"\r9/9 lines [\d.]+ lines/s", capsys.readouterr().err)


def test_progress_on_stdin_counts_lines(models, monkeypatch, capsys):
    """From stdin the total is unknown: progress counts the lines done, the last count
    shown when the job ends; typed or --line-by-line input shows none (each line's output is)."""
    fake_stdin(monkeypatch, "".join(line + "\n" for line in LINES).encode())
    assert cli.main(["translate", *model_args(models), "--batch-size", "2", "--progress"]) == 0
    assert re.search(r"\r9 lines [\d.]+ lines/s\n$", capsys.readouterr().err)
    fake_stdin(monkeypatch, "".join(line + "\n" for line in LINES).encode())
    assert cli.main(["translate", *model_args(models), "--line-by-line", "--progress"]) == 0
    assert "lines/s" not in capsys.readouterr().err


def test_a_quick_job_on_a_terminal_shows_no_progress(models, monkeypatch, capsys):
    """`echo ... | fastdec translate` on a terminal: the output, and no progress line after it."""
    fake_stdin(monkeypatch, b"a man .\n")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli.main(["translate", *model_args(models)]) == 0
    assert capsys.readouterr().err == ""


def test_progress_shows_once_its_delay_has_passed(monkeypatch, capsys):
    from pyfastdec.jobs import progress as progress_module

    clock = iter([0.0, 0.5, 1.2, 1.25, 2.0])  # start, then one reading per update and at finish
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    bar = progress_module.Progress(None, True, delay=1.0)
    for _ in range(3):
        bar.update(1)  # at 0.5 s: before the delay; at 1.2 s: shown; at 1.25 s: within 0.1 s of it
    bar.finish()
    assert capsys.readouterr().err == "\r2 lines 1.7 lines/s\r3 lines 1.5 lines/s\n"


def terminal_view(text: str) -> list[str]:
    """The lines a terminal shows for `text`: a carriage return goes back to the start of
    the line, and what follows overwrites it character by character."""
    shown = []
    for line in text.split("\n"):
        cells, at = [], 0
        for ch in line:
            if ch == "\r":
                at = 0
                continue
            cells[at:at + 1] = [ch]
            at += 1
        shown.append("".join(cells).rstrip())
    return shown


def test_progress_bar_and_output_on_one_terminal(models, translator, tmp_path):
    """Without -o the output scrolls on the terminal the bar is drawn on: every output
    line is shown whole, none runs on after the bar's text."""
    lines = sentences(50, seed=26)
    src = write_lines(tmp_path / "in.txt", lines)
    done = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "translate", *model_args(models), "-i", str(src),
                           "--batch-size", "2", "--progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          cwd=tmp_path, env=child_env(FASTDEC_THREADS="1"), timeout=120)
    assert done.returncode == 0, done.stdout
    shown = terminal_view(done.stdout.decode())
    assert shown[:-2] == expected(translator, lines).splitlines()
    assert re.fullmatch(r"50/50 lines [\d.]+ lines/s", shown[-2]) and shown[-1] == ""


def test_info_and_bench(models, tmp_path, capsys):
    assert cli.main(["info", "-m", str(models["int8"])]) == 0
    out = capsys.readouterr().out
    assert f"chosen {cpu_info()['isa']}" in out
    assert "arch: transformer" in out and "vocab: 40" in out and "quantization: int8 weights" in out
    assert "shortlist: none" in out and "layers: 2 encoder, 2 decoder" in out
    src = write_lines(tmp_path / "in.txt", TEXTS)
    assert cli.main(["bench", *model_args(models, drafter=True), "-i", str(src), "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "algo gad, batch size 4" in out and "threads 1" in out
    assert re.search(r"latency, batch 1 \(6 sentences\): p50 [\d.]+ ms, p90 [\d.]+ ms", out)
    assert re.search(r"throughput, batch 4 \(6 sentences\): [\d.]+ sentences/s", out)


def test_bench_names_a_cut_sentence_by_its_line_in_the_file(models, tmp_path, capsys):
    """bench times the non-empty lines only: a sentence cut for being too long is still
    named by its line in the file (4), once, not by its index among those lines."""
    long_sentence = "two big red dogs run in the green park with a small girl near the blue water"
    src = write_lines(tmp_path / "in.txt", ["a dog .", "", "", long_sentence, ""])
    short = ["-m", str(models["short"]), "--threads", "1", "--compute-type", "float32"]
    assert cli.main(["bench", *short, "-i", str(src), "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    assert re.findall(r"fastdec: warning: (.*?): a sentence of \d+ source tokens exceeds", err) == ["line 4"], err


# ----------------------------------------------------------------------------- subprocesses
def test_subprocess_stdin_to_stdout_and_errors(models, translator, tmp_path):
    stdin = "".join(line + "\n" for line in LINES).encode()
    done = run_cli(["translate", *model_args(models, drafter=True), "--block", "2"], tmp_path, stdin)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == expected(translator, LINES)
    bad = run_cli(["translate", *model_args(models)], tmp_path, b"a man .\n\xff\n")
    assert bad.returncode == 2 and b"line 2: invalid UTF-8" in bad.stderr and b"Traceback" not in bad.stderr
    missing = run_cli(["translate", "-m", str(tmp_path / "nope")], tmp_path, b"a\n")
    assert missing.returncode == 1 and missing.stdout == b""
    assert missing.stderr.decode().startswith("fastdec: error: ") and b"Traceback" not in missing.stderr


def test_subprocess_stdin_redirected_from_the_output_file(models, translator, tmp_path):
    """`fastdec translate < f -o f` (as `sort -o f f`): f is read whole before it is rewritten.
    Read as it came, the job went on reading f past its first lines into its own output."""
    lines = sentences(600, seed=24)  # more than one read of stdin's buffer
    f = write_lines(tmp_path / "f.txt", lines)
    with open(f, "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "translate", *model_args(models),
                               "--batch-size", "4", "-o", str(f)], stdin=stdin, capture_output=True,
                              cwd=tmp_path, env=child_env(FASTDEC_THREADS="1"), timeout=30)  # else: endless
    assert done.returncode == 0, done.stderr
    assert f.read_text(encoding="utf-8") == expected(translator, lines)


def test_subprocess_workers_give_the_same_output(models, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", sentences(40, seed=23) + [""] + sentences(9, seed=24))
    assert cli.main(["translate", *model_args(models, drafter=True), "-i", str(src), "--workers", "1"]) == 0
    one = capsys.readouterr().out.encode()
    two = run_cli(["translate", *model_args(models, drafter=True), "--block", "3", "-i", str(src),
                   "--workers", "2", "--batch-size", "4", "--stats"], tmp_path)
    assert two.returncode == 0, two.stderr.decode()
    assert two.stdout == one and one.count(b"\n") == 50
    assert b"50 lines in" in two.stderr


def test_subprocess_broken_pipe_exits_quietly(models, tmp_path):
    src = write_lines(tmp_path / "big.txt", sentences(3000, seed=25))
    env = child_env(FASTDEC_THREADS="1")
    with open(src, "rb") as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "pyfastdec.cli", "translate", *model_args(models),
                                 "--batch-size", "8"], stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=tmp_path, env=env)
        first = proc.stdout.readline()  # like `| head -1`
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert first.endswith(b"\n")
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert code in (0, 1)


def test_subprocess_info_names_the_chosen_isa(tmp_path):
    done = run_cli(["info"], tmp_path)
    assert done.returncode == 0
    assert re.search(rb"isa: detected \w+, chosen \w+", done.stdout)
    assert f"chosen {cpu_info()['isa']}".encode() in done.stdout


def test_subprocess_output_appears_once_a_batch_is_done(models, translator, tmp_path):
    """From a pipe, a batch's lines are written (and flushed) before more input arrives;
    with --line-by-line (the default on a terminal) every line is."""
    env = child_env(FASTDEC_THREADS="1")
    for flags, per_round in ((["--batch-size", "2"], 2), (["--line-by-line"], 1)):
        proc = subprocess.Popen([sys.executable, "-m", "pyfastdec.cli", "translate", *model_args(models), *flags],
                                bufsize=0, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp_path, env=env)
        try:  # unbuffered pipes: readline takes one line, so select sees what is left
            for r in range(2):
                batch = TEXTS[r * per_round:(r + 1) * per_round]
                proc.stdin.write("".join(t + "\n" for t in batch).encode())
                proc.stdin.flush()
                for text in batch:  # answered while stdin is still open
                    assert select.select([proc.stdout], [], [], 60)[0], "no output before more input"
                    assert proc.stdout.readline().decode() == expected(translator, [text])
        finally:
            proc.stdin.close()
            proc.stdout.close()
            proc.stderr.close()
            proc.wait(timeout=60)
