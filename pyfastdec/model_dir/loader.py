"""ModelDir: a model directory loaded and validated (export/FORMAT.md, version 1).

`ModelDir.load` validates config.json, model.safetensors and the tokenizer files before
anything uses them, so an engine never sees a directory it does not understand: every
refusal is a ModelDirError whose message reads "<file>: <field or tensor>: what is
wrong (expected ...)". Beyond structure it checks what damage breaks: values (finite,
bounded: check_values), keys given twice in config.json, and, when config.json has a
"checksum", the content of every file.
"""
from __future__ import annotations

import dataclasses
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from pyfastdec.model_dir import safetensors_io
from pyfastdec.model_dir.checksums import check_content
from pyfastdec.model_dir.config_parser import read_config
from pyfastdec.model_dir.config_schema import ModelConfig
from pyfastdec.model_dir.errors import ModelDirError, files_in_memory, read_bytes, require_file as _require_file
from pyfastdec.model_dir.foreign_models import convert_first
from pyfastdec.model_dir.heads_verifier import check_heads_verifier
from pyfastdec.model_dir.layout import CONFIG_FILE, SPM_FILE, WEIGHTS_FILE
from pyfastdec.model_dir.tensor_schema import check_tensors, check_values
from pyfastdec.model_dir.tokenizer_files import check_tokenizer


@dataclass(frozen=True)
class ModelDir:
    """A validated model directory; `tensors` are read-only views of a memory map (of the
    bytes in memory it was loaded from, with load's `files`)."""

    path: Path
    config: ModelConfig
    tensors: dict[str, np.ndarray]
    spm_path: Optional[Path]  # the joint spm.model; None for tokenizer "marian" (see tokenizer_files)
    tokenizer_files: dict[str, Path] = dataclasses.field(default_factory=dict)  # file name -> path
    # The bytes it was validated from (load's `files`; its tensors view them), so that what
    # compares its files later reads none of them again; None: they are on disk only.
    files: Optional[Mapping[str, bytes]] = dataclasses.field(default=None, repr=False, compare=False)
    # Digests of this load's tensors by kind (shared_encoder.encoder_digest): the tensors are
    # read-only views of one mapping, so one computed for this object stays true, and the
    # CLI, which checks a pair and then builds its Translator from the same objects, hashes
    # an encoder once. Not an argument: dataclasses.replace starts an empty one.
    digests: dict[str, str] = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | os.PathLike, files: Optional[Mapping[str, bytes]] = None) -> "ModelDir":
        """files: the directory's files already read (file name -> content, as
        model_files.ModelFiles holds them), validated from those bytes instead of read
        again; the tensors then view them."""
        path = Path(path)
        with nullcontext() if files is None else files_in_memory(path, files):
            return cls._load(path, files)

    @classmethod
    def _load(cls, path: Path, files: Optional[Mapping[str, bytes]]) -> "ModelDir":
        if not path.is_dir():
            what = "not a directory" if path.exists() else "no such directory"
            raise ModelDirError(f"{path}: (directory): {what} "
                                f"(expected a model directory with {CONFIG_FILE}, {WEIGHTS_FILE}, {SPM_FILE})")
        config_path = path / CONFIG_FILE
        try:
            config = read_config(config_path)
        except ModelDirError as err:
            # A Hugging Face, CTranslate2 or Marian folder fails here: say which command converts it.
            foreign = convert_first(path)
            if foreign is None:
                raise
            raise ModelDirError(foreign) from err

        weights_path = path / WEIGHTS_FILE
        _require_file(weights_path, f"the weights of {config_path}")
        try:
            if files is None or WEIGHTS_FILE not in files:
                header, mapping = safetensors_io.read_header(weights_path), None
            else:
                header, mapping = safetensors_io.view_bytes(weights_path, files[WEIGHTS_FILE])
            check_tensors(header, config)
            if mapping is None:
                mapping = safetensors_io.map_file(header)
            # Hashes the very mapping the tensors view, so what is checked is what runs.
            check_content(mapping, weights_path, WEIGHTS_FILE, config, config_path)
            tensors = safetensors_io.map_tensors(header, mapping)
            check_values(tensors, weights_path)
        except ModelDirError:
            raise
        except ValueError as err:  # safetensors_io's messages already name file and field
            raise ModelDirError(str(err)) from None
        except OSError as err:
            raise ModelDirError(f"{weights_path}: (file): unreadable ({err.strerror})") from None

        tokenizer = check_tokenizer(path, config, config_path)
        loaded = cls(path, config, tensors, tokenizer.get(SPM_FILE), tokenizer, files)
        check_heads_verifier(loaded)
        return loaded

    def read_bytes(self, name: str) -> bytes:
        """The content of file `name` of the directory: the bytes it was loaded from, else the disk's."""
        if self.files is not None and name in self.files:
            return self.files[name]
        return read_bytes(self.path / name)
