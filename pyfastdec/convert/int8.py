"""An int8 model directory from a float32 one, in numpy (export/FORMAT.md, int8).

Weights: every quantized linear per output row, q = clamp(round(w * 127 / max|w_row|),
+-127), weight_scale = 1 / (127 / max|w_row|) (quantize_linear: export/writer.py's
quantize_weight runs it too, so both writers store the same bytes); the tied embedding
int8 per row by the engine's rule (pyfastdec/model_dir/int8_rows.py).

Activations, one of:
- static ("int8_static_per_tensor"): one calibrated multiplier per linear input
  (pyfastdec/convert/calibration.py), the form export.write produces (the config field:
  quantization_field, shared with export/writer.py);
- dynamic ("int8_dynamic_per_row"): no multipliers; the engine scales each row of a
  linear's input by 127 / max|row| at run time (csrc/kernels/isa_common.h), so no
  calibration text is needed. Speed and quality of both: bench/README.md.

Only numpy: this is what `fastdec convert marian --quantize int8` runs from the wheel.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

import numpy as np

from pyfastdec.model_dir import safetensors_io
from pyfastdec.convert.calibration import ACT_STAT
from pyfastdec.model_dir.int8_rows import quantize_rows
from pyfastdec.model_dir.staging import check_output, staged_dir
from pyfastdec.model_dir import (CONFIG_FILE, EMBED_SCALE, QUANT_ACTIVATIONS, QUANT_DYNAMIC_ACTIVATIONS,
                                 QUANT_EMBEDDING, QUANT_WEIGHT_SCALE, QUANT_WEIGHTS, TOKENIZER_FILES,
                                 SHORTLIST_FILE, WEIGHTS_FILE, ModelDir, quantized_linears)
from pyfastdec.model_dir.checksums import directory_checksums

MAX_CALIBRATION_SENTENCES = 2000


def quantize_linear(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[out, in] float32 -> (int8 [out, in], float32 [out]) per output row."""
    w = np.asarray(w, dtype=np.float32)
    # Reciprocal, then times 127: the order in which torch computes 127 / max|w_row|, and so
    # the bytes of every int8 directory export/ wrote with torch before it used this rule.
    mult = (np.float32(1) / np.maximum(np.abs(w).max(axis=1), np.float32(1e-12))) * np.float32(127)
    q = np.clip(np.rint(w * mult[:, None]), -127, 127).astype(np.int8)
    return q, (np.float32(1.0) / mult).astype(np.float32)


def quantization_field(linears: list[str], scales: Optional[dict[str, float]] = None,
                       calibration: Optional[dict] = None, embedding: bool = True) -> dict:
    """config.json "quantization" of an int8 directory (export/FORMAT.md): static
    activations with `scales` (linear -> multiplier, stored for every one of `linears`,
    in that order), dynamic ones with scales=None; embedding: the tied embedding is stored
    int8 per row. export/writer.py writes the same field."""
    quantization: dict = {"weights": QUANT_WEIGHTS, "weight_scale": QUANT_WEIGHT_SCALE}
    if scales is None:
        quantization["activations"] = QUANT_DYNAMIC_ACTIVATIONS
    else:
        quantization["activations"] = QUANT_ACTIVATIONS
        quantization["activation_scales"] = {lin: float(scales[lin]) for lin in linears}
        quantization["calibration"] = dict(calibration or {}, statistic=ACT_STAT)
    if embedding:
        quantization["embedding"] = QUANT_EMBEDDING
    return quantization


def write_int8_dir(float_model: ModelDir, out: Path, scales: Optional[dict[str, float]] = None,
                   calibration: Optional[dict] = None) -> ModelDir:
    """Write into the existing directory `out` the int8 form of `float_model`: static
    activations with `scales` (linear -> multiplier, every quantized linear), dynamic
    ones with scales=None. Returns the written directory, loaded (so validated)."""
    cfg = float_model.config
    if cfg.quantization is not None:
        raise ValueError(f"{float_model.path}: already int8 (config.json quantization is set)")
    linears = quantized_linears(cfg)
    tensors = {n: np.asarray(t) for n, t in float_model.tensors.items()}
    for lin in linears:
        tensors[f"{lin}.weight"], tensors[f"{lin}.weight_scale"] = quantize_linear(tensors[f"{lin}.weight"])
    tensors["embed.weight"], tensors[EMBED_SCALE] = quantize_rows(tensors["embed.weight"])
    config = json.loads((float_model.path / CONFIG_FILE).read_text(encoding="utf-8"))
    config.pop("checksum", None)
    config["quantization"] = quantization_field(linears, scales, calibration)
    safetensors_io.save_file(out / WEIGHTS_FILE, tensors, metadata={"format": "fastdec", "version": "1"})
    for name in TOKENIZER_FILES[cfg.tokenizer]:
        shutil.copyfile(float_model.path / name, out / name)
    if (float_model.path / SHORTLIST_FILE).is_file():  # the model's own: copied before the checksum lists it
        shutil.copyfile(float_model.path / SHORTLIST_FILE, out / SHORTLIST_FILE)
    config["checksum"] = directory_checksums(out, config)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return ModelDir.load(out)


def read_text_lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except OSError as err:
        raise ValueError(f"{path}: (file): unreadable ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: (file): not valid UTF-8 at byte {err.start}") from None


def quantize_dir(model_dir: ModelDir, out: Path, calibration_file: Optional[Path],
                 max_sentences: int = MAX_CALIBRATION_SENTENCES) -> None:
    """An int8 directory in `out` from the float one: with `calibration_file`, static
    activation multipliers calibrated on its sentences (pyfastdec/convert/calibration.py;
    the decoder is teacher-forced on the float model's own greedy outputs, what it reads at
    inference); without, dynamic per-row activations (write_int8_dir)."""
    if calibration_file is None:
        write_int8_dir(model_dir, out)
        return
    from pyfastdec.convert.calibration import BATCH_SIZE, calibrate
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding.greedy import greedy
    from pyfastdec.text import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    eos, limit = model_dir.config.tokens["eos"], model_dir.config.max_source_len - 1
    sources = [tokenizer.encode(line)[:limit] for line in read_text_lines(calibration_file) if line][:max_sentences]
    sources = [s for s in sources if s]
    if not sources:
        raise ValueError(f"{calibration_file}: (file): no non-empty line (expected source sentences to "
                         f"calibrate the int8 activation scales on)")
    targets, _ = greedy(NativeBackend(model_dir, threads=1, shortlist=False), [s + [eos] for s in sources])
    scales = calibrate(model_dir, list(zip(sources, targets)))
    write_int8_dir(model_dir, out, scales, {"data": str(calibration_file), "sentences": len(sources),
                                            "batch_size": BATCH_SIZE})


def to_int8(model_dir: str | os.PathLike, out_dir: str | os.PathLike, calibrate: Optional[str | os.PathLike] = None,
            force: bool = False) -> Path:
    """`fastdec convert int8`: the int8 form of a float32 model directory in OUT_DIR
    (staged, never over MODEL_DIR), dynamic activations unless `calibrate` names source
    sentences for static ones. A shortlist.bin is copied along (write_int8_dir). Returns OUT_DIR."""
    out, source = Path(out_dir), Path(model_dir)
    check_output(out, source, *([Path(calibrate)] if calibrate is not None else []), force=force)
    model = ModelDir.load(source)
    with staged_dir(out) as tmp:
        quantize_dir(model, tmp, None if calibrate is None else Path(calibrate))  # loads what it wrote
    return out
