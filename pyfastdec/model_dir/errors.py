"""ModelDirError, and the helpers every reader of this package words its refusals with.

Every refusal reads "<file>: <field or tensor>: what is wrong (expected ...)", one line.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

# ModelDir.load(path, files): a directory's files already in memory (what a Ray job ships),
# served by read_bytes while that load validates them, so they are not read twice.
_IN_MEMORY: ContextVar[Optional[tuple[Path, Mapping[str, bytes]]]] = ContextVar("model_dir_files", default=None)


class ModelDirError(ValueError):
    """A model directory (or one of its files) that this reader refuses."""


def show(value: Any) -> str:
    """A short JSON rendering of a value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def require_file(path: Path, expected: str) -> None:
    if not path.is_file():
        what = "not a regular file" if path.exists() else "missing"
        raise ModelDirError(f"{path}: (file): {what} (expected {expected})")


@contextmanager
def files_in_memory(directory: Path, files: Mapping[str, bytes]) -> Iterator[None]:
    """Within: read_bytes of a file of `directory` returns files[its name], not the disk's."""
    token = _IN_MEMORY.set((directory, files))
    try:
        yield
    finally:
        _IN_MEMORY.reset(token)


def read_bytes(path: Path) -> bytes:
    require_file(path, "a file of the model directory")
    served = _IN_MEMORY.get()
    if served is not None and path.parent == served[0] and path.name in served[1]:
        return served[1][path.name]
    try:
        return path.read_bytes()
    except OSError as err:
        raise ModelDirError(f"{path}: (file): unreadable ({err.strerror})") from None
