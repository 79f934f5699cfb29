"""A model directory's files read once into memory, with one digest of them all.

A job that runs on other machines (pyfastdec.ray) ships these bytes, not the path, and
records the digest in its resume record (pyfastdec.resumable_job): the model a resumed
job decodes with is then the one its committed parts were decoded with, byte for byte,
or the job is refused. The digest covers every file of the directory (config.json,
weights, vocabulary, shortlist.bin), whether or not config.json has a "checksum".
ReadOnce is how such a job's driver loads its directories: each read from disk once,
validated from the bytes it then ships.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from pyfastdec.model_dir.config_parser import read_config
from pyfastdec.model_dir.errors import ModelDirError, files_in_memory, read_bytes
from pyfastdec.model_dir.layout import CONFIG_FILE
from pyfastdec.model_dir.loader import ModelDir


@dataclass(frozen=True)
class ModelFiles:
    path: Path  # where they were read (for messages only: the identity is the digest)
    files: dict[str, bytes]  # file name -> content; model directories are flat (export/FORMAT.md)
    digest: str  # sha256 hex of every file's name, length and content, in name order

    @classmethod
    def read(cls, path: str | Path, known: Optional[Mapping[str, bytes]] = None) -> "ModelFiles":
        """known: files of `path` read already (name -> content), not read again."""
        path, known = Path(path), known or {}
        files = {p.name: known[p.name] if p.name in known else p.read_bytes()
                 for p in sorted(path.iterdir()) if p.is_file()}
        return cls(path, files, files_digest(files))


def files_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        # name and length framed, so that moving bytes from one file to the next changes the digest
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


class ReadOnce:
    """A loader for api.load_checked (its `load`) that reads each directory from disk once:
    its files into memory (ModelFiles: what a Ray job ships and names in its resume
    record) and the ModelDir validated from those very bytes (ModelDir.load's `files`).
    config.json comes first, so that a folder that is no model directory (a Hugging Face
    one of gigabytes, say) is refused, in ModelDir.load's words, before the rest is read."""

    def __init__(self) -> None:
        self.read: dict[Path, ModelFiles] = {}

    def __call__(self, path: str | os.PathLike) -> ModelDir:
        path = Path(path)
        config = path / CONFIG_FILE
        try:
            first = {CONFIG_FILE: read_bytes(config)}
            with files_in_memory(path, first):
                read_config(config)
        except ModelDirError:
            ModelDir.load(path)  # refuses it in its own words (naming the converter of a foreign folder)
            raise
        try:
            files = ModelFiles.read(path, first)
        except OSError:
            ModelDir.load(path)  # a model file that cannot be read: refused in one line
            raise  # another file of the directory
        loaded = ModelDir.load(path, files.files)
        self.read[loaded.path] = files
        return loaded

    def files(self, model_dir: Optional[ModelDir]) -> Optional[ModelFiles]:
        """The files `model_dir` (loaded by this object) was validated from."""
        return None if model_dir is None else self.read[model_dir.path]
