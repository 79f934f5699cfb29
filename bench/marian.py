"""Marian (pymarian, the 'bench-marian' extra) as a peer of bench.run.

Models: our float32 weights converted by pyfastdec.convert.marian_npz_export (cached beside the
other derived models), both the SSRU student en-de and en-de-attn, so every pyfastdec
row has Marian's same model beside it. What the conversion cannot make equal (Marian's
zero decoder start, its position frequencies, eps 1e-6) changes Marian's outputs, not
its cost per step: its rows' BLEU is Marian's on the converted model.

Settings, from Marian's own options:
- precision int8: `--optimize --gemm-type T`, Marian quantising the float32 weights on
  load with FBGEMM (`intgemm8` is not compiled into the pymarian wheel). T is probed:
  greedy at batch 32 with 1 thread on `probe_n` sentences for every GEMM_TYPES_INT8, the
  fastest wins (`choose_gemm_type`). float32: `--gemm-type float32` (no `--optimize`).
- threads: `--cpu-threads N` runs N workers, each decoding whole mini-batches with
  single-threaded GEMMs (Marian has no intra-op threading on CPU), so a batch of 32 on 2
  threads is sent as mini-batches of 16 (`--mini-batch ceil(B / N)`); at batch 1 a second
  thread cannot help one sentence.
- shortlist: Marian's lexical shortlist written by the converter (`--shortlist lex.s2t 0
  BEST`); Marian builds one candidate set per mini-batch (ours per sentence).
- input / output: sentencepiece pieces (`--no-spm-encode --no-spm-decode`), as CTranslate2
  gets them, so tokenisation is timed for neither; `--allow-unk` (ours may emit unk);
  `--max-length-factor 3` is Marian's default output limit (ours 2 * len + 10).
- beam 5: `--beam-size 5 --normalize 1` (length-normalised scores, as ours).
"""
from __future__ import annotations

import math
from pathlib import Path

from bench.plan import LATENCY_BATCH, Job, Plan, _mt_workloads, wanted
from bench.results import speed

GEMM_TYPES_INT8 = ("packed8avx512", "packed8avx2")
BEAM = 5


def marian_model(float_dir: Path) -> Path:
    """The Marian conversion of a float32 model directory, cached by content."""
    from bench.models import CACHE, _cached, dir_hash
    from pyfastdec.convert.marian_npz_export import to_marian_npz

    return _cached(CACHE / dir_hash(float_dir) / "marian", lambda tmp: to_marian_npz(float_dir, tmp, force=True))


def cli_args(spec: dict, batch_size: int) -> str:
    """pymarian.Translator's command line for one job spec and batch size."""
    path = Path(spec["path"])
    threads = spec["threads"]
    gemm = spec["gemm_type"]
    beam = BEAM if spec["strategy"] == "beam5" else 1
    args = [f"-m {path}/model.npz", f"-v {path}/vocab.src.spm {path}/vocab.trg.spm",
            f"--cpu-threads {threads}", f"--beam-size {beam}", "--normalize 1", "--allow-unk",
            f"--mini-batch {max(1, math.ceil(batch_size / threads))}", "--maxi-batch 1", "--maxi-batch-sort none",
            "--no-spm-encode", "--no-spm-decode", "--quiet", f"--gemm-type {gemm}"]
    if gemm != "float32":
        args.append("--optimize")
    if spec.get("shortlist"):
        from pyfastdec.convert.marian_npz_export import shortlist_option

        option = shortlist_option(path)
        if option is None:
            raise ValueError(f"{path}: no lexical shortlist (the model directory had no shortlist.bin)")
        args.append("--shortlist " + " ".join(option))
    return " ".join(args)


def load_marian(spec: dict):
    """A Runner (bench/system_runner.py): source id lists -> output id lists through pymarian."""
    import pymarian
    import sentencepiece as spm

    from bench.system_runner import Runner

    if spec["strategy"] not in ("greedy", "beam5"):
        raise ValueError(f"Marian runs greedy and beam5, not {spec['strategy']!r}")
    sp = spm.SentencePieceProcessor(model_file=f"{spec['path']}/vocab.trg.spm")
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    # One Translator per workload batch size (the mini-batch size is a load-time option);
    # a shorter last batch goes to the smallest one that holds it.
    translators = {w["batch_size"]: pymarian.Translator(cli_args(spec, w["batch_size"]))
                   for w in sorted(spec["workloads"], key=lambda w: w["batch_size"])}

    def decode(batch):
        lines = [" ".join(pieces[t] for t in s[:-1]) for s in batch]  # Marian appends EOS itself
        size = next((b for b in translators if b >= len(batch)), max(translators))
        outs = translators[size].translate(lines)
        return [[sp.piece_to_id(p) for p in out.split()] for out in outs]
    return Runner(decode=decode, info={"version": getattr(pymarian, "__version__", "?"), "gemm_type": spec["gemm_type"],
                                       "beam_size": BEAM if spec["strategy"] == "beam5" else 1,
                                       "cli": cli_args(spec, LATENCY_BATCH)})


def _job(plan: Plan, model: str, path: Path, precision: str, strategy: str, threads: int, gemm: str,
         shortlist: bool, probe: bool = False) -> Job:
    if probe:
        workloads = [{"name": f"b{b}", "batch_size": b, "limit": plan.probe_n} for b in (LATENCY_BATCH, 32)]
        serves = {"b1": [], "b32": []}
    else:
        workloads, serves = _mt_workloads(plan, threads)
    spec = {"system": "marian", "path": str(path), "threads": threads, "strategy": strategy, "gemm_type": gemm,
            "shortlist": shortlist, "workloads": workloads}
    return Job("marian", model, precision, strategy, threads, f"threads={threads} gemm={gemm}", "multi30k",
               serves, spec, env={"OMP_NUM_THREADS": "1"}, shortlist=shortlist, probe=probe)


def probe_jobs(plan: Plan, model: str, path: Path) -> list[Job]:
    """Greedy with every GEMM type, float32 included for the report (the int8 rows use
    the fastest int8 type whatever float32 does)."""
    return [_job(plan, model, path, "float32" if gemm == "float32" else "int8", "greedy", 1, gemm, False, probe=True)
            for gemm in GEMM_TYPES_INT8 + ("float32",)]


def choose_gemm_type(probes: list[tuple[Job, dict]]) -> tuple[str, list[dict]]:
    """The fastest int8 GEMM type (most sentences/s) and the probe table."""
    table = [{"gemm_type": job.spec["gemm_type"],
              "b1_ms_p50": result["workloads"]["b1"]["repeats"][0]["ms_p50"],
              "b32_sentences_per_s": result["workloads"]["b32"]["repeats"][0]["sentences_per_s"]}
             for job, result in probes]
    int8 = [t for t in table if t["gemm_type"] in GEMM_TYPES_INT8]
    if not int8:
        return GEMM_TYPES_INT8[0], table
    return max(int8, key=lambda t: t["b32_sentences_per_s"])["gemm_type"], table


def marian_jobs(plan: Plan, model: str, path: Path, gemm_int8: str, has_shortlist: bool) -> list[Job]:
    """Marian's rows: int8 (the chosen GEMM type) and float32, greedy and beam 5, shortlist
    off and on, for every thread budget `wanted` keeps (as the CTranslate2 rows)."""
    jobs = []
    for threads in plan.threads:
        for precision, gemm in (("int8", gemm_int8), ("float32", "float32")):
            for strategy in ("greedy", "beam5"):
                if not wanted(plan, "marian", precision, strategy, threads):
                    continue
                for sl in ((False, True) if has_shortlist else (False,)):
                    jobs.append(_job(plan, model, path, precision, strategy, threads, gemm, sl))
    return jobs


def add_marian_ratios(rows: list[dict]) -> None:
    """vs_marian: how many times faster than Marian's row of the same model, precision,
    strategy, shortlist and workload (each pyfastdec row against Marian's same configuration)."""
    for r in rows:
        same = [m for m in rows if m["system"] == "marian" and m["workload"] == r["workload"]
                and m["model"] == r["model"] and m["precision"] == r["precision"]
                and m["strategy"] == r["strategy"] and m["shortlist"] == r["shortlist"]]
        r["vs_marian"] = speed(r) / speed(same[0]) if same and r["system"] in ("pyfastdec", "ct2") else None


def marian_section(rows: list[dict], settings: dict | None) -> list[str]:
    """report.md: the GEMM-type probe and every pyfastdec row beside Marian's same configuration."""
    lines = ["## Marian (pymarian)", ""]
    if settings:
        lines += [f"GEMM types probed (greedy, 1 thread, {settings['probe_sentences']} sentences, the int8 rows take the "
                  f"fastest int8 type at batch 32): "
                  + ", ".join(f"{p['gemm_type']} {p['b1_ms_p50']:.2f} ms at batch 1, {p['b32_sentences_per_s']:.1f} "
                              f"sent/s at batch 32" for p in settings["probes"])
                  + f"; chosen: {settings['chosen']}.", ""]
    pairs = [r for r in rows if r.get("vs_marian") is not None]
    if not pairs:
        return lines + ["No pyfastdec row has a Marian row of the same configuration.", ""]
    lines += ["| system | model | precision | strategy | shortlist | workload | system's | Marian's | x Marian |",
              "|---|---|---|---|---|---|---:|---:|---:|"]
    for r in sorted(pairs, key=lambda r: (r["workload"], r["system"], r["model"], r["precision"], r["strategy"],
                                          r["shortlist"])):
        m = next(m for m in rows if m["system"] == "marian" and m["workload"] == r["workload"]
                 and m["model"] == r["model"] and m["precision"] == r["precision"]
                 and m["strategy"] == r["strategy"] and m["shortlist"] == r["shortlist"])
        fig = (lambda x: f"{x['ms_p50']:.2f} ms") if r["batch_size"] == LATENCY_BATCH else \
            (lambda x: f"{x['sentences_per_s']:.1f} sent/s")
        lines.append(f"| {r['system']} | {r['model']} | {r['precision']} | {r['strategy']} | {'yes' if r['shortlist'] else 'no'} | "
                     f"{r['workload']} | {fig(r)} | {fig(m)} | {r['vs_marian']:.2f}x |")
    return lines + [""]
