"""Write and read pyfastdec model directories (config.json, model.safetensors, spm.model).

The tensor names and layouts are those of export/FORMAT.md, which are the state_dict
names of modeling.py, so writing is a plain dump. int8 export replaces each linear
weight of the encoder and decoder layers by `<linear>.weight` int8 [out, in] plus
`<linear>.weight_scale` float32 [out] (w ~= int8 * scale) and records the calibrated
activation multipliers in config.json "quantization". The tied embedding of an int8
directory is stored int8 per vocabulary row too (`embed.weight` int8 [V, d] plus
`embed.weight_scale` float32 [V], quantization.embedding "int8_per_row"), quantised by
the engine's own rule (pyfastdec/model_dir/int8_rows.py), so the stored rows are those the engine would
compute from the float ones; int8_embedding=False keeps a float32 `embed.weight`.

The reader refuses, naming the file and field or tensor, anything it does not
understand: unknown format/version, missing or unexpected tensors, wrong shape or dtype;
it first loads the directory with pyfastdec.model_dir.ModelDir.load, so it refuses
everything pyfastdec refuses (checksums, non-finite weights, ...) with the same message.
Every written directory carries config.json "checksum" (rehash.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from pyfastdec.convert.int8 import quantization_field, quantize_linear
from pyfastdec.model_dir.int8_rows import int8_embedding_rows, quantize_rows
from pyfastdec.model_dir import EMBED_SCALE, QUANT_DYNAMIC_ACTIVATIONS, QUANT_EMBEDDING, TOKENIZER_FILES, ModelDir

from .modeling import ModelConfig, Seq2Seq
from .rehash import rehash
from .vocab import load_vocab

CONFIG, WEIGHTS, SPM = "config.json", "model.safetensors", "spm.model"


def quantized_linears(model: Seq2Seq) -> list[str]:
    """Names (without .weight) of the linears stored as int8: every nn.Linear inside the
    encoder/decoder layers and the proposal heads. The tied embedding/output matrix is
    not one of them (quantize_embedding)."""
    return [name for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Linear) and name.startswith(("encoder.", "decoder.", "heads."))]


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per output row: multiplier 127/max|w_row|; q = clamp(round(w * mult), ±127); scale = 1/mult.
    The package's rule (pyfastdec/convert/int8.py quantize_linear, what `fastdec convert
    int8` writes), on the float32 values of a torch [out, in] weight."""
    q, scale = quantize_linear(w.detach().to(torch.float32).cpu().numpy())
    return torch.from_numpy(q), torch.from_numpy(scale)


def quantize_embedding(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's per-row int8 rule (pyfastdec/model_dir/int8_rows.py) for a torch [V, d]
    embedding: (int8 [V, d], float32 [V]), bit-identical to what the engine computes at
    load. (quantize_weight, the linears' rule, computes 127 / max first: other last bits.)"""
    q, scale = quantize_rows(w.detach().to(torch.float32).cpu().numpy())
    return torch.from_numpy(q), torch.from_numpy(scale)


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name -> (shape, dtype) every model.safetensors of this config must hold exactly."""
    model = Seq2Seq(cfg)
    out = {k: (tuple(v.shape), torch.float32) for k, v in model.state_dict().items()}
    if cfg.quantization:
        for lin in quantized_linears(model):
            shape = out[f"{lin}.weight"][0]
            out[f"{lin}.weight"] = (shape, torch.int8)
            out[f"{lin}.weight_scale"] = ((shape[0],), torch.float32)
        if cfg.quantization.get("embedding") == QUANT_EMBEDDING:
            out["embed.weight"] = (out["embed.weight"][0], torch.int8)
            out[EMBED_SCALE] = ((cfg.vocab_size,), torch.float32)
    return out


def write_model_dir(model: Seq2Seq, spm_model: bytes | str | Path, out: str | Path,
                    act_scales: dict[str, float] | None = None, int8: bool = False,
                    calibration: dict | None = None, int8_embedding: bool = True) -> Path:
    """Write a model directory. int8=True needs act_scales for every quantized linear.
    int8_embedding (int8 only): store the tied embedding int8 per row (about half the
    file); False stores it float32, which the engine then quantises at load to the same
    rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = ModelConfig.from_json(model.cfg.to_json())
    tensors = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if int8:
        linears = quantized_linears(model)
        missing = [l for l in linears if l not in (act_scales or {})]
        if missing:
            raise ValueError(f"int8 export: no activation scale for {missing[:3]}... ({len(missing)} missing)")
        for lin in linears:
            q, scale = quantize_weight(tensors[f"{lin}.weight"])
            tensors[f"{lin}.weight"], tensors[f"{lin}.weight_scale"] = q, scale
        if int8_embedding:
            tensors["embed.weight"], tensors[EMBED_SCALE] = quantize_embedding(tensors["embed.weight"])
        cfg.quantization = quantization_field(linears, act_scales, calibration, embedding=int8_embedding)
    else:
        cfg.quantization = None
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "fastdec", "version": "1"})
    (out / CONFIG).write_text(cfg.dumps() + "\n")
    if isinstance(spm_model, dict):  # tokenizer "marian": file name -> path or bytes
        if set(spm_model) != set(TOKENIZER_FILES[cfg.tokenizer]):
            raise ValueError(f"write_model_dir: tokenizer {cfg.tokenizer!r} needs files "
                             f"{', '.join(TOKENIZER_FILES[cfg.tokenizer])}, got {', '.join(sorted(spm_model))}")
        for name, src in spm_model.items():
            if isinstance(src, (bytes, bytearray)):
                (out / name).write_bytes(src)
            else:
                shutil.copyfile(src, out / name)
    elif cfg.tokenizer != "spm":
        raise ValueError(f"write_model_dir: tokenizer {cfg.tokenizer!r} needs a dict of its files, not one spm model")
    elif isinstance(spm_model, (bytes, bytearray)):
        (out / SPM).write_bytes(spm_model)
        load_vocab(out / SPM)  # refuses a vocabulary with other special ids
    else:
        shutil.copyfile(spm_model, out / SPM)
        load_vocab(out / SPM)
    # Records the files' checksums, then loads the directory as pyfastdec will: a writer
    # that produced anything the reader refuses (a NaN weight, say) fails here, not later.
    rehash(out)
    return out


def read_config(path: str | Path) -> ModelConfig:
    file = Path(path) / CONFIG
    if not file.is_file():
        raise ValueError(f"{file}: missing")
    try:
        obj = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from None
    cfg = ModelConfig.from_json(obj, where=str(file))
    q = cfg.quantization
    if q is not None:
        if q.get("weights") != "int8" or q.get("weight_scale") != "per_output_channel":
            raise ValueError(f"{file}: field 'quantization' has weights={q.get('weights')!r}, "
                             f"weight_scale={q.get('weight_scale')!r}; known: int8 / per_output_channel")
        if q.get("activations") != QUANT_DYNAMIC_ACTIVATIONS and not isinstance(q.get("activation_scales"), dict):
            raise ValueError(f"{file}: field 'quantization.activation_scales' missing")
    return cfg


def read_model_dir(path: str | Path, simulate_int8: bool = False) -> tuple[Seq2Seq, Path]:
    """Load a model directory into a float32 Seq2Seq (int8 weights dequantised).

    The tied embedding of an int8 directory is what the engine reads: stored int8, it is
    dequantised (q * scale); stored float32, it goes through the same per-row int8 rule
    and back (int8_embedding_rows), as the engine quantises it at load and looks tokens
    up in those rows too. So the model here is the engine's, whichever form is stored.

    simulate_int8: also round each quantized linear's input to its int8 grid
    (clamp(round(x * m), ±127) / m), as the engine's int8 GEMM sees it: m calibrated
    (static activations) or 127 / max|row| of each input row (dynamic).
    """
    path = Path(path)
    ModelDir.load(path)  # the inference side's validation, checksums included
    cfg = read_config(path)
    wfile = path / WEIGHTS
    if not wfile.is_file():
        raise ValueError(f"{wfile}: missing")
    try:
        tensors = load_file(str(wfile))
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{wfile}: unreadable ({err})") from None
    expected = expected_tensors(cfg)
    for name, (shape, dtype) in expected.items():
        if name not in tensors:
            raise ValueError(f"{wfile}: missing tensor {name}")
        t = tensors[name]
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"{wfile}: tensor {name} is {t.dtype} {list(t.shape)}, expected {dtype} {list(shape)}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ValueError(f"{wfile}: unexpected tensor {extra[0]} ({len(extra)} unexpected)")
    model = Seq2Seq(cfg)
    state = {}
    for name, t in tensors.items():
        if name.endswith(".weight_scale"):
            continue
        if t.dtype == torch.int8:
            t = t.to(torch.float32) * tensors[name + "_scale"][:, None]
        state[name] = t
    if cfg.quantization and tensors["embed.weight"].dtype == torch.float32:
        state["embed.weight"] = torch.from_numpy(int8_embedding_rows(state["embed.weight"].numpy()))
    model.load_state_dict(state)
    if cfg.tokenizer != "spm":  # ModelDir.load checked its files against the config
        spm_file = {name: path / name for name in TOKENIZER_FILES[cfg.tokenizer]}
        if simulate_int8 and not cfg.quantization:
            raise ValueError(f"{path / CONFIG}: simulate_int8 asked for a model without quantization")
        if simulate_int8:
            attach_activation_quant(model, cfg.quantization)
        return model.eval(), spm_file
    spm_file = path / SPM
    if not spm_file.is_file():
        raise ValueError(f"{spm_file}: missing")
    sp = load_vocab(spm_file)
    if sp.vocab_size() != cfg.vocab_size:
        raise ValueError(f"{spm_file}: {sp.vocab_size()} pieces, but {path / CONFIG} field 'vocab_size' is {cfg.vocab_size}")
    if simulate_int8:
        if not cfg.quantization:
            raise ValueError(f"{path / CONFIG}: simulate_int8 asked for a model without quantization")
        attach_activation_quant(model, cfg.quantization)
    return model.eval(), spm_file


def write_float_twin(model_dir: str | Path, out: str | Path) -> Path:
    """A float32 directory holding the dequantised weights (q * scale) of an int8
    directory: the same model for the float32 engine and the torch reference. Its
    embedding holds the int8 rows the int8 engine reads (read_model_dir)."""
    model, spm_file = read_model_dir(model_dir)
    return write_model_dir(model, spm_file, out)


def attach_activation_quant(model: Seq2Seq, quantization: dict) -> None:
    """Forward pre-hooks that put every quantized linear's input on its int8 grid: the
    calibrated multiplier of each (static), or 127 / max|row| per input row, as the
    engine computes it at run time (dynamic; csrc/kernels/isa_common.h)."""
    modules = dict(model.named_modules())
    if quantization.get("activations") == QUANT_DYNAMIC_ACTIVATIONS:
        def dynamic(_mod, args):
            x = args[0]
            m = 127.0 / x.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
            return (torch.clamp(torch.round(x * m), -127, 127) / m,) + tuple(args[1:])

        for name in quantized_linears(model):
            modules[name].register_forward_pre_hook(dynamic)
        return
    for name, mult in quantization["activation_scales"].items():
        if name not in modules:
            raise ValueError(f"quantization.activation_scales: no linear named {name}")

        def hook(_mod, args, mult=float(mult)):
            x = args[0]
            return (torch.clamp(torch.round(x * mult), -127, 127) / mult,) + tuple(args[1:])

        modules[name].register_forward_pre_hook(hook)
