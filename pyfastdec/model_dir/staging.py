"""Write a directory so that nothing half-written is ever at its final path, and never
over the converter's own input.

The content goes into a staging directory beside the output (same filesystem, so the
final rename is atomic), which replaces the output only when everything was written,
and is removed when anything fails, on Ctrl-C and on SIGTERM. A conversion killed
outright (kill -9, power loss) cannot clean up: its staging directory is named
`.<output name>.staging-<pid>-<random>`, and the next conversion to the same output
removes those whose process is gone.

Errors raised while staging are re-raised with the staging path replaced by the user's
output path, and OSErrors (a full disk, a read-only or missing parent) as one
ConvertOutputError line naming the output: the staging directory is an implementation
detail the user never sees.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STAGING_TAG = ".staging-"


class ConvertOutputError(ValueError):
    """An output the converters cannot or must not write; the message names it."""


def _staging_pattern(out: Path) -> re.Pattern:
    return re.compile(re.escape(f".{out.name}{STAGING_TAG}") + r"(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove staging directories of `out` left by conversions that were killed (their
    process is gone). Returns those removed."""
    pattern, removed = _staging_pattern(out), []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match and entry.is_dir() and not entry.is_symlink() and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def check_output(out: Path, *inputs: Path, force: bool = False) -> None:
    """Refuse (ConvertOutputError, one line) an output that is one of the inputs, lies
    inside one or contains one: replacing it would destroy the input before it is read.
    An existing non-empty output needs force."""
    target = Path(os.path.abspath(out))
    real = target.resolve()
    for given in inputs:
        src = Path(given).resolve()
        if real == src or src in real.parents or real in src.parents:
            how = "is" if real == src else "is inside" if src in real.parents else "contains"
            raise ConvertOutputError(f"{out}: the output directory {how} the input {given} (expected a "
                                     f"directory apart from the model it is converted from)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise FileExistsError(f"{out}: already exists and is not an empty directory (use --force)")
    if target.parent.exists() and not target.parent.is_dir():
        raise ConvertOutputError(f"{out}: cannot create: {target.parent} is not a directory")


def _describe(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "no space left on the device (nothing was written; free some space and rerun)"
    return err.strerror or str(err)


def _restate(err: BaseException, tmp: Path, out: Path) -> BaseException | None:
    """The error with the staging path replaced by `out`; None to re-raise as it is."""
    if isinstance(err, OSError):
        names = [str(n) for n in (err.filename, err.filename2) if n is not None]
        if names and not any(str(tmp) in n or str(out) in n for n in names):  # an input, not the output
            return ConvertOutputError(f"{names[0]}: cannot read: {_describe(err)}")
        return ConvertOutputError(f"{out}: cannot write: {_describe(err)}")
    text = str(err)
    if isinstance(err, ValueError) and str(tmp) in text:
        try:
            return type(err)(text.replace(str(tmp), str(out)))
        except TypeError:  # an exception class with another signature
            return ValueError(text.replace(str(tmp), str(out)))
    return None


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside the block, so the staging cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """Yields the staging directory to fill; on success it replaces `out` (an existing
    `out` is removed first: callers check --force before, with check_output), on
    failure or interruption it is deleted."""
    out = Path(out)
    with _sigterm_as_interrupt():
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(out)
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGING_TAG}{os.getpid()}-", dir=out.parent))
            tmp.chmod(0o755)  # mkdtemp makes it 0700; the published directory is read by others too
        except OSError as err:
            raise ConvertOutputError(f"{out}: cannot create: {_describe(err)}") from None
        try:
            yield tmp
            if out.exists() or out.is_symlink():
                shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
            os.replace(tmp, out)
        except BaseException as err:
            shutil.rmtree(tmp, ignore_errors=True)
            restated = _restate(err, tmp, out)
            if restated is None:
                raise
            raise restated from None


@contextmanager
def scratch_dir(out: Path) -> Iterator[Path]:
    """A staging-named directory beside `out` for intermediate files (the float32 model
    an int8 one is made from), always removed; errors restated as staged_dir's."""
    out = Path(out)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGING_TAG}{os.getpid()}-", dir=out.parent))
    except OSError as err:
        raise ConvertOutputError(f"{out}: cannot create: {_describe(err)}") from None
    try:
        yield tmp
    except BaseException as err:
        restated = _restate(err, tmp, out)
        if restated is None:
            raise
        raise restated from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
