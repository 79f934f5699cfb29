"""Read and write `.safetensors` files with numpy and the standard library only.

pyfastdec's run-time dependencies are numpy and sentencepiece, so model weights cannot
be read with the `safetensors` package. This module reads the same files zero-copy: the
file is memory-mapped read-only and every tensor is a numpy view into the mapping, so
loading costs no copy and untouched weights are never paged in.

File layout (https://github.com/huggingface/safetensors):
    8 bytes   N, unsigned little-endian: length of the JSON header
    N bytes   UTF-8 JSON object: {"__metadata__": {str: str} (optional),
                                  name: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
              padded with spaces; offsets are relative to the data section
    rest      data section: the tensors' little-endian, row-major bytes, back to back

The reader trusts nothing in the file: every field is checked before any view is made,
so a damaged file raises ValueError naming the file and the offending tensor or field,
and can never make a view reach past the end of the mapping.
"""
from __future__ import annotations

import io
import json
import math
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

METADATA_KEY = "__metadata__"
# The safetensors package refuses headers above 100 MB; so do we, which also bounds the
# memory a corrupted length field can make us allocate.
MAX_HEADER_BYTES = 100_000_000
_LENGTH = struct.Struct("<Q")
# The writer pads the header with spaces so the data section starts 8-byte aligned.
_HEADER_ALIGN = 8

# safetensors dtype code -> numpy dtype (always little-endian, as the format stores).
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"), "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
}
# Recognised (a header may hold them and read_header accepts them) but numpy has no
# such type, so load_file refuses them instead of returning mislabelled integers.
NON_NUMPY_ITEMSIZES: dict[str, int] = {"BF16": 2}
ITEMSIZES: dict[str, int] = {**{k: v.itemsize for k, v in NUMPY_DTYPES.items()}, **NON_NUMPY_ITEMSIZES}

# The safetensors package writes tensors sorted by dtype, largest alignment first in the
# order of its Rust `Dtype` enum (descending), then by name; save_file uses the same
# order so its bytes equal the package's.
_WRITE_ORDER = ("U64", "I64", "F64", "F32", "U32", "I32", "F16", "U16", "I16", "I8", "U8", "BOOL")
_WRITE_RANK = {code: rank for rank, code in enumerate(_WRITE_ORDER)}


@dataclass(frozen=True)
class TensorInfo:
    """One header entry, validated. begin/end are byte offsets into the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """A validated header: tensors in file (offset) order, metadata, where the data starts."""

    path: str
    tensors: dict[str, TensorInfo]
    metadata: Optional[dict[str, str]]
    data_start: int  # = 8 + header length: file offset of the data section
    file_size: int


def _fail(path: Any, field: str, what: str) -> ValueError:
    return ValueError(f"{path}: {field}: {what}")


def dtype_code(dtype: Any) -> str:
    """safetensors code ("F32", ...) of a numpy dtype; ValueError if the format has none."""
    dt = np.dtype(dtype)
    for code, known in NUMPY_DTYPES.items():
        if dt.kind == known.kind and dt.itemsize == known.itemsize:
            return code
    raise ValueError(f"numpy dtype {dt} has no safetensors equivalent (known: {', '.join(NUMPY_DTYPES)})")


def numpy_dtype(code: str) -> np.dtype:
    """numpy dtype of a safetensors code; ValueError for BF16 and unknown codes."""
    if code in NUMPY_DTYPES:
        return NUMPY_DTYPES[code]
    if code in NON_NUMPY_ITEMSIZES:
        raise ValueError(f"dtype {code} has no numpy equivalent (convert the tensor to F32 or F16)")
    raise ValueError(f"unknown dtype {code!r} (known: {', '.join(ITEMSIZES)})")


# ----------------------------------------------------------------------------- reading
def _is_int(value: Any) -> bool:
    # JSON true/false arrive as bool, which is an int subclass in Python.
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last of two equal keys; two tensors of one name
    # (or two shapes for one tensor) make the file ambiguous.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_header_json(path: Any, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _fail(path, "header", f"not valid UTF-8 at byte {8 + err.start} (expected a UTF-8 JSON object)") from None
    try:
        obj = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except RecursionError:
        raise _fail(path, "header", "JSON nested too deeply (expected a flat JSON object)") from None
    except ValueError as err:  # JSONDecodeError, duplicate keys, over-long integer literals
        raise _fail(path, "header", f"not valid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise _fail(path, "header", f"JSON {type(obj).__name__} (expected a JSON object)")
    return obj


def _parse_metadata(path: Any, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _fail(path, METADATA_KEY, f"{type(value).__name__} (expected an object of strings)")
    for key, item in value.items():
        if not isinstance(item, str):
            raise _fail(path, f"{METADATA_KEY}.{key}", f"{type(item).__name__} (expected a string)")
    return value


def _parse_entry(path: Any, name: str, entry: Any, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _fail(path, name, f"header entry is {type(entry).__name__} (expected an object with dtype, shape, data_offsets)")
    fields = {"dtype", "shape", "data_offsets"}
    missing = sorted(fields - set(entry))
    if missing:
        raise _fail(path, name, f"header entry has no {missing[0]!r} (expected dtype, shape, data_offsets)")
    unknown = sorted(set(entry) - fields)
    if unknown:
        raise _fail(path, name, f"unknown header field {unknown[0]!r} (expected only dtype, shape, data_offsets)")

    code = entry["dtype"]
    if not isinstance(code, str) or code not in ITEMSIZES:
        raise _fail(path, name, f"unknown dtype {code!r} (expected one of {', '.join(ITEMSIZES)})")

    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise _fail(path, name, f"shape {shape!r} (expected a list of integers)")
    if any(d < 0 for d in shape):
        raise _fail(path, name, f"shape {shape} has a negative dimension")

    offsets = entry["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise _fail(path, name, f"data_offsets {offsets!r} (expected [begin, end], two integers)")
    begin, end = offsets
    if begin < 0 or end < 0:
        raise _fail(path, name, f"data_offsets {offsets} has a negative offset")
    if end < begin:
        raise _fail(path, name, f"data_offsets {offsets} ends before it begins")
    nbytes = math.prod(shape) * ITEMSIZES[code]
    if end - begin != nbytes:
        raise _fail(path, name, f"data_offsets {offsets} span {end - begin} bytes "
                                f"(expected {nbytes} = shape {shape} x {ITEMSIZES[code]}-byte {code})")
    if end > data_size:
        raise _fail(path, name, f"data_offsets {offsets} end beyond the {data_size}-byte data section "
                                f"(file truncated?)")
    return TensorInfo(name, code, tuple(shape), begin, end)


def _check_coverage(path: Any, infos: list[TensorInfo], data_size: int) -> None:
    """The tensors must tile the data section exactly, in offset order: no gap, no overlap
    (an overlap would let two tensors alias, a gap hides unaccounted bytes)."""
    position, previous = 0, None
    for info in infos:
        if info.begin < position:
            raise _fail(path, info.name, f"data_offsets [{info.begin}, {info.end}] overlap tensor {previous!r} "
                                         f"(expected to begin at {position})")
        if info.begin > position:
            after = f"tensor {previous!r}" if previous is not None else "the start of the data section"
            raise _fail(path, info.name, f"data_offsets [{info.begin}, {info.end}] leave a {info.begin - position}-byte "
                                         f"gap after {after} (expected to begin at {position})")
        position, previous = info.end, info.name
    if position != data_size:
        raise _fail(path, "data section", f"{data_size - position} bytes after the last tensor belong to no tensor "
                                          f"(expected the tensors to end at byte {data_size})")


def _read_header_from(path: Any, f, file_size: int) -> Header:
    head = f.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise _fail(path, "header length", f"file is {file_size} bytes (expected at least 8; file truncated?)")
    (length,) = _LENGTH.unpack(head)
    if length > file_size - _LENGTH.size:
        raise _fail(path, "header length", f"{length} bytes, beyond the {file_size - _LENGTH.size} bytes "
                                           f"after the length field (file truncated or not safetensors?)")
    if length > MAX_HEADER_BYTES:
        raise _fail(path, "header length", f"{length} bytes (expected at most {MAX_HEADER_BYTES})")
    raw = f.read(length)
    if len(raw) != length:  # the file shrank while we read it
        raise _fail(path, "header", f"read {len(raw)} of {length} bytes (file truncated?)")
    obj = _parse_header_json(path, raw)

    data_start = _LENGTH.size + length
    data_size = file_size - data_start
    metadata = _parse_metadata(path, obj[METADATA_KEY]) if METADATA_KEY in obj else None
    infos = [_parse_entry(path, name, entry, data_size) for name, entry in obj.items() if name != METADATA_KEY]
    infos.sort(key=lambda i: (i.begin, i.end))
    _check_coverage(path, infos, data_size)
    return Header(str(path), {i.name: i for i in infos}, metadata, data_start, file_size)


def read_header(path: str | os.PathLike) -> Header:
    """Parse and validate the header of a .safetensors file (reads no tensor data)."""
    # A FIFO or device would block or lie about its size; only regular files are mapped.
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise _fail(path, "file", "not a regular file (expected a .safetensors file)")
    with open(path, "rb") as f:
        return _read_header_from(path, f, os.fstat(f.fileno()).st_size)


def view_bytes(path: str | os.PathLike, data: bytes) -> tuple[Header, np.ndarray]:
    """read_header and map_file for the content of file `path` already in memory: its
    validated header and a read-only uint8 view of `data` (no copy)."""
    header = _read_header_from(path, io.BytesIO(data), len(data))
    return header, np.frombuffer(data, dtype=np.uint8)


def map_file(header: Header) -> np.memmap:
    """A read-only memory map of the whole file of a validated header (header bytes included,
    so hashing it gives the file's checksum), refused if the file changed size since."""
    size = os.path.getsize(header.path)
    if size != header.file_size:
        raise _fail(header.path, "file size", f"{size} bytes, but {header.file_size} when its header was read "
                                              f"(file changed while loading)")
    return np.memmap(header.path, dtype=np.uint8, mode="r")


def map_tensors(header: Header, mapping: Optional[np.memmap] = None) -> dict[str, np.ndarray]:
    """Read-only numpy views of every tensor of a validated header, over one memory map
    (`mapping`, from map_file, or a new one)."""
    for info in header.tensors.values():
        try:
            numpy_dtype(info.dtype)
        except ValueError as err:
            raise _fail(header.path, info.name, str(err)) from None
    if mapping is None:
        if not header.tensors:
            return {}
        mapping = map_file(header)
    # np.memmap keeps the mapping alive for as long as any view below references it.
    out: dict[str, np.ndarray] = {}
    for info in header.tensors.values():
        raw = mapping[header.data_start + info.begin: header.data_start + info.end]
        # type=np.ndarray: plain arrays (not memmap subclasses) whose base is the mapping.
        out[info.name] = raw.view(dtype=NUMPY_DTYPES[info.dtype], type=np.ndarray).reshape(info.shape)
    return out


def load_file(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """name -> read-only numpy view of every tensor, zero-copy (memory-mapped).

    Raises ValueError naming the file and the tensor or field for any malformed file.
    """
    return map_tensors(read_header(path))


# ----------------------------------------------------------------------------- writing
def save_file(path: str | os.PathLike, tensors: Mapping[str, np.ndarray],
              metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write tensors (and optional str -> str metadata) in the safetensors format.

    The bytes equal those of `safetensors.numpy.save_file` (same tensor order, compact
    JSON, space padding to 8 bytes), except that metadata keys are written sorted where
    the package's order is that of a Rust HashMap.
    """
    arrays = []
    for name, value in tensors.items():
        if not isinstance(name, str) or name == METADATA_KEY:
            raise ValueError(f"{path}: tensor name {name!r} (expected a string other than {METADATA_KEY!r})")
        array = np.asarray(value)
        code = dtype_code(array.dtype)
        # Little-endian and C-contiguous, as the format stores; no copy if already so.
        # (Not np.ascontiguousarray: it turns a 0-d array into shape (1,).)
        array = array.astype(NUMPY_DTYPES[code], order="C", copy=False)
        arrays.append((_WRITE_RANK[code], name, code, array))
    arrays.sort(key=lambda item: (item[0], item[1]))

    header: dict[str, Any] = {}
    if metadata is not None:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"{path}: {METADATA_KEY}: {key!r}: {value!r} (expected string keys and values)")
        header[METADATA_KEY] = {key: metadata[key] for key in sorted(metadata)}
    offset = 0
    for _, name, code, array in arrays:
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % _HEADER_ALIGN)

    with open(Path(path), "wb") as f:
        f.write(_LENGTH.pack(len(raw)))
        f.write(raw)
        for _, _, _, array in arrays:
            f.write(array.reshape(-1).view(np.uint8))
