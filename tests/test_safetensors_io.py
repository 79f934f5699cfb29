"""pyfastdec.model_dir.safetensors_io, the dependency-free safetensors reader and writer:
round trips of every dtype, byte compatibility with the safetensors package, and a one-line
ValueError for every malformed header or short file."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from pyfastdec.model_dir import safetensors_io
from test_model_dir import backed_by_mmap


ALL_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "u8": np.uint8,
              "i16": np.int16, "u16": np.uint16, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
              "u64": np.uint64, "bool": np.bool_}


def sample_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    out = {f"t.{name}": (rng.standard_normal((3, 5)) * 50).astype(dt) for name, dt in ALL_DTYPES.items()}
    out["scalar"] = np.array(2.5, np.float32)
    out["empty"] = np.zeros((0, 4), np.float32)
    out["é \"quoted\"\tname"] = np.arange(4, dtype=np.int32)
    return out


def test_save_and_load_round_trip(tmp_path):
    tensors = sample_tensors()
    tensors["transposed big-endian"] = np.arange(12, dtype=">f4").reshape(3, 4).T
    path = tmp_path / "x.safetensors"
    safetensors_io.save_file(path, tensors, metadata={"b": "2", "a": "1"})
    header = safetensors_io.read_header(path)
    assert header.metadata == {"a": "1", "b": "2"}
    assert header.data_start % 8 == 0  # header padded, as the safetensors package does
    loaded = safetensors_io.load_file(path)
    assert set(loaded) == set(tensors)
    for name, array in tensors.items():
        assert loaded[name].shape == array.shape and loaded[name].dtype == array.dtype.newbyteorder("<"), name
        np.testing.assert_array_equal(loaded[name], array, err_msg=name)
        assert backed_by_mmap(loaded[name]) and not loaded[name].flags.writeable
    safetensors_io.save_file(path, {})
    assert safetensors_io.load_file(path) == {}


def test_writer_refuses_what_safetensors_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="complex128 has no safetensors equivalent"):
        safetensors_io.save_file(tmp_path / "x", {"c": np.zeros(2, np.complex128)})
    with pytest.raises(ValueError, match="expected string keys and values"):
        safetensors_io.save_file(tmp_path / "x", {"a": np.zeros(1, np.float32)}, metadata={"v": 1})
    with pytest.raises(ValueError, match="__metadata__"):
        safetensors_io.save_file(tmp_path / "x", {"__metadata__": np.zeros(1, np.float32)})


def test_byte_compatible_with_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="the safetensors package is not installed")
    tensors = sample_tensors()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    for metadata in (None, {"format": "fastdec"}):
        safetensors_io.save_file(ours, tensors, metadata=metadata)
        st.save_file(tensors, str(theirs), metadata=metadata)
        assert ours.read_bytes() == theirs.read_bytes()
    # Several metadata keys: the package orders them like a Rust HashMap, so compare contents.
    metadata = {"format": "fastdec", "version": "1", "note": "ü"}
    safetensors_io.save_file(ours, tensors, metadata=metadata)
    st.save_file(tensors, str(theirs), metadata=metadata)
    for written_by, read in ((ours, st.load_file), (theirs, safetensors_io.load_file)):
        loaded = read(str(written_by))
        assert set(loaded) == set(tensors)
        for name, array in tensors.items():
            assert loaded[name].dtype == array.dtype, name
            np.testing.assert_array_equal(loaded[name], array, err_msg=name)
    assert safetensors_io.read_header(theirs).metadata == metadata


def raw_file(path: Path, header, data: bytes = b"", length: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def entry(dtype="F32", shape=(1,), offsets=(0, 4)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


HEADER_CASES = [
    ("length-beyond-file", b"{}", b"", 1000, r"header length: 1000 bytes, beyond the 2 bytes after the length field"),
    ("not-utf8", b'{"\xff": 1}', b"", None, r"header: not valid UTF-8"),
    ("not-json", b'{"a": ', b"", None, r"header: not valid JSON"),
    ("not-object", b"[1, 2]", b"", None, r"header: JSON list \(expected a JSON object\)"),
    ("deeply-nested", b"[" * 100_000, b"", None, r"header: (JSON nested too deeply|not valid JSON)"),
    ("duplicate-tensor", b'{"a": %s, "a": %s}' % ((json.dumps(entry()).encode(),) * 2), b"\0" * 4, None,
     r"header: not valid JSON: duplicate key 'a'"),
    ("metadata-not-string", {"__metadata__": {"k": 1}}, b"", None, r"__metadata__\.k: int \(expected a string\)"),
    ("entry-not-object", {"a": 3}, b"", None, r"a: header entry is int"),
    ("no-dtype", {"a": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, None, r"a: header entry has no 'dtype'"),
    ("unknown-field", {"a": dict(entry(), extra=1)}, b"\0" * 4, None, r"a: unknown header field 'extra'"),
    ("unknown-dtype", {"a": entry(dtype="Q7")}, b"\0" * 4, None, r"a: unknown dtype 'Q7'"),
    ("shape-not-ints", {"a": entry(shape=[1.5])}, b"\0" * 4, None, r"a: shape \[1\.5\] \(expected a list of integers\)"),
    ("shape-bool", {"a": entry(shape=[True])}, b"\0" * 4, None, r"a: shape \[True\] \(expected a list of integers\)"),
    ("shape-negative", {"a": entry(shape=[-1], offsets=(0, 0))}, b"", None, r"a: shape \[-1\] has a negative dimension"),
    ("offsets-one-number", {"a": entry(offsets=[4])}, b"\0" * 4, None, r"a: data_offsets \[4\] \(expected \[begin, end\]"),
    ("offsets-negative", {"a": entry(offsets=(-4, 0))}, b"\0" * 4, None, r"a: data_offsets \[-4, 0\] has a negative offset"),
    ("offsets-reversed", {"a": entry(offsets=(4, 0))}, b"\0" * 4, None, r"a: data_offsets \[4, 0\] ends before it begins"),
    ("span-vs-shape", {"a": entry(shape=[2], offsets=(0, 4))}, b"\0" * 4, None,
     r"a: data_offsets \[0, 4\] span 4 bytes \(expected 8 = shape \[2\] x 4-byte F32\)"),
    ("huge-shape", {"a": entry(shape=[2**62, 2**62], offsets=(0, 4))}, b"\0" * 4, None, r"a: data_offsets \[0, 4\] span 4 bytes"),
    ("truncated-data", {"a": entry(shape=[2], offsets=(0, 8))}, b"\0" * 4, None,
     r"a: data_offsets \[0, 8\] end beyond the 4-byte data section \(file truncated\?\)"),
    ("overlap", {"a": entry(shape=[2], offsets=(0, 8)), "b": entry(shape=[2], offsets=(4, 12))}, b"\0" * 12, None,
     r"b: data_offsets \[4, 12\] overlap tensor 'a' \(expected to begin at 8\)"),
    ("gap", {"a": entry(), "b": entry(offsets=(8, 12))}, b"\0" * 12, None,
     r"b: data_offsets \[8, 12\] leave a 4-byte gap after tensor 'a'"),
    ("gap-at-start", {"a": entry(offsets=(4, 8))}, b"\0" * 8, None, r"a: .* gap after the start of the data section"),
    ("trailing-bytes", {"a": entry()}, b"\0" * 8, None, r"data section: 4 bytes after the last tensor belong to no tensor"),
]


@pytest.mark.parametrize("header,data,length,message", [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES])
def test_reader_refuses_bad_header(header, data, length, message, tmp_path):
    path = raw_file(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(ValueError, match="^" + re.escape(str(path)) + ": " + message):
        safetensors_io.load_file(path)


def test_reader_refuses_short_file_and_bf16(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x02\x00")
    message = f"{path}: header length: file is 2 bytes (expected at least 8; file truncated?)"
    with pytest.raises(ValueError, match=re.escape(message)):
        safetensors_io.load_file(path)
    # bfloat16 is recognised (the header reads), but numpy has no such dtype to view it as.
    path = raw_file(tmp_path / "bf16.safetensors", {"w": entry(dtype="BF16", shape=[2])}, b"\0" * 4)
    assert safetensors_io.read_header(path).tensors["w"].shape == (2,)
    with pytest.raises(ValueError, match=re.escape(f"{path}: w: dtype BF16 has no numpy equivalent")):
        safetensors_io.load_file(path)
