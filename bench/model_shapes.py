"""Int8 model directories of a given SHAPE with random weights, for cost measurements
(bench/verify_cost_shapes.py): what a step costs depends on the shape, not on the values.

    python -m bench.model_shapes [--shapes base-32k,base-58k,big-32k] [--cache DIR]

A shape is layers, width, heads, FFN and vocabulary (SHAPES: the transformer-base and
transformer-big of Vaswani et al. 2017, at OPUS-MT's 58,101 rows and at 32k). The
directory is a complete, checksummed model directory (export/FORMAT.md) that
pyfastdec.model_dir.ModelDir.load validates like any other:
- weights int8 per output row as pyfastdec.convert.int8 stores them: uniform random q,
  weight_scale = 1 / (127 sqrt(fan_in)) (unit-variance outputs for unit-variance inputs,
  so the stream neither vanishes nor overflows into infs or denormals, which cost time);
  layer norms 1 / 0, biases 0; static activation multipliers 127 / 8 (an input of unit
  variance clipped at 8 sigma), the form calibrated models have;
- tokenizer "marian": source.spm / target.spm trained on the Multi30k sets in data/
  (tests/marian_checkpoints.py) and a vocab.json padded to the vocabulary size, as
  bench/marian_base.py builds OPUS-MT's 58k rows;
- shortlist.bin with random candidates: FREQUENT ids plus PER_SOURCE per source id, about
  as many candidates per Multi30k sentence (~380) as en-de-attn's real shortlist (~360).
Built once per shape under ~/.cache/pyfastdec-bench/shapes/<name> (never in the repository).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "pyfastdec-bench" / "shapes"
ACT_MULTIPLIER = 127 / 8  # static activation scale: unit-variance input, clipped at 8 sigma
FREQUENT = 100  # shortlist: always-candidate ids (Marian's and export.shortlist's default)
PER_SOURCE = 16  # shortlist: random targets per source id; ~380 candidates per Multi30k sentence
SPM_PIECES = 1000  # per side: what Multi30k's shipped sets train comfortably


@dataclass(frozen=True)
class Shape:
    name: str
    encoder_layers: int
    decoder_layers: int
    d_model: int
    heads: int
    ffn: int
    vocab: int
    head_dim: int = 64
    spm_pieces: int = SPM_PIECES


SHAPES = {s.name: s for s in (
    Shape("base-32k", 6, 6, 512, 8, 2048, 32000),
    Shape("base-58k", 6, 6, 512, 8, 2048, 58101),  # OPUS-MT en-de's rows
    Shape("big-32k", 6, 6, 1024, 16, 4096, 32000),
)}


def _config(shape: Shape) -> dict:
    from pyfastdec.convert.int8 import quantization_field
    from pyfastdec.model_dir import parse_config, quantized_linears

    layer = {"heads": shape.heads, "ffn": shape.ffn}
    config = {"format": "fastdec", "version": 1, "arch": "transformer", "d_model": shape.d_model,
              "head_dim": shape.head_dim, "vocab_size": shape.vocab, "norm": "pre", "activation": "relu",
              "encoder": {"layers": [layer] * shape.encoder_layers},
              "decoder": {"self": "attention", "layers": [layer] * shape.decoder_layers},
              # the marian layout: eos 0, unk 1, pad last and the decoder start token
              "tokens": {"pad": shape.vocab - 1, "unk": 1, "bos": shape.vocab - 1, "eos": 0},
              "max_source_len": 128, "quantization": None, "tokenizer": "marian"}
    linears = quantized_linears(parse_config(config))
    config["quantization"] = quantization_field(linears, {lin: ACT_MULTIPLIER for lin in linears},
                                                {"data": f"none: random weights (bench.model_shapes {shape.name})"})
    return config


def _tensors(config: dict, seed: int) -> dict[str, np.ndarray]:
    from pyfastdec.model_dir import expected_tensors, parse_config

    rng = np.random.default_rng(seed)
    out = {}
    for name, (dtype, dims) in expected_tensors(parse_config(config)).items():
        if dtype == np.int8:
            out[name] = rng.integers(-127, 128, dims, dtype=np.int8)
        elif name.endswith("weight_scale"):  # dims = (out,); the matching weight's fan-in
            fan_in = config["d_model"]
            if name.endswith((".o.weight_scale", ".fc2.weight_scale")):
                fan_in = out[name.replace("weight_scale", "weight")].shape[1]
            out[name] = np.full(dims, 1 / (127 * math.sqrt(fan_in)), dtype=np.float32)
        elif ".ln_" in name or "final_ln" in name:
            out[name] = np.full(dims, 1.0 if name.endswith(".weight") else 0.0, dtype=np.float32)
        else:  # biases
            out[name] = np.zeros(dims, dtype=np.float32)
    return out


def random_shortlist(vocab: int, seed: int, frequent: int = FREQUENT, per_source: int = PER_SOURCE):
    """A Shortlist of `frequent` random ids plus `per_source` distinct random targets per id."""
    from pyfastdec.model_dir.shortlist import Shortlist

    rng = np.random.default_rng(seed)
    per_source = min(per_source, vocab // 2)
    # distinct within a row: strictly increasing steps that sum to less than vocab
    steps = np.cumsum(rng.integers(1, vocab // per_source + 1, (vocab, per_source)), axis=1) - 1
    targets = (rng.integers(0, vocab, (vocab, 1)) + steps) % vocab
    indptr = np.arange(vocab + 1, dtype=np.uint64) * per_source
    chosen = np.sort(rng.choice(np.arange(2, vocab - 1), min(frequent, vocab - 3), replace=False))
    return Shortlist(vocab, chosen, indptr, targets.reshape(-1), best=per_source, first_fill_id=2)


def build(shape: Shape, out: Path, seed: int = 0) -> Path:
    """Write the model directory of `shape` into `out` (replaced) and return it, loaded
    once by ModelDir.load so that a directory that is returned is a valid one."""
    from bench.marian_base import checkpoints
    from pyfastdec.model_dir import CONFIG_FILE, SHORTLIST_FILE, WEIGHTS_FILE, ModelDir, safetensors_io
    from pyfastdec.model_dir.checksums import directory_checksums

    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    checkpoints().build_tokenizer_files(tmp, shape.spm_pieces, shape.spm_pieces, total=shape.vocab)
    config = _config(shape)
    safetensors_io.save_file(tmp / WEIGHTS_FILE, _tensors(config, seed), metadata={"format": "fastdec", "version": "1"})
    random_shortlist(shape.vocab, seed + 1).save(tmp / SHORTLIST_FILE)
    config["checksum"] = directory_checksums(tmp, config)
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    (tmp / "shape.json").write_text(json.dumps(asdict(shape)) + "\n", encoding="utf-8")
    ModelDir.load(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def cached(shape: Shape, cache: Path = CACHE) -> Path:
    """The directory of `shape` under `cache`, built on first use (or when its shape changed)."""
    path = Path(cache) / shape.name
    marker = path / "shape.json"
    if not (marker.is_file() and json.loads(marker.read_text()) == asdict(shape)):
        build(shape, path)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    for name in args.shapes.split(","):
        print(f"{name}: {cached(SHAPES[name], args.cache)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
