"""`fastdec translate/correct/bench --inter-threads N`: N copies of the model decode a
block's batches at once (Translator(inter_threads=N), lanes.py). On the shipped models
and real sentences the output is what one lane's greedy decoding gives, line for line,
from a file and from a pipe, and the copies really decode (a pipe's block holds a batch
per lane); the thread defaults are divided over the copies; combinations that cannot
work are usage errors (exit 2) before anything is written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from child_python import child_env
from export.data import load_pairs
from pyfastdec import Corrector, Translator, cli, lanes
from test_real_sentences import uagec_test_head

MODELS = Path(__file__).resolve().parents[1] / "models"
SOURCES = [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[40:80]]
LINES = SOURCES[:10] + [""] + SOURCES[10:]  # an empty line inside: kept, in place


def greedy_lines(translator, lines: list[str]) -> str:
    return "".join(t + "\n" for t in translator.translate(lines, algo="greedy", batch_size=4))


@pytest.fixture(scope="module")
def en_de_greedy() -> str:
    return greedy_lines(Translator(MODELS / "en-de", threads=1), LINES)


@pytest.fixture
def copies_made(monkeypatch) -> list[int]:
    """The number of engine copies each Lanes.map call had once it returned."""
    made, original = [], lanes.Lanes.map

    def recording(self, fn, batches):
        try:
            return original(self, fn, batches)
        finally:
            made.append(len(self.copies))

    monkeypatch.setattr(lanes.Lanes, "map", recording)
    return made


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_file_decoded_by_two_copies_is_one_copys_greedy(en_de_greedy, copies_made, tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", LINES)
    out = tmp_path / "out.txt"
    assert cli.main(["translate", "-m", str(MODELS / "en-de"), "--threads", "1", "--inter-threads", "2",
                     "--batch-size", "4", "-i", str(src), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == en_de_greedy
    assert copies_made and max(copies_made) == 1  # the second lane was made and used


def test_a_pipe_gives_every_copy_a_batch(en_de_greedy, copies_made, monkeypatch, capsys):
    """From a pipe (no total, not a terminal) a block is a batch per lane, not one batch:
    with one batch per call the second copy would never be made."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("".join(l + "\n" for l in LINES).encode())))
    assert cli.main(["translate", "-m", str(MODELS / "en-de"), "--threads", "1", "--inter-threads", "2",
                     "--batch-size", "4"]) == 0
    assert capsys.readouterr().out == en_de_greedy
    assert copies_made and max(copies_made) == 1


def test_correct_and_workers_with_copies(tmp_path):
    """correct --inter-threads 2 in two worker processes (ModelSpec carries the count to
    each): IAD's output is one lane's greedy decoding of the correction model."""
    sources = uagec_test_head(24)
    src = write_lines(tmp_path / "in.txt", sources)
    expected = greedy_lines(Corrector(MODELS / "uk-gec", threads=1), sources)
    run = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "correct", "-i", str(src), "--inter-threads", "2",
                          "--workers", "2", "--batch-size", "3", "--threads", "1"],
                         capture_output=True, text=True, cwd=tmp_path, env=child_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected


def test_bench_names_the_copies(tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", SOURCES[:12])
    assert cli.main(["bench", "-i", str(src), "--threads", "1", "--inter-threads", "2", "--batch-size", "4",
                     "--latency-sentences", "2"]) == 0
    assert "threads 1 x inter_threads 2;" in capsys.readouterr().out


@pytest.mark.parametrize("argv, threads, copies", [
    (["--inter-threads", "2"], 2, 2),  # FASTDEC_THREADS=4 over two copies
    (["--inter-threads", "2", "--workers", "2"], 1, 2),
    (["--inter-threads", "2", "--threads", "3"], 3, 2),  # given: per copy
    ([], 4, 1),
])
def test_thread_defaults_are_divided_over_the_copies(monkeypatch, argv, threads, copies):
    monkeypatch.setenv("FASTDEC_THREADS", "4")
    args = cli.build_parser().parse_args(["translate", *argv])
    spec = cli.model_spec(args)
    assert (spec.threads or 4, spec.inter_threads) == (threads, copies)
    assert Translator(MODELS / "en-de", threads=spec.threads, inter_threads=spec.inter_threads).inter_threads == copies


@pytest.mark.parametrize("argv, message", [
    (["--inter-threads", "0"], "expected a positive integer"),
    (["--inter-threads", "two"], "expected a positive integer"),
    (["--inter-threads", "2", "--device", "cuda"], "the GPU model runs one batch at a time"),
    (["--inter-threads", "2", "--ray"], "a Ray actor decodes one batch at a time"),
])
def test_combinations_that_cannot_work_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    src = write_lines(tmp_path / "in.txt", SOURCES[:2])
    out = tmp_path / "out.txt"
    out.write_text("yesterday's output\n", encoding="utf-8")
    run = ["translate", "-i", str(src), "-o", str(out), *argv]
    if argv[1] in ("0", "two"):  # argparse's own refusal
        with pytest.raises(SystemExit) as refused:
            cli.main(run)
        assert refused.value.code == 2
    else:
        assert cli.main(run) == 2
    assert message in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "yesterday's output\n"
