"""Static (calibrated) against dynamic (per-row, run-time) int8 activation scales on the
same weights: ms/sentence at batch 1 and batch 32 (1 thread, greedy) and BLEU on the
Multi30k test set shipped in data/ (sacreBLEU defaults).

    python -m bench.studies.int8_activations [--model models/en-de-attn] [--latency-sentences 300]

The float32 model is MODEL's weights dequantised (an int8 directory's float twin, so
every row below starts from the same floats); `fastdec convert int8` then writes the
dynamic directory and, with `--calibrate data/multi30k/val.en` (1,014 sentences), the
static one. Calls run interleaved, each the best of `--repeats`, as the machine is shared.
Figures: bench/README.md, "int8 without calibration text".
"""
from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "multi30k"


def lines(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def float_twin(model_dir: Path, out: Path) -> Path:
    """MODEL's weights as float32 (int8 rows dequantised), written with numpy only; its
    shortlist.bin too, which `convert int8` copies along, so every row uses it."""
    import shutil

    from pyfastdec.convert.weights import float_weights
    from pyfastdec.model_dir import TOKENIZER_FILES, ModelDir, safetensors_io
    from pyfastdec.model_dir.checksums import directory_checksums

    model = ModelDir.load(model_dir)
    out.mkdir(parents=True)
    safetensors_io.save_file(out / "model.safetensors", float_weights(model), metadata={"format": "fastdec",
                                                                                       "version": "1"})
    for name in TOKENIZER_FILES[model.config.tokenizer] + (("shortlist.bin",) if (model_dir / "shortlist.bin").is_file()
                                                           else ()):
        shutil.copyfile(model_dir / name, out / name)
    config = json.loads((model_dir / "config.json").read_text())
    config.pop("checksum", None)
    config["quantization"] = None
    config["checksum"] = directory_checksums(out, config)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    ModelDir.load(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "en-de-attn")
    ap.add_argument("--latency-sentences", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import sacrebleu

    from pyfastdec import Translator
    from pyfastdec.convert.command import main as convert

    sources, refs = lines("test_2016_flickr.en.gz"), lines("test_2016_flickr.de.gz")
    work = Path(tempfile.mkdtemp(prefix="int8-activations-"))
    calib = work / "val.en"
    calib.write_text("\n".join(lines("val.en.gz")) + "\n")
    fp32 = float_twin(args.model, work / "float32")
    t0 = time.perf_counter()
    assert convert(["int8", str(fp32), str(work / "dynamic")]) == 0
    t1 = time.perf_counter()
    assert convert(["int8", str(fp32), str(work / "static"), "--calibrate", str(calib)]) == 0
    t2 = time.perf_counter()
    print(f"convert int8: dynamic {t1 - t0:.1f} s, static (calibrated on {len(lines('val.en.gz'))} "
          f"sentences) {t2 - t1:.1f} s")
    systems = {"float32": (fp32, "float32"), "int8 static": (work / "static", "int8"),
               "int8 dynamic": (work / "dynamic", "int8"), "shipped int8 (static)": (args.model, "int8")}
    translators = {name: Translator(path, compute_type=ct, threads=1) for name, (path, ct) in systems.items()}
    # Interleaved call by call, each call's time the best of its repeats: on a shared
    # machine load changes within a run, and a slow spell then hits every row alike.
    few = sources[:args.latency_sentences]
    chunks = [sources[k:k + 32] for k in range(0, len(sources), 32)]
    b1 = {name: np.full(len(few), np.inf) for name in systems}
    b32 = {name: np.full(len(chunks), np.inf) for name in systems}
    outputs: dict[str, list[str]] = {name: [] for name in systems}
    for repeat in range(args.repeats):
        for k, sentence in enumerate(few):
            for name, tr in translators.items():
                start = time.perf_counter()
                tr.translate([sentence], algo="greedy", batch_size=1)
                b1[name][k] = min(b1[name][k], time.perf_counter() - start)
        for k, chunk in enumerate(chunks):
            for name, tr in translators.items():
                start = time.perf_counter()
                out = tr.translate(chunk, algo="greedy", batch_size=32)
                b32[name][k] = min(b32[name][k], time.perf_counter() - start)
                if repeat == 0:
                    outputs[name] += out
    best = {name: {"b1": b1[name].sum() / len(few) * 1e3, "b32": b32[name].sum() / len(sources) * 1e3}
            for name in systems}
    print(f"{args.model.name}, greedy, 1 thread; ms/sentence best of {args.repeats}; BLEU on "
          f"test_2016_flickr ({len(sources)} sentences)")
    print("| weights / activations | ms/sentence, batch 1 | ms/sentence, batch 32 | BLEU | same output as float32 |")
    print("| --- | --- | --- | --- | --- |")
    for name in systems:
        bleu = sacrebleu.corpus_bleu(outputs[name], [refs]).score
        same = sum(a == b for a, b in zip(outputs[name], outputs["float32"])) / len(sources)
        print(f"| {name} | {best[name]['b1']:.2f} | {best[name]['b32']:.2f} | {bleu:.2f} | {same:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
