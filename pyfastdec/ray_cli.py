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
from pyfastdec.cli import CliError, DecodeOptions, ModelSpec
from pyfastdec.model_files import ModelFiles
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


def run(args, spec: ModelSpec, options: DecodeOptions, address: Optional[str], model_path: Path,
        drafter_path: Optional[Path]) -> int:
    """The --ray path of fastdec translate/correct; address None: a local cluster."""
    started = False

    def execute(rows: list[dict], model: ModelFiles, drafter: Optional[ModelFiles]):
        nonlocal started
        started = _connect(address)
        _quiet_ray_data()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # load_checked has reported the model warnings once
            ds = ray.data.from_items(rows)
            out = fastdec_ray._map(ds, spec, options, "text", resumable_job.OUTPUT_COLUMN, args.workers, None,
                                   True, cli_lines=True, shipped=(model, drafter))
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            yield {column: batch[column].tolist() for column in COLUMNS}

    try:
        return resumable_job.run(args, spec, options, model_path, drafter_path, execute, "Ray")
    except ray.exceptions.RayError as err:
        line = _model_error(err)
        if line is None:
            raise
        raise CliError(line) from None
    finally:
        if started:
            ray.shutdown()
