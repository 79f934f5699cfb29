"""config.json "checksum" (export/FORMAT.md, *Checksum*): the sha256 of each file of a
model directory and of config.json's own canonical content. The readers check content
against it (check_content); every writer records it with directory_checksums, so that
what a writer lists and what a reader requires are decided in one place.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from pyfastdec.model_dir.config_schema import ModelConfig
from pyfastdec.model_dir.errors import ModelDirError
from pyfastdec.model_dir.layout import SHORTLIST_FILE, TOKENIZER_FILES, WEIGHTS_FILE

# config.json "checksum" (optional): sha256 of each file's bytes, and of config.json's own
# canonical content (CHECKSUM_CONFIG) without the checksum field; see config_digest.
CHECKSUM_CONFIG = "config"


def checksum_keys(tokenizer: str) -> tuple[str, ...]:
    """The keys config.json "checksum" must have for a directory with this tokenizer."""
    return (CHECKSUM_CONFIG, WEIGHTS_FILE) + TOKENIZER_FILES[tokenizer]


# A digest as config.json writes it.
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def config_digest(obj: dict) -> str:
    """"sha256:<hex>" of a decoded config.json without its "checksum" field, in a canonical
    form (sorted keys, no whitespace), so re-indenting or reordering keeps it and any
    changed value breaks it."""
    content = {key: value for key, value in obj.items() if key != "checksum"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(data: Any) -> str:
    """"sha256:<hex>" of a bytes-like object (bytes, a memory map)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checksum_mismatch(where: Any, field: str, key: str, expected: str, actual: str,
                      config_path: Any) -> ModelDirError:
    """The refusal for content that differs from config.json checksum.<key>."""
    return ModelDirError(f"{where}: {field}: content is {actual} (expected {expected} of {config_path} "
                         f"checksum.{key}: damaged or replaced since it was written; if changed on purpose, "
                         f"record the new content with python -m pyfastdec.training.rehash DIR)")


def check_content(data, path: Path, key: str, config: ModelConfig, config_path: Any) -> None:
    """The bytes of `path` against config.json checksum.<key>, when the config has one."""
    if config.checksum is not None:
        actual, expected = file_digest(data), config.checksum[key]
        if actual != expected:
            raise checksum_mismatch(path, "(content)", key, expected, actual, config_path)


def check_shortlist_content(data: Optional[bytes], path: Path, config: ModelConfig, config_path: Any) -> None:
    """A model directory's own shortlist.bin (its bytes, None if absent) against config.json
    checksum: with a checksum, a present shortlist must be listed and match, and a listed
    one must be present. Without a checksum (hand-built directories) anything passes."""
    if config.checksum is None:
        return
    if SHORTLIST_FILE not in config.checksum:
        if data is not None:
            raise ModelDirError(f"{path}: (file): not listed in {config_path} checksum (expected checksum."
                                f"{SHORTLIST_FILE}: a shortlist of another model with the same vocabulary changes "
                                f"every output; if this one belongs to the model, record it with "
                                f"python -m pyfastdec.training.rehash DIR)")
        return
    if data is None:
        raise ModelDirError(f"{path}: (file): missing (expected the shortlist {config_path} checksum."
                            f"{SHORTLIST_FILE} lists; or pass shortlist=False / --no-shortlist)")
    check_content(data, path, SHORTLIST_FILE, config, config_path)


def directory_checksums(path: str | Path, config: dict) -> dict[str, str]:
    """The "checksum" object for the files of directory `path` and the decoded config.json
    `config` (its own "checksum" field, if any, is left out of the config digest): the
    weights, the tokenizer files of config["tokenizer"], and shortlist.bin when present
    (optional, but listed whenever present: check_shortlist_content)."""
    path = Path(path)
    out = {CHECKSUM_CONFIG: config_digest(config)}
    tokenizer = config.get("tokenizer", "spm")
    for name in (WEIGHTS_FILE,) + TOKENIZER_FILES.get(tokenizer, TOKENIZER_FILES["spm"]):
        if not (path / name).is_file():
            raise ModelDirError(f"{path / name}: (file): missing (expected a file of the model directory)")
        out[name] = file_digest((path / name).read_bytes())
    if (path / SHORTLIST_FILE).exists():
        out[SHORTLIST_FILE] = file_digest((path / SHORTLIST_FILE).read_bytes())
    return out


def tensors_digest(described: dict, tensors: dict[str, np.ndarray], keep: Callable[[str], bool]) -> str:
    """sha256 over `described` (JSON, sorted keys) and then, in name order, each kept
    tensor's name, dtype, shape and bytes: the identity of part of a network (heads.verifier,
    encoder.shared), unchanged by whatever else the directory holds."""
    h = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
    for name in sorted(tensors):
        if keep(name):
            array = np.ascontiguousarray(tensors[name])
            h.update(f"{name}:{array.dtype.str}:{list(array.shape)}".encode())
            h.update(memoryview(array).cast("B"))
    return "sha256:" + h.hexdigest()
