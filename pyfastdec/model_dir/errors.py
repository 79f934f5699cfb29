"""ModelDirError, and the helpers every reader of this package words its refusals with.

Every refusal reads "<file>: <field or tensor>: what is wrong (expected ...)", one line.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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


def read_bytes(path: Path) -> bytes:
    require_file(path, "a file of the model directory")
    try:
        return path.read_bytes()
    except OSError as err:
        raise ModelDirError(f"{path}: (file): unreadable ({err.strerror})") from None
