"""pyfastdec.ray and `fastdec translate --ray` on a local Ray instance (2 CPUs, 2 actors),
against Translator.translate and the one-process CLI as references: same lines, same
order, every line exactly once, also when an actor dies mid-run or a job is killed and
resumed. Ray starts once for the module (several seconds), in the module fixture."""
import concurrent.futures
import os
import socket
import threading
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # the [ray] extra; these tests are slow and run with -m slow

from child_python import NEUTRAL_CWD, PACKAGE_ROOT  # noqa: E402

from pyfastdec import Translator, cli  # noqa: E402
from pyfastdec import ray as fastdec_ray  # noqa: E402
from pyfastdec import ray_cli, resumable_job  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "en-de"
N_LINES = 2000


def numbered_lines(n: int) -> list[str]:
    # Short, different lines: cheap to decode, and a line out of place is seen.
    return [f"Line {i}: the man number {i} rides a bike." for i in range(1, n + 1)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    crash = tmp_path_factory.mktemp("crash") / "hook"
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", fastdec_ray.CRASH_ONCE_ENV)}
    # Actors import the pyfastdec this process imports (installed, or this checkout built in
    # place), and see the test hook.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, saved["PYTHONPATH"]) if p)
    os.environ[fastdec_ray.CRASH_ONCE_ENV] = str(crash)
    # Ray's workers put the driver's working directory first on their sys.path: started from
    # the checkout (after `pip install .`), they would import its source folder, which has no
    # compiled engine. The driver starts Ray from outside the repository.
    started_in = os.getcwd()
    os.chdir(NEUTRAL_CWD)
    try:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    finally:
        os.chdir(started_in)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield crash
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def reference():
    lines = numbered_lines(N_LINES)
    return lines, Translator(MODEL, threads=1).translate(lines, algo="greedy")


def fastdec(args: list[str]) -> int:
    return cli.main(["translate", "-m", str(MODEL), "--algo", "greedy", *args])


def test_translate_dataset_gives_translator_output_line_for_line(cluster, reference):
    lines, expected = reference
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(lines)])
    rows = fastdec_ray.translate_dataset(ds, model=MODEL, algo="greedy", workers=2, threads_per_worker=1).take_all()
    assert sorted(r["i"] for r in rows) == list(range(N_LINES))  # every line exactly once
    got = [r["translation"] for r in sorted(rows, key=lambda r: r["i"])]
    assert got == expected


def test_fastdec_ray_writes_what_fastdec_writes(cluster, reference, tmp_path, capsys):
    lines, _ = reference
    lines = list(lines)
    lines[10] = ""  # an empty line
    lines[20] = " ".join(["word"] * 400)  # a sentence over max_source_len: cut, with a warning
    lines[30] = "\x07\x1b"  # control characters only: an empty line
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    assert fastdec(["-i", str(src), "-o", str(tmp_path / "one.txt")]) == 0
    one_err = capsys.readouterr().err
    assert fastdec(["--ray", "--workers", "2", "-i", str(src), "-o", str(tmp_path / "ray.txt")]) == 0
    ray_err = capsys.readouterr().err
    assert (tmp_path / "ray.txt").read_bytes() == (tmp_path / "one.txt").read_bytes()
    assert "line 21: a sentence of" in one_err
    assert [e for e in ray_err.splitlines() if "line 21" in e] == [e for e in one_err.splitlines() if "line 21" in e]
    assert not (tmp_path / "ray.txt.fastdec-parts").exists()  # the work directory is gone when done


def test_invalid_utf8_is_refused_as_by_fastdec_before_anything_runs(cluster, tmp_path, capsys):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"A man.\nA b\xffad line.\nA woman.\n")
    assert fastdec(["-i", str(src), "-o", str(tmp_path / "one.txt")]) == cli.EXIT_BAD_INPUT
    one_err = capsys.readouterr().err
    assert fastdec(["--ray", "-i", str(src), "-o", str(tmp_path / "ray.txt")]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == one_err == (f"fastdec: error: {src}: line 2: invalid UTF-8 at byte 4 of "
                                                  f"the line\n")
    assert not (tmp_path / "ray.txt").exists()
    # In a directory of shards the file is named too, and no shard is written.
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.txt").write_text("A man.\n")
    (tmp_path / "shards" / "b.txt").write_bytes(src.read_bytes())
    assert fastdec(["--ray", "-i", str(tmp_path / "shards"), "-o", str(tmp_path / "out")]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == (f"fastdec: error: {tmp_path / 'shards' / 'b.txt'}: line 2: invalid UTF-8 "
                                       f"at byte 4 of the line\n")
    assert not (tmp_path / "out" / "a.txt").exists()


def test_an_actor_killed_mid_run_is_replaced_and_no_line_is_lost_or_repeated(cluster, reference, tmp_path):
    lines, expected = reference
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    armed = Path(str(cluster) + ".armed")
    armed.touch()  # the first actor to start its second batch exits (pyfastdec.ray.CRASH_ONCE_ENV)
    # --batch-size 4: 32 lines per call, so the crash lands early with most of the work to come.
    assert fastdec(["--ray", "--workers", "2", "--batch-size", "4", "-i", str(src), "-o", str(tmp_path / "o")]) == 0
    assert not armed.exists() and Path(str(cluster) + ".fired").exists()  # an actor did die
    assert (tmp_path / "o").read_text().splitlines() == expected


def test_a_killed_job_resumes_without_redoing_committed_parts(cluster, reference, tmp_path, monkeypatch, capsys):
    lines, expected = reference
    shards = tmp_path / "in"
    shards.mkdir()
    for k in range(3):  # 3 shards of 300 lines, parts of 200: 6 parts
        (shards / f"s{k}.txt").write_text("\n".join(lines[300 * k:300 * (k + 1)]) + "\n")
    monkeypatch.setattr(resumable_job, "PART_LINES", 200)
    commit = resumable_job.WorkDir.commit_part
    commits = []

    def commit_then_die(self, shard, part, out):
        commit(self, shard, part, out)
        commits.append((shard, part))
        if len(commits) == 3:
            raise KeyboardInterrupt  # the job is killed after its third part is committed

    monkeypatch.setattr(resumable_job.WorkDir, "commit_part", commit_then_die)
    out = tmp_path / "out"
    assert fastdec(["--ray", "--workers", "2", "-i", str(shards), "-o", str(out)]) == cli.EXIT_INTERRUPTED
    assert (out / resumable_job.WORK_IN_DIR / resumable_job.MANIFEST).is_file()
    committed = set(commits)
    capsys.readouterr()

    sent = []
    from_items = ray.data.from_items
    monkeypatch.setattr(ray.data, "from_items", lambda rows, **kw: sent.extend(rows) or from_items(rows, **kw))
    monkeypatch.setattr(resumable_job.WorkDir, "commit_part", commit)
    assert fastdec(["--ray", "--workers", "2", "-i", str(shards), "-o", str(out)]) == 0
    assert "resuming from" in capsys.readouterr().err
    redone = {(r["shard"], r["part"]) for r in sent}
    assert not redone & committed and len(sent) == 900 - 200 * len(committed) + 100 * sum(p == 1 for _, p in committed)
    for k in range(3):
        assert (out / f"s{k}.txt").read_text().splitlines() == expected[300 * k:300 * (k + 1)]
    assert not (out / resumable_job.WORK_IN_DIR).exists()


def test_a_model_directory_the_actors_cannot_read_is_one_clear_error(cluster, tmp_path):
    missing = tmp_path / "not-on-the-workers"  # as a path that exists on the driver only
    ds = ray.data.from_items([{"text": "A man."}] * 10)
    out = fastdec_ray.translate_dataset(ds, model=missing, workers=1, ship_model=False)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(out.take_all)
        with pytest.raises(Exception) as info:
            future.result(timeout=120)  # an error, not a hang
    # Ray wraps it (with the actor's traceback); the one line inside is what fastdec --ray prints.
    assert ray_cli._model_error(info.value) == (
        f"on Ray node {socket.gethostname()}: {missing}: (directory): no such directory (expected a model "
        f"directory with config.json, model.safetensors, spm.model)")


def test_more_threads_than_any_node_has_is_one_line_not_a_hang(cluster, tmp_path, capsys):
    """An actor of --threads 3 fits no node of the 2-CPU local instance: Ray would wait for
    one forever."""
    src = tmp_path / "in.txt"
    src.write_text("A man.\n")
    result = []
    # A daemon thread: a hang fails the test instead of blocking the run.
    worker = threading.Thread(target=lambda: result.append(fastdec(["--ray", "--threads", "3", "-i", str(src),
                                                                    "-o", str(tmp_path / "out.txt")])), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert result == [cli.EXIT_BAD_INPUT]
    # Only fastdec's lines: the module's Ray instance may still print actor logs of earlier tests.
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("fastdec:")] == [
        "fastdec: error: --threads 3: each Ray actor needs 3 CPUs on one node, but the largest node of the local Ray "
        "instance has 2 (expected --threads 2 or fewer)"]
    assert not (tmp_path / "out.txt").exists()
