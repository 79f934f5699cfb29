"""A model directory's files read once into memory, with one digest of them all.

A job that runs on other machines (pyfastdec.ray) ships these bytes, not the path, and
records the digest in its resume record (pyfastdec.resumable_job): the model a resumed
job decodes with is then the one its committed parts were decoded with, byte for byte,
or the job is refused. The digest covers every file of the directory (config.json,
weights, vocabulary, shortlist.bin), whether or not config.json has a "checksum".
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFiles:
    path: Path  # where they were read (for messages only: the identity is the digest)
    files: dict[str, bytes]  # file name -> content; model directories are flat (export/FORMAT.md)
    digest: str  # sha256 hex of every file's name, length and content, in name order

    @classmethod
    def read(cls, path: str | Path) -> "ModelFiles":
        path = Path(path)
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}
        return cls(path, files, files_digest(files))


def files_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        # name and length framed, so that moving bytes from one file to the next changes the digest
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
