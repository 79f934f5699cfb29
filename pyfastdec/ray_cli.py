"""`fastdec translate --ray [ADDRESS] -i IN -o OUT` (and correct): the resumable job of
pyfastdec.resumable_job (shards, parts, commit protocol, resume record) with Ray Data as
its executor (pyfastdec.ray): the rows of the parts not done yet go to a pool of actors,
and their batches come back in whatever order the actors finish.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Optional

from pyfastdec import resumable_job
from pyfastdec.jobs.errors import EXIT_BAD_INPUT, CliError, warn
from pyfastdec.jobs.options import DecodeOptions, ModelSpec
from pyfastdec.model_dir.model_files import ModelFiles
from pyfastdec.row_batches import LINE_COLUMN, NOTES_COLUMN

try:
    import pyfastdec.ray as fastdec_ray  # first: its ImportError says how to install the extra
except ImportError as err:
    raise CliError(str(err)) from None
import ray
import ray.data

COLUMNS = ("shard", "part", LINE_COLUMN, resumable_job.OUTPUT_COLUMN, NOTES_COLUMN)


def _connect(address: Optional[str]) -> bool:
    """Connect to the cluster at `address`, or start a local one; True when started here."""
    if ray.is_initialized():
        return False
    if address is None:
        # The local cluster's workers import the pyfastdec this process runs (a source checkout included).
        package_root = str(Path(fastdec_ray.__file__).resolve().parents[1])
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    ray.init(address=address, logging_level=logging.ERROR, include_dashboard=False, log_to_driver=False)
    return True


def _quiet_ray_data() -> None:
    """Ray Data's progress bars and INFO logs would mix with ours on stderr."""
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False


def _check_actor_fits(threads: int, address: Optional[str]) -> None:
    """An actor asks Ray for --threads CPUs on one node. Where no node has that many, Ray
    waits for one to appear, forever on a cluster nothing adds nodes to: the local one
    (address None) is refused in one line; a cluster at an address may have an autoscaler
    that adds a larger node, so it is only warned about."""
    cpus = [node.get("Resources", {}).get("CPU", 0.0) for node in ray.nodes() if node.get("Alive")]
    largest = max(cpus, default=0.0)
    if threads <= largest:
        return
    what = (f"--threads {threads}: each Ray actor needs {threads} CPUs on one node, but the largest node of the "
            f"{'local Ray instance' if address is None else 'cluster'} has {largest:g}")
    if address is None:
        raise CliError(f"{what} (expected --threads {int(largest)} or fewer)" if largest >= 1 else what,
                       EXIT_BAD_INPUT)
    warn(f"{what}: the job waits until a node with {threads} CPUs joins (an autoscaler's)")


def _model_error(err: BaseException) -> Optional[str]:
    """The one line of a model directory the actors could not load, found inside Ray's
    error (an ActorDiedError holding the RayTaskError of the actor's constructor, whose
    cause is the ModelDirError)."""
    todo, seen = [err], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, fastdec_ray.ModelDirError):
            return str(e).splitlines()[0]
        todo += [getattr(e, "cause", None), e.__cause__, *(a for a in e.args if isinstance(a, BaseException))]
    return None


def run(args, spec: ModelSpec, options: DecodeOptions, address: Optional[str], model_files: ModelFiles,
        drafter_files: Optional[ModelFiles]) -> int:
    """The --ray path of fastdec translate/correct; address None: a local cluster. The
    model's files as the driver read and checked them (model_files.ReadOnce)."""
    started = False

    def execute(rows: list[dict], model: ModelFiles, drafter: Optional[ModelFiles]):
        nonlocal started
        started = _connect(address)
        _quiet_ray_data()
        _check_actor_fits(spec.threads, address)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # load_checked has reported the model warnings once
            ds = ray.data.from_items(rows)
            out = fastdec_ray._map(ds, spec, options, "text", resumable_job.OUTPUT_COLUMN, args.workers, None,
                                   True, cli_lines=True, shipped=(model, drafter))
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            yield {column: batch[column].tolist() for column in COLUMNS}

    try:
        return resumable_job.run(args, spec, options, model_files, drafter_files, execute, "Ray")
    except ray.exceptions.RayError as err:
        line = _model_error(err)
        if line is None:
            raise
        raise CliError(line) from None
    finally:
        if started:
            ray.shutdown()
