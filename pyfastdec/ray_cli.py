"""`fastdec translate --ray [ADDRESS] -i IN -o OUT` (and correct): a text file, or a
directory of shards, decoded on a Ray cluster (pyfastdec.ray), resumable.

The lines are read and checked here exactly as the one-machine CLI reads a file
(cli.numbered_lines: invalid UTF-8 named by line, a byte-order mark dropped; every file
checked before anything runs), numbered, and cut into parts of PART_LINES lines. One Ray Dataset
carries the lines of every part not done yet; outputs come back in whatever order the
actors finish and are put in place by (shard, part, line), each line exactly once.

Commit protocol, so that a killed job resumes where it stopped: a part whose lines are all
back is written to the work directory (OUT.fastdec-parts, or OUT/.fastdec-parts for a
directory) under a temporary name and renamed; a shard whose parts are all there is
concatenated into its output the same way, then marked done and its parts deleted. The
work directory holds a manifest (inputs' sizes and hashes, model, options); a rerun with
the same manifest skips what is committed, a rerun with another one is refused. The work
directory is removed when everything is done.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pyfastdec.cli import (EXIT_BAD_INPUT, CliError, DecodeOptions, Line, ModelSpec, Progress, numbered_lines,
                           sigint_deferred, warn)

try:
    import pyfastdec.ray as fastdec_ray  # first: its ImportError says how to install the extra
except ImportError as err:
    raise CliError(str(err)) from None
import ray
import ray.data

PART_LINES = 10_000  # lines per committed part: what a killed job may have to redo, per shard
WORK_SUFFIX, WORK_IN_DIR = ".fastdec-parts", ".fastdec-parts"
MANIFEST = "manifest.json"


@dataclass
class Shard:
    source: Path
    output: Path
    label: str  # prefixes error and warning messages ("" for a single file, as the CLI)
    lines: list[Line]
    digest: str

    def parts(self) -> list[list[Line]]:
        return [self.lines[s:s + PART_LINES] for s in range(0, len(self.lines), PART_LINES)]


def _read_shard(source: Path, output: Path, label: str) -> Shard:
    try:
        data = source.read_bytes()
    except OSError as err:
        raise CliError(f"cannot read input {source}: {err.strerror or err}") from None
    try:
        lines = numbered_lines(data)  # the bytes just hashed, not the file read again
    except CliError as err:
        raise CliError(f"{label}{err}", err.code) from None
    return Shard(source, output, label, lines, hashlib.sha256(data).hexdigest())


def plan_shards(input_path: str, output_path: str) -> tuple[list[Shard], Path]:
    """The shards (read and checked, all of them, before anything runs) and the work directory."""
    src, dst = Path(input_path), Path(output_path)
    if not src.is_dir():
        return [_read_shard(src, dst, "")], dst.with_name(dst.name + WORK_SUFFIX)
    names = sorted(p.name for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    if not names:
        raise CliError(f"{src}: no input files in the directory (hidden files are skipped)", EXIT_BAD_INPUT)
    if dst.exists() and not dst.is_dir():
        raise CliError(f"{dst}: is a file, but the input {src} is a directory (expected an output directory)",
                       EXIT_BAD_INPUT)
    dst.mkdir(parents=True, exist_ok=True)
    return [_read_shard(src / n, dst / n, f"{src / n}: ") for n in names], dst / WORK_IN_DIR


def _write_atomically(path: Path, chunks: list[bytes]) -> None:
    """Write a temporary file next to `path`, flush it to disk, rename it over `path`."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class WorkDir:
    """What is committed: parts (`S.P.out`) and finished shards (`S.done`)."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        file = path / MANIFEST
        if path.is_dir() and file.is_file():
            try:
                old = json.loads(file.read_text())
            except (OSError, ValueError):
                old = None
            if old != manifest:
                raise CliError(f"{path}: left by an interrupted job with other inputs, model or options "
                               f"(its {MANIFEST} differs); remove the directory to start over", EXIT_BAD_INPUT)
        else:
            path.mkdir(parents=True, exist_ok=True)
            _write_atomically(file, [json.dumps(manifest, indent=1, sort_keys=True).encode()])

    def part(self, shard: int, part: int) -> Path:
        return self.path / f"{shard}.{part}.out"

    def done(self, shard: int) -> Path:
        return self.path / f"{shard}.done"

    def commit_part(self, shard: int, part: int, lines: list[str]) -> None:
        with sigint_deferred():
            _write_atomically(self.part(shard, part), ["".join(lines).encode("utf-8")])

    def commit_shard(self, index: int, shard: Shard, parts: int) -> None:
        with sigint_deferred():
            _write_atomically(shard.output, [self.part(index, p).read_bytes() for p in range(parts)])
            self.done(index).touch()
            for p in range(parts):
                self.part(index, p).unlink()

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _manifest(shards: list[Shard], spec: ModelSpec, options: DecodeOptions) -> dict:
    model = {"role": spec.role, "model": str(Path(spec.model).resolve()) if spec.model else None,
             "drafter": str(Path(spec.drafter).resolve()) if spec.drafter else None,
             "compute_type": spec.compute_type, "shortlist": spec.shortlist}
    return {"inputs": [[s.source.name, s.digest] for s in shards], "part_lines": PART_LINES, "model": model,
            "options": repr(options)}


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


def run(args, spec: ModelSpec, options: DecodeOptions, address: Optional[str]) -> int:
    """The --ray path of fastdec translate/correct; address None: a local cluster."""
    if not args.input or args.input == "-" or not args.output or args.output == "-":
        raise CliError("--ray needs -i IN and -o OUT (files, or directories of shards): outputs are committed "
                       "shard by shard, so a killed job can resume", EXIT_BAD_INPUT)
    shards, work_path = plan_shards(args.input, args.output)
    work = WorkDir(work_path, _manifest(shards, spec, options))
    total = sum(len(s.lines) for s in shards)
    # pending[(shard, part)] = output slots, None until the line comes back
    pending: dict[tuple[int, int], list[Optional[str]]] = {}
    rows, done_lines, done_parts = [], 0, 0
    for si, shard in enumerate(shards):
        parts = shard.parts()
        if work.done(si).exists():
            done_lines += len(shard.lines)
            done_parts += len(parts)
            continue
        for pi, part in enumerate(parts):
            if work.part(si, pi).exists():
                done_lines += len(part)
                done_parts += 1
                continue
            pending[(si, pi)] = [None] * len(part)
            rows += [{"shard": si, "part": pi, fastdec_ray.LINE_COLUMN: line.number, "text": line.text}
                     for line in part]
    if done_parts:
        warn(f"resuming from {work.path}: {done_parts} parts ({done_lines} of {total} lines) already done")
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(total, show)
    progress.update(done_lines)
    start = time.perf_counter()
    started = False
    try:
        if rows:
            started = _connect(address)
            _quiet_ray_data()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # load_checked has reported the model warnings once
                ds = ray.data.from_items(rows)
                out = fastdec_ray._map(ds, spec, options, "text", "output", args.workers, None, True, cli_lines=True)
            _collect(out, shards, work, pending, progress)
        for si, shard in enumerate(shards):
            if not work.done(si).exists():
                work.commit_shard(si, shard, len(shard.parts()))
    except ray.exceptions.RayError as err:
        line = _model_error(err)
        if line is None:
            raise
        raise CliError(line) from None
    finally:
        progress.finish()
        if started:
            ray.shutdown()
    work.remove()
    if args.stats:
        seconds = max(time.perf_counter() - start, 1e-9)
        print(f"fastdec: {total - done_lines} lines in {seconds:.2f} s: {(total - done_lines) / seconds:.1f} "
              f"lines/s on Ray", file=sys.stderr, flush=True)
    return 0


def _collect(out: "ray.data.Dataset", shards: list[Shard], work: WorkDir,
             pending: dict[tuple[int, int], list[Optional[str]]], progress: Progress) -> None:
    missing = {key: len(slots) for key, slots in pending.items()}
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        for si, note in zip(batch["shard"].tolist(), batch[fastdec_ray.NOTES_COLUMN].tolist()):
            for line in str(note).splitlines():
                progress.clear()
                warn(shards[si].label + line)
        keys = set()
        for si, pi, number, text in zip(batch["shard"].tolist(), batch["part"].tolist(),
                                        batch[fastdec_ray.LINE_COLUMN].tolist(), batch["output"].tolist()):
            slots = pending[(si, pi)]
            i = (number - 1) % PART_LINES
            if slots[i] is not None:
                raise RuntimeError(f"{shards[si].source}: line {number} came back twice from Ray")
            slots[i] = text
            missing[(si, pi)] -= 1
            keys.add((si, pi))
        progress.update(len(batch["shard"]))
        for key in sorted(keys):
            if missing[key] == 0:
                work.commit_part(*key, pending.pop(key))
    if pending:
        si, pi = min(pending)
        raise RuntimeError(f"{shards[si].source}: lines of part {pi} never came back from Ray")
