"""Thread counts: a bounded number (4 per usable CPU), refused at once above it from
every entry point, and a pool that cannot start its threads fails with a clear error
instead of hanging (the constructor used to unwind past waiting workers: destroying
their condition variable blocked for ever)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from child_python import NEUTRAL_CWD, child_env
from pyfastdec import Translator, _engine, cli
from pyfastdec.runtime import check_threads, default_threads, max_threads


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_limit_is_four_per_usable_cpu():
    assert max_threads() == 4 * usable_cpus()
    assert check_threads(max_threads()) == max_threads()
    assert _engine.ThreadPool(2).threads == 2


@pytest.mark.parametrize("threads", [10**6, "max+1"])
def test_translator_refuses_too_many_threads_at_once(threads):
    threads = max_threads() + 1 if threads == "max+1" else threads
    with pytest.raises(ValueError, match=rf"threads={threads}: at most {max_threads()} threads"):
        Translator(threads=threads)  # before any model is read


def test_engine_refuses_too_many_threads():
    with pytest.raises(ValueError, match=f"exceeds the limit {max_threads()}"):
        _engine.ThreadPool(10**6)


def test_fastdec_threads_env_is_bounded(monkeypatch):
    monkeypatch.setenv("FASTDEC_THREADS", str(max_threads() + 1))
    with pytest.raises(ValueError, match=f"FASTDEC_THREADS='{max_threads() + 1}': at most {max_threads()}"):
        default_threads()


def test_cli_threads_option_is_bounded(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate", "--threads", "1024"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --threads: 1024: at most {max_threads()} threads" in err


# A fresh interpreter whose address space is then limited to what it maps now plus
# 20 MiB: room for two 8 MiB thread stacks, so the pool starts a few workers and then
# pthread_create fails (EAGAIN). The limit is set after the imports (which map far more
# than 20 MiB) rather than in preexec_fn, so it depends on no library's size.
STARVED_POOL = textwrap.dedent("""
    import resource
    from pyfastdec import _engine

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])

    threads_before = status("Threads")
    vm = status("VmSize") * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + 20 * 2**20, resource.RLIM_INFINITY))
    try:
        _engine.ThreadPool(_engine.max_threads())
        print("started")
    except RuntimeError as e:
        print("RuntimeError:", e)
    print("threads left:", status("Threads") - threads_before)
""")


def test_pool_that_cannot_start_its_threads_raises_instead_of_hanging():
    if max_threads() < 8:
        pytest.skip("needs a limit of >= 8 threads to starve (2 CPUs or more)")
    proc = subprocess.run([sys.executable, "-c", STARVED_POOL], capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, env=child_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr  # not std::terminate's abort
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("RuntimeError: ThreadPool: could not start thread ")
    assert f"of {max_threads()} (" in lines[0] and "use fewer threads" in lines[0]
    assert lines[1] == "threads left: 0"  # the workers it had started were joined
