"""pyfastdec against CTranslate2 on a base-size Hugging Face Marian model, each engine
running its own converter's int8 model (issue 13, item 3).

    python -m bench.marian_base [--work DIR] [--out DIR] [--batch1 N] [--batch32 N]
                                [--repeats R] [--threads 1,2] [--build-only]

Model: a random-initialised MarianMTModel of the OPUS-MT base shape (6 + 6 layers,
d_model 512, 8 heads, FFN 2048, swish, 58,101 vocabulary rows), with sentencepiece
models trained on Multi30k (tests/marian_checkpoints.py), saved with save_pretrained in
--work (built once, reused). Converted twice:
  pyfastdec    python -m pyfastdec.convert marian HF_DIR OUT --quantize int8
               --calibrate <first 500 Multi30k val.en sentences>
  ct2          ctranslate2.converters.TransformersConverter(HF_DIR).convert(OUT,
               quantization="int8"), run with compute_type "int8"
Sources: the first --batch1 (batch 1) / --batch32 (batch 32) English sentences of
test_2016_flickr as source.spm pieces, the same pieces for both engines. Output
lengths are forced (bench/forced_length.py): a sentence decodes exactly as many tokens
as target.spm gives its German reference, a batch of 32 decodes the longest of its
rows' lengths on every row (CTranslate2's lengths are per call). Greedy, no shortlist.

Timing: for each thread count one process loads both engines and alternates them pass
by pass (A B, then B A, ...), --repeats passes each, so the machine's drift hits both
alike; each pass follows one untimed warm-up batch per engine. The ratio of a repeat
compares the two passes next to each other; reported are medians over repeats of each
engine's figure and of the ratios. Batch 1: ms per sentence (median over the pass's
sentences, and the mean); batch 32: sentences/s and output tokens/s. Threads: pyfastdec
threads=T; CTranslate2 intra_threads=T, and with 2 threads also its other candidate:
intra_threads=1 at batch 1, inter_threads=2 x intra_threads=1 at batch 32 (its best
settings in bench.engine), the faster of its settings being the one compared against. pyfastdec's decoder loop
(the call minus its encoder time, from the Translator's stats) is reported beside the
end-to-end figure; CTranslate2 reports no such split.

Output in --out (default bench/results/marian_base/): results.json and report.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORK = Path.home() / ".cache" / "pyfastdec" / "bench-marian-base"
SHAPE = dict(d_model=512, heads=8, ffn=2048, layers=6, activation="swish")
VOCAB_ROWS = 58101  # OPUS-MT en-de's embedding rows
SPM_PIECES = 6000  # per side; Multi30k is too small for OPUS-MT's ~29k (marian_checkpoints)
CALIBRATION_SENTENCES = 500
TARGETS = {1: 2.0, 32: 1.5}  # issue 13: speed-up over CTranslate2 at batch 1 / batch 32
PAUSE_S = 0.3  # between passes: lets an engine's idle OpenMP threads stop spinning


def checkpoints():
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import marian_checkpoints
    return marian_checkpoints


# ---------------------------------------------------------------- build (torch)
def build(work: Path) -> dict[str, Path]:
    """The HF checkpoint and both int8 conversions in `work` (each built once)."""
    mc = checkpoints()
    hf, ours, ct2 = work / "hf", work / "pyfastdec-int8", work / "ct2-int8"
    if not (hf / "config.json").exists():
        vocab = mc.build_tokenizer_files(hf, SPM_PIECES, SPM_PIECES, total=VOCAB_ROWS, splits=("train",))
        mc.save_marian(hf, vocab, **SHAPE)
    if not (ours / "config.json").exists():
        from pyfastdec.convert.command import main as convert_main

        calib = work / "calibrate.en"
        calib.write_text("\n".join(mc.read_lines("val.en.gz", CALIBRATION_SENTENCES)) + "\n", encoding="utf-8")
        if convert_main(["marian", str(hf), str(ours), "--quantize", "int8", "--calibrate", str(calib),
                         "--force"]) != 0:
            raise SystemExit(f"converting {hf} with pyfastdec failed")
    if not (ct2 / "model.bin").exists():
        import ctranslate2

        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), quantization="int8", force=True)
    return {"hf": hf, "pyfastdec": ours, "ct2": ct2}


def workload(hf: Path, count: int, batch_size: int) -> list[dict]:
    """Batches of source pieces, each with the output length every row is forced to."""
    import sentencepiece as spm

    mc = checkpoints()
    src_sp = spm.SentencePieceProcessor(model_file=str(hf / "source.spm"))
    tgt_sp = spm.SentencePieceProcessor(model_file=str(hf / "target.spm"))
    sources = [src_sp.encode(s, out_type=str) for s in mc.read_lines("test_2016_flickr.en.gz", count)]
    lengths = [max(1, len(tgt_sp.encode(s))) for s in mc.read_lines("test_2016_flickr.de.gz", count)]
    return [{"pieces": sources[i:i + batch_size], "length": max(lengths[i:i + batch_size])}
            for i in range(0, len(sources), batch_size)]


# ---------------------------------------------------------------- timing (child process)
def run_pass(decode, batches: list[dict]) -> dict:
    """One timed pass of decode(pieces, length) -> (outputs, encoder seconds or None)."""
    seconds, decoder_s, tokens = [], [], 0
    for b in batches:
        start = time.perf_counter()
        outs, encoder_s = decode(b["pieces"], b["length"])
        took = time.perf_counter() - start
        seconds.append(took)
        if encoder_s is not None:
            decoder_s.append(took - encoder_s)
        if any(len(o) != b["length"] for o in outs):  # what forced_length promises; never time less work
            raise RuntimeError(f"output lengths {sorted({len(o) for o in outs})} != forced {b['length']}")
        tokens += b["length"] * len(outs)
    sentences = sum(len(b["pieces"]) for b in batches)
    total = sum(seconds)
    out = {"seconds": total, "sentences_per_s": sentences / total, "tokens_per_s": tokens / total,
           "ms_p50": 1e3 * statistics.median(seconds), "ms_mean": 1e3 * total / len(seconds)}
    if decoder_s:
        out["decoder_ms_p50"] = 1e3 * statistics.median(decoder_s)
        out["decoder_sentences_per_s"] = sentences / sum(decoder_s)
    return out


def engines(spec: dict) -> dict:
    """name -> decode(pieces, length) for this spec's thread count and batch size."""
    import ctranslate2

    from bench.forced_length import ForcedLengthTranslator, ct2_decode

    threads, batch_size = spec["threads"], spec["batch_size"]
    ours = ForcedLengthTranslator(spec["pyfastdec"], threads=threads)

    def ours_decode(pieces, length):
        outs, stats = ours.decode(pieces, length)
        return outs, stats.encoder_s

    found = {"pyfastdec": ours_decode}
    settings = [(threads, 1)]
    if threads > 1:
        # its other 2-core settings: bench.engine measured intra_threads=2 10x slower than 1
        # at batch 1 on this VM, and two single-thread workers its best at batch 32
        settings.append((1, 1) if batch_size == 1 else (1, threads))
    for intra, inter in settings:
        translator = ctranslate2.Translator(spec["ct2"], device="cpu", compute_type="int8", intra_threads=intra,
                                           inter_threads=inter)
        sub_batch = 0 if inter == 1 else max(1, batch_size // inter)

        def ct2(pieces, length, translator=translator, sub_batch=sub_batch):
            return ct2_decode(translator, pieces, length, sub_batch), None
        found[f"ct2 intra={intra} inter={inter}"] = ct2
    return found


def measure(spec: dict) -> dict:
    """Every engine of `spec`, passes alternated; per engine the list of pass figures."""
    batches = [dict(b) for b in spec["batches"]]
    decoders = engines(spec)
    for decode in decoders.values():
        decode(batches[0]["pieces"], batches[0]["length"])  # warm-up: first-call allocations
    names = list(decoders)
    passes = {name: [] for name in names}
    for r in range(spec["repeats"]):
        for name in (names if r % 2 == 0 else names[::-1]):
            time.sleep(PAUSE_S)
            passes[name].append(run_pass(decoders[name], batches))
    import os

    import ctranslate2
    return {"passes": passes, "ct2_isa": os.environ.get("CT2_FORCE_CPU_ISA", "not forced"),
            "ct2_version": ctranslate2.__version__}


# ---------------------------------------------------------------- summary and report
def summarise(spec: dict, raw: dict) -> dict:
    passes = raw["passes"]
    batch_size = spec["batch_size"]
    key = "ms_p50" if batch_size == 1 else "sentences_per_s"
    ct2_names = [n for n in passes if n.startswith("ct2")]

    def med(name, field):
        values = [p[field] for p in passes[name] if field in p]
        return statistics.median(values) if values else None

    # the CTranslate2 setting compared against: its best median on the headline figure
    best = (min if batch_size == 1 else max)(ct2_names, key=lambda n: med(n, key))
    if batch_size == 1:
        ratios = [c["ms_p50"] / o["ms_p50"] for o, c in zip(passes["pyfastdec"], passes[best])]
        mean_ratios = [c["ms_mean"] / o["ms_mean"] for o, c in zip(passes["pyfastdec"], passes[best])]
    else:
        ratios = [o["sentences_per_s"] / c["sentences_per_s"] for o, c in zip(passes["pyfastdec"], passes[best])]
        mean_ratios = ratios
    rows = {name: {f: med(name, f) for f in ("ms_p50", "ms_mean", "sentences_per_s", "tokens_per_s",
                                             "decoder_ms_p50", "decoder_sentences_per_s")}
            for name in passes}
    for name in passes:
        rows[name]["spread"] = [min(p[key] for p in passes[name]), max(p[key] for p in passes[name])]
    target = TARGETS[1 if batch_size == 1 else 32]
    ratio = statistics.median(ratios)
    return {"threads": spec["threads"], "batch_size": batch_size, "sentences": sum(len(b["pieces"])
            for b in spec["batches"]), "repeats": spec["repeats"], "rows": rows, "ct2_compared": best,
            "ratios": ratios, "ratio": ratio, "ratio_mean_time": statistics.median(mean_ratios),
            "target": target, "met": ratio >= target}


def markdown(results: list[dict], env: dict) -> str:
    lines = [f"CTranslate2 {env['ct2_version']} (CT2_FORCE_CPU_ISA={env['ct2_isa']}); pyfastdec ISA "
             f"{env['fastdec_isa']}; {env['cpu']}. Medians over {results[0]['repeats']} alternated passes; "
             "ratio = median over repeats of the per-repeat ratio against the CTranslate2 setting compared.", "",
             "| threads | batch | engine | ms/sentence p50 | mean | decoder loop p50 | sentences/s | tokens/s "
             "| pass spread |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---|"]

    def num(v, fmt):
        return "" if v is None else format(v, fmt)
    for res in results:
        for name, r in res["rows"].items():
            b1 = res["batch_size"] == 1
            unit = "ms" if b1 else "sent/s"
            latency = " | ".join(num(r[f] if b1 else None, ".2f") for f in ("ms_p50", "ms_mean", "decoder_ms_p50"))
            lines.append(f"| {res['threads']} | {res['batch_size']} | {name} | {latency}"
                         f" | {r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
                         f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f} {unit} |")
    lines += ["", "| threads | batch | compared with | speed-up (median) | per repeat | target | |",
              "|---:|---:|---|---:|---|---:|---|"]
    for res in results:
        what = "latency p50" if res["batch_size"] == 1 else "sentences/s"
        lines.append(f"| {res['threads']} | {res['batch_size']} | {res['ct2_compared']} | {res['ratio']:.2f}x "
                     f"({what}) | {', '.join(f'{x:.2f}' for x in res['ratios'])} | >= {res['target']}x | "
                     f"{'met' if res['met'] else 'missed'} |")
    return "\n".join(lines) + "\n"


def environment(raw: dict) -> dict:
    import platform

    from pyfastdec.runtime import cpu_info
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"ct2_version": raw["ct2_version"], "ct2_isa": raw["ct2_isa"], "fastdec_isa": cpu_info()["isa"],
            "cpu": cpu}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.marian_base", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help=f"model cache (default {DEFAULT_WORK})")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "marian_base")
    parser.add_argument("--batch1", type=int, default=100, help="sentences at batch 1 (default 100)")
    parser.add_argument("--batch32", type=int, default=320, help="sentences at batch 32 (default 320)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--build-only", action="store_true", help="build the checkpoint and conversions, then stop")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child side (bench/isolate.py)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        spec = json.loads(args.measure.read_text())
        args.result.write_text(json.dumps(measure(spec)))
        return 0
    paths = build(args.work)
    if args.build_only:
        print(f"built in {args.work}: " + ", ".join(f"{k} {v}" for k, v in paths.items()))
        return 0
    from bench.isolate import run_isolated

    results, raw = [], None
    for threads in (int(t) for t in args.threads.split(",")):
        for batch_size, count in ((1, args.batch1), (32, args.batch32)):
            spec = {"threads": threads, "batch_size": batch_size, "repeats": args.repeats,
                    "pyfastdec": str(paths["pyfastdec"]), "ct2": str(paths["ct2"]),
                    "batches": workload(paths["hf"], count, batch_size)}
            # OpenMP (CTranslate2) sizes its pool from this, read at import
            raw, _ = run_isolated("bench.marian_base", spec, {"OMP_NUM_THREADS": str(threads)})
            results.append({**summarise(spec, raw), "passes": raw["passes"]})
            print(markdown(results[-1:], environment(raw)), flush=True)
    env = environment(raw)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"environment": env, "results": results}, indent=1))
    report = markdown(results, env)
    (args.out / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
