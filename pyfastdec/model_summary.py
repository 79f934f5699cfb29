"""`fastdec info -m MODEL`: a model directory summarised in a few lines, and the strategy
`fastdec translate` (or correct) runs on it with no --algo."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from pyfastdec.api import ALGOS, load_checked
from pyfastdec.default_strategy import default_strategy
from pyfastdec.jobs.errors import PROG
from pyfastdec.model_dir import CONFIG_FILE, SHORTLIST_FILE, ModelDir, read_config


def model_summary(path: str | ModelDir) -> list[str]:
    md = path if isinstance(path, ModelDir) else ModelDir.load(path)
    c = md.config
    heads = lambda layers: ",".join(str(s.heads) for s in layers)  # noqa: E731
    ffns = lambda layers: ",".join(str(s.ffn) for s in layers)  # noqa: E731
    params = sum(int(np.prod(t.shape)) for name, t in md.tensors.items() if not name.endswith("weight_scale"))
    q = c.quantization
    shortlist = md.path / SHORTLIST_FILE
    lines = [
        f"model: {md.path}",
        f"  arch: {c.arch} (decoder self-attention: {c.decoder_self}, {c.norm}-norm, {c.activation})",
        f"  layers: {len(c.encoder_layers)} encoder, {len(c.decoder_layers)} decoder",
        f"  d_model: {c.d_model} (head_dim {c.head_dim}; heads enc {heads(c.encoder_layers)} dec "
        f"{heads(c.decoder_layers)}; ffn enc {ffns(c.encoder_layers)} dec {ffns(c.decoder_layers)})",
        f"  vocab: {c.vocab_size} ({', '.join(md.tokenizer_files)})",
        f"  max_source_len: {c.max_source_len}",
        "  quantization: " + (f"{q.weights} weights ({q.weight_scale}), {q.activations} activations, embedding "
                              + ("int8 per row" if q.embedding else "float32 (int8 per row at load)") if q
                              else "none (float32)"),
        "  shortlist: " + (f"present ({SHORTLIST_FILE}, {shortlist.stat().st_size} bytes)" if shortlist.is_file()
                            else "none"),
        f"  parameters: {params}",
    ]
    if c.block_size is not None:
        lines.append(f"  block_size: {c.block_size}")
    if c.edit_margin:
        lines.append(f"  edit margin: {c.edit_margin:g} nats (correct's default; config.json decoding.edit_margin)")
    if c.task:
        lines.append(f"  task: {c.task} (" + ("fastdec translate" if c.task == "translation"
                                              else "fastdec correct, or fastdec translate") + ")")
    if c.description:
        lines.append(f"  description: {c.description}")
    return lines


def default_model_line(role: str, path: Path) -> str:
    """`fastdec info`'s line on the default model of `role`: where it is, and what it was
    trained on and is good for (its config.json "description", when it has one)."""
    if not path.is_dir():
        return f"default {role} model: {path} (not installed)"
    description = read_config(path / CONFIG_FILE).description
    return f"default {role} model: {path} (installed)" + (f"\n  {description}" if description else "")


def strategy_line(role: str, model: Optional[str], drafter: Optional[str], loaded: Optional[ModelDir] = None) -> str:
    """What `fastdec translate` (or correct) runs with no --algo on these directories;
    loaded: the model directory already read (not read again)."""
    compute_type = "int8" if model is None else _compute_type(model, loaded)
    model_dir, drafter_dir = load_checked(model if loaded is None else loaded, drafter, role, compute_type)
    choice = default_strategy(model_dir, drafter_dir, role, ALGOS)
    command = f"{PROG} {role}" + (f" -m {model}" if model else "") + (f" --drafter {drafter}" if drafter else "")
    return f"strategy of `{command}`: {choice.algo} ({choice.reason})"


def _compute_type(model: str, loaded: Optional[ModelDir]) -> str:
    """The compute type a directory runs without --compute-type, without the int8 warning."""
    # The loaded directory's config, else config.json alone: the whole directory (weights
    # hashed) is loaded once, by load_checked
    config = loaded.config if loaded is not None else read_config(Path(model) / CONFIG_FILE)
    return "int8" if config.quantization is not None else "float32"
