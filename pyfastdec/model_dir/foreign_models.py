"""Recognise a model folder of another framework given where a pyfastdec model directory
is expected (`-m`, Translator(model_dir)), and say which `fastdec convert` command turns
it into one: reporting only the config.json fields ours lacks leaves the user guessing.

Recognised: a Hugging Face checkpoint (config.json with "model_type", as save_pretrained
writes it), a CTranslate2 model (model.bin with its vocabulary files), a Marian .npz
model. Anything else goes on to the ordinary checks (loader.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

CT2_VOCABULARIES = ("shared_vocabulary.json", "shared_vocabulary.txt", "source_vocabulary.json",
                    "source_vocabulary.txt")


def _config(path: Path) -> Optional[dict]:
    try:
        obj = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def convert_first(path: Path) -> Optional[str]:
    """The one-line refusal for a foreign model folder `path`, or None."""
    config = _config(path)
    if config is not None and config.get("format") == "fastdec":
        return None
    if (path / "model.bin").is_file() and (any((path / v).is_file() for v in CT2_VOCABULARIES)
                                           or config is not None):
        return (f"{path}: a CTranslate2 model (model.bin), not a pyfastdec model directory, and CTranslate2 "
                f"models do not convert back; convert the model it was made from first: fastdec convert marian "
                f"HF_DIR OUT_DIR (a Hugging Face MarianMTModel) or fastdec convert marian-npz-in MODEL.npz "
                f"VOCAB.spm OUT_DIR (a Marian model)")
    if config is not None and isinstance(config.get("model_type"), str):
        model_type = config["model_type"]
        if model_type == "marian":
            return (f"{path}: a Hugging Face Marian model (config.json model_type \"marian\"), not a pyfastdec "
                    f"model directory; convert it first: fastdec convert marian {path} OUT_DIR")
        return (f"{path}: a Hugging Face {model_type!r} model (config.json model_type), not a pyfastdec model "
                f"directory; only Marian models convert (fastdec convert marian HF_DIR OUT_DIR)")
    npz = sorted(path.glob("*.npz")) if config is None else []
    if npz:
        vocab = sorted(path.glob("*.spm"))
        vocab_arg = str(vocab[0]) if len(vocab) == 1 else "VOCAB.spm"
        return (f"{path}: a Marian model ({npz[0].name}), not a pyfastdec model directory; convert it first: "
                f"fastdec convert marian-npz-in {npz[0]} {vocab_arg} OUT_DIR")
    return None
