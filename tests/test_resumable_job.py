"""The driver of `fastdec translate --ray` (pyfastdec.resumable_job) without Ray: an
executor that hands rows back in shuffled batches, as a pool of actors does. Output order
against the input itself and against the one-process CLI; resume after a kill without
redoing committed parts; a resume refused when an input or the model changed in between
(the resume record names both by content). tests/test_ray.py runs the same driver on a
real Ray instance (slow, the [ray] extra)."""
from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from pyfastdec import cli, resumable_job
from pyfastdec.api import load_checked
from pyfastdec.default_strategy import default_strategy
from pyfastdec.jobs.errors import EXIT_BAD_INPUT, CliError
from pyfastdec.jobs.options import DecodeOptions, ModelSpec
from pyfastdec.model_dir.model_files import ModelFiles, ReadOnce, files_digest
from pyfastdec.row_batches import LINE_COLUMN, NOTES_COLUMN, decode_batch

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "en-de"
OTHER_MODEL = ROOT / "models" / "en-de-attn"  # another En-De translation model, a different function


def numbered_lines(n: int, start: int = 1) -> list[str]:
    # Short, different lines: cheap to decode, and a line out of place is seen.
    return [f"Line {i}: the man number {i} rides a bike." for i in range(start, start + n)]


class Shuffled:
    """An executor: rows back in batches of `batch`, in a random order. decode=False: the
    output line is the input text (so the input is the reference), else decoded as a Ray
    actor decodes (row_batches.decode_batch) with a Translator built from the files it
    was handed, written to a directory of their own, not from the model's path."""

    def __init__(self, tmp: Path, spec: ModelSpec, options: DecodeOptions, decode: bool, batch: int = 8,
                 seed: int = 0):
        self.tmp, self.spec, self.options, self.decode, self.batch = tmp, spec, options, decode, batch
        self.rng = random.Random(seed)
        self.sent: list[dict] = []
        self.digests: list[str] = []

    def __call__(self, rows, model: ModelFiles, drafter):
        self.sent += rows
        self.digests.append(model.digest)
        assert drafter is None and model.digest == files_digest(model.files)
        translator = None
        if self.decode:
            copy = self.tmp / f"shipped-{model.digest[:12]}"
            copy.mkdir(exist_ok=True)
            for name, data in model.files.items():
                (copy / name).write_bytes(data)
            spec = ModelSpec(self.spec.role, str(copy), None, 1, self.spec.compute_type, self.spec.shortlist)
            translator = spec.build()
        batches = [rows[s:s + self.batch] for s in range(0, len(rows), self.batch)]
        self.rng.shuffle(batches)
        for chunk in batches:
            columns = {k: [r[k] for r in chunk] for k in ("shard", "part", LINE_COLUMN, "text")}
            if translator is not None:
                yield decode_batch(translator, columns, self.options, "text", resumable_job.OUTPUT_COLUMN, True)
            else:
                yield dict(columns, **{resumable_job.OUTPUT_COLUMN: [t + "\n" for t in columns["text"]],
                                       NOTES_COLUMN: [""] * len(chunk)})


def job(argv: list[str], tmp: Path, decode: bool = True, model: Path = MODEL, executor_class=None, **executor):
    """What `fastdec translate -m MODEL --algo greedy --ray ARGV` runs (cli._run_on_ray),
    with a Shuffled executor in place of Ray: (run(), the executor)."""
    args = cli.build_parser().parse_args(["translate", "-m", str(model), "--algo", "greedy", "--threads", "1",
                                          *argv])
    spec = cli.model_spec(args)
    read = ReadOnce()  # as cli._run_on_ray: each directory read once, checked, then shipped
    model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type, read)
    options = cli.decode_options(args, default_strategy(model_dir, drafter_dir, spec.role, cli.ALGOS))
    execute = (executor_class or Shuffled)(tmp, spec, options, decode, **executor)
    return (lambda: resumable_job.run(args, spec, options, read.files(model_dir), None, execute, "a test")), execute


def write_shards(directory: Path, lines: list[str], sizes: list[int]) -> list[list[str]]:
    directory.mkdir()
    shards, start = [], 0
    for k, size in enumerate(sizes):
        shards.append(lines[start:start + size])
        (directory / f"s{k}.txt").write_text("".join(t + "\n" for t in shards[-1]))
        start += size
    return shards


def kill_after_commits(monkeypatch, count: int) -> list[tuple[int, int]]:
    """The job is killed (KeyboardInterrupt) right after its `count`-th part is committed."""
    commit, commits = resumable_job.WorkDir.commit_part, []

    def commit_then_die(self, shard, part, out):
        commit(self, shard, part, out)
        commits.append((shard, part))
        if len(commits) == count:
            raise KeyboardInterrupt

    monkeypatch.setattr(resumable_job.WorkDir, "commit_part", commit_then_die)
    return commits


def test_rows_that_come_back_in_any_order_are_written_in_input_order(tmp_path, monkeypatch):
    monkeypatch.setattr(resumable_job, "PART_LINES", 64)
    shards = write_shards(tmp_path / "in", numbered_lines(1000), [1, 600, 399])  # parts: 1, 10, 7 (one short)
    run, execute = job(["-i", str(tmp_path / "in"), "-o", str(tmp_path / "out")], tmp_path, decode=False, batch=7)
    assert run() == 0
    assert len(execute.sent) == 1000
    for k, expected in enumerate(shards):
        assert (tmp_path / "out" / f"s{k}.txt").read_text().splitlines() == expected
    assert not (tmp_path / "out" / resumable_job.WORK_IN_DIR).exists()


class Faulty(Shuffled):
    """Shuffled, then its first batch sent twice ("twice") or its last one lost ("never")."""

    fault = "twice"

    def __call__(self, rows, model, drafter):
        batches = list(super().__call__(rows, model, drafter))
        return batches + batches[:1] if self.fault == "twice" else batches[:-1]


@pytest.mark.parametrize("fault, message", [("twice", "came back twice"), ("never", "never came back")])
def test_a_line_that_comes_back_twice_or_never_is_an_error(tmp_path, monkeypatch, fault, message):
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in numbered_lines(20)))
    monkeypatch.setattr(Faulty, "fault", fault)
    run, _ = job(["-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")], tmp_path, decode=False,
                 executor_class=Faulty)
    with pytest.raises(RuntimeError, match=f"^{re.escape(str(tmp_path / 'in.txt'))}: .*{message}$"):
        run()
    assert not (tmp_path / "out.txt").exists()


def test_the_job_writes_what_the_one_process_cli_writes(tmp_path, capsys):
    lines = numbered_lines(60)
    lines[10] = ""  # an empty line
    lines[20] = " ".join(["word"] * 400)  # a sentence over max_source_len: cut, with a warning
    lines[30] = "\x07\x1b"  # control characters only: an empty line
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    assert cli.main(["translate", "-m", str(MODEL), "--algo", "greedy", "--threads", "1", "-i", str(src),
                     "-o", str(tmp_path / "one.txt")]) == 0
    one_err = capsys.readouterr().err
    run, _ = job(["-i", str(src), "-o", str(tmp_path / "job.txt")], tmp_path, batch=5)
    assert run() == 0
    job_err = capsys.readouterr().err
    assert (tmp_path / "job.txt").read_bytes() == (tmp_path / "one.txt").read_bytes()
    assert "line 21: a sentence of" in one_err
    assert [e for e in job_err.splitlines() if "line 21" in e] == [e for e in one_err.splitlines() if "line 21" in e]


def test_invalid_utf8_in_a_single_file_is_named_as_the_one_process_cli_names_it(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"A man rides a bike.\nbad \xff byte\n")
    assert cli.main(["translate", "-m", str(MODEL), "--algo", "greedy", "--threads", "1", "-i", str(src),
                     "-o", str(tmp_path / "one.txt")]) == EXIT_BAD_INPUT
    one_err = capsys.readouterr().err
    assert one_err.startswith(f"fastdec: error: {src}: line 2: invalid UTF-8 at byte ")
    with pytest.raises(CliError) as refused:
        job(["-i", str(src), "-o", str(tmp_path / "job.txt")], tmp_path)[0]()
    assert f"fastdec: error: {refused.value}\n" == one_err and refused.value.code == EXIT_BAD_INPUT
    assert not (tmp_path / "job.txt").exists()


def test_a_killed_job_resumes_without_redoing_committed_parts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(resumable_job, "PART_LINES", 20)
    shards = write_shards(tmp_path / "in", numbered_lines(90), [30, 30, 30])  # 6 parts: 20 + 10 lines each
    argv = ["-i", str(tmp_path / "in"), "-o", str(tmp_path / "out")]
    commit = resumable_job.WorkDir.commit_part
    commits = kill_after_commits(monkeypatch, 3)
    run, _ = job(argv, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run()
    assert (tmp_path / "out" / resumable_job.WORK_IN_DIR / resumable_job.MANIFEST).is_file()
    monkeypatch.setattr(resumable_job.WorkDir, "commit_part", commit)
    capsys.readouterr()

    run, execute = job(argv, tmp_path)
    assert run() == 0
    assert "resuming from" in capsys.readouterr().err
    redone = {(r["shard"], r["part"]) for r in execute.sent}
    committed = set(commits)
    assert not redone & committed
    assert len(execute.sent) == 90 - sum(20 if p == 0 else 10 for _, p in committed)
    reference = cli.main  # the one-process CLI, shard by shard
    for k in range(3):
        assert reference(["translate", "-m", str(MODEL), "--algo", "greedy", "--threads", "1",
                          "-i", str(tmp_path / "in" / f"s{k}.txt"), "-o", str(tmp_path / f"one{k}.txt")]) == 0
        assert (tmp_path / "out" / f"s{k}.txt").read_bytes() == (tmp_path / f"one{k}.txt").read_bytes()
        assert len(shards[k]) == len((tmp_path / "out" / f"s{k}.txt").read_text().splitlines())
    assert not (tmp_path / "out" / resumable_job.WORK_IN_DIR).exists()


def interrupted_job(tmp_path, monkeypatch, model: Path) -> list[str]:
    """A job of two parts over a copy of the input, killed after its first part; the argv to resume it."""
    monkeypatch.setattr(resumable_job, "PART_LINES", 10)
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in numbered_lines(20)))
    argv = ["-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    commit = resumable_job.WorkDir.commit_part
    kill_after_commits(monkeypatch, 1)
    run, _ = job(argv, tmp_path, model=model)
    with pytest.raises(KeyboardInterrupt):
        run()
    monkeypatch.setattr(resumable_job.WorkDir, "commit_part", commit)
    return argv


def test_a_resumed_job_refuses_an_input_that_changed(tmp_path, monkeypatch):
    argv = interrupted_job(tmp_path, monkeypatch, MODEL)
    # Same name, same size, same number of lines, one line different.
    src = tmp_path / "in.txt"
    src.write_text(src.read_text().replace("Line 15: the man", "Line 15: the dog"))
    run, execute = job(argv, tmp_path)
    with pytest.raises(CliError) as info:
        run()
    assert str(info.value) == (f"{tmp_path / 'out.txt.fastdec-parts'}: left by an interrupted job with other input "
                               f"content: {src} changed since; rerun it as it was, or remove the directory to "
                               f"start over")
    assert info.value.code == EXIT_BAD_INPUT
    assert execute.sent == [] and not (tmp_path / "out.txt").exists()


def test_a_resumed_job_refuses_a_model_directory_replaced_in_place(tmp_path, monkeypatch):
    model = Path(shutil.copytree(MODEL, tmp_path / "model"))
    argv = interrupted_job(tmp_path, monkeypatch, model)
    shutil.rmtree(model)
    shutil.copytree(OTHER_MODEL, model)  # another valid model at the same path
    run, execute = job(argv, tmp_path, model=model)
    with pytest.raises(CliError) as info:
        run()
    assert str(info.value) == (f"{tmp_path / 'out.txt.fastdec-parts'}: left by an interrupted job with another "
                               f"model: the content of {model} differs from what the committed parts were decoded "
                               f"with; rerun it as it was, or remove the directory to start over")
    assert execute.sent == [] and not (tmp_path / "out.txt").exists()
    # Put back, the job resumes and writes what the first model writes.
    shutil.rmtree(model)
    shutil.copytree(MODEL, model)
    run, execute = job(argv, tmp_path, model=model)
    assert run() == 0 and len(execute.sent) == 10
    assert cli.main(["translate", "-m", str(MODEL), "--algo", "greedy", "--threads", "1", "-i",
                     str(tmp_path / "in.txt"), "-o", str(tmp_path / "one.txt")]) == 0
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "one.txt").read_bytes()


def test_the_ray_driver_reads_each_model_file_once(tmp_path, monkeypatch):
    """cli._run_on_ray, with ray_cli's executor replaced by one that echoes the input:
    every file of both directories of a BiLD pair is read from disk once (ReadOnce: the
    checks run on the bytes that are shipped), and what is shipped is the directory's
    content (its digest as a fresh read gives it)."""
    import sys
    import types

    import pyfastdec
    from pyfastdec.model_dir import safetensors_io

    big, little = ROOT / "models" / "en-de-big", ROOT / "models" / "en-de-little"
    reads: dict[str, int] = {}
    read_bytes, map_file = Path.read_bytes, safetensors_io.map_file

    def counted_read(self):
        reads[str(self)] = reads.get(str(self), 0) + 1
        return read_bytes(self)

    def counted_map(header):
        reads[str(header.path)] = reads.get(str(header.path), 0) + 1
        return map_file(header)

    shipped = []

    def run(args, spec, options, address, model, drafter):
        shipped.extend([model, drafter])

        def echo(rows, model, drafter):
            yield {"shard": [r["shard"] for r in rows], "part": [r["part"] for r in rows],
                   LINE_COLUMN: [r[LINE_COLUMN] for r in rows],
                   resumable_job.OUTPUT_COLUMN: [r["text"] + "\n" for r in rows], NOTES_COLUMN: [""] * len(rows)}
        return resumable_job.run(args, spec, options, model, drafter, echo, "a test")

    fake = types.ModuleType("pyfastdec.ray_cli")
    fake.run = run
    monkeypatch.setitem(sys.modules, "pyfastdec.ray_cli", fake)
    monkeypatch.setattr(pyfastdec, "ray_cli", fake, raising=False)
    monkeypatch.setattr(Path, "read_bytes", counted_read)
    monkeypatch.setattr(safetensors_io, "map_file", counted_map)
    lines = numbered_lines(5)
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in lines))
    assert cli.main(["translate", "-m", str(big), "--drafter", str(little), "--ray", "-i", str(tmp_path / "in.txt"),
                     "-o", str(tmp_path / "out.txt")]) == 0
    monkeypatch.undo()
    assert (tmp_path / "out.txt").read_text().splitlines() == lines
    model_files = {str(p): 1 for d in (big, little) for p in d.iterdir() if p.is_file()}
    assert {name: n for name, n in reads.items() if name in model_files} == model_files
    assert [m.digest for m in shipped] == [ModelFiles.read(big).digest, ModelFiles.read(little).digest]


@pytest.mark.parametrize("damage", ["missing", "foreign", "weights", "spm"])
def test_the_ray_driver_refuses_a_directory_in_model_dir_load_s_words(tmp_path, damage):
    """ReadOnce (files read into memory first) refuses what ModelDir.load (from disk)
    refuses, with the very same line."""
    from pyfastdec.model_dir import ModelDir, ModelDirError

    model = tmp_path / "model"
    if damage != "missing":
        shutil.copytree(MODEL, model)
    if damage == "foreign":  # a Hugging Face folder: the line names the converter
        (model / "config.json").write_text('{"model_type": "marian", "architectures": ["MarianMTModel"]}')
    elif damage in ("weights", "spm"):  # one byte changed: config.json's checksum refuses it
        name = "model.safetensors" if damage == "weights" else "spm.model"
        data = bytearray((model / name).read_bytes())
        data[-1] ^= 1
        (model / name).write_bytes(bytes(data))
    with pytest.raises(ModelDirError) as from_disk:
        ModelDir.load(model)
    with pytest.raises(ModelDirError) as read_once:
        ReadOnce()(model)
    assert str(read_once.value) == str(from_disk.value)
    # ReadOnce words these two by calling ModelDir.load itself: held to their words here too
    expected = {"missing": r"\(directory\): no such directory", "foreign": r"fastdec convert marian"}
    if damage in expected:
        assert re.search(expected[damage], str(read_once.value))
