"""What one bench.run measures: the jobs, each one measuring process (bench/child.py)
running one system configuration over one or two workloads.

Workloads: Multi30k at batch 1 (latency, over the first `latency_n` sentences) and batch
32 (throughput, over `n`), and UA-GEC at batch 1 and 32 (both over the first `gec_n`
sentences, so IAD at batch 32 is checked against greedy at batch 1 as well), each with
a thread budget. A workload id reads `<dataset>-b<batch>-t<threads>`.

The matrix (`wanted`): every pyfastdec strategy x precision x shortlist, and every peer,
at 1 thread. With more threads only what the headline comparisons need, so a full run
fits its 30 minutes on 2 cores; `--quick` trims further to stay within 3 minutes;
`every_config` runs the whole matrix at every thread count. `strategies` and
`precisions` (bench.run --strategies / --precisions) keep only the rows named, e.g.
greedy and blockwise at int8 for the heads models' rows beside CTranslate2's. At more
than one thread, greedy, blockwise and IAD at batch 32 also run as CTranslate2's
inter_threads does (`inter_jobs`: setting `threads=1 inter=N`).

Models with proposal heads (issue 11) run greedy, `blockwise` (the cost policy users
get) and `blockwise-all` (all K proposals verified every iteration), at their own
precision, with and without their shortlist; greedy of the same directory is their
reference. CTranslate2 int8 greedy also runs with its vocabulary map from the
shortlist (`use_vmap`, bench/vmap.py), at the setting chosen for it without the map.

The correction model (issue 16) runs greedy and IAD, and CTranslate2 int8 greedy on its
own weights (probed like en-de-attn's, on UA-GEC sentences): `gec_jobs`, and the
CTranslate2 functions with model="uk-gec", dataset="uagec".

Models without an encoder of their own (issue 15): `gad-shared` is GAD with a drafter that
reads the verifier's encoder output, beside `gad` with the drafter that encodes again
(`gad_shared_jobs`); BiLD (`bild_jobs`) runs greedy of the big model, lossless `bild` and
the little model's lossy default (`bild-lossy`) at batch 1 and 32, and a sweep of
(fallback, rollback) points at batch 1 (BILD_GRID; BILD_GRID_QUICK under --quick) at the
fewest threads measured. Sweep points are jobs marked `sweep`: their rows go to the
report's BiLD section and plot, not to the main tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field

LATENCY_BATCH, THROUGHPUT_BATCH = 1, 32
CT2_ISAS = ("default", "AVX512")  # CTranslate2 picks AVX2 on AVX-512 machines unless forced


@dataclass
class Plan:
    n: int  # Multi30k sentences at batch 32
    latency_n: int  # Multi30k sentences at batch 1
    gec_n: int  # UA-GEC sentences at batch 1 and at batch 32
    repeats: int
    threads: list[int]
    probe_n: int  # sentences per CTranslate2 settings probe
    every_config: bool = False
    quick: bool = False
    strategies: tuple[str, ...] | None = None  # only these strategies (None: every one)
    precisions: tuple[str, ...] | None = None  # only these precisions (None: both)
    draft_policy: bool = True  # GAD and BiLD under their cost policies (False: draft every iteration)


@dataclass
class Job:
    system: str  # pyfastdec | ct2 | onnx | torch
    model: str  # en-de | en-de-attn | uk-gec
    precision: str  # int8 | float32
    strategy: str  # greedy | beam5 | gad | gad++ | iad | blockwise | blockwise-all
    threads: int  # thread budget of the workloads this job serves
    setting: str  # the engine settings, as the report shows them
    dataset: str  # multi30k | uagec
    serves: dict[str, list[str]]  # child workload name -> workload ids it is the row of
    spec: dict  # for bench.child; run.py adds sources_file and repeats
    env: dict = field(default_factory=dict)
    shortlist: bool = False
    probe: bool = False
    sweep: bool = False  # a BiLD sweep point: reported in its own section, not the main tables
    fields: dict = field(default_factory=dict)  # copied into each of its rows (BiLD: fallback, rollback)

    @property
    def id(self) -> str:
        sl = "+shortlist" if self.shortlist else ""
        return f"{self.system}/{self.model}/{self.precision}/{self.strategy}{sl}/{self.setting}"


POLICY_STRATEGIES = ("gad", "gad-shared", "gad++", "bild", "bild-lossy")  # the ones --no-draft-policy changes


def _policy(plan: Plan, strategy: str, spec: dict, setting: str) -> str:
    """Records in `spec` whether a GAD / BiLD job runs its cost policy; returns the
    setting the report shows ("policy=off" appended when it does not)."""
    if strategy not in POLICY_STRATEGIES:
        return setting
    spec["draft_policy"] = plan.draft_policy
    return setting if plan.draft_policy else setting + " policy=off"


def workload_id(dataset: str, batch_size: int, threads: int) -> str:
    return f"{dataset}-b{batch_size}-t{threads}"


def workload_limit(plan: Plan, dataset: str, batch_size: int) -> int:
    """Sentences a measured (not probing) workload runs over."""
    if dataset == "uagec":
        return plan.gec_n
    return plan.latency_n if batch_size == LATENCY_BATCH else plan.n


def _mt_workloads(plan: Plan, threads: int, batches=(LATENCY_BATCH, THROUGHPUT_BATCH)):
    spec = [{"name": f"b{b}", "batch_size": b, "limit": plan.latency_n if b == LATENCY_BATCH else plan.n}
            for b in batches]
    serves = {f"b{b}": [workload_id("multi30k", b, threads)] for b in batches}
    return spec, serves


def wanted(plan: Plan, system: str, precision: str, strategy: str, threads: int) -> bool:
    """Whether a configuration is measured at this thread budget."""
    if plan.strategies is not None and strategy not in plan.strategies:
        return False
    if plan.precisions is not None and precision not in plan.precisions:
        return False
    if plan.every_config:
        return True
    if plan.quick and precision == "float32" and strategy == "beam5":
        return False  # the slowest rows of all, and no headline compares them
    if threads == 1:
        return True
    # Beyond one thread: what the headline comparisons need. torch is the reference, not
    # a contender; the peers' greedy is what pyfastdec is compared with.
    if system == "torch":
        return False
    if plan.quick:
        return precision == "int8" and strategy in ("greedy", "gad", "gad-shared", "iad", "blockwise",
                                                    "blockwise-all", "bild")
    if system in ("ct2", "onnx"):
        return strategy == "greedy"
    return (precision == "int8" and strategy in ("greedy", "gad", "gad-shared", "gad++", "iad", "blockwise",
                                                 "blockwise-all", "bild", "bild-lossy")) or \
        (precision == "float32" and strategy == "greedy")


HEADS_STRATEGIES = ("greedy", "blockwise", "blockwise-all")


def pyfastdec_jobs(plan: Plan, model: str, dirs: dict, shortlist: bool, drafter: str | None,
                   strategies=("greedy", "beam5", "gad", "gad++")) -> list[Job]:
    """dirs: precision -> model directory; drafter: its path (None: GAD not run)."""
    jobs = []
    for threads in plan.threads:
        for precision, path in dirs.items():
            for strategy in strategies:
                if strategy in ("gad", "gad++") and drafter is None:
                    continue
                if not wanted(plan, "pyfastdec", precision, strategy, threads):
                    continue
                for sl in ((False, True) if shortlist else (False,)):
                    workloads, serves = _mt_workloads(plan, threads)
                    spec = {"system": "pyfastdec", "path": str(path), "threads": threads, "shortlist": sl,
                            "strategy": strategy, "drafter": drafter, "workloads": workloads}
                    setting = _policy(plan, strategy, spec, f"threads={threads}")
                    jobs.append(Job("pyfastdec", model, precision, strategy, threads, setting,
                                    "multi30k", serves, spec, shortlist=sl))
    return jobs


# pyfastdec rows beside CTranslate2's inter_threads at batch 32 (lossless strategies; the
# models' default ones).
INTER_STRATEGIES = ("greedy", "blockwise", "iad")


def inter_jobs(plan: Plan, jobs: list[Job]) -> list[Job]:
    """For each pyfastdec job of INTER_STRATEGIES at more than one thread, its batch-32
    workload again as CTranslate2 runs it with inter_threads: each batch cut into one
    sub-batch per thread, decoded at once by engines of one thread each (systems.py
    `inter`, as Translator(inter_threads=) decodes). Not under --quick."""
    if plan.quick:
        return []
    out, name = [], f"b{THROUGHPUT_BATCH}"
    for job in jobs:
        if job.system != "pyfastdec" or job.strategy not in INTER_STRATEGIES or job.threads < 2 \
                or job.sweep or name not in job.serves:
            continue
        spec = dict(job.spec, threads=1, inter=job.threads,
                    workloads=[w for w in job.spec["workloads"] if w["name"] == name])
        out.append(Job(job.system, job.model, job.precision, job.strategy, job.threads,
                       f"threads=1 inter={job.threads}", job.dataset, {name: job.serves[name]}, spec, dict(job.env),
                       shortlist=job.shortlist, fields=dict(job.fields)))
    return out


def gad_shared_jobs(plan: Plan, model: str, path, shortlist: bool, drafter: str) -> list[Job]:
    """GAD with a shared-encoder drafter on the verifier `path` (int8: the drafter reads
    the encoder of exactly that directory), with its shortlist when it has one (the
    fastest setting, as the separate drafter's `gad` rows beside it)."""
    jobs = []
    for threads in plan.threads:
        if not wanted(plan, "pyfastdec", "int8", "gad-shared", threads):
            continue
        workloads, serves = _mt_workloads(plan, threads)
        spec = {"system": "pyfastdec", "path": str(path), "threads": threads, "shortlist": shortlist,
                "strategy": "gad-shared", "drafter": drafter, "workloads": workloads}
        setting = _policy(plan, "gad-shared", spec, f"threads={threads}")
        jobs.append(Job("pyfastdec", model, "int8", "gad-shared", threads, setting, "multi30k",
                        serves, spec, shortlist=shortlist, fields={"drafter": drafter}))
    return jobs


# BiLD's sweep at batch 1: every fallback x rollback (rollback 0: lossless, = big greedy).
BILD_GRID = ((0.3, 0.5, 0.7, 0.9), (0.0, 0.5, 1.0, 2.0, 3.0))
BILD_GRID_QUICK = ((0.3, 0.5, 0.9), (0.0, 1.0, 3.0))


def bild_grid(plan: Plan) -> list[tuple[float, float]]:
    fallbacks, rollbacks = BILD_GRID_QUICK if plan.quick else BILD_GRID
    return [(f, r) for f in fallbacks for r in rollbacks]


def _bild_strategy(rollback: float) -> str:
    return "bild-lossy" if rollback > 0 else "bild"


def bild_jobs(plan: Plan, model: str, precision: str, path, shortlist: bool, little: str,
              lossless_fallback: float, lossy: tuple[float, float]) -> list[Job]:
    """Greedy of the big model `path`, BiLD with the little model at its defaults
    (lossless: rollback 0 at `lossless_fallback`; lossy: (fallback, rollback)) at batch
    1 and 32 at every thread count wanted, and the sweep (bild_grid) at batch 1 at the
    fewest threads, each point its own job; a point equal to a default is that default's
    batch-1 row. The little model runs with the big model's shortlist when it has one."""
    jobs = []

    def job(strategy, threads, workloads, serves, fallback=None, rollback=None, default=None, sweep=False):
        spec = {"system": "pyfastdec", "path": str(path), "threads": threads, "shortlist": shortlist,
                "strategy": strategy, "drafter": None, "workloads": workloads}
        setting, fields = f"threads={threads}", {}
        if strategy != "greedy":
            spec.update(little=little, fallback=fallback, rollback=rollback)
            setting = _policy(plan, strategy, spec, setting + f" fallback={fallback:g} rollback={rollback:g}")
            fields = {"little": little, "fallback": fallback, "rollback": rollback, "bild_default": default}
        return Job("pyfastdec", model, precision, strategy, threads, setting, "multi30k", serves, spec,
                   shortlist=shortlist, sweep=sweep, fields=fields)

    defaults = {"lossless": (lossless_fallback, 0.0), "lossy": lossy}
    for threads in plan.threads:
        workloads, serves = _mt_workloads(plan, threads)
        if wanted(plan, "pyfastdec", precision, "greedy", threads):
            jobs.append(job("greedy", threads, workloads, serves))
        for name, (fallback, rollback) in defaults.items():
            strategy = _bild_strategy(rollback)
            if wanted(plan, "pyfastdec", precision, strategy, threads):
                jobs.append(job(strategy, threads, workloads, serves, fallback, rollback, name))
    sweep_threads = min(plan.threads)
    workloads, serves = _mt_workloads(plan, sweep_threads, batches=(LATENCY_BATCH,))
    for fallback, rollback in bild_grid(plan):
        strategy = _bild_strategy(rollback)
        if (fallback, rollback) in defaults.values() or not wanted(plan, "pyfastdec", precision, strategy,
                                                                   sweep_threads):
            continue
        jobs.append(job(strategy, sweep_threads, workloads, serves, fallback, rollback, sweep=True))
    return jobs


def gec_jobs(plan: Plan, dirs: dict, shortlist: bool) -> list[Job]:
    """Greedy and IAD on the correction model, each at batch 1 (latency) and batch 32
    (throughput) in one process."""
    jobs = []
    batches = (LATENCY_BATCH, THROUGHPUT_BATCH)
    for threads in plan.threads:
        for precision, path in dirs.items():
            for strategy in ("greedy", "iad"):
                if not wanted(plan, "pyfastdec", precision, strategy, threads):
                    continue
                for sl in ((False, True) if shortlist else (False,)):
                    spec = {"system": "pyfastdec", "path": str(path), "threads": threads, "shortlist": sl,
                            "strategy": strategy, "drafter": None,
                            "workloads": [{"name": f"b{b}", "batch_size": b, "limit": plan.gec_n} for b in batches]}
                    serves = {f"b{b}": [workload_id("uagec", b, threads)] for b in batches}
                    jobs.append(Job("pyfastdec", "uk-gec", precision, strategy, threads, f"threads={threads}",
                                    "uagec", serves, spec, shortlist=sl))
    return jobs


def peer_jobs(plan: Plan, system: str, dirs: dict, strategies=("greedy",)) -> list[Job]:
    """onnxruntime (dirs: its exports) or torch (dirs: {"float32": model dir})."""
    jobs = []
    for threads in plan.threads:
        for precision, path in dirs.items():
            for strategy in strategies:
                if not wanted(plan, system, precision, strategy, threads):
                    continue
                workloads, serves = _mt_workloads(plan, threads)
                spec = {"system": system, "path": str(path), "threads": threads, "strategy": strategy,
                        "workloads": workloads}
                jobs.append(Job(system, "en-de-attn", precision, strategy, threads, f"threads={threads}",
                                "multi30k", serves, spec, env={"OMP_NUM_THREADS": str(threads)}))
    return jobs


# ---------------------------------------------------------------- CTranslate2
def _ct2_job(plan: Plan, dirs: dict, precision: str, strategy: str, isa: str, intra: int, inter: int,
             threads: int, batches, probe: bool, vmap: bool = False, model: str = "en-de-attn",
             dataset: str = "multi30k") -> Job:
    limit = plan.probe_n if probe else None
    workloads = [{"name": f"b{b}", "batch_size": b, "limit": limit or workload_limit(plan, dataset, b)}
                 for b in batches]
    spec = {"system": "ct2", "path": str(dirs[precision]), "compute_type": precision, "intra": intra,
            "inter": inter, "strategy": strategy, "workloads": workloads, "vmap": vmap}
    env = {"OMP_NUM_THREADS": str(intra), "CT2_VERBOSE": "1"}  # the log names the ISA it selected
    if isa != "default":
        env["CT2_FORCE_CPU_ISA"] = isa
    setting = f"intra={intra} inter={inter} isa={isa}"
    return Job("ct2", model, precision, strategy, threads, setting, dataset,
               {f"b{b}": [] for b in batches}, spec, env, shortlist=vmap, probe=probe)


def ct2_candidates(threads: int) -> dict[int, list[tuple[int, int]]]:
    """Batch size -> the (intra, inter) settings CTranslate2 may use with this budget:
    fewer threads than the budget are allowed (on 2 vCPUs intra_threads=2 measured 10x
    slower than 1 at batch 1, bench/README.md); inter_threads splits a batch over workers."""
    if threads == 1:
        return {LATENCY_BATCH: [(1, 1)], THROUGHPUT_BATCH: [(1, 1)]}
    return {LATENCY_BATCH: [(1, 1), (threads, 1)], THROUGHPUT_BATCH: [(threads, 1), (1, threads)]}


def ct2_probe_jobs(plan: Plan, dirs: dict, model: str = "en-de-attn", dataset: str = "multi30k") -> list[Job]:
    """Greedy on the first probe_n sentences for every candidate setting x ISA; one job
    per (precision, ISA, intra, inter), serving every batch size that setting is a
    candidate for. model / dataset: the model dirs hold and the sentences it runs on."""
    jobs = {}
    for threads in plan.threads:
        for batch, settings in ct2_candidates(threads).items():
            for intra, inter in settings:
                for precision in dirs:
                    if not wanted(plan, "ct2", precision, "greedy", threads):
                        continue
                    for isa in CT2_ISAS:
                        key = (precision, isa, intra, inter)
                        if key not in jobs:
                            jobs[key] = _ct2_job(plan, dirs, precision, "greedy", isa, intra, inter,
                                                 max(intra, inter), [], probe=True, model=model, dataset=dataset)
                        job = jobs[key]
                        if f"b{batch}" not in job.serves:
                            job.serves[f"b{batch}"] = []
                            job.spec["workloads"].append({"name": f"b{batch}", "batch_size": batch,
                                                          "limit": plan.probe_n})
                        job.serves[f"b{batch}"].append(workload_id(dataset, batch, threads))
    return list(jobs.values())


def ct2_choose(probes: list[tuple[Job, dict]]) -> dict[tuple[str, str], dict]:
    """(precision, workload id) -> the fastest probed setting: lowest ms p50 at batch 1,
    most sentences/s at batch 32. probes: (job, child result) of the successful probes."""
    best = {}
    for job, result in probes:
        for name, ids in job.serves.items():
            figures = result["workloads"][name]["repeats"][0]
            latency = name == f"b{LATENCY_BATCH}"
            score = -figures["ms_p50"] if latency else figures["sentences_per_s"]
            for wid in ids:
                key = (job.precision, wid)
                if key not in best or score > best[key]["score"]:
                    best[key] = {"score": score, "isa": job.env.get("CT2_FORCE_CPU_ISA", "default"),
                                 "intra": job.spec["intra"], "inter": job.spec["inter"], "batch": name}
    return best


def ct2_jobs(plan: Plan, dirs: dict, choices: dict, strategies=("greedy", "beam5"), vmap: bool = False,
             model: str = "en-de-attn", dataset: str = "multi30k") -> list[Job]:
    """The measured CTranslate2 rows, each workload with its chosen setting; beam search
    uses the setting greedy chose. Workloads sharing a setting share a process, and a
    setting chosen for two budgets (e.g. intra=1 at batch 1 with 1 and with 2 threads) is
    measured once and reported for both. vmap: dirs are the models with a vocabulary map,
    run with use_vmap at the setting chosen without it (rows marked shortlist). Only the
    choices of `dataset`'s workloads are used."""
    jobs = {}
    for (precision, wid), choice in sorted(choices.items()):
        if precision not in dirs or not wid.startswith(f"{dataset}-b"):
            continue
        threads = int(wid.rsplit("-t", 1)[1])
        for strategy in strategies:
            if not wanted(plan, "ct2", precision, strategy, threads):
                continue
            key = (precision, strategy, choice["isa"], choice["intra"], choice["inter"])
            if key not in jobs:
                jobs[key] = _ct2_job(plan, dirs, precision, strategy, choice["isa"], choice["intra"],
                                     choice["inter"], threads, [], probe=False, vmap=vmap, model=model,
                                     dataset=dataset)
            job = jobs[key]
            batch = int(choice["batch"][1:])
            if choice["batch"] not in job.serves:
                job.serves[choice["batch"]] = []
                job.spec["workloads"].append({"name": choice["batch"], "batch_size": batch,
                                              "limit": workload_limit(plan, dataset, batch)})
            job.serves[choice["batch"]].append(wid)
    return list(jobs.values())
