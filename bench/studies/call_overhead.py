"""Where encode, a batch-1 step and a translate call spend their time outside the GEMMs.

    python -m bench.studies.call_overhead [--model models/en-de] [--sentences 300] [--out FILE.json]

1 thread. Figures (issue 12, items 5 and 5a):
  encode ms at 2/16/64 source ids (EOS included; the ids are real test_2016_flickr
    sources, concatenated and cut to length), median over repeats; the same GEMMs timed
    alone with kernels.gemm_i8 (the issue's reference figure);
  a batch-1 decoder step in microseconds (median over the first 20 steps after a
    16-id source);
  the per-op table of both: the engine's own per-op timer (kernels/op_profile.h),
    microseconds per call, plus "python" (NativeBackend's wrapper: everything between the
    Python call and the binding);
  translate(["."]) ms on this model and on the packaged uk-gec, split into the model's
    own work (time inside the backend's encode/start/step/select/truncate/draft calls)
    and the fixed cost around it (tokenisation, sorting, splitting, strategy loop,
    result objects);
  end-to-end ms per sentence at batch 1 (translate([s]) one sentence at a time) on the
    first --sentences sources of test_2016_flickr, default strategy; the outputs' sha256
    is printed so runs before and after a change can be compared for identical results.
Run it through /work/measure.sh on the shared machine.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np

from pyfastdec import kernels

ROOT = Path(__file__).resolve().parents[2]
ENCODE_LENGTHS = (2, 16, 64)
STEP_SOURCE_LENGTH = 16
STEPS = 20
BACKEND_CALLS = ("encode", "start", "step", "select", "truncate", "draft")


def sources(tokenizer, eos: int) -> dict[int, list[int]]:
    from bench.data import multi30k_test
    ids = [i for s in multi30k_test(40).sources for i in tokenizer.encode(s)]
    return {n: ids[:n - 1] + [eos] for n in ENCODE_LENGTHS}


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def profiled(fn, repeats: int) -> tuple[dict[str, float], float]:
    """Per-op microseconds per call of fn (engine ops + the Python wrapper) and the mean
    wall microseconds per call, with the engine's timer on."""
    kernels.op_profile(True)
    kernels.op_profile_totals(reset=True)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    wall = (time.perf_counter() - start) / repeats * 1e6
    totals = kernels.op_profile_totals(reset=True)
    kernels.op_profile(False)
    ops = {name: seconds / repeats * 1e6 for name, (seconds, _) in totals.items()}
    ops["python"] = max(0.0, wall - sum(ops.values()))
    return ops, wall


def gemms_alone_ms(model_dir, T: int, repeats: int) -> float:
    """The encoder's GEMMs (and the decoder's cross K/V) at M = T, each timed by itself
    with kernels.gemm_i8, 1 thread."""
    cfg = model_dir.config
    tensors = model_dir.tensors
    scales = cfg.quantization.activation_scales
    pool = kernels.ThreadPool(1)
    gemms = []

    def add(prefix: str, parts: list[str], relu: bool = False):
        w = np.concatenate([tensors[f"{prefix}{p}.weight"] for p in parts])
        s = np.concatenate([tensors[f"{prefix}{p}.weight_scale"] for p in parts]).astype(np.float32)
        b = np.concatenate([tensors[f"{prefix}{p}.bias"] for p in parts]).astype(np.float32)
        m = kernels.Int8Matrix(np.ascontiguousarray(w), s)
        a = np.random.default_rng(0).standard_normal((T, w.shape[1])).astype(np.float32)
        gemms.append((a, m, b, relu, scales.get(f"{prefix}{parts[0]}")))

    for i in range(len(cfg.encoder_layers)):
        p = f"encoder.layers.{i}."
        add(p, ["self_attn.q", "self_attn.k", "self_attn.v"])
        add(p, ["self_attn.o"])
        add(p, ["ffn.fc1"], relu=True)
        add(p, ["ffn.fc2"])
    for i in range(len(cfg.decoder_layers)):
        add(f"decoder.layers.{i}.", ["cross_attn.k", "cross_attn.v"])

    def run():
        for a, m, b, relu, scale in gemms:
            kernels.gemm_i8(a, m, bias=b, relu=relu, act_scale=scale, pool=pool)
    run()
    return median_ms(run, repeats)


def table(rows: dict[str, dict[str, float]]) -> str:
    names = list(next(iter(rows.values())))
    lines = ["| op | " + " | ".join(rows) + " |", "| --- |" + " ---: |" * len(rows)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{r[n]:.1f}" for r in rows.values()) + " |")
    lines.append("| **total** | " + " | ".join(f"{sum(r.values()):.1f}" for r in rows.values()) + " |")
    non_gemm = {k: 100 * (1 - r["gemm"] / sum(r.values())) for k, r in rows.items()}
    lines.append("| non-GEMM share | " + " | ".join(f"{v:.0f} %" for v in non_gemm.values()) + " |")
    return "\n".join(lines)


def engine_figures(model: Path, repeats: int) -> dict:
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.text import Tokenizer
    backend = NativeBackend(model, threads=1, shortlist=False)
    src = sources(Tokenizer(backend.model_dir.spm_path), backend.tokens["eos"])
    out = {"encode_ms": {}, "gemms_alone_ms": {}, "ops_us": {}}
    for n, ids in src.items():
        call = lambda ids=ids: backend.encode([ids])  # noqa: E731
        for _ in range(20):
            call()
        out["encode_ms"][n] = median_ms(call, repeats)
        out["gemms_alone_ms"][n] = gemms_alone_ms(backend.model_dir, n, repeats)
        out["ops_us"][f"encode {n}"], _ = profiled(call, repeats)
    memory = backend.encode([src[STEP_SOURCE_LENGTH]])
    bos = np.full((1, 1), backend.tokens["bos"], dtype=np.int64)

    def steps(times: list | None = None):
        state = backend.start(memory)
        token = bos
        for _ in range(STEPS):
            start = time.perf_counter()
            token = backend.step(state, token).argmax.reshape(1, 1)
            if times is not None:
                times.append(time.perf_counter() - start)
    for _ in range(5):
        steps()
    times: list[float] = []
    for _ in range(max(1, repeats // 4)):
        steps(times)
    out["step_us"] = 1e6 * statistics.median(times)
    ops, _ = profiled(steps, max(1, repeats // 4))
    # The profile ran 20 steps (and one start) per call: per step.
    out["ops_us"]["step (batch 1)"] = {k: v / STEPS for k, v in ops.items()}
    return out


def timed_backend(backend) -> dict[str, float]:
    """Wraps the backend's model calls so the seconds spent in them add up in the dict."""
    spent = {"seconds": 0.0}
    for name in BACKEND_CALLS:
        fn = getattr(backend, name, None)
        if fn is None:
            continue

        def wrapped(*args, _fn=fn, **kwargs):
            start = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent["seconds"] += time.perf_counter() - start
        setattr(backend, name, wrapped)
    return spent


def translate_call(model: Path | str, repeats: int) -> dict:
    from pyfastdec.api import Translator
    translator = Translator(model, threads=1)
    call = lambda: translator.translate(["."])  # noqa: E731
    for _ in range(20):
        call()
    total = median_ms(call, repeats)
    backends = [translator.verifier] + ([translator.drafter] if translator.drafter else [])
    spent = [timed_backend(b) for b in backends]
    model_ms = []
    for _ in range(repeats):
        before = sum(s["seconds"] for s in spent)
        call()
        model_ms.append(1e3 * (sum(s["seconds"] for s in spent) - before))
    model_work = statistics.median(model_ms)
    return {"algo": translator.strategy.algo, "total_ms": total, "model_ms": model_work,
            "fixed_ms": total - model_work}


def end_to_end(model: Path, n: int) -> dict:
    from bench.data import multi30k_test
    from pyfastdec.api import Translator
    translator = Translator(model, threads=1)
    texts = multi30k_test(n).sources
    translator.translate(texts[:5])
    outputs = []
    start = time.perf_counter()
    for t in texts:
        outputs.append(translator.translate([t])[0])
    seconds = time.perf_counter() - start
    digest = hashlib.sha256("\n".join(outputs).encode()).hexdigest()[:16]
    return {"algo": translator.strategy.algo, "ms_per_sentence": 1e3 * seconds / len(texts), "outputs_sha256": digest}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "en-de")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    figures = engine_figures(args.model, args.repeats)
    figures["translate_dot"] = {"en-de": translate_call(args.model, args.repeats),
                                "uk-gec": translate_call(ROOT / "models" / "uk-gec", args.repeats)}
    figures["end_to_end"] = end_to_end(args.model, args.sentences)
    print(table(figures["ops_us"]))
    print()
    for key in ("encode_ms", "gemms_alone_ms", "step_us", "translate_dot", "end_to_end"):
        print(key, json.dumps(figures[key]))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
