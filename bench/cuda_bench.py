"""The CUDA backend on the device (issue 30, item 4): GPU greedy against Hugging Face
MarianMTModel.generate on the same weights and GPU, against this project's CPU engine,
and the drafting strategies' speed-ups over GPU greedy.

    python -m bench.cuda_bench --out DIR [--work DIR] [--batch1 N] [--batch32 N] [--parts hf,strategies]

hf: a random-initialised MarianMTModel of the OPUS-MT base shape (bench/marian_base.py's
    SHAPE and vocabulary rows; sentencepiece models trained on the repository's Multi30k
    val + test, so nothing outside the checkout is read), converted with
    `python -m pyfastdec.convert marian` (float32). Both decode exactly L tokens per row
    (bench/forced_length.py: EOS suppressed, L from the German reference's pieces; HF:
    min_new_tokens = max_new_tokens = L), greedy, no shortlist. HF runs in float16 on the
    GPU (model.half()); pyfastdec's GPU model has float16 weights and float32
    activations. Batch 1: ms per sentence (median); batch 64: sentences/s. The CPU engine
    (float32 on the same directory, all cores) runs the batch-1 set beside them.
strategies: the shipped models on the GPU, Translator(device="cuda"): greedy, then IAD
    (uk-gec), GAD (en-de + en-de-drafter), blockwise (en-de's heads) and BiLD (en-de-big +
    en-de-little) at batch 1 and 32; wall seconds, speed-up over that model's GPU greedy,
    tokens per verifier iteration, and whether the outputs equal greedy's.
Targets (issue 30): GPU greedy >= 3x HF's batch-1 latency and >= 2x its batch-64
throughput; IAD >= 3x GPU greedy at batch 1; GAD or blockwise >= 2x at batch 1.
Output: DIR/cuda_bench.json and DIR/cuda_bench.md.

Each system runs in a process of its own (bench/isolate.py, as bench.run's): HF, the GPU
model and the CPU engine, and each strategies model; torch's CUDA caching allocator and
threads, the GPU model's buffers and the CPU engine's pool then do not carry over from one
to the next. Every row records the process it ran in ("pid"). The parent builds the
models and the workload, and sends each child its spec (--measure, --result: internal).

FASTDEC_BENCH_DRY=1 runs it all without a GPU, to check the script before device time is
spent on it: the GPU model on its reference ops, HF in float32 on the CPU (figures
meaningless).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
HF_PIECES = 2000  # per side: val + test hold too little text for OPUS-MT's piece counts
DRY = os.environ.get("FASTDEC_BENCH_DRY") == "1"
OPS = "reference" if DRY else "cuda"


def sync():
    import torch
    if not DRY:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- HF against the GPU model
def build_hf(work: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO / "tests"))
    import marian_checkpoints as mc

    from bench.marian_base import SHAPE, VOCAB_ROWS

    hf, ours = work / "hf", work / "pyfastdec-float32"
    if not (hf / "config.json").exists():
        vocab = mc.build_tokenizer_files(hf, HF_PIECES, HF_PIECES, total=VOCAB_ROWS)
        mc.save_marian(hf, vocab, **SHAPE)
    if not (ours / "config.json").exists():
        from pyfastdec.convert.command import main as convert_main
        if convert_main(["marian", str(hf), str(ours), "--force"]) != 0:
            raise SystemExit(f"converting {hf} failed")
    return hf, ours


def hf_workload(hf: Path, count: int) -> tuple[list[list[str]], list[int]]:
    import sentencepiece as spm
    sys.path.insert(0, str(REPO / "tests"))
    import marian_checkpoints as mc

    src = spm.SentencePieceProcessor(model_file=str(hf / "source.spm"))
    tgt = spm.SentencePieceProcessor(model_file=str(hf / "target.spm"))
    pieces = [src.encode(s, out_type=str) for s in mc.read_lines("test_2016_flickr.en.gz", count)]
    lengths = [max(1, len(tgt.encode(s))) for s in mc.read_lines("test_2016_flickr.de.gz", count)]
    return pieces, lengths


def time_batches(decode, pieces, lengths, batch: int) -> list[float]:
    """Seconds per batch, after one untimed warm-up batch."""
    decode(pieces[:batch], max(lengths[:batch]))
    seconds = []
    for i in range(0, len(pieces), batch):
        start = time.perf_counter()
        decode(pieces[i:i + batch], max(lengths[i:i + batch]))
        seconds.append(time.perf_counter() - start)
    return seconds


def hf_decoder(system: str, hf: Path, ours: Path):
    """decode(batch of pieces, length) of one system of the hf part, loaded in this process."""
    if system == "pyfastdec_cpu_fp32":
        from bench.forced_length import ForcedLengthTranslator
        cpu = ForcedLengthTranslator(ours, threads=os.cpu_count() or 1, compute_type="float32")
        return lambda b, n: cpu.decode(b, n)
    if system == "pyfastdec_gpu":
        from bench.forced_length import ForcedLengthTranslator, eos_suppressed
        from pyfastdec.backends.cuda import CudaBackend
        gpu = ForcedLengthTranslator(ours, threads=1)
        gpu.verifier = CudaBackend(eos_suppressed(gpu.model_dir), shortlist=False, ops=OPS)
        return lambda b, n: gpu.decode(b, n)
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(hf).eval()
    model = model if DRY else model.half().cuda()
    where = "cpu" if DRY else "cuda"
    tok = MarianTokenizer.from_pretrained(hf)

    def hf_decode(batch, length):
        ids = tok.convert_tokens_to_ids
        rows = [ids(p) + [tok.eos_token_id] for p in batch]
        width = max(map(len, rows))
        input_ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows], device=where)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=where)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, num_beams=1, do_sample=False,
                                 min_new_tokens=length, max_new_tokens=length)
        sync()
        return out
    return hf_decode


HF_SYSTEMS = ("hf_fp16", "pyfastdec_gpu", "pyfastdec_cpu_fp32")


def hf_system(spec: dict) -> dict:
    """The child side of the hf part: one system's row."""
    decode = hf_decoder(spec["system"], Path(spec["hf"]), Path(spec["ours"]))
    pieces, lengths, n1, n64 = spec["pieces"], spec["lengths"], spec["n1"], spec["n64"]
    one = time_batches(decode, pieces[:n1], lengths[:n1], 1)
    row = {"batch1_ms_median": 1000 * statistics.median(one), "batch1_ms_mean": 1000 * statistics.mean(one)}
    if spec["system"] != "pyfastdec_cpu_fp32":
        many = time_batches(decode, pieces[:n64], lengths[:n64], 64)
        row["batch64_sentences_per_s"] = n64 / sum(many)
    row["pid"] = os.getpid()
    return row


def hf_part(work: Path, n1: int, n64: int) -> dict:
    hf, ours = build_hf(work)
    pieces, lengths = hf_workload(hf, max(n1, n64))
    results = {}
    for name in HF_SYSTEMS:
        results[name] = in_own_process({"part": "hf", "system": name, "hf": str(hf), "ours": str(ours),
                                        "pieces": pieces, "lengths": lengths, "n1": n1, "n64": n64})
        print(name, results[name], flush=True)
    h, g = results["hf_fp16"], results["pyfastdec_gpu"]
    results["speedup_batch1_latency"] = h["batch1_ms_median"] / g["batch1_ms_median"]
    results["speedup_batch64_throughput"] = g["batch64_sentences_per_s"] / h["batch64_sentences_per_s"]
    return results


# ---------------------------------------------------------------- strategies on the GPU
def texts(model: str, count: int) -> list[str]:
    sys.path.insert(0, str(REPO / "tests"))
    from gpu_cases import uk_gec_texts

    from export.data import load_pairs
    if model == "uk-gec":
        return uk_gec_texts(count)
    return [s for s, _ in load_pairs("test_2016_flickr", "en", "de")[:count]]


CASES = [("uk-gec", None, ["iad"]), ("en-de", "en-de-drafter", ["gad", "blockwise"]),
         ("en-de-big", "en-de-little", ["bild"])]


def strategies_case(spec: dict) -> list[dict]:
    """The child side of the strategies part: one model (and its drafter), greedy then
    each of its algorithms, at batch 1 and 32."""
    from pyfastdec import Corrector, Translator

    model, drafter, algos, n1, n32 = spec["model"], spec["drafter"], spec["algos"], spec["n1"], spec["n32"]
    rows = []
    device = "cpu" if DRY else "cuda"
    if model == "uk-gec":
        t = Corrector(MODELS / model, device=device)
    else:
        t = Translator(MODELS / model, None if drafter is None else MODELS / drafter, device=device)
    if DRY:
        from pyfastdec.backends.cuda import CudaBackend
        t.verifier = CudaBackend(t.model_dir, ops=OPS)
        t.drafter = None if t.drafter is None else CudaBackend(t.drafter_dir, ops=OPS)
    for batch, count in ((1, n1), (32, n32)):
        src = texts(model, count)
        t.translate(src[:batch], algo="greedy", batch_size=batch)  # warm-up
        base = None
        for algo in ["greedy"] + algos:
            start = time.perf_counter()
            out, stats = t.translate(src, algo=algo, batch_size=batch, return_stats=True)
            seconds = time.perf_counter() - start
            if algo == "greedy":
                base = (out, seconds)
            rows.append({"model": model, "algo": algo, "batch": batch, "sentences": len(src), "seconds": seconds,
                         "speedup": base[1] / seconds, "tokens_per_iteration": stats.row_steps and
                         stats.generated / stats.row_steps, "equals_greedy": out == base[0],
                         "encoder_s": stats.encoder_s, "drafter_s": stats.drafter_s,
                         "verifier_s": stats.verifier_s,
                         # the step loop's cost per verifier call, host work included
                         "ms_per_iteration": 1000 * stats.verifier_s / max(stats.iterations, 1),
                         "pid": os.getpid()})
    return rows


def strategies_part(n1: int, n32: int) -> list[dict]:
    rows = []
    for model, drafter, algos in CASES:
        for row in in_own_process({"part": "strategies", "model": model, "drafter": drafter, "algos": algos,
                                   "n1": n1, "n32": n32}):
            rows.append(row)
            print(row, flush=True)
    return rows


def in_own_process(spec: dict):
    """measure(spec) in a fresh Python (bench/isolate.py); FASTDEC_BENCH_DRY passes on with
    the environment. A child that fails raises MeasurementFailed with its stderr's tail."""
    from bench.isolate import run_isolated
    return run_isolated("bench.cuda_bench", spec)[0]


def measure(spec: dict):
    return hf_system(spec) if spec["part"] == "hf" else strategies_case(spec)


def markdown(res: dict) -> str:
    lines = ["# CUDA backend bench", "", f"device: {res.get('device')}", ""]
    hf = res.get("hf")
    if isinstance(hf, dict) and "hf_fp16" in hf:
        lines += ["| system | batch 1 ms (median) | batch 64 sentences/s |", "|---|---|---|"]
        for name in ("hf_fp16", "pyfastdec_gpu", "pyfastdec_cpu_fp32"):
            r = hf[name]
            lines.append(f"| {name} | {r['batch1_ms_median']:.2f} | {r.get('batch64_sentences_per_s', float('nan')):.1f} |")
        lines += ["", f"speed-up over HF: batch 1 {hf['speedup_batch1_latency']:.2f}x (target 3x), batch 64 "
                      f"{hf['speedup_batch64_throughput']:.2f}x (target 2x)", ""]
    elif hf is not None:
        lines += ["hf part failed: " + str(hf.get("error")), ""]
    st = res.get("strategies")
    if isinstance(st, list):
        lines += ["| model | algo | batch | s | speed-up | tokens/iteration | ms/verifier call | = greedy |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in st:
            lines.append(f"| {r['model']} | {r['algo']} | {r['batch']} | {r['seconds']:.2f} | {r['speedup']:.2f} | "
                         f"{r['tokens_per_iteration']:.2f} | {r['ms_per_iteration']:.3f} | {r['equals_greedy']} |")
    elif st is not None:
        lines += ["strategies part failed: " + str(st.get("error"))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="folder for cuda_bench.json and cuda_bench.md (required)")
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "pyfastdec" / "bench-cuda")
    p.add_argument("--batch1", type=int, default=50, help="sentences decoded one at a time")
    p.add_argument("--batch32", type=int, default=256, help="sentences decoded in batches of 32 (64 for hf)")
    p.add_argument("--parts", default="hf,strategies")
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child side (bench/isolate.py)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        args.result.write_text(json.dumps(measure(json.loads(args.measure.read_text()))))
        return 0
    if args.out is None:
        p.error("the following arguments are required: --out")
    args.out.mkdir(parents=True, exist_ok=True)
    from pyfastdec.backends.cuda import gpu_engine
    res = {"device": gpu_engine(OPS).device_name() + (" (dry run)" if DRY else "")}
    for part in args.parts.split(","):
        try:
            res[part] = (hf_part(args.work, args.batch1, args.batch32) if part == "hf"
                         else strategies_part(args.batch1, args.batch32))
        except Exception as err:  # one part failing still reports the other
            traceback.print_exc()
            res[part] = {"error": f"{type(err).__name__}: {err}"}
        (args.out / "cuda_bench.json").write_text(json.dumps(res, indent=1))
        (args.out / "cuda_bench.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
