"""`fastdec translate` under real signals, in real subprocesses, as `timeout`, `kill` and
a terminal send them: SIGTERM while a write waits on a slow reader still leaves whole
lines (exit 143, one line on stderr); SIGTERM to the process group with --workers ends
every process quietly; a Ctrl-C from the package's first line of Python on is one line,
exit 130. (tests/test_cli_errors.py has Ctrl-C at later moments and other failures.)"""
from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from child_python import NEUTRAL_CWD, child_env

from pyfastdec import cli

MODEL = Path(__file__).resolve().parents[1] / "models" / "en-de"
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ from Python 3.10 on Linux; the number, for older fcntl modules
# What pip writes for `fastdec = "pyfastdec.cli:main"` (pyproject.toml [project.scripts]).
CONSOLE_SCRIPT = """\
import re
import sys
from pyfastdec.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs Linux's /proc/PID/syscall")


def numbered_lines(n: int) -> list[str]:
    return [f"Line {i}: the man number {i} rides a bike down the street." for i in range(1, n + 1)]


def blocked_writing_stdout(pid: int) -> bool:
    """The process's main thread waits in write(1, ...) (syscall 1 on x86-64, fd 0x1)."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return fields[:2] == ["1", "0x1"]


def start_on_a_small_pipe(args: list[str], src: Path, group: bool) -> tuple[subprocess.Popen, int]:
    """fastdec writing to a 4 KiB pipe nobody reads yet; (process, read end)."""
    read, write = os.pipe()
    fcntl.fcntl(write, F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "pyfastdec.cli", "translate", "-m", str(MODEL), "--algo", "greedy",
                             "--threads", "1", "-i", str(src), *args], stdout=write, stderr=subprocess.PIPE,
                            cwd=NEUTRAL_CWD, env=child_env(), start_new_session=group)
    os.close(write)
    return proc, read


def read_all(fd: int, seconds: float = 60) -> bytes:
    """Everything up to the writer's end, or a failure after `seconds`: a command that
    hangs after SIGTERM fails the test instead of hanging the run."""
    chunks, deadline = [], time.monotonic() + seconds
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no end of output within {seconds} s of the signal: the command hangs"
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """600 lines and their one-process translation: the reference every cut output is a prefix of."""
    directory = tmp_path_factory.mktemp("signals")
    src = directory / "in.txt"
    src.write_text("".join(t + "\n" for t in numbered_lines(600)))
    assert cli.main(["translate", "-m", str(MODEL), "--algo", "greedy", "--threads", "1", "-i", str(src),
                     "-o", str(directory / "out.txt")]) == 0
    return src, (directory / "out.txt").read_bytes()


def test_sigterm_while_a_write_waits_on_a_slow_reader_leaves_whole_lines(text):
    """The first block of lines (12 KB) does not fit the 4 KiB pipe: the write waits for
    the reader, SIGTERM arrives, then the reader reads everything."""
    src, expected = text
    proc, read = start_on_a_small_pipe([], src, group=False)
    try:
        deadline = time.monotonic() + 60
        while not blocked_writing_stdout(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "never blocked writing stdout"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out = read_all(read)
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == cli.EXIT_TERMINATED and err == "fastdec: terminated\n", (proc.returncode, err)
    assert len(out) > 4096 and out.endswith(b"\n") and expected.startswith(out)


@pytest.mark.parametrize("moment", ["workers starting", "first output", "parent only"])
def test_sigterm_with_workers_ends_every_process_quietly(text, moment):
    """`timeout` signals the whole process group, the parent and its --workers processes;
    `kill PID` the parent only (its workers used to print BrokenPipeError tracebacks)."""
    src, expected = text
    proc, read = start_on_a_small_pipe(["--workers", "2", "--batch-size", "8"], src, group=True)
    try:
        if moment == "workers starting":
            time.sleep(1.0)  # the parent has loaded; the workers are importing
        else:
            select.select([read], [], [], 60)
        if moment == "parent only":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        out = read_all(read)
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == cli.EXIT_TERMINATED and err == "fastdec: terminated\n", (proc.returncode, err)
    assert out.endswith(b"\n") or out == b""
    assert expected.startswith(out)


# A real SIGINT to itself (as a Ctrl-C arrives) at the moment `TARGET` is first looked for.
SIGINT_AT_IMPORT = """\
import os, signal, sys
class _Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {target!r}:
            os.kill(os.getpid(), signal.SIGINT)
sys.meta_path.insert(0, _Interrupt())
"""


@pytest.mark.parametrize("target", ["pyfastdec._version", "threading", "argparse"])
def test_ctrl_c_from_the_packages_first_line_on_is_one_line(tmp_path, target):
    """pyfastdec/__init__ imports pyfastdec._version first; pyfastdec.cli then threading and
    argparse: before cli's own imports, the package already holds Ctrl-C back."""
    script = tmp_path / "fastdec"
    script.write_text(SIGINT_AT_IMPORT.format(target=target) + CONSOLE_SCRIPT)
    done = subprocess.run([sys.executable, str(script), "translate", "-m", str(MODEL)], input=b"A man.\n",
                          capture_output=True, cwd=NEUTRAL_CWD, env=child_env(), timeout=120)
    assert done.stderr.decode() == "fastdec: interrupted\n" and done.returncode == cli.EXIT_INTERRUPTED
    assert done.stdout == b""


def test_a_worker_killed_alone_ends_the_command_in_one_line(text):
    """A worker that dies on its own (the OOM killer, `kill -9`) breaks the executor: the
    command stops with one line and exit 1 after whole lines, instead of waiting forever
    for that worker's shard (multiprocessing.Pool respawned the worker and waited)."""
    src, expected = text
    proc, read = start_on_a_small_pipe(["--workers", "2", "--batch-size", "8"], src, group=True)
    try:
        select.select([read], [], [], 60)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        workers = [pid for pid in children if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert workers
        os.kill(int(workers[0]), signal.SIGKILL)
        out = read_all(read)
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == cli.EXIT_ERROR and err.count("\n") == 1 and "worker process ended abruptly" in err, err
    assert out.endswith(b"\n") and expected.startswith(out)
