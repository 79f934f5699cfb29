"""The tokenizer files of a model directory (config.json "tokenizer"): one joint
spm.model, or Marian's source.spm and target.spm over one vocab.json. Each is checked
against the config (vocabulary size, special ids) and config.json "checksum".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pyfastdec.model_dir.checksums import check_content
from pyfastdec.model_dir.config_schema import ModelConfig
from pyfastdec.model_dir.errors import ModelDirError, read_bytes as _read_bytes, require_file as _require_file, show as _show
from pyfastdec.model_dir.layout import SOURCE_SPM_FILE, SPM_FILE, TARGET_SPM_FILE, TOKENIZER_FILES, VOCAB_FILE

try:  # a run-time dependency, but the reader stays importable without it
    import sentencepiece
except ImportError:  # pragma: no cover - exercised only in minimal environments
    sentencepiece = None

MASK_PIECE = "<mask>"  # the drafter placeholder's piece in spm.model (export/vocab.py)
# Marian's special pieces in vocab.json (HF MarianTokenizer's defaults).
MARIAN_EOS_PIECE, MARIAN_UNK_PIECE = "</s>", "<unk>"
# A vocab.json must hold at least this share of each sentencepiece model's pieces: a joint
# Marian vocabulary may miss pieces never seen in the encoded training data, but one from
# another model shares almost none.
MIN_VOCAB_COVERAGE = 0.9


def check_spm(spm_path: Path, config: ModelConfig, config_path: Path) -> None:
    """spm.model has vocab_size pieces, the special ids of config.json "tokens", and the
    content of config.json checksum."spm.model" when there is one."""
    data = _read_bytes(spm_path)
    if sentencepiece is not None:  # a run-time dependency; absent only in minimal environments
        _check_spm_pieces(data, spm_path, config, config_path)
    check_content(data, spm_path, SPM_FILE, config, config_path)


def _check_spm_pieces(data: bytes, spm_path: Path, config: ModelConfig, config_path: Path) -> None:
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as err:  # noqa: BLE001 - sentencepiece raises assorted types for a bad model
        raise ModelDirError(f"{spm_path}: (file): not a sentencepiece model ({err})") from None
    pieces = sp.GetPieceSize()
    if pieces != config.vocab_size:
        raise ModelDirError(f"{spm_path}: vocabulary size: {pieces} pieces "
                            f"(expected vocab_size {config.vocab_size} of {config_path})")
    special = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    for name, got in special.items():
        if got != config.tokens[name]:
            raise ModelDirError(f"{spm_path}: {name} id: {got} (expected tokens.{name} = "
                                f"{config.tokens[name]} of {config_path})")
    if "mask" not in config.tokens:
        return
    mask = config.tokens["mask"]
    if sp.IdToPiece(mask) != MASK_PIECE:
        raise ModelDirError(f"{spm_path}: mask id: piece {mask} is {sp.IdToPiece(mask)!r} "
                            f"(expected {MASK_PIECE!r}, as tokens.mask = {mask} of {config_path})")


def _load_spm(data: bytes, path: Path):
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as err:  # noqa: BLE001 - sentencepiece raises assorted types for a bad model
        raise ModelDirError(f"{path}: (file): not a sentencepiece model ({err})") from None
    return sp


def read_vocab_json(path: Path, vocab_size: Optional[int] = None, where: Any = None) -> dict[str, int]:
    """vocab.json (piece -> id) refused unless its ids are exactly 0 .. vocab_size - 1 once
    each (the rows of the model's embedding); `where` names the config giving vocab_size."""
    data = _read_bytes(path)
    try:
        vocab = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ModelDirError(f"{path}: (file): not valid UTF-8 JSON ({err})") from None
    if not isinstance(vocab, dict) or not vocab:
        raise ModelDirError(f"{path}: (top level): {_show(vocab)} (expected a non-empty object piece -> id)")
    size = len(vocab) if vocab_size is None else vocab_size
    seen: dict[int, str] = {}
    for piece, tid in vocab.items():
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < size:
            raise ModelDirError(f"{path}: {piece}: id {_show(tid)} (expected an integer from 0 to {size - 1}"
                                + (f", vocab_size of {where})" if where else ")"))
        if tid in seen:
            raise ModelDirError(f"{path}: {piece}: id {tid} is also {seen[tid]!r} (expected one piece per id)")
        seen[tid] = piece
    if len(seen) != size:
        missing = next(i for i in range(size) if i not in seen)
        raise ModelDirError(f"{path}: (ids): no piece has id {missing} (expected ids 0 to {size - 1}"
                            + (f", vocab_size of {where})" if where else ")"))
    return vocab


def check_marian_vocab(vocab_path: Path, spm_paths: tuple[Path, Path], tokens: dict[str, int],
                       vocab_size: int, where: Any) -> dict[str, int]:
    """vocab.json against the model (ids 0..vocab_size-1, eos and unk pieces at tokens.eos
    and tokens.unk) and against the two sentencepiece models: each must have at least
    MIN_VOCAB_COVERAGE of its pieces in vocab.json. Returns the vocabulary."""
    vocab = read_vocab_json(vocab_path, vocab_size, where)
    for name, piece in (("eos", MARIAN_EOS_PIECE), ("unk", MARIAN_UNK_PIECE)):
        if vocab.get(piece) != tokens[name]:
            raise ModelDirError(f"{vocab_path}: {piece}: id {_show(vocab.get(piece))} (expected tokens.{name} = "
                                f"{tokens[name]} of {where})")
    if sentencepiece is None:  # pragma: no cover - minimal environments
        return vocab
    for spm_path in spm_paths:
        sp = _load_spm(_read_bytes(spm_path), spm_path)
        pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())
                  if not (sp.IsControl(i) or sp.IsUnknown(i))]
        found = sum(piece in vocab for piece in pieces)
        if pieces and found < MIN_VOCAB_COVERAGE * len(pieces):
            raise ModelDirError(f"{vocab_path}: (pieces): holds {found} of the {len(pieces)} pieces of {spm_path} "
                                f"(expected at least {MIN_VOCAB_COVERAGE:.0%}: the vocabulary these sentencepiece "
                                f"models were built with)")
    return vocab


def check_tokenizer(path: Path, config: ModelConfig, config_path: Path) -> dict[str, Path]:
    """The tokenizer files of config.json "tokenizer" in directory `path`, validated and
    checked against config.json checksum; returns file name -> path."""
    files = {name: path / name for name in TOKENIZER_FILES[config.tokenizer]}
    for name, file in files.items():
        _require_file(file, f"the {name} of {config_path} (tokenizer {json.dumps(config.tokenizer)})")
    if config.tokenizer == "spm":
        check_spm(files[SPM_FILE], config, config_path)
        return files
    check_marian_vocab(files[VOCAB_FILE], (files[SOURCE_SPM_FILE], files[TARGET_SPM_FILE]), config.tokens,
                       config.vocab_size, config_path)
    for name, file in files.items():
        check_content(_read_bytes(file), file, name, config, config_path)
    return files
