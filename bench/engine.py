"""Decoder speed of the native engine against CTranslate2 on the same weights.

    python -m bench.engine [--sentences N] [--work DIR] [--out FILE.json]

Workload of the Engine issue: random-weight models (6 encoder + 2 decoder layers,
d_model 256, 4 heads of 64, FFN 1024, the 8k joint vocabulary of Multi30k), the
English sources of test_2016_flickr, and exactly 20 output tokens per sentence for
every engine (EOS is ignored: random weights would otherwise stop at different
points, and the issue asks for the same output lengths). Engines:
  fastdec int8/fp32      pyfastdec.backends.native, attention decoder (and SSRU)
  ct2 int8/fp32          CTranslate2 on the same float weights (pyfastdec.convert)
Batch 1: milliseconds per sentence (encode + 20 steps), median and p90 over the
sentences. Batch 32: sentences per second over all sentences. Threads 1 and 2; for
CTranslate2 at batch 32 also two single-thread workers (inter_threads=2), its best
2-core setting. CTranslate2 runs with CT2_FORCE_CPU_ISA as given (--ct2-isa). Every
measurement runs in its own process, so no engine shares threads with another or with
torch (which builds the models).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

OUTPUT_TOKENS = 20
BOS, EOS = 2, 3


def build_models(work: Path) -> dict[str, Path]:
    """Random-weight model directories (fp32, int8, SSRU int8) and their CT2 conversions."""
    import torch

    from export.calibrate import calibrate
    from export.data import corpus_path, read_lines
    from export.modeling import LayerSpec, ModelConfig, Seq2Seq
    from export.vocab import train_vocab
    from export.writer import write_model_dir
    from pyfastdec.convert.ctranslate2_export import to_ctranslate2

    work.mkdir(parents=True, exist_ok=True)
    spm_path = work / "spm.model"
    if not spm_path.exists():
        sentences = read_lines(corpus_path("train", "en")) + read_lines(corpus_path("train", "de"))
        train_vocab(sentences, spm_path, 8000)
    paths = {}
    for name, decoder_self in (("attn", "attention"), ("ssru", "ssru")):
        torch.manual_seed(0)
        cfg = ModelConfig(d_model=256, head_dim=64, vocab_size=8000, norm="pre",
                          encoder_layers=[LayerSpec(4, 1024)] * 6, decoder_layers=[LayerSpec(4, 1024)] * 2,
                          decoder_self=decoder_self)
        model = Seq2Seq(cfg).eval()
        fp32, int8 = work / f"{name}-fp32", work / f"{name}-int8"
        if not (fp32 / "config.json").exists():
            write_model_dir(model, spm_path, fp32)
        if not (int8 / "config.json").exists():
            rng = np.random.default_rng(0)
            pairs = [([int(t) for t in rng.integers(5, 8000, 15)] + [EOS],
                      [int(t) for t in rng.integers(5, 8000, 15)] + [EOS]) for _ in range(64)]
            write_model_dir(model, spm_path, int8, act_scales=calibrate(model, pairs), int8=True)
        paths[f"{name}-fp32"], paths[f"{name}-int8"] = fp32, int8
    for quant in ("int8", "float32"):
        out = work / f"ct2-{quant}"
        if not (out / "model.bin").exists():
            to_ctranslate2(paths["attn-fp32"], out, quantization=None if quant == "float32" else quant, force=True)
        paths[f"ct2-{quant}"] = out
    return paths


def load_sources(spm_path: Path, count: int) -> list[list[int]]:
    import sentencepiece as spm

    from export.data import corpus_path, read_lines

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    lines = read_lines(corpus_path("test_2016_flickr", "en"))[:count]
    return [sp.encode(line) for line in lines]


# ---------------------------------------------------------------- pyfastdec
def fastdec_decode(backend, batch: list[list[int]]) -> np.ndarray:
    """Encode, then exactly OUTPUT_TOKENS greedy steps (EOS not special)."""
    from pyfastdec.backends.base import Want

    state = backend.start(backend.encode([s + [EOS] for s in batch]))
    tokens = np.full((len(batch), 1), BOS, np.int64)
    out = []
    for _ in range(OUTPUT_TOKENS):
        tokens = backend.step(state, tokens, Want(argmax=True)).argmax
        out.append(tokens[:, 0])
    return np.stack(out, 1)


def time_fastdec(path: Path, sources, threads: int, batch_size: int) -> dict:
    from pyfastdec.backends.native import NativeBackend

    backend = NativeBackend(path, threads=threads, shortlist=False)
    return time_engine(lambda batch: fastdec_decode(backend, batch), sources, batch_size)


_worker_backend = None


def _worker_init(path: str):
    global _worker_backend
    from pyfastdec.backends.native import NativeBackend

    _worker_backend = NativeBackend(path, threads=1, shortlist=False)


def _worker_decode(args):
    shard, batch_size = args
    for i in range(0, len(shard), batch_size):
        fastdec_decode(_worker_backend, shard[i:i + batch_size])
    return len(shard)


def time_fastdec_workers(path: Path, sources, workers: int, batch_size: int) -> dict:
    """Throughput of `workers` single-thread processes over contiguous shards (the
    multi-process mode of `fastdec translate --workers`), models loaded before timing."""
    import multiprocessing as mp

    shard = (len(sources) + workers - 1) // workers
    shards = [(sources[i:i + shard], batch_size) for i in range(0, len(sources), shard)]
    with mp.get_context("spawn").Pool(workers, initializer=_worker_init, initargs=(str(path),)) as pool:
        pool.map(_worker_decode, [(s[:batch_size], batch_size) for s, _ in shards])  # load + warm up
        start = time.perf_counter()
        done = sum(pool.map(_worker_decode, shards))
        total = time.perf_counter() - start
    return {"batch_size": batch_size, "sentences": done, "seconds": total, "sentences_per_s": done / total}


# ---------------------------------------------------------------- CTranslate2
def time_ct2(path: Path, sources, pieces, compute_type: str, intra: int, inter: int, batch_size: int) -> dict:
    import ctranslate2

    translator = ctranslate2.Translator(str(path), device="cpu", compute_type=compute_type,
                                       intra_threads=intra, inter_threads=inter)
    # One call per batch; with inter_threads > 1 CTranslate2 splits the call into
    # sub-batches of max_batch_size that its workers decode in parallel.
    sub_batch = batch_size if inter == 1 else max(1, batch_size // inter)

    def run(batch):
        return translator.translate_batch([[pieces[t] for t in s] for s in batch], beam_size=1,
                                          min_decoding_length=OUTPUT_TOKENS, max_decoding_length=OUTPUT_TOKENS,
                                          max_batch_size=sub_batch)
    return time_engine(run, sources, batch_size)


def time_engine(run, sources, batch_size: int) -> dict:
    from bench.timing import batches_of, pass_figures, timed_pass

    batches = batches_of(sources, batch_size)
    run(batches[0])  # warm-up: first-call allocations
    seconds, _ = timed_pass(run, batches)
    result = {"batch_size": batch_size, "sentences": len(sources),
              **pass_figures(seconds, len(sources), batch_size)}
    if batch_size == 1:
        result["ms_per_token"] = result["ms_p50"] / OUTPUT_TOKENS
    return result


def markdown(report) -> str:
    rows = report["rows"]
    lines = [f"CPU: {report['cpu']['brand']}, fastdec kernels: {report['cpu']['isa']}; CTranslate2 "
             f"{report['ct2_version']} with CT2_FORCE_CPU_ISA={report['ct2_isa']}; {report['output_tokens']} "
             "output tokens per sentence for every engine.", "",
             "| engine | setting | batch | ms/sentence p50 | p90 | ms/token | sentences/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lat = (f"{r['ms_p50']:.2f} | {r['ms_p90']:.2f} | {r['ms_per_token']:.3f}" if r["batch_size"] == 1
               else " | | ")
        lines.append(f"| {r['engine']} | {r['setting']} | {r['batch_size']} | {lat} | {r['sentences_per_s']:.1f} |")
    return "\n".join(lines) + "\n"


def measure(spec: dict) -> dict:
    """One measurement, run in a fresh process (see run_isolated)."""
    sources = spec["sources"]
    if spec["engine"] == "fastdec":
        return time_fastdec(Path(spec["path"]), sources, spec["threads"], spec["batch_size"])
    if spec["engine"] == "fastdec-workers":
        return time_fastdec_workers(Path(spec["path"]), sources, spec["workers"], spec["batch_size"])
    return time_ct2(Path(spec["path"]), sources, spec["pieces"], spec["compute_type"], spec["intra"],
                    spec["inter"], spec["batch_size"])


def run_isolated(spec: dict) -> dict:
    """Each engine in its own process (bench/isolate.py): CTranslate2's OpenMP threads and
    torch's (which built the models) must not share a process, nor engines each other's
    thread pools (measured: CTranslate2 intra_threads=2 took 75 ms/sentence beside torch,
    17 alone)."""
    from bench.isolate import run_isolated as run_in_child

    env = {"OMP_NUM_THREADS": str(spec.get("intra", spec.get("threads", 1)))}
    result, _ = run_in_child("bench.engine", spec, env)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--work", default=os.path.expanduser("~/.cache/pyfastdec-bench"))
    parser.add_argument("--ct2-isa", default="AVX512", help="CT2_FORCE_CPU_ISA for CTranslate2 ('' = its default)")
    parser.add_argument("--out", help="write every figure as JSON here")
    parser.add_argument("--markdown", help="write the table as markdown here")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one measurement spec (JSON file)
    parser.add_argument("--result", help=argparse.SUPPRESS)  # internal: where the measurement goes
    args = parser.parse_args(argv)
    if args.measure:
        Path(args.result).write_text(json.dumps(measure(json.loads(Path(args.measure).read_text()))))
        return None
    if args.ct2_isa:
        os.environ["CT2_FORCE_CPU_ISA"] = args.ct2_isa  # inherited by the measuring processes
    import ctranslate2

    import pyfastdec

    paths = build_models(Path(args.work))
    sources = load_sources(Path(args.work) / "spm.model", args.sentences)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(Path(args.work) / "spm.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    rows = []

    def record(engine, setting, threads, result):
        row = {"engine": engine, "setting": setting, "threads": threads, **result}
        rows.append(row)
        if result["batch_size"] == 1:
            print(f"{engine:22s} {setting:26s} batch 1 : {result['ms_p50']:7.2f} ms/sent p50, "
                  f"{result['ms_p90']:7.2f} p90, {result['ms_per_token']:.3f} ms/token", flush=True)
        else:
            print(f"{engine:22s} {setting:26s} batch {result['batch_size']}: "
                  f"{result['sentences_per_s']:7.1f} sentences/s", flush=True)

    for threads in (1, 2):
        for batch_size in (1, 32):
            common = {"sources": sources, "batch_size": batch_size}
            for name in ("attn-int8", "ssru-int8", "attn-fp32"):
                spec = {"engine": "fastdec", "path": str(paths[name]), "threads": threads, **common}
                record(f"fastdec {name}", f"threads={threads}", threads, run_isolated(spec))
            for quant in ("int8", "float32"):
                spec = {"engine": "ct2", "path": str(paths[f"ct2-{quant}"]), "pieces": pieces,
                        "compute_type": quant, "intra": threads, "inter": 1, **common}
                record(f"ct2 {quant}", f"intra={threads}", threads, run_isolated(spec))
            if threads == 2 and batch_size == 32:
                for name in ("attn-int8", "ssru-int8"):
                    spec = {"engine": "fastdec-workers", "path": str(paths[name]), "workers": 2, **common}
                    record(f"fastdec {name}", "2 workers x 1 thread", 2, run_isolated(spec))
                spec = {"engine": "ct2", "path": str(paths["ct2-int8"]), "pieces": pieces,
                        "compute_type": "int8", "intra": 1, "inter": 2, **common}
                record("ct2 int8", "inter=2 intra=1", 2, run_isolated(spec))
    report = {"cpu": pyfastdec.cpu_info(), "ct2_version": ctranslate2.__version__,
              "ct2_isa": os.environ.get("CT2_FORCE_CPU_ISA", "default"), "output_tokens": OUTPUT_TOKENS,
              "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(report))
    return report


if __name__ == "__main__":
    main()
