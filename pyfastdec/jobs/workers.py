"""Where a job's blocks are decoded: in this process, or in worker processes (--workers)
over contiguous shards of the input, with results in input order either way."""
from __future__ import annotations

import math
import multiprocessing
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Optional

from pyfastdec.api import Translator
from pyfastdec.jobs.decode import translate_block
from pyfastdec.jobs.errors import CliError
from pyfastdec.jobs.interrupts import sigint_deferred
from pyfastdec.jobs.lines import InputLines, Line
from pyfastdec.jobs.options import DecodeOptions, ModelSpec, checked_translator


# Worker processes (--workers): each builds its own Translator at its first shard (not in
# the pool initializer: an initializer that raises makes the pool respawn it forever,
# while an error in a job reaches the parent).
_worker_spec: Optional[ModelSpec] = None
_worker_translator: Optional[Translator] = None


def _worker_init(spec: ModelSpec) -> None:
    global _worker_spec
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if hasattr(signal, "pthread_sigmask"):
        # Started with Ctrl-C and SIGTERM blocked (_start_workers): Ctrl-C is now ignored,
        # and SIGTERM (`timeout` to the process group, or _stop_workers) ends the worker
        # silently, as its default action does.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _worker_spec = spec


def _start_workers(spec: ModelSpec, jobs: list, processes: int):
    """Worker processes (a ProcessPoolExecutor) and the futures of `jobs`, in order.
    The workers never see Ctrl-C: a terminal sends it to every process of the group, and a
    worker still starting up (importing, before _worker_init) would print a traceback; they
    start with SIGINT (and SIGTERM) blocked, a mask that fork and exec pass on, and unblock
    it once they ignore it. The executor starts its processes as jobs are submitted, so the
    submitting is what runs under the mask.

    Not multiprocessing.Pool: a worker that SIGTERM ends (`timeout` signals the whole
    process group) can die holding one of the pool's queue locks, and Pool.terminate()
    then waits on that lock forever (seen: the parent hung in _terminate_pool). The
    executor notices a dead worker by its process sentinel and never waits on its locks."""
    if hasattr(signal, "pthread_sigmask"):
        # The pool starts multiprocessing's resource tracker, which unblocks SIGINT when it
        # is up: started first, it leaves the mask below alone.
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
    with sigint_deferred():
        executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init, initargs=(spec,))
        return executor, [executor.submit(_worker_translate, job) for job in jobs]


def _stop_workers(executor: ProcessPoolExecutor) -> None:
    """End the workers now, whatever they are doing (an interrupt, an error)."""
    kill = getattr(executor, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):  # 3.10-3.13: no public way
        process.kill()  # a no-op for one that has exited


def _worker_translate(job: tuple[list[Line], DecodeOptions]):
    global _worker_translator
    lines, options = job
    if _worker_translator is None:
        _worker_translator = checked_translator(_worker_spec, None, options)  # a refused option: exit 2
    return translate_block(_worker_translator, lines, options)


def results_in_one_process(translator: Translator, source: InputLines, options: DecodeOptions, interactive: bool):
    """Each block of `source` with its translate_block result, decoded here by `translator`
    (built and its options checked before the output is opened: options.checked_translator)."""
    # A file: blocks of 8 batches (sorted by length within a block). A pipe: a batch per
    # lane, so that output flows and every lane has a batch.
    lanes = translator.inter_threads
    size = 1 if interactive else options.batch_size * (max(8, lanes) if source.total is not None else lanes)
    for block in source.blocks(size):
        yield block, translate_block(translator, block, options)


def _result(future):
    """A worker's result, waited for in short slices: a signal that the kernel hands to
    another thread of this process (one started before SIGTERM was caught, e.g. a BLAS
    thread) only flags Python's handler, which the main thread runs when it next executes
    bytecode; a wait with no timeout never returns to it, and `timeout` hung forever."""
    while True:
        try:
            return future.result(timeout=0.2)
        except FutureTimeout:
            continue
        except BrokenProcessPool:
            # A worker ended abruptly. When a SIGTERM or Ctrl-C to the process group ended it,
            # this process has the same signal pending: let its handler run first.
            time.sleep(0.2)
            raise CliError("a worker process ended abruptly (killed, or out of memory); no output after the "
                           "lines already written") from None


def results_in_workers(spec: ModelSpec, source: InputLines, options: DecodeOptions, workers: int):
    """Each block of `source` with its translate_block result, decoded by `workers`
    processes that each load the directories of `spec` once; in input order."""
    lines = source.all()
    if not lines:
        return
    # Contiguous shards, several per worker so that the output flows and a slow shard
    # does not hold the others' results back for long.
    shard = max(1, min(math.ceil(len(lines) / workers), options.batch_size * 8))
    jobs = [(lines[s:s + shard], options) for s in range(0, len(lines), shard)]
    executor, futures = _start_workers(spec, jobs, min(workers, len(jobs)))
    finished = False
    try:
        for (block, _), future in zip(jobs, futures):
            yield block, _result(future)
        finished = True
    finally:
        if not finished:
            _stop_workers(executor)
        executor.shutdown(wait=True, cancel_futures=True)
