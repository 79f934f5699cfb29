"""Lexical shortlist: which target ids the output layer scores for one source sentence.

The file format is specified in export/SHORTLIST_FORMAT.md; this module is its Python
reader and writer. It is imported at inference time, so it needs only numpy and the
standard library. The builder (IBM Model 1 training) lives in export/shortlist.py.

A shortlist is per row: `candidates(src_ids)` looks only at one sentence's source ids,
so a row's output never depends on which other sentences share its batch (Marian's
batch-wide union does, which makes translations change with batch composition).
"""
from __future__ import annotations

import mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MAGIC = b"FDSHORT\0"
VERSION = 2                       # what save() writes unless told otherwise
KNOWN_VERSIONS = (1, 2)
HEADER_BYTES = 128
ALIGN = 64            # every section starts on a 64-byte boundary (cache line, AVX-512)
SIMD_MULTIPLE = 8     # candidates() pads its result to a multiple of this
FLAG_HAS_PROBS = 1

# Header layout, little-endian; offsets and meaning are documented in
# export/SHORTLIST_FORMAT.md, which the C++ reader follows.
_HEADER = struct.Struct(
    "<8s"     # 0   magic
    "I"       # 8   version
    "I"       # 12  header_bytes
    "I"       # 16  vocab_size
    "I"       # 20  num_frequent
    "I"       # 24  best
    "I"       # 28  first_fill_id
    "I"       # 32  flags
    "I"       # 36  payload_crc32
    "Q"       # 40  file_bytes
    "QQ"      # 48  frequent_offset, frequent_bytes
    "QQ"      # 64  index_offset,    index_bytes
    "QQ"      # 80  targets_offset,  targets_bytes
    "QQ"      # 96  probs_offset,    probs_bytes
    "III"     # 112 version 1: reserved (zero); version 2: id_bytes, offset_bytes, reserved
)
_HEADER_CRC_AT = _HEADER.size          # 124: crc32 of header bytes [0, 124)
assert _HEADER_CRC_AT + 4 == HEADER_BYTES
_SECTIONS = ("frequent", "index", "targets", "probs")
_ID_DTYPES = {2: "<u2", 4: "<u4"}         # id_bytes -> dtype of the frequent and targets sections
_OFFSET_DTYPES = {4: "<u4", 8: "<u8"}     # offset_bytes -> dtype of the index section


def _align_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _widths(version: int, vocab_size: int, num_targets: int) -> tuple[int, int]:
    """(id_bytes, offset_bytes) a writer of `version` uses: version 2 takes the narrowest
    that holds every id (< vocab_size) and every offset (<= num_targets)."""
    if version == 1:
        return 4, 8
    if version == 2:
        return 2 if vocab_size <= 2**16 else 4, 4 if num_targets < 2**32 else 8
    raise ValueError(f"version: {version} cannot be written (this writer knows versions "
                     f"{', '.join(map(str, KNOWN_VERSIONS))})")


class Shortlist:
    """Frequent target ids plus, per source id, its best target ids (CSR).

    frequent : uint32, sorted ascending, unique — always candidates.
    indptr   : uint64 [vocab_size + 1] — source id f owns targets[indptr[f]:indptr[f+1]].
    targets  : uint32 — per source id in descending t(e|f), ties by ascending id.
    probs    : float32 aligned with targets, or None.
    best     : the M the builder used; no source id has more than M targets.
    first_fill_id : candidates() pads with the lowest ids >= this not yet chosen;
                    ids below it (pad, unk, bos, eos, mask) are never used as padding.
    """

    def __init__(self, vocab_size: int, frequent, indptr, targets, probs=None, *,
                 best: int, first_fill_id: int):
        self.vocab_size = int(vocab_size)
        self.best = int(best)
        self.first_fill_id = int(first_fill_id)
        self.frequent = np.asarray(frequent, dtype="<u4")
        self.indptr = np.asarray(indptr, dtype="<u8")
        self.targets = np.asarray(targets, dtype="<u4")
        self.probs = None if probs is None else np.asarray(probs, dtype="<f4")
        self._validate()

    # ------------------------------------------------------------------ queries
    def translations(self, src_id: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Target ids of one source id (best first) and their probabilities."""
        if not 0 <= src_id < self.vocab_size:
            raise ValueError(f"source id {src_id} outside vocabulary [0, {self.vocab_size})")
        lo, hi = int(self.indptr[src_id]), int(self.indptr[src_id + 1])
        probs = None if self.probs is None else self.probs[lo:hi]
        return self.targets[lo:hi], probs

    def candidates(self, src_ids: Sequence[int]) -> np.ndarray:
        """Sorted unique int32 target ids to score for one source sentence.

        The union of the frequent ids and every source id's targets, padded with the
        lowest unused ids >= first_fill_id to a multiple of 8 (a SIMD-friendly column
        count); padding stops early only if the vocabulary has no unused ids left.
        """
        src = np.asarray(src_ids, dtype=np.int64).reshape(-1)
        if src.size and (src.min() < 0 or src.max() >= self.vocab_size):
            bad = src[(src < 0) | (src >= self.vocab_size)][0]
            raise ValueError(f"source id {bad} outside vocabulary [0, {self.vocab_size})")
        # A boolean mask over the vocabulary gives union, dedup and sorting in O(V),
        # which for V ~ 8k is cheaper than sorting the concatenated lists.
        chosen = np.zeros(self.vocab_size, dtype=bool)
        chosen[self.frequent] = True
        src = np.unique(src)
        starts = self.indptr[src].astype(np.int64)
        lengths = self.indptr[src + 1].astype(np.int64) - starts
        total = int(lengths.sum())
        if total:
            # Flat positions of all the rows' slices without a Python loop:
            # position = start of its row + its rank within the row.
            row_first = np.cumsum(lengths) - lengths
            within = np.arange(total) - np.repeat(row_first, lengths)
            chosen[self.targets[np.repeat(starts, lengths) + within]] = True
        short = (-int(np.count_nonzero(chosen))) % SIMD_MULTIPLE
        if short:
            free = np.flatnonzero(~chosen[self.first_fill_id:])[:short]
            chosen[free + self.first_fill_id] = True
        return np.flatnonzero(chosen).astype(np.int32)

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        """Raise ValueError naming the first field that breaks the format's invariants."""
        V = self.vocab_size
        if not 0 < V < 2**32:
            raise ValueError(f"vocab_size: {V} is not in [1, 2^32)")
        if not 0 <= self.best < 2**32:
            raise ValueError(f"best: {self.best} is not a u32")
        if not 0 <= self.first_fill_id <= V:
            raise ValueError(f"first_fill_id: {self.first_fill_id} is not in [0, {V}]")
        freq = self.frequent
        if freq.ndim != 1:
            raise ValueError("frequent: ids must be a 1-D array")
        if freq.size and int(freq.max()) >= V:
            raise ValueError(f"frequent: id {int(freq.max())} is not < vocab_size {V}")
        if freq.size > 1 and not np.all(freq[1:] > freq[:-1]):
            raise ValueError("frequent: ids are not strictly increasing")
        ip = self.indptr
        if ip.shape != (V + 1,):
            raise ValueError(f"index: has {ip.size} offsets, expected vocab_size + 1 = {V + 1}")
        if ip[0] != 0 or np.any(ip[1:] < ip[:-1]) or int(ip[-1]) != self.targets.size:
            raise ValueError("index: offsets must start at 0, not decrease and end at the "
                             f"number of targets ({self.targets.size})")
        if int(np.diff(ip).max(initial=0)) > self.best:
            raise ValueError(f"index: a source id has more than best = {self.best} targets")
        if self.targets.ndim != 1:
            raise ValueError("targets: ids must be a 1-D array")
        if self.targets.size and int(self.targets.max()) >= V:
            at = int(np.argmax(self.targets >= V))
            f = int(np.searchsorted(ip, at, side="right")) - 1
            raise ValueError(f"targets: id {int(self.targets[at])} (entry {at}, source id {f}) "
                             f"is not < vocab_size {V}")
        if self.probs is not None:
            p = self.probs
            if p.shape != self.targets.shape:
                raise ValueError(f"probs: {p.size} values for {self.targets.size} targets")
            if not np.all((p >= 0) & (p <= 1)):     # also rejects NaN
                raise ValueError("probs: values must lie in [0, 1]")
            # Readers may keep only a prefix of each row, so rows must be best-first.
            row = np.repeat(np.arange(V), np.diff(ip).astype(np.int64))
            rising = (p[1:] > p[:-1]) & (row[1:] == row[:-1])
            if np.any(rising):
                f = int(row[1:][rising][0])
                raise ValueError(f"probs: targets of source id {f} are not in descending "
                                 "probability order")

    # ------------------------------------------------------------------ file I/O
    def save(self, path: str | os.PathLike, version: int = VERSION) -> None:
        """Write the file atomically (temp file + rename) in format `version` (1 or 2).

        Renaming rather than overwriting in place matters: a Shortlist loaded from the
        same path is an mmap of the old file, and truncating a mapped file under it
        would crash the process (SIGBUS) on the next access.
        """
        id_bytes, offset_bytes = _widths(version, self.vocab_size, self.targets.size)
        sections = {
            "frequent": self.frequent.astype(_ID_DTYPES[id_bytes]).tobytes(),
            "index": self.indptr.astype(_OFFSET_DTYPES[offset_bytes]).tobytes(),
            "targets": self.targets.astype(_ID_DTYPES[id_bytes]).tobytes(),
            "probs": b"" if self.probs is None else self.probs.astype("<f4").tobytes(),
        }
        payload = bytearray()
        where = {}
        for name in _SECTIONS:
            data = sections[name]
            if name == "probs" and self.probs is None:
                where[name] = (0, 0)
                continue
            payload += bytes(_align_up(HEADER_BYTES + len(payload)) - HEADER_BYTES - len(payload))
            where[name] = (HEADER_BYTES + len(payload), len(data))
            payload += data
        payload += bytes(_align_up(HEADER_BYTES + len(payload)) - HEADER_BYTES - len(payload))
        header = _HEADER.pack(
            MAGIC, version, HEADER_BYTES, self.vocab_size, self.frequent.size, self.best,
            self.first_fill_id, FLAG_HAS_PROBS if self.probs is not None else 0,
            zlib.crc32(payload), HEADER_BYTES + len(payload),
            *where["frequent"], *where["index"], *where["targets"], *where["probs"],
            *((0, 0, 0) if version == 1 else (id_bytes, offset_bytes, 0)))
        header += struct.pack("<I", zlib.crc32(header))
        path = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(header)
                out.write(payload)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Shortlist":
        """Map a shortlist file (zero-copy) after checking every header field.

        Any problem raises ValueError("<path>: <field>: <what is wrong>").
        """
        try:
            return cls._load(Path(path))
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    @classmethod
    def _load(cls, path: Path) -> "Shortlist":
        size = path.stat().st_size
        if size < HEADER_BYTES:
            raise ValueError(f"header: file is truncated ({size} bytes, the header alone "
                             f"is {HEADER_BYTES})")
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        head = buf[:HEADER_BYTES]
        (magic, version, header_bytes, vocab_size, num_frequent, best, first_fill_id,
         flags, payload_crc, file_bytes, *sec, w0, w1, r2) = _HEADER.unpack_from(head)
        # Magic and version first: a newer version may lay out the rest differently.
        if magic != MAGIC:
            raise ValueError(f"magic: {magic!r} is not {MAGIC!r}; not a fastdec shortlist")
        if version not in KNOWN_VERSIONS:
            raise ValueError(f"version: {version} is not supported (this reader knows versions "
                             f"{', '.join(map(str, KNOWN_VERSIONS))})")
        (header_crc,) = struct.unpack_from("<I", head, _HEADER_CRC_AT)
        if zlib.crc32(head[:_HEADER_CRC_AT]) != header_crc:
            raise ValueError("header_crc32: checksum mismatch, the header is corrupt")
        if header_bytes != HEADER_BYTES:
            raise ValueError(f"header_bytes: {header_bytes}, expected {HEADER_BYTES}")
        if version == 1:
            if (w0, w1, r2) != (0, 0, 0):
                raise ValueError("reserved: header bytes 112..123 must be zero")
            id_bytes, offset_bytes = 4, 8
        else:
            id_bytes, offset_bytes = w0, w1
            if id_bytes not in _ID_DTYPES:
                raise ValueError(f"id_bytes: {id_bytes}, expected 2 or 4")
            if id_bytes == 2 and vocab_size > 2**16:
                raise ValueError(f"id_bytes: 2 cannot hold the ids of vocab_size {vocab_size} "
                                 "(u16 holds ids < 65536; expected 4)")
            if offset_bytes not in _OFFSET_DTYPES:
                raise ValueError(f"offset_bytes: {offset_bytes}, expected 4 or 8")
            if r2 != 0:
                raise ValueError("reserved: header bytes 120..123 must be zero")
        if flags & ~FLAG_HAS_PROBS:
            raise ValueError(f"flags: unknown bits set in {flags:#x}")
        if file_bytes != size:
            raise ValueError(f"file_bytes: header says {file_bytes} bytes but the file has "
                             f"{size} (truncated or appended to)")
        has_probs = bool(flags & FLAG_HAS_PROBS)
        spans = dict(zip(_SECTIONS, zip(sec[0::2], sec[1::2])))
        num_targets = spans["targets"][1] // id_bytes     # a remainder is refused below
        expected = {"frequent": id_bytes * num_frequent,
                    "index": offset_bytes * (vocab_size + 1),
                    "targets": None, "probs": 4 * num_targets}
        end_of_previous = HEADER_BYTES
        for name in _SECTIONS:
            offset, nbytes = spans[name]
            if name == "probs" and not has_probs:
                if (offset, nbytes) != (0, 0):
                    raise ValueError("probs_offset: must be 0 when flags has no probabilities")
                continue
            if name == "targets" and nbytes % id_bytes:
                raise ValueError(f"targets_bytes: {nbytes} is not a multiple of id_bytes {id_bytes}")
            if name == "probs" and nbytes != expected["probs"]:
                raise ValueError(f"probs_bytes: {nbytes}, expected 4 per target = {expected['probs']}")
            if expected[name] is not None and nbytes != expected[name]:
                raise ValueError(f"{name}_bytes: {nbytes}, expected {expected[name]}")
            if offset % ALIGN or offset < end_of_previous or offset + nbytes > size:
                raise ValueError(f"{name}_offset: {offset} (+{nbytes} bytes) is misaligned, "
                                 f"overlaps a previous section or runs past the end of file")
            end_of_previous = offset + nbytes
        if zlib.crc32(memoryview(buf)[HEADER_BYTES:]) != payload_crc:
            raise ValueError("payload_crc32: checksum mismatch, the file is corrupt")

        def view(name, dtype):
            offset, nbytes = spans[name]
            return np.frombuffer(buf, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize,
                                 offset=offset)

        # Version 1 arrays are used in place (zero-copy); narrower version 2 ones are widened
        # once here (the constructor's asarray), so every caller and the engine see u32 ids
        # and u64 offsets whichever version was read.
        try:
            return cls(vocab_size, view("frequent", _ID_DTYPES[id_bytes]),
                       view("index", _OFFSET_DTYPES[offset_bytes]),
                       view("targets", _ID_DTYPES[id_bytes]),
                       view("probs", "<f4") if has_probs else None,
                       best=best, first_fill_id=first_fill_id)
        except ValueError as err:
            raise ValueError(f"{err} (header and checksums were valid)") from None
