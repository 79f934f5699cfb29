"""Translate and correct Ray Datasets on a pool of actors (the `[ray]` extra).

    import ray.data
    from pyfastdec.ray import translate_dataset
    ds = ray.data.from_items([{"text": t} for t in texts])
    out = translate_dataset(ds, model="path/to/en-de", workers=4)   # lazy; adds "translation"

Each actor of the pool loads the model once (a Translator with `threads_per_worker`
threads, the CPUs it asks Ray for) and decodes the batches Ray Data sends it, exactly as
`fastdec translate` decodes a block of lines (jobs.decode.translate_block: sentence splitting,
over-long sentences cut between words, control characters). Scheduling, back-pressure,
autoscaling and fault tolerance are Ray Data's own: an actor pool map (map_batches with a
callable class and an ActorPoolStrategy) whose actors Ray Data creates with
max_restarts=-1 and max_task_retries=-1 unless told otherwise
(ActorPoolMapOperator._apply_default_remote_args), so an actor that dies is restarted and
the batches it held are run again; nothing is scheduled here.

The model directory reaches the actors once: its files are put in the object store by the
driver (ship_model=True, the default) and each node writes them to a local cache directory
named by their hash, which every actor on that node loads; or, on a shared file system,
ship_model=False hands the actors the path itself.

Importing this module imports Ray; nothing else in pyfastdec does.
"""
from __future__ import annotations

import os
import socket
import tempfile
import warnings
from pathlib import Path
from typing import Any, Optional

try:
    import ray
    import ray.data
except ImportError as err:  # pragma: no cover - exercised by a test in a subprocess
    raise ImportError("pyfastdec.ray needs Ray Data, which is not installed: pip install 'pyfastdec[ray]' "
                      "(or pip install 'ray[data]')") from err

from pyfastdec.api import load_checked
from pyfastdec.jobs.options import DecodeOptions, ModelSpec
from pyfastdec.model_dir import ModelDirError
from pyfastdec.model_dir.model_files import ModelFiles, ReadOnce
from pyfastdec.row_batches import LINE_COLUMN, NOTES_COLUMN, decode_batch  # noqa: F401  (columns: public here too)

# A test hook: a path P. While P.armed exists, the first actor to rename it to P.fired exits
# on the spot at the start of its second batch, as a killed process would; its replacement
# and the other actors find nothing to rename and carry on. Read by the actors, so the
# variable is set before ray.init (workers inherit the environment); a test arms it per run.
CRASH_ONCE_ENV = "PYFASTDEC_RAY_CRASH_ONCE"
CACHE_DIR_ENV = "PYFASTDEC_RAY_CACHE"  # where nodes keep shipped model directories (default: the temp dir)


def _materialize(files: dict[str, bytes], digest: str) -> Path:
    """The node-local copy of a shipped directory: written once per node (into a private
    directory, then renamed into place, so an actor never loads a half-written copy)."""
    root = Path(os.environ.get(CACHE_DIR_ENV) or Path(tempfile.gettempdir()) / f"pyfastdec-ray-{os.getuid()}")
    target = root / digest
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=root))
    for name, data in files.items():
        (partial / name).write_bytes(data)
    try:
        os.rename(partial, target)
    except OSError:  # another actor of this node got there first
        for p in partial.iterdir():
            p.unlink()
        partial.rmdir()
    return target


def _ship(files: ModelFiles) -> tuple[str, Any]:
    """A model directory's files in the object store, with their digest (the cache name)."""
    return files.digest, ray.put(files.files)


class DecodeBatches:
    """The callable class of the actor pool: one Translator (or Corrector) per actor."""

    def __init__(self, spec: ModelSpec, options: DecodeOptions, column: str, output_column: str,
                 model_files: Any = None, drafter_files: Any = None, cli_lines: bool = False):
        model, drafter = spec.model, spec.drafter
        # Object references nested in a tuple are not resolved by Ray: fetched here, once per actor.
        if model_files is not None:
            model = str(_materialize(ray.get(model_files[1]), model_files[0]))
        if drafter_files is not None:
            drafter = str(_materialize(ray.get(drafter_files[1]), drafter_files[0]))
        spec = ModelSpec(spec.role, model, drafter, spec.threads, spec.compute_type, spec.shortlist, spec.device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the driver reported the model's warnings once
                self.translator = spec.build()
        except (ModelDirError, OSError) as err:
            # One line that says where: the driver sees it inside Ray's own error.
            raise ModelDirError(f"on Ray node {socket.gethostname()}: {err}") from None
        self.options, self.column, self.output_column = options, column, output_column
        self.cli_lines = cli_lines
        self.batches = 0
        self.crash_marker = os.environ.get(CRASH_ONCE_ENV)

    def __call__(self, batch: dict) -> dict:
        self.batches += 1
        if self.crash_marker and self.batches == 2:
            self._crash_once()
        return decode_batch(self.translator, batch, self.options, self.column, self.output_column, self.cli_lines)

    def _crash_once(self) -> None:
        try:
            os.rename(self.crash_marker + ".armed", self.crash_marker + ".fired")
        except FileNotFoundError:
            return
        os._exit(1)


def _map(ds: "ray.data.Dataset", spec: ModelSpec, options: DecodeOptions, column: str, output_column: str,
         workers: Optional[int], lines_per_call: Optional[int], ship_model: bool, cli_lines: bool = False,
         shipped: Optional[tuple[ModelFiles, Optional[ModelFiles]]] = None) -> "ray.data.Dataset":
    """shipped: the files to ship (read by the caller, who recorded their digest); else,
    with ship_model, the directories of `spec` are read here, once each, and checked."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers: expected a positive integer or None (autoscaling), got {workers}")
    if lines_per_call is None:
        lines_per_call = options.batch_size * 8  # the CLI's block of lines for --workers
    model_files = drafter_files = None
    if ship_model:
        if shipped is None:
            # Checked here, where the error is one line before anything starts.
            read = ReadOnce()
            model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type, read)
            shipped = (read.files(model_dir), read.files(drafter_dir))
        model_files = _ship(shipped[0])
        drafter_files = None if shipped[1] is None else _ship(shipped[1])
    pool = (ray.data.ActorPoolStrategy(size=workers) if workers is not None
            else ray.data.ActorPoolStrategy(min_size=1, max_size=None))
    return ds.map_batches(
        DecodeBatches, batch_size=lines_per_call, batch_format="numpy", compute=pool,
        num_cpus=spec.threads,
        fn_constructor_kwargs=dict(spec=spec, options=options, column=column, output_column=output_column,
                                   model_files=model_files, drafter_files=drafter_files, cli_lines=cli_lines))


def translate_dataset(ds: "ray.data.Dataset", model: str | os.PathLike | None = None, column: str = "text",
                      output_column: str = "translation", algo: Optional[str] = None, workers: Optional[int] = None,
                      threads_per_worker: int = 1, batch_size: int = 32, drafter: str | os.PathLike | None = None,
                      beam_size: int = 1, block: Optional[int] = None, beta: Optional[int] = None,
                      tau: Optional[float] = None, compute_type: str = "int8", shortlist: bool = True,
                      ship_model: bool = True, lines_per_call: Optional[int] = None) -> "ray.data.Dataset":
    """`ds` with `output_column` added: the translation of each row's `column`, as
    Translator(model, drafter).translate(texts, algo=..., batch_size=...) gives it.

    Lazy, like every Ray Data transform: the pool starts when the result is consumed.
    workers: actors in the pool (None: Ray Data autoscales it from 1 to what the cluster
        has room for); each asks Ray for threads_per_worker CPUs and runs that many threads.
    batch_size: sentences per engine batch, as Translator.translate's; lines_per_call
        (default 8 x batch_size) rows go to an actor per call, the unit Ray retries.
    ship_model: put the directories in the object store (True) or pass their path to the
        actors (False: a file system every node shares).
    Rows keep their other columns; their order follows Ray Data's
    DataContext.execution_options.preserve_order (keep an index column to restore it).
    """
    spec = ModelSpec("translate", None if model is None else str(model), None if drafter is None else str(drafter),
                     threads_per_worker, compute_type, shortlist)
    options = DecodeOptions(algo, beam_size, batch_size, 1, block, beta, tau)
    return _map(ds, spec, options, column, output_column, workers, lines_per_call, ship_model)


def correct_dataset(ds: "ray.data.Dataset", model: str | os.PathLike | None = None, column: str = "text",
                    output_column: str = "correction", workers: Optional[int] = None, threads_per_worker: int = 1,
                    batch_size: int = 32, compute_type: str = "int8", shortlist: bool = True,
                    ship_model: bool = True, lines_per_call: Optional[int] = None) -> "ray.data.Dataset":
    """`ds` with `output_column` added: Corrector(model).correct of each row's `column`
    (IAD, output identical to greedy's, with the repetition guard on as in Corrector.correct);
    the other arguments as translate_dataset's."""
    spec = ModelSpec("correct", None if model is None else str(model), None, threads_per_worker, compute_type,
                     shortlist)
    options = DecodeOptions("iad", batch_size=batch_size)
    return _map(ds, spec, options, column, output_column, workers, lines_per_call, ship_model)
