"""The native runtime: which ISA runs, and how many threads to use.

Thread default: one intra-op thread per *physical* core this process may run on.
Hyper-threads share the vector units an int8 GEMM saturates, so counting them only
adds contention; numpy's and torch's own pools are left alone (we never set them), and
our pool is separate, so callers who mix libraries choose the split explicitly.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from pyfastdec.engine_import import import_engine

_engine = import_engine()  # the first import of the engine: a missing one is explained there

ThreadPool = _engine.ThreadPool


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use (affinity-aware)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return max(1, (os.cpu_count() or 2) // 2)
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topo / "physical_package_id").read_text().strip()
            core = (topo / "core_id").read_text().strip()
        except OSError:
            return len(cpus)
        cores.add((package, core))
    return max(1, len(cores))


def max_threads() -> int:
    """The most intra-op threads a pool may have: 4 per CPU this process may run on.
    Workers spin before they sleep, so threads beyond the CPUs only take time from each
    other; the margin leaves room for oversubscription experiments, and the limit turns
    a typo (threads=10**6) into an error instead of a hang."""
    return _engine.max_threads()


def check_threads(value, what: str = "threads") -> int:
    """value as a thread count in [1, max_threads()], else a one-line ValueError naming
    `what` (the argument, option or variable it came from)."""
    try:
        threads = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={value!r}: expected a positive integer") from None
    if threads < 1:
        raise ValueError(f"{what}={value!r}: expected a positive integer")
    limit = max_threads()
    if threads > limit:
        raise ValueError(f"{what}={value!r}: at most {limit} threads "
                         f"(4 per CPU this process may use; {limit // 4} CPUs)")
    return threads


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_workers(value: int, what: str = "--workers") -> int:
    """Worker processes on this machine: at most one per CPU this process may use. Each
    loads its own copy of the models and runs at least one thread, so a worker beyond the
    CPUs adds memory and start-up time and takes CPU time from the others: refused (in one
    line, as too many threads are) rather than cut down behind the caller's back."""
    cpus = usable_cpus()
    if value > cpus:
        raise ValueError(f"{what} {value}: at most {cpus} worker processes here (one per CPU this process may use; "
                         f"each loads its own models, so more add memory and time, not speed)")
    return value


def default_threads() -> int:
    """FASTDEC_THREADS if set, else the number of physical cores."""
    env = os.environ.get("FASTDEC_THREADS")
    if env:
        return check_threads(env, "FASTDEC_THREADS")
    return physical_cores()


def cpu_info() -> dict:
    """What the CPU offers, which ISA pyfastdec chose, and the path of each kernel."""
    info = _engine.cpu_info()
    info["physical_cores"] = physical_cores()
    info["default_threads"] = default_threads()
    return info


def _warn_if_isa_capped() -> None:
    info = _engine.cpu_info()
    order = ["scalar", "avx2", "avx512", "vnni", "amx"]
    # "amx-emulated" (tests only) runs on any CPU: never capped.
    if info["forced"] and info["requested"] in order and order.index(info["requested"]) > order.index(info["detected"]):
        warnings.warn(
            f"FASTDEC_ISA={info['requested']} is above what this CPU supports; "
            f"using {info['isa']}", RuntimeWarning, stacklevel=3)


_warn_if_isa_capped()
