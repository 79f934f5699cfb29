"""inter_threads: several copies of one Translator's engines in one process, each decoding
whole batches on its own thread, as CTranslate2's inter_threads does.

The native engine releases the GIL in every call, so N lanes decode N batches at once;
only the Python between engine calls (a few percent of a batch-32 step) takes turns. Each
lane has its own backends (the weights loaded once per lane), cost policies and scratch,
so lanes share nothing they write. A call's batches are claimed in order, longest first,
by whichever lane is free; results come back in batch order, so the output does not
depend on which lane ran what (sampling seeds are per input, sentence_units.Unit.seed).
The calling thread is lane 0: a Ctrl-C reaches it between engine calls, and the other
lanes then stop after their current batch before the interrupt goes on.
Unlike CTranslate2, whose translators on one device share the weights and also decode
concurrent calls in parallel, each lane loads the weights again, and the lanes work in
parallel within one call (calls from several threads take turns on the engine).
Measured against intra-op threads in bench/README.md ("The same on an AVX2-only CPU").
"""
from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyfastdec.backends.devices import model_backends
from pyfastdec.runtime import check_threads, default_threads

B = TypeVar("B")
R = TypeVar("R")
# Translator attributes that a lane must not share: the engines, and the cost policies
# that learn this machine's costs from the calls they see (decoding/strategies.py slots).
_OWN = ("_iad_policy", "_heads_policy", "_bild_policy", "_draft_policy")


def check_inter_threads(value, device: str, draft_policy) -> int:
    """inter_threads as a lane count, bounded as threads are (runtime.check_threads), else
    a one-line ValueError. More lanes than CPUs only take time from each other."""
    count = check_threads(value, "inter_threads")
    if count > 1 and device != "cpu":
        raise ValueError(f"inter_threads={count}: the {device} backend runs one lane; pass inter_threads=1")
    if count > 1 and draft_policy is not None:
        raise ValueError(f"inter_threads={count}: one draft_policy object cannot learn for {count} lanes at once; "
                         f"pass inter_threads=1, or no draft_policy (each lane then learns its own)")
    return count


def lane_threads(threads, inter_threads: int) -> int:
    """Intra-op threads per lane: as given, else the default (physical cores or
    FASTDEC_THREADS) divided over the lanes, at least one each."""
    if threads is not None:
        return check_threads(threads)
    return max(1, default_threads() // inter_threads)


class Lanes:
    """The owner (lane 0) and its copies; `map` runs a function over batches on them. A
    copy is made at the first call with a batch for it: a translator that only ever sees
    one batch at a time loads its model once, and a subclass's attributes set after
    Translator.__init__ (Corrector's) are there to copy. The owner holds this object, so
    it is held weakly here: a strong reference would keep every Translator in a cycle,
    its engines freed only by the garbage collector."""

    def __init__(self, owner, count: int, shortlist: bool):
        self._owner = weakref.ref(owner)
        self.count, self.shortlist = count, shortlist
        self.copies: list = []

    @property
    def lanes(self) -> list:
        return [self._owner(), *self.copies]

    def backends(self) -> list:
        return [b for lane in self.lanes for b in (lane.verifier, lane.drafter) if b is not None]

    def map(self, fn: Callable[[object, B], R], batches: Sequence[B]) -> list[R]:
        """[fn(lane, batch) for each batch], in batch order, the batches shared out over
        the lanes as they come free. The first error (or interrupt) stops the other lanes
        after their current batch and is raised here once they have: no lane outlives
        the call (one still in the engine at interpreter exit would abort the process)."""
        owner = self._owner()
        want = min(self.count, len(batches))  # no more lanes than batches
        if want < 2:
            return [fn(owner, b) for b in batches]
        while len(self.copies) < want - 1:
            self.copies.append(_copy_of(owner, self.shortlist))
        results: list = [None] * len(batches)
        claim = iter(range(len(batches)))
        lock = threading.Lock()
        stop = threading.Event()
        errors: list[BaseException] = []

        def run(lane, done: threading.Event | None = None) -> None:
            try:
                while not stop.is_set():
                    with lock:
                        i = next(claim, None)
                    if i is None:
                        return
                    results[i] = fn(lane, batches[i])
            except BaseException as err:  # noqa: BLE001  (re-raised by the calling thread)
                stop.set()
                errors.append(err)
            finally:
                if done is not None:
                    done.set()

        done = [threading.Event() for _ in range(want - 1)]
        others = [threading.Thread(target=run, args=(lane, ended), name=f"fastdec-lane-{n}", daemon=True)
                  for n, (lane, ended) in enumerate(zip(self.copies[:want - 1], done), 1)]
        try:
            for thread in others:
                thread.start()
            run(owner)
        finally:
            stop.set()  # done or failed: the others end after the batch they hold
            for thread, ended in zip(others, done):
                # Wait on the lane's own event, not join(): an interrupted join() marks the
                # thread finished while it still runs. An interrupt here is raised after.
                while thread.ident is not None and not ended.is_set():
                    try:
                        ended.wait()
                    except KeyboardInterrupt as err:
                        errors.insert(0, err)
        if errors:
            raise errors[0]
        return results


def _copy_of(owner, shortlist: bool):
    """A lane: the owner's settings and read-only parts (tokenizer, model directories),
    its own engines and policies."""
    lane = copy.copy(owner)
    lane.verifier, lane.drafter = model_backends(owner.model_dir, owner.drafter_dir, owner.device, owner.threads,
                                                 shortlist)
    for name in _OWN:
        setattr(lane, name, None)
    lane._lanes = None
    return lane
