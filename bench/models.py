"""The model directories a benchmark run needs, derived from the ones it is given and
cached under ~/.cache/pyfastdec-bench/<content hash>/ so a second run reuses them:

- both precisions of every model: an int8 directory's float32 twin is its dequantised
  weights (q * scale, export.writer.read_model_dir); a float32 directory's int8 twin is a
  sibling `<dir>-int8` when one exists with the same architecture, else written here with
  activation scales calibrated on the model's validation split (export.calibrate), as
  `python -m export.write --int8` does;
- the CTranslate2 models (int8 and float32) converted with pyfastdec.convert from the
  float32 weights, the int8 one also with a vocabulary map from the model's shortlist
  (bench/vmap.py), and the ONNX exports (float32, onnxruntime dynamic int8).
Nothing here crashes a run over a missing or unusable model: `availability` returns the
reason a model cannot be used, and every preparation step reports failures as reasons.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

CACHE = Path(os.environ.get("FASTDEC_BENCH_CACHE", "~/.cache/pyfastdec-bench")).expanduser()
HASHED_FILES = ("config.json", "model.safetensors", "spm.model", "shortlist.bin")


def dir_hash(path: str | Path) -> str:
    """Content hash of a model directory (the files an engine reads), 16 hex digits."""
    h = hashlib.sha256()
    for name in HASHED_FILES:
        file = Path(path) / name
        if file.is_file():
            h.update(name.encode())
            with open(file, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


def availability(path: str | Path | None, arch: str | None = None, decoder_self: str | None = None) -> str | None:
    """None if `path` is a model directory pyfastdec reads (of the given arch / decoder
    kind when given), else the reason it is not."""
    from pyfastdec.model_dir import ModelDir, ModelDirError

    if path is None:
        return "no model directory given"
    if not Path(path).is_dir():
        return f"model directory {path} not found"
    try:
        cfg = ModelDir.load(path).config
    except (ModelDirError, OSError, ValueError) as err:
        return f"{path} unusable: {err}"
    if arch and cfg.arch != arch:
        return f"{path} is a {cfg.arch!r} model, not {arch!r}"
    if decoder_self and cfg.decoder_self != decoder_self:
        return f"{path} has a {cfg.decoder_self!r} decoder, not {decoder_self!r}"
    return None


def proposal_heads(path: str | Path) -> int:
    """K, the proposal heads the directory's config.json declares (0: none)."""
    heads = _config(Path(path)).get("heads")
    return int(heads["count"]) if isinstance(heads, dict) else 0


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _same_model(a: dict, b: dict) -> bool:
    keys = ("arch", "d_model", "head_dim", "vocab_size", "encoder", "decoder")
    return all(a.get(k) == b.get(k) for k in keys)


def _cached(out: Path, build: Callable[[Path], None]) -> Path:
    """Build into a temporary sibling, then rename: an interrupted run leaves no half model."""
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    build(tmp)
    tmp.rename(out)
    return out


def _torch_one_thread():
    """Preparation runs before any measurement, but must not take the whole machine."""
    import torch

    torch.set_num_threads(1)


def _copy_shortlist(src: Path, dst: Path):
    if (src / "shortlist.bin").is_file():
        shutil.copyfile(src / "shortlist.bin", dst / "shortlist.bin")


def precisions(path: str | Path, calibration_pairs: Callable[[], list[tuple[str, str]]]
               ) -> tuple[dict[str, Path], dict[str, str]]:
    """({"int8": dir, "float32": dir}, how each was obtained). Errors name the step."""
    path = Path(path).resolve()
    cfg = _config(path)
    key = CACHE / dir_hash(path)
    if cfg.get("quantization"):
        def dequantise(out: Path):
            from export.writer import write_float_twin

            _torch_one_thread()
            write_float_twin(path, out)
            _copy_shortlist(path, out)
        fp32 = _cached(key / "float32-dequantised", dequantise)
        return {"int8": path, "float32": fp32}, {"int8": str(path), "float32": f"{path}, dequantised ({fp32})"}
    sibling = path.with_name(path.name + "-int8")
    if sibling.is_dir() and availability(sibling) is None and _config(sibling).get("quantization") \
            and _same_model(cfg, _config(sibling)):
        return {"int8": sibling, "float32": path}, {"int8": f"{sibling} (sibling)", "float32": str(path)}

    def quantise(out: Path):
        import sentencepiece as spm

        from export.calibrate import calibrate
        from export.writer import read_model_dir, write_model_dir

        _torch_one_thread()
        model, spm_file = read_model_dir(path)
        sp = spm.SentencePieceProcessor(model_file=str(spm_file))
        pairs = [(sp.encode(s), sp.encode(t)) for s, t in calibration_pairs()]
        scales = calibrate(model, pairs)
        write_model_dir(model, spm_file, out, act_scales=scales, int8=True,
                        calibration={"data": "bench validation split", "sentences": len(pairs), "batch_size": 16})
        _copy_shortlist(path, out)
    int8 = _cached(key / "int8-calibrated", quantise)
    return {"int8": int8, "float32": path}, {"int8": f"{path}, int8 calibrated on validation ({int8})",
                                             "float32": str(path)}


def ctranslate2_model(float_dir: Path, quantization: str) -> Path:
    """CTranslate2 model of the float32 weights; CTranslate2 quantises int8 itself."""
    from pyfastdec.convert.ctranslate2_export import to_ctranslate2

    out = CACHE / dir_hash(float_dir) / f"ct2-{quantization}"
    return _cached(out, lambda tmp: to_ctranslate2(float_dir, tmp, force=True,
                                                   quantization=None if quantization == "float32" else quantization))


def ctranslate2_vmap_model(float_dir: Path, ct2_dir: Path, quantization: str) -> Path:
    """The CTranslate2 model `ct2_dir` (of `float_dir`) with a vmap.txt written from
    float_dir's shortlist.bin (bench/vmap.py), in a directory of its own so that the rows
    without the map load no map. ValueError if float_dir has no shortlist."""
    from bench.vmap import VMAP_FILE, write_vmap
    from pyfastdec.model_dir import ModelDir

    shortlist = Path(float_dir) / "shortlist.bin"
    if not shortlist.is_file():
        raise ValueError(f"{float_dir}: no shortlist.bin to build CTranslate2's vocabulary map from")
    eos = ModelDir.load(float_dir).config.tokens["eos"]

    def build(tmp: Path):
        shutil.copytree(ct2_dir, tmp)
        write_vmap(shortlist, Path(float_dir) / "spm.model", eos, tmp / VMAP_FILE)
    return _cached(CACHE / dir_hash(float_dir) / f"ct2-{quantization}-vmap", build)


def onnx_model(float_dir: Path, int8: bool) -> Path:
    from export.onnx_export import GRAPH_VERSION, export_model_dir

    _torch_one_thread()
    out = CACHE / dir_hash(float_dir) / f"onnx-{'int8' if int8 else 'float32'}-g{GRAPH_VERSION}"
    return _cached(out, lambda tmp: export_model_dir(float_dir, tmp, int8=int8))


def compatible_drafter(verifier: Path, drafter: Path) -> str | None:
    """None if the drafter can draft for the verifier (same vocabulary), else why not."""
    v, d = _config(verifier), _config(drafter)
    if v["vocab_size"] != d["vocab_size"] or v["tokens"] != d["tokens"]:
        return f"drafter {drafter} has another vocabulary than {verifier}"
    if (verifier / "spm.model").read_bytes() != (drafter / "spm.model").read_bytes():
        return f"drafter {drafter} has another spm.model than {verifier}"
    return None


def shared_pairing(host: Path, model: Path | None, arch: str, role: str) -> str | None:
    """None if `model` (a shared-encoder model of `arch`: "nat-drafter" for GAD,
    "transformer" for BiLD's little model) reads `host`'s encoder output and speaks its
    vocabulary (pyfastdec.api.check_drafter), else the reason it cannot run beside it."""
    from pyfastdec.api import check_drafter
    from pyfastdec.model_dir import ModelDir, ModelDirError

    reason = availability(model, arch=arch)
    if reason:
        return reason
    little = ModelDir.load(model)
    if little.config.encoder_shared is None:
        return f"{model} has an encoder of its own (config.json encoder.shared is absent), not a shared-encoder {role}"
    try:
        check_drafter(ModelDir.load(host), little)
    except ModelDirError as err:
        return str(err)
    return None


def bild_defaults(little: Path) -> dict:
    """The thresholds Translator uses with this little model (api.Translator._bild): its
    config.json decoding {fallback, lossy_fallback, rollback}, else pyfastdec's defaults.
    {"lossless": fallback, "lossy": (fallback, rollback), "source": where they came from}."""
    from pyfastdec.decoding.bild import DEFAULT_FALLBACK, DEFAULT_ROLLBACK
    from pyfastdec.model_dir import ModelDir

    own = ModelDir.load(little).config.bild
    if own:
        return {"lossless": own["fallback"], "lossy": (own["lossy_fallback"], own["rollback"]),
                "source": f"{little}/config.json decoding"}
    return {"lossless": DEFAULT_FALLBACK, "lossy": (DEFAULT_FALLBACK, DEFAULT_ROLLBACK),
            "source": "pyfastdec.decoding.bild DEFAULT_FALLBACK / DEFAULT_ROLLBACK (no decoding thresholds in "
                      f"{little}/config.json)"}
