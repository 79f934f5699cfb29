"""The driver of `fastdec translate --ray -i IN -o OUT` (and correct): a text file, or a
directory of shards, decoded by any executor, written in input order, resumable. Ray is
one executor (pyfastdec.ray_cli); nothing here imports it, so the order and resume logic
is tested without Ray (tests/test_resumable_job.py).

The lines are read and checked exactly as the one-machine CLI reads a file
(jobs.lines.numbered_lines: invalid UTF-8 named by line, a byte-order mark dropped; every file
checked before anything runs), numbered, and cut into parts of PART_LINES lines. The
executor gets the rows of every part not done yet and gives back batches of decoded rows
in whatever order they finish; each is put in place by (shard, part, line), exactly once.

Commit protocol, so that a killed job resumes where it stopped: a part whose lines are all
back is written to the work directory (OUT.fastdec-parts, or OUT/.fastdec-parts for a
directory) under a temporary name and renamed; a shard whose parts are all there is
concatenated into its output the same way, then marked done and its parts deleted. The
work directory holds a manifest: every input's sha256, the sha256 of the model's (and
drafter's) files, and the options. The executor decodes with exactly the bytes that
digest covers (model_files.ModelFiles), so a rerun with the same manifest skips what is
committed, and a rerun after an input or the model changed is refused, naming what
changed. The work directory is removed when everything is done.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from pyfastdec.jobs.errors import EXIT_BAD_INPUT, CliError, warn
from pyfastdec.jobs.interrupts import sigint_deferred
from pyfastdec.jobs.lines import Line, numbered_lines
from pyfastdec.jobs.options import DecodeOptions, ModelSpec
from pyfastdec.jobs.progress import Progress
from pyfastdec.model_dir.model_files import ModelFiles
from pyfastdec.row_batches import LINE_COLUMN, NOTES_COLUMN

PART_LINES = 10_000  # lines per committed part: what a killed job may have to redo, per shard
WORK_SUFFIX, WORK_IN_DIR = ".fastdec-parts", ".fastdec-parts"
MANIFEST = "manifest.json"
OUTPUT_COLUMN = "output"

# rows to decode ({"shard", "part", LINE_COLUMN, "text"} each), the model's files, the
# drafter's -> batches of decoded rows: columns "shard", "part", LINE_COLUMN, OUTPUT_COLUMN
# (whole output lines) and NOTES_COLUMN, as lists, in any order and batching.
Executor = Callable[[list[dict], ModelFiles, Optional[ModelFiles]], Iterable[dict]]


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
        # Named by its file whatever the label (the CLI's InputLines names it too); warnings
        # keep the label ("" for a single file), as the CLI's do.
        raise CliError(f"{label or f'{source}: '}{err}", err.code) from None
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


def manifest(shards: list[Shard], spec: ModelSpec, options: DecodeOptions, model: ModelFiles,
             drafter: Optional[ModelFiles]) -> dict:
    """What a resumed job must share with the one that committed the parts."""
    identity = {"role": spec.role, "model": model.digest, "drafter": drafter.digest if drafter else None,
                "compute_type": spec.compute_type, "shortlist": spec.shortlist}
    return {"inputs": [[s.source.name, s.digest] for s in shards], "part_lines": PART_LINES, "model": identity,
            "options": repr(options)}


def _what_differs(old: object, new: dict, shards: list[Shard], model: ModelFiles,
                  drafter: Optional[ModelFiles]) -> str:
    """What a resume record that is not `new` says changed, for the refusal's one line."""
    if not isinstance(old, dict):
        return f"its {MANIFEST} unreadable"
    if old.get("inputs") != new["inputs"]:
        before = {name: digest for name, digest in old.get("inputs") or [] if isinstance(name, str)}
        changed = [s.source for s in shards if before.get(s.source.name) != s.digest]
        if changed and len(before) == len(shards):
            return f"other input content: {changed[0]} changed since"
        return f"other input files ({len(before)} then, {len(shards)} now)"
    old_model, new_model = old.get("model") or {}, new["model"]
    for key, files in (("model", model), ("drafter", drafter)):
        if isinstance(old_model, dict) and old_model.get(key) != new_model[key]:
            if files is None:
                return f"another {key}: none now, where the committed parts were decoded with one"
            return f"another {key}: the content of {files.path} differs from what the committed parts were decoded with"
    return "other options" if old.get("part_lines") == new["part_lines"] else "another part size"


class WorkDir:
    """What is committed: parts (`S.P.out`) and finished shards (`S.done`)."""

    def __init__(self, path: Path, manifest: dict, explain: Callable[[object], str]):
        self.path = path
        file = path / MANIFEST
        if path.is_dir() and file.is_file():
            try:
                old = json.loads(file.read_text())
            except (OSError, ValueError):
                old = None
            if old != manifest:
                raise CliError(f"{path}: left by an interrupted job with {explain(old)}; rerun it as it was, or "
                               f"remove the directory to start over", EXIT_BAD_INPUT)
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


def run(args, spec: ModelSpec, options: DecodeOptions, model: ModelFiles, drafter: Optional[ModelFiles],
        execute: Executor, engine: str) -> int:
    """Decode args.input into args.output with `execute`; `engine` names it in --stats.
    model, drafter: the directories' files as the caller read and checked them
    (model_files.ReadOnce): the digest in the manifest is of the very bytes the executor
    decodes with."""
    if not args.input or args.input == "-" or not args.output or args.output == "-":
        raise CliError("--ray needs -i IN and -o OUT (files, or directories of shards): outputs are committed "
                       "shard by shard, so a killed job can resume", EXIT_BAD_INPUT)
    shards, work_path = plan_shards(args.input, args.output)
    new = manifest(shards, spec, options, model, drafter)
    work = WorkDir(work_path, new, lambda old: _what_differs(old, new, shards, model, drafter))
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
            rows += [{"shard": si, "part": pi, LINE_COLUMN: line.number, "text": line.text} for line in part]
    if done_parts:
        warn(f"resuming from {work.path}: {done_parts} parts ({done_lines} of {total} lines) already done")
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(total, show)
    progress.update(done_lines)
    start = time.perf_counter()
    try:
        if rows:
            collect(execute(rows, model, drafter), shards, work, pending, progress)
        for si, shard in enumerate(shards):
            if not work.done(si).exists():
                work.commit_shard(si, shard, len(shard.parts()))
    finally:
        progress.finish()
    work.remove()
    if args.stats:
        seconds = max(time.perf_counter() - start, 1e-9)
        print(f"fastdec: {total - done_lines} lines in {seconds:.2f} s: {(total - done_lines) / seconds:.1f} "
              f"lines/s on {engine}", file=sys.stderr, flush=True)
    return 0


def collect(batches: Iterable[dict], shards: list[Shard], work: WorkDir,
            pending: dict[tuple[int, int], list[Optional[str]]], progress: Progress) -> None:
    """Put each decoded row in its slot; commit every part as soon as its last line is back."""
    missing = {key: len(slots) for key, slots in pending.items()}
    for batch in batches:
        for si, note in zip(batch["shard"], batch[NOTES_COLUMN]):
            for line in str(note).splitlines():
                progress.clear()
                warn(shards[si].label + line)
        keys = set()
        for si, pi, number, text in zip(batch["shard"], batch["part"], batch[LINE_COLUMN], batch[OUTPUT_COLUMN]):
            slots = pending.get((si, pi))
            i = (number - 1) % PART_LINES
            if slots is None or slots[i] is not None:
                raise RuntimeError(f"{shards[si].source}: line {number} came back twice")
            slots[i] = text
            missing[(si, pi)] -= 1
            keys.add((si, pi))
        progress.update(len(batch["shard"]))
        for key in sorted(keys):
            if missing[key] == 0:
                work.commit_part(*key, pending.pop(key))
    if pending:
        si, pi = min(pending)
        raise RuntimeError(f"{shards[si].source}: lines of part {pi} never came back")
