"""pyfastdec against the engines users would pick instead, in one run: a JSON of every
figure, a markdown report and plots (issue 6).

    python -m bench.run [--quick] [--out DIR] [--limit N] [--threads 1,2]
        [--en-de DIR] [--en-de-attn DIR] [--drafter DIR] [--shared-drafter DIR] [--uk-gec DIR]
        [--en-de-heads DIR] [--en-de-attn-heads DIR] [--joint DIR] [--big DIR] [--little DIR]
        [--systems pyfastdec,heads,bild,ct2,onnx,torch,gec] [--strategies S,..] [--precisions int8,float32]
        [--models en-de,en-de-attn,uk-gec,bild-big,...]

Systems: pyfastdec greedy, beam 5, GAD, GAD++ (beta 3, tau 1.0), int8 and float32, with and
without the lexical shortlist, on --en-de (SSRU student) and --en-de-attn (attention
student); IAD and greedy on --uk-gec at batch 1 and 32, with IAD's iterations per
sentence and tokens per iteration (issue 16); CTranslate2 int8 / float32 greedy and beam 5
on --en-de-attn converted with pyfastdec.convert, at its best probed settings per workload
(CT2_FORCE_CPU_ISA, intra vs inter threads), int8 greedy also with its vocabulary map
built from --en-de-attn's shortlist (use_vmap), and int8 greedy on --uk-gec's weights
(probed the same way on UA-GEC); onnxruntime greedy (float32 and dynamic
int8) on the ONNX export of --en-de-attn; the PyTorch eager reference's greedy.
Models with proposal heads (issue 11; system "heads"): --en-de-heads, --en-de-attn-heads
(frozen students with heads from export.train_heads) and --joint (a student trained with
its heads), each running greedy, blockwise (the default cost policy) and blockwise-all
(all K proposals verified), with tokens per iteration and the decoder-loop speed-up
(encoder time excluded) beside the end-to-end one.
Models without an encoder of their own (issue 15): GAD on --en-de int8 with --shared-drafter
(a drafter reading the verifier's encoder output; strategy gad-shared) beside GAD with
--drafter, with encoder and drafter time per sentence and drafted tokens accepted per
iteration; and BiLD (system "bild", model role bild-big): greedy of --big, lossless BiLD
with --little at its fallback and the little model's lossy default, at batch 1 and 32,
and a (fallback, rollback) sweep at batch 1 with BLEU, its Pareto front and
bild_pareto.png (bench/shared_encoder_report.py).
Workloads and the matrix: bench/plan.py. Every measurement runs in its own process
(bench/child.py). A missing model, data set or peer is reported as "not run: <reason>".
--models keeps only the named models' rows: `--models uk-gec --systems gec,ct2` runs the
correction rows and CTranslate2 on the correction model, nothing else.

Output in DIR (default bench/results/latest, not committed): results.json, report.md,
quality_vs_latency.png, speedup_by_length.png, bild_pareto.png, outputs.json.gz (every
system's detokenized outputs).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import sys
import time
from importlib import metadata
from pathlib import Path

from bench import behind, data, marian, models, plan as planning, plots, report, results, shared_encoder_report
from bench.isolate import MeasurementFailed, run_isolated
from bench.quality import bleu_chrf

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "latest"
# Full: the whole test set at batch 32; batch 1 (a pass costs about 3x batch 32's) over
# half of it and over 500 UA-GEC sentences, so the run fits 30 minutes on 2 cores.
FULL = dict(n=1000, latency_n=500, gec_n=500, repeats=3, probe_n=96)
QUICK = dict(n=200, latency_n=200, gec_n=200, repeats=1, probe_n=32)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="200-sentence subsets, one timed pass, a trimmed matrix (bench/plan.py): under 3 minutes")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--limit", type=int, help="at most N sentences per workload (smoke runs)")
    ap.add_argument("--repeats", type=int, help="timed passes per measurement (default 3, --quick 1)")
    ap.add_argument("--threads", default="1,2", help="thread budgets to measure, comma-separated")
    ap.add_argument("--no-draft-policy", action="store_true",
                    help="GAD, GAD++ and BiLD draft every iteration instead of running their cost policies "
                         "(Translator's default): their raw tokens per iteration, and BiLD's sweep without plain "
                         "runs; rows say policy=off")
    ap.add_argument("--every-config", action="store_true",
                    help="the whole matrix at every thread count (default: beyond 1 thread only the "
                         "configurations the headline comparisons need; bench/plan.py)")
    ap.add_argument("--systems", default="pyfastdec,heads,bild,ct2,marian,onnx,torch,gec",
                    help="subset to run: pyfastdec (translation), heads (the models with proposal heads), "
                         "bild (BiLD: --big with --little), ct2, marian (pymarian, the bench-marian extra; "
                         "bench/marian.py), onnx, torch, gec (IAD)")
    ap.add_argument("--strategies", help="only these strategies, comma-separated (greedy, beam5, gad, gad-shared, "
                                         "gad++, iad, blockwise, blockwise-all, bild, bild-lossy; default: all)")
    ap.add_argument("--precisions", help="only these precisions, comma-separated (int8, float32; default: both)")
    ap.add_argument("--models", help="only these models, comma-separated (" + ", ".join(MODEL_ROLES)
                                     + "; default: all), e.g. uk-gec for the correction rows and CTranslate2 on them")
    ap.add_argument("--en-de", type=Path, default=REPO_ROOT / "models" / "en-de", help="SSRU student")
    ap.add_argument("--en-de-attn", type=Path, default=REPO_ROOT / "models" / "en-de-attn",
                    help="attention student (also the peers' model)")
    ap.add_argument("--drafter", type=Path, default=REPO_ROOT / "models" / "en-de-drafter-separate",
                    help="GAD drafter with its own encoder (strategies gad, gad++ on both students)")
    ap.add_argument("--shared-drafter", type=Path, default=_existing(DEFAULT_SHARED_DRAFTER),
                    help="GAD drafter without an encoder, reading --en-de's int8 encoder output (strategy "
                         "gad-shared; default: models/en-de-drafter, the packaged drafter, if it exists)")
    ap.add_argument("--big", type=Path, default=REPO_ROOT / "models" / "en-de-big",
                    help="BiLD's big model (run at the precision it is stored in)")
    ap.add_argument("--little", type=Path, default=_existing(DEFAULT_LITTLE),
                    help="BiLD's little model, reading --big's encoder output (default: models/en-de-little if it "
                         "exists, else BiLD is not run)")
    ap.add_argument("--uk-gec", type=Path, default=REPO_ROOT / "models" / "uk-gec", help="correction model")
    for flag, role, student in (("--en-de-heads", "en-de-heads", "en-de"),
                                ("--en-de-attn-heads", "en-de-attn-heads", "en-de-attn"),
                                ("--joint", "joint", None)):
        ap.add_argument(flag, type=Path, default=default_heads_model(student),
                        help=f"{role}: a model directory with proposal heads (default: models/{student} if its "
                             f"config.json has 'heads', else not run)" if student else
                        f"{role}: a student trained jointly with its proposal heads (default: not run)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measuring process")
    return ap.parse_args(argv)


HEADS_ROLES = {"en-de-heads": "en_de_heads", "en-de-attn-heads": "en_de_attn_heads", "joint": "joint"}
BILD_ROLE = "bild-big"  # BiLD's rows: greedy of --big and BiLD with --little
MODEL_ROLES = ("en-de", "en-de-attn", "uk-gec", *HEADS_ROLES, BILD_ROLE)
# Shared-encoder models (issue 15); the names the shipped ones will have.
DEFAULT_SHARED_DRAFTER = REPO_ROOT / "models" / "en-de-drafter"
DEFAULT_LITTLE = REPO_ROOT / "models" / "en-de-little"


def _existing(path: Path) -> Path | None:
    return path if path.is_dir() else None


def default_heads_model(student: str | None) -> Path | None:
    """models/<student> when its config.json declares proposal heads, else None."""
    if student is None:
        return None
    path = REPO_ROOT / "models" / student
    try:
        return path if json.loads((path / "config.json").read_text()).get("heads") else None
    except (OSError, ValueError):
        return None


def _names(value: str | None, known: tuple[str, ...], flag: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"{flag}: {', '.join(unknown) or 'nothing given'}; expected some of {', '.join(known)}")
    return names


def make_plan(args) -> planning.Plan:
    sizes = dict(QUICK if args.quick else FULL)
    if args.limit:
        for k in ("n", "latency_n", "gec_n", "probe_n"):
            sizes[k] = min(sizes[k], args.limit)
    if args.repeats:
        sizes["repeats"] = args.repeats
    threads = sorted({int(t) for t in args.threads.split(",")})
    from bench.systems import STRATEGIES

    return planning.Plan(threads=threads, every_config=args.every_config, quick=args.quick,
                         draft_policy=not args.no_draft_policy,
                         strategies=_names(args.strategies, STRATEGIES, "--strategies"),
                         precisions=_names(args.precisions, ("int8", "float32"), "--precisions"), **sizes)


def environment() -> dict:
    import pyfastdec

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    versions = {}
    for dist in ("pyfastdec", "ctranslate2", "pymarian", "onnxruntime", "torch", "numpy", "sacrebleu", "sentencepiece"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    versions["pyfastdec"] = versions["pyfastdec"] or pyfastdec.__version__
    info = pyfastdec.cpu_info()
    return {"cpu_model": cpu, "cpus": os.cpu_count(), "pyfastdec_cpu_info": info, "pyfastdec_isa": info["isa"],
            "python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def ct2_log(stderr: str) -> dict:
    """What CTranslate2 logged at load with CT2_VERBOSE=1: the ISA and compute type it used."""
    out = {}
    for key, pattern in (("selected_isa", r"Selected ISA: (\S+)"), ("compute_type", r"Selected compute type: (\S+)"),
                         ("gemm_s8", r"GEMM_S8 backend: ([^\n]+)")):
        m = re.search(pattern, stderr)
        if m:
            out[key] = m.group(1).strip()
    return out


class Runner:
    """Runs jobs one after another and keeps what came back (or why not)."""

    def __init__(self, plan, sources_files: dict, timeout: float):
        self.plan, self.sources_files, self.timeout = plan, sources_files, timeout
        self.rows, self.sweep, self.not_run, self.done = [], [], [], 0
        self.start = time.perf_counter()

    def skip(self, what: str, reason: str):
        self.not_run.append({"what": what, "reason": reason})
        print(f"  not run: {what}: {reason}", flush=True)

    def run(self, job, total: int) -> dict | None:
        spec = dict(job.spec, sources_file=str(self.sources_files[(job.model, job.dataset)]),
                    repeats=1 if job.probe else self.plan.repeats)
        env = {"OMP_NUM_THREADS": str(job.threads), **job.env}
        self.done += 1
        t = time.perf_counter()
        try:
            result, stderr = run_isolated("bench.child", spec, env, self.timeout)
        except MeasurementFailed as err:
            self.skip(job.id, f"failed: {err}")
            return None
        if job.system == "ct2":
            result["ct2_log"] = ct2_log(stderr)
        figures = []
        for w in result["workloads"].values():
            p = w["repeats"][0]
            figures.append(f"b{w['batch_size']} " + (f"{p['ms_p50']:.2f} ms p50" if w["batch_size"] == 1
                                                       else f"{p['sentences_per_s']:.1f} sent/s"))
        print(f"[{self.done}/{total} {time.perf_counter() - self.start:5.0f}s] {job.id}: {time.perf_counter() - t:.1f}s, "
              + ", ".join(figures) + (f", {result['ct2_log'].get('selected_isa')}" if job.system == "ct2" else ""),
              flush=True)
        if not job.probe:
            (self.sweep if job.sweep else self.rows).extend(results.job_rows(job, result, result.get("ct2_log")))
        return result


def prepare_models(args, systems, skip) -> dict:
    """role -> {"dirs": precision -> dir, "notes", "shortlist", "spm"} for the usable models."""
    wanted = {"en-de": (bool(systems & {"pyfastdec", "marian"}), None),
              "en-de-attn": (bool(systems & {"pyfastdec", "ct2", "marian", "onnx", "torch"}),
                                                                       "attention"),
              "uk-gec": (bool(systems & {"gec", "ct2"}), None)}
    paths = {"en-de": args.en_de, "en-de-attn": args.en_de_attn, "uk-gec": args.uk_gec}
    calibration = {"en-de": data.multi30k_val, "en-de-attn": data.multi30k_val, "uk-gec": data.uagec_val}
    prepared = {}
    for role, (needed, decoder_self) in wanted.items():
        if not needed or role not in args.roles:
            continue
        reason = models.availability(paths[role], arch="transformer", decoder_self=decoder_self)
        if reason:
            skip(f"every system on {role}", reason)
            continue
        try:
            dirs, notes = models.precisions(paths[role], calibration[role])
        except Exception as err:  # noqa: BLE001 - a run reports, never crashes, over one model
            skip(f"every system on {role}", f"preparing int8 / float32 failed: {err!r}")
            continue
        prepared[role] = {"dirs": {k: Path(v) for k, v in dirs.items()}, "notes": notes,
                          "shortlist": (Path(paths[role]) / "shortlist.bin").is_file(),
                          "spm": Path(paths[role]) / "spm.model", "path": str(paths[role])}
        print(f"{role}: " + "; ".join(f"{k}: {v}" for k, v in notes.items()), flush=True)
    return prepared


def prepare_heads_models(args, skip) -> dict:
    """role -> the same entry as prepare_models gives, for the models with proposal heads:
    run at the precision the directory has (its heads are stored at it; no twin is made)."""
    prepared = {}
    for role, attr in HEADS_ROLES.items():
        if role not in args.roles:
            continue
        path = getattr(args, attr)
        reason = models.availability(path, arch="transformer") if path is not None else \
            f"no model directory with proposal heads given (--{role})"
        if reason is None and models.proposal_heads(path) == 0:
            reason = f"{path}/config.json has no proposal heads (field 'heads')"
        if reason:
            skip(f"blockwise on {role}", reason)
            continue
        precision = "int8" if json.loads((Path(path) / "config.json").read_text()).get("quantization") else "float32"
        prepared[role] = {"dirs": {precision: Path(path)}, "notes": {precision: str(path)},
                          "shortlist": (Path(path) / "shortlist.bin").is_file(),
                          "spm": Path(path) / "spm.model", "path": str(path),
                          "heads": models.proposal_heads(path)}
        print(f"{role}: {path} ({precision}, {prepared[role]['heads']} proposal heads)", flush=True)
    return prepared


def prepare_bild_model(args, skip) -> dict:
    """{BILD_ROLE: entry} when --big and --little can run BiLD together: the big model at
    the precision it is stored in (the little model reads the encoder of exactly that
    directory), the little model and its thresholds; else {} and the reason skipped."""
    if args.little is None:
        skip("BiLD", f"no little model given (--little; {DEFAULT_LITTLE.relative_to(REPO_ROOT)} does not exist)")
        return {}
    reason = models.availability(args.big, arch="transformer") or \
        models.shared_pairing(args.big, args.little, "transformer", "little model")
    if reason:
        skip("BiLD", reason)
        return {}
    precision = "int8" if json.loads((Path(args.big) / "config.json").read_text()).get("quantization") else "float32"
    defaults = models.bild_defaults(args.little)
    entry = {"dirs": {precision: Path(args.big)}, "notes": {precision: str(args.big)},
             "shortlist": (Path(args.big) / "shortlist.bin").is_file(), "spm": Path(args.big) / "spm.model",
             "path": str(args.big), "little": str(args.little), "bild": defaults}
    print(f"{BILD_ROLE}: {args.big} ({precision}) with little model {args.little}; lossless fallback "
          f"{defaults['lossless']:g}, lossy {defaults['lossy']} ({defaults['source']})", flush=True)
    return {BILD_ROLE: entry}


def main(argv=None) -> dict:
    args = parse_args(argv)
    args.roles = _names(args.models, MODEL_ROLES, "--models") or MODEL_ROLES
    plan = make_plan(args)
    systems = set(args.systems.split(","))
    out = args.out
    (out / "sources").mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    env = environment()
    print(f"bench.run {'quick' if args.quick else 'full'}: {plan}", flush=True)

    not_run_early = []

    def skip(what, reason):
        not_run_early.append({"what": what, "reason": reason})
        print(f"  not run: {what}: {reason}", flush=True)

    prepared = prepare_models(args, systems, skip)
    if "heads" in systems:
        prepared.update(prepare_heads_models(args, skip))
    if "bild" in systems and BILD_ROLE in args.roles:
        prepared.update(prepare_bild_model(args, skip))

    # ---- data: every model's own tokenisation of the test sets
    test_sets, sources_files, source_lengths = {}, {}, {}
    try:
        test_sets["multi30k"] = data.multi30k_test(plan.n)
    except ValueError as err:  # export.data.DataError: missing or malformed shared data
        for role in ("en-de", "en-de-attn", *HEADS_ROLES, BILD_ROLE):
            if prepared.pop(role, None):
                skip(f"every system on {role}", f"Multi30k test set unreadable: {err}")
    if "uk-gec" in prepared:
        try:
            test_sets["uagec"] = data.uagec_test(plan.gec_n)
        except data.DataMissing as err:
            skip("uk-gec greedy, IAD and CTranslate2", str(err))
            del prepared["uk-gec"]
    for role, p in prepared.items():
        dataset = "uagec" if role == "uk-gec" else "multi30k"
        ids = data.tokenize(test_sets[dataset].sources, p["spm"])
        file = out / "sources" / f"{role}.{dataset}.json"
        file.write_text(json.dumps(ids))
        sources_files[(role, dataset)] = file
        source_lengths[(role, dataset)] = [len(s) for s in ids]

    runner = Runner(plan, sources_files, args.timeout)
    runner.not_run += not_run_early
    jobs = []

    # ---- pyfastdec on the translation models
    drafter_reason = models.availability(args.drafter, arch="nat-drafter")
    for role in ("en-de", "en-de-attn"):
        if role not in prepared or "pyfastdec" not in systems:
            continue
        p = prepared[role]
        reason = drafter_reason or models.compatible_drafter(Path(p["path"]), args.drafter)
        if reason:
            runner.skip(f"pyfastdec {role} GAD and GAD++", reason)
        if not p["shortlist"]:
            runner.skip(f"pyfastdec {role} with shortlist", f"no shortlist.bin in {p['path']}")
        jobs += planning.pyfastdec_jobs(plan, role, p["dirs"], p["shortlist"], None if reason else str(args.drafter))
    if "en-de" in prepared and "pyfastdec" in systems:
        jobs += gad_shared_jobs(runner, plan, prepared["en-de"], args.shared_drafter)
    for role in HEADS_ROLES:
        if role not in prepared:
            continue
        p = prepared[role]
        if not p["shortlist"]:
            runner.skip(f"pyfastdec {role} with shortlist", f"no shortlist.bin in {p['path']}")
        jobs += planning.pyfastdec_jobs(plan, role, p["dirs"], p["shortlist"], None, planning.HEADS_STRATEGIES)
    if BILD_ROLE in prepared:
        p = prepared[BILD_ROLE]
        if not p["shortlist"]:
            runner.skip("BiLD with shortlist", f"no shortlist.bin in {p['path']}")
        (precision, path), = p["dirs"].items()
        if plan.precisions is not None and precision not in plan.precisions:
            runner.skip("BiLD", f"{path} is {precision} (run as stored), and --precisions excludes it")
        jobs += planning.bild_jobs(plan, BILD_ROLE, precision, path, p["shortlist"], p["little"],
                                   p["bild"]["lossless"], p["bild"]["lossy"])
    if "uk-gec" in prepared and "gec" in systems:
        p = prepared["uk-gec"]
        if not p["shortlist"]:
            runner.skip("pyfastdec uk-gec with shortlist", f"no shortlist.bin in {p['path']}")
        jobs += planning.gec_jobs(plan, p["dirs"], p["shortlist"])

    jobs += planning.inter_jobs(plan, jobs)

    # ---- peers on en-de-attn's float32 weights
    ct2_settings = {}
    if "en-de-attn" in prepared:
        float_dir = prepared["en-de-attn"]["dirs"]["float32"]
        if "ct2" in systems:
            try:
                ct2_dirs = {q: models.ctranslate2_model(float_dir, q) for q in ("int8", "float32")
                            if plan.precisions is None or q in plan.precisions}
            except Exception as err:  # noqa: BLE001
                runner.skip("CTranslate2", f"conversion failed: {err!r}")
                ct2_dirs = None
            if ct2_dirs:
                ct2_settings = probe_ct2(runner, plan, ct2_dirs)
                jobs += planning.ct2_jobs(plan, ct2_dirs, ct2_settings["choices"])
                jobs += ct2_vmap_jobs(runner, plan, float_dir, ct2_dirs, ct2_settings["choices"])
        if "onnx" in systems:
            onnx_dirs = {}
            for precision in ("float32", "int8"):
                try:
                    onnx_dirs[precision] = models.onnx_model(float_dir, precision == "int8")
                except Exception as err:  # noqa: BLE001
                    runner.skip(f"onnxruntime {precision}", f"export failed: {err!r}")
            jobs += planning.peer_jobs(plan, "onnx", onnx_dirs)
        if "torch" in systems:
            jobs += planning.peer_jobs(plan, "torch", {"float32": float_dir})
    if "uk-gec" in prepared and "ct2" in systems:
        jobs += ct2_greedy_jobs(runner, plan, prepared["uk-gec"]["dirs"]["float32"], ct2_settings, "uk-gec", "uagec")
    if BILD_ROLE in prepared and "ct2" in systems and not _same_model_as_attn(prepared):
        try:  # the big model's float32 weights (an int8 one's dequantised twin, cached), which CTranslate2 converts
            big_float = prepared[BILD_ROLE]["dirs"].get("float32") or \
                models.precisions(prepared[BILD_ROLE]["path"], lambda: [])[0]["float32"]
        except Exception as err:  # noqa: BLE001
            runner.skip(f"CTranslate2 on {BILD_ROLE}", f"preparing float32 failed: {err!r}")
        else:
            jobs += ct2_greedy_jobs(runner, plan, big_float, ct2_settings, BILD_ROLE, "multi30k")
    marian_settings = marian_peer_jobs(runner, plan, prepared, jobs) if "marian" in systems else None
    for job in jobs:
        runner.run(job, len(jobs))

    # ---- figures derived from the measurements (the BiLD sweep's rows beside the main
    # rows, so that its points get quality, ratios and checks against the same greedy rows)
    rows, sweep = runner.rows, runner.sweep
    measured = rows + sweep
    references = {name: ts.references for name, ts in test_sets.items()}
    spm_of = {role: p["spm"] for role, p in prepared.items()}
    results.add_quality(measured, references, lambda model, outs: data.detokenize(outs, spm_of[model]))
    baselines = {}
    if "uagec" in test_sets and any(r["dataset"] == "uagec" for r in rows):
        n_gec = max(r["sentences"] for r in rows if r["dataset"] == "uagec")
        baselines["uagec"] = bleu_chrf(test_sets["uagec"].sources[:n_gec], references["uagec"][:n_gec])
    results.add_identical(measured)
    results.add_lossless_check(measured)
    shared_encoder_report.add_bild_identical(measured)
    results.add_ratios(measured)
    paths = {role: str(p["path"]) for role, p in prepared.items()}
    behind.add_peer_ratios(rows, {role: other for role, path in paths.items() for other in ("en-de", "en-de-attn")
                                  if role != other and paths.get(other) == path})
    marian.add_marian_ratios(rows)
    results.add_decoder_loop(measured)
    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    env["torch_isa"] = next((r["engine"].get("isa") for r in rows if r["system"] == "torch"), None)
    report_data = {
        "started": started, "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": [sys.executable, "-m", "bench.run"] + list(argv if argv is not None else sys.argv[1:]),
        "environment": env, "plan": vars(plan),
        "drafters": {"gad": str(args.drafter), "gad-shared": str(args.shared_drafter)},
        "models": {role: {"path": p["path"], "precisions": p["notes"], "shortlist": p["shortlist"],
                          "heads": p.get("heads", 0), **{k: p[k] for k in ("little", "bild") if k in p}}
                   for role, p in prepared.items()},
        "ct2_settings": ct2_settings.get("report"), "marian_settings": marian_settings, "noise": results.noise(rows), "baselines": baselines,
        "not_run": runner.not_run, "rows": rows, "bild_sweep": sweep}
    made = [plots.quality_vs_latency(rows, out / "quality_vs_latency.png"),
            plots.speedup_by_length(rows, source_lengths, out / "speedup_by_length.png"),
            plots.bild_pareto(shared_encoder_report.bild_sweep_points(measured), out / "bild_pareto.png")]
    report_data["plots"] = [p.name for p in made if p is not None]
    with gzip.open(out / "outputs.json.gz", "wt") as f:
        json.dump({f"{r['job']} {r['workload']}": data.detokenize(r["_outputs"], spm_of[r["model"]])
                   for r in measured}, f)
    saved = dict(report_data, rows=[{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
                 bild_sweep=[{k: v for k, v in r.items() if not k.startswith("_")} for r in sweep])
    (out / "results.json").write_text(json.dumps(saved, indent=1))
    (out / "report.md").write_text(report.markdown(saved))
    print(f"wrote {out}/report.md, results.json, {', '.join(report_data['plots'])} "
          f"({time.perf_counter() - runner.start:.0f} s)", flush=True)
    return saved


def gad_shared_jobs(runner: Runner, plan, p: dict, drafter: Path | None) -> list:
    """GAD on en-de's int8 directory with a drafter that reads its encoder output (issue
    15), with the shortlist when en-de has one; none, with the reason, when the drafter is
    missing or reads another encoder."""
    what = "pyfastdec en-de GAD with a shared-encoder drafter"
    if drafter is None:
        runner.skip(what, f"no shared-encoder drafter given (--shared-drafter; "
                          f"{DEFAULT_SHARED_DRAFTER.relative_to(REPO_ROOT)} does not exist)")
        return []
    if plan.precisions is not None and "int8" not in plan.precisions:
        runner.skip(what, "int8 only (the drafter reads the int8 verifier's encoder), and --precisions excludes it")
        return []
    reason = models.shared_pairing(p["dirs"]["int8"], drafter, "nat-drafter", "drafter")
    if reason:
        runner.skip(what, reason)
        return []
    return planning.gad_shared_jobs(plan, "en-de", p["dirs"]["int8"], p["shortlist"], str(drafter))


def marian_peer_jobs(runner: Runner, plan, prepared: dict, jobs: list) -> dict | None:
    """Marian's rows on en-de and en-de-attn (their float32 weights, converted), after a
    probe of its int8 GEMM types on en-de-attn; appends to jobs, returns the probe report."""
    try:
        import pymarian  # noqa: F401
    except ImportError as err:
        runner.skip("Marian", f"pymarian is not installed (pip install 'pyfastdec[bench-marian]'): {err}")
        return None
    converted = {}
    for role in ("en-de-attn", "en-de"):
        if role not in prepared:
            continue
        try:
            converted[role] = marian.marian_model(prepared[role]["dirs"]["float32"])
        except Exception as err:  # noqa: BLE001
            runner.skip(f"Marian on {role}", f"conversion failed: {err!r}")
    if not converted:
        return None
    probe_role = next(iter(converted))
    probes = []
    probe_list = marian.probe_jobs(plan, probe_role, converted[probe_role])
    for job in probe_list:
        result = runner.run(job, len(probe_list))
        if result is not None:
            probes.append((job, result))
    runner.done = 0
    gemm, table = marian.choose_gemm_type(probes)
    for role, path in converted.items():
        jobs += marian.marian_jobs(plan, role, path, gemm, prepared[role]["shortlist"])
    return {"probe_sentences": plan.probe_n, "probes": table, "chosen": gemm}


def ct2_vmap_jobs(runner: Runner, plan, float_dir: Path, ct2_dirs: dict, choices: dict) -> list:
    """CTranslate2 int8 greedy with the vocabulary map of en-de-attn's shortlist."""
    if "int8" not in ct2_dirs:
        return []
    try:
        vmap_dir = models.ctranslate2_vmap_model(float_dir, ct2_dirs["int8"], "int8")
    except Exception as err:  # noqa: BLE001 - a missing shortlist is a reason, not a crash
        runner.skip("CTranslate2 int8 with vocabulary map", f"{err}")
        return []
    return planning.ct2_jobs(plan, {"int8": vmap_dir}, choices, strategies=("greedy",), vmap=True)


def _same_model_as_attn(prepared: dict) -> bool:
    """BiLD's big model is en-de-attn itself, whose CTranslate2 rows the run has already."""
    return "en-de-attn" in prepared and \
        Path(prepared[BILD_ROLE]["path"]).resolve() == Path(prepared["en-de-attn"]["path"]).resolve()


def ct2_greedy_jobs(runner: Runner, plan, float_dir: Path, ct2_settings: dict, model: str, dataset: str) -> list:
    """CTranslate2 int8 greedy on another model's weights: the correction model (issue 16:
    IAD against it) or BiLD's big model (issue 15: BiLD against it), converted like
    en-de-attn's (pyfastdec.convert pads pruned layers to one shape per stack) and probed
    the same way on that model's sentences; its probes and choices join `ct2_settings`
    (what probe_ct2 returned for en-de-attn, or empty)."""
    if plan.precisions is not None and "int8" not in plan.precisions:
        return []
    try:
        ct2_dirs = {"int8": models.ctranslate2_model(float_dir, "int8")}
    except Exception as err:  # noqa: BLE001
        runner.skip(f"CTranslate2 on {model}", f"conversion failed: {err!r}")
        return []
    probed = probe_ct2(runner, plan, ct2_dirs, model=model, dataset=dataset)
    if not ct2_settings:
        ct2_settings.update(choices={}, report={"probe_sentences": plan.probe_n, "probes": [], "chosen": []})
    ct2_settings["choices"].update(probed["choices"])
    ct2_settings["report"]["probes"] += probed["report"]["probes"]
    ct2_settings["report"]["chosen"] += probed["report"]["chosen"]
    return planning.ct2_jobs(plan, ct2_dirs, probed["choices"], strategies=("greedy",), model=model, dataset=dataset)


def probe_ct2(runner: Runner, plan, ct2_dirs: dict, model: str = "en-de-attn", dataset: str = "multi30k") -> dict:
    """Measure every candidate setting briefly and choose the fastest per workload."""
    probes, table = [], []
    probe_jobs = planning.ct2_probe_jobs(plan, ct2_dirs, model=model, dataset=dataset)
    for job in probe_jobs:
        result = runner.run(job, len(probe_jobs))
        if result is None:
            continue
        probes.append((job, result))
        w = result["workloads"]
        table.append({"model": model, "precision": job.precision, "isa": job.env.get("CT2_FORCE_CPU_ISA", "default"),
                      "selected_isa": result["ct2_log"].get("selected_isa"), "intra": job.spec["intra"],
                      "inter": job.spec["inter"],
                      "b1_ms_p50": w["b1"]["repeats"][0]["ms_p50"] if "b1" in w else None,
                      "b32_sentences_per_s": w["b32"]["repeats"][0]["sentences_per_s"] if "b32" in w else None})
    runner.done = 0
    choices = planning.ct2_choose(probes)
    chosen = [dict(model=model, workload=wid, precision=prec, **{k: v for k, v in c.items() if k != "score"})
              for (prec, wid), c in sorted(choices.items())]
    return {"choices": choices, "report": {"probe_sentences": plan.probe_n, "probes": table, "chosen": chosen}}


if __name__ == "__main__":
    main()
