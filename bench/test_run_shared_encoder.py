"""bench.run's issue-15 rows end to end: GAD with a shared-encoder drafter beside GAD with
the separate drafter, and BiLD (greedy of the big model, lossless and lossy defaults at
batch 1 and 32, the (fallback, rollback) sweep, its Pareto front and bild_pareto.png),
with --quick --limit.

    pytest bench/test_run_shared_encoder.py

Two sets of models: "tiny" (trained for seconds on export/tiny_task.py's task, written
here: an SSRU verifier with a shortlist, its shared-encoder drafter and a separate
drafter; an attention big model with a shortlist and its little model), always run, with
--no-draft-policy so that every lossless row drafts and accepts drafts in its timed
passes; and "shipped": models/en-de with the shared drafter and models/en-de-big with
the little model, from $FASTDEC_BENCH_SHARED_DRAFTER / $FASTDEC_BENCH_LITTLE or the
default directories bench.run looks for, skipped when absent, under the cost policies
(what Translator runs; they may not draft at all on 6 sentences).

Checked against references outside the code under test: the lossless rows' outputs
against greedy decoded here, in this process (pyfastdec.decoding.greedy), the run's own
check must have compared them (a skipped check fails), the tiny rows must have accepted
drafts (else the check proves nothing), and the BiLD grid is the one bench/plan.py
declares for --quick.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="building the tiny models needs torch")

from bench import plan as planning  # noqa: E402
from bench.run import BILD_ROLE, DEFAULT_LITTLE, DEFAULT_SHARED_DRAFTER, REPO_ROOT  # noqa: E402

LIMIT = 6
FIRST_WORD, UNK, BOS, EOS = 5, 1, 2, 3


def task_shortlist(vocab: int):
    """Each word: itself and its task translation (export.tiny_task._MAP), so the tiny
    models' outputs mostly stay in their lists; a few frequent ids on top."""
    from export.tiny_task import _MAP
    from pyfastdec.model_dir.shortlist import Shortlist

    indptr, targets = [0], []
    for f in range(vocab):
        targets += [] if f < FIRST_WORD else sorted({f, _MAP[f]})
        indptr.append(len(targets))
    return Shortlist(vocab, [UNK, BOS, EOS, 7, 20], indptr, targets, best=2, first_fill_id=FIRST_WORD)


def tiny_models(root: Path) -> dict:
    from export.calibrate import calibrate
    from export.rehash import rehash
    from export.tiny import TINY_VOCAB, tiny_spm
    from export.tiny_task import task_sources, trained_drafter, trained_shared, trained_verifier, translate
    from export.writer import write_model_dir
    from pyfastdec.model_dir import encoder_digest

    spm = tiny_spm(root / "spm.model")
    pairs = [(s[:-1], translate(s)) for s in task_sources(32, seed=5)]

    def int8(model, name):
        return write_model_dir(model, spm, root / name, act_scales=calibrate(model, pairs), int8=True)

    dirs = {}
    for role, host_self, kind in (("en-de", "ssru", "drafter"), ("big", "attention", "little")):
        host = int8(trained_verifier(host_self), role)
        task_shortlist(TINY_VOCAB).save(host / "shortlist.bin")
        rehash(host)  # the checksum lists the shortlist
        shared = trained_shared(kind, host_self)
        shared.cfg.encoder_shared = encoder_digest(host)
        dirs[role], dirs[kind] = host, int8(shared, kind)
    dirs["separate"] = int8(trained_drafter(), "separate")
    return dirs


def task_test_set(spm_path: Path, n: int):
    """The tiny models' task as the test set bench.run reads (text through their spm):
    Multi30k through a 40-piece vocabulary would make them emit junk to the length limit
    and never accept a draft, so the run would check nothing."""
    import sentencepiece as spm

    from bench.data import TestSet
    from export.tiny_task import task_sources, translate

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    sources = task_sources(n, seed=77)
    return TestSet("tiny task", [sp.decode(s[:-1]) or "a" for s in sources],
                   [sp.decode(translate(s)) for s in sources])


def shipped_models() -> dict | None:
    shared = Path(os.environ.get("FASTDEC_BENCH_SHARED_DRAFTER", DEFAULT_SHARED_DRAFTER))
    little = Path(os.environ.get("FASTDEC_BENCH_LITTLE", DEFAULT_LITTLE))
    if not (shared.is_dir() and little.is_dir()):
        return None
    models = REPO_ROOT / "models"
    return {"en-de": models / "en-de", "drafter": shared, "separate": models / "en-de-drafter-separate",
            "big": models / "en-de-big", "little": little}


# Every test that takes `run` is marked slow: the fixture builds models (tiny ones trained
# here, or the shipped ones converted) and runs bench.run, each measurement in a child process.
@pytest.fixture(scope="module", params=["tiny", "shipped"])
def run(request, tmp_path_factory):
    import bench.data
    import bench.models
    from bench import run as bench_run

    root = tmp_path_factory.mktemp(request.param)
    dirs = tiny_models(root) if request.param == "tiny" else shipped_models()
    if dirs is None:
        pytest.skip(f"no shared-encoder drafter and little model ({DEFAULT_SHARED_DRAFTER}, {DEFAULT_LITTLE}; "
                    "$FASTDEC_BENCH_SHARED_DRAFTER, $FASTDEC_BENCH_LITTLE)")
    mp = pytest.MonkeyPatch()
    mp.setattr(bench.models, "CACHE", root / "cache")
    if request.param == "tiny":
        test_set = task_test_set(dirs["en-de"] / "spm.model", LIMIT)
        mp.setattr(bench.data, "multi30k_test", lambda limit=None: test_set)
    try:
        out = root / "out"
        results = bench_run.main([
            "--quick", "--limit", str(LIMIT), "--threads", "1", "--out", str(out),
            "--systems", "pyfastdec,bild,ct2", "--models", f"en-de,{BILD_ROLE}", "--precisions", "int8",
            "--strategies", "greedy,gad,gad-shared,bild,bild-lossy",
            # The tiny run drafts every iteration, so that its rows accept drafts in the timed
            # passes (the policies would spend their exploration on the warm-up sentence)
            *(["--no-draft-policy"] if request.param == "tiny" else []),
            "--en-de", str(dirs["en-de"]), "--drafter", str(dirs["separate"]),
            "--shared-drafter", str(dirs["drafter"]), "--big", str(dirs["big"]), "--little", str(dirs["little"])])
    finally:
        mp.undo()
    return {"out": out, "results": results, "dirs": dirs, "policy": request.param != "tiny"}


def _rows(rows, **want):
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


def _greedy_here(model_dir: Path, sources_file: Path, shortlist: bool) -> list[str]:
    from bench.data import detokenize
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import greedy

    sources = json.loads(sources_file.read_text())[:LIMIT]
    ids, _ = greedy(NativeBackend(model_dir, threads=1, shortlist=shortlist), sources)
    return detokenize(ids, model_dir / "spm.model")


@pytest.mark.slow
def test_gad_shared_rows_beside_gad_with_their_figures(run):
    rows = run["results"]["rows"]
    for batch in (1, 32):
        group = {s: _rows(rows, model="en-de", strategy=s, shortlist=True, batch_size=batch)
                 for s in ("greedy", "gad", "gad-shared")}
        assert all(len(g) == 1 for g in group.values()), (batch, {s: len(g) for s, g in group.items()})
        shared, greedy = group["gad-shared"][0], group["greedy"][0]
        assert shared["lossless_equal"] is True and shared["vs_greedy"] > 0
        assert shared["encoder_s"] > 0 and shared["drafter_s"] >= 0
        if not run["policy"]:  # it drafts every iteration: attaching and drafting count as drafter time
            assert shared["drafter_s"] > 0 and shared["accepted_per_iteration"] > 0
        assert shared["tokens_per_iteration"] >= 1.0 and shared["accepted_per_iteration"] >= 0.0
        assert shared["drafter"] == str(run["dirs"]["drafter"])
        stats = shared["decode_stats"]
        assert shared["accepted_per_iteration"] == pytest.approx(stats["accepted"] / stats["row_steps"])
        if batch == 1:
            assert shared["ms_p50"] > 0 and greedy["ms_p50"] > 0
    report = (run["out"] / "report.md").read_text()
    assert "## GAD with a shared-encoder drafter (issue 15)" in report
    assert "| en-de | int8 | yes | gad-shared | verifier's encoder | 1 | 1 |" in report


@pytest.mark.slow
def test_bild_rows_defaults_and_sweep(run):
    results = run["results"]
    rows, sweep = results["rows"], results["bild_sweep"]
    for batch in (1, 32):
        for strategy in ("greedy", "bild", "bild-lossy"):
            got = _rows(rows, system="pyfastdec", model=BILD_ROLE, strategy=strategy, batch_size=batch)
            assert len(got) == 1, (strategy, batch)
            assert got[0]["shortlist"] and got[0]["bleu"] is not None
            if strategy != "greedy":
                assert got[0]["bild_default"] == ("lossy" if strategy == "bild-lossy" else "lossless")
                assert got[0]["vs_greedy"] > 0
    # The sweep: --quick's grid, each point once (a default's batch-1 row stands for its point)
    points = {(r["fallback"], r["rollback"]) for r in rows + sweep
              if r["strategy"] in ("bild", "bild-lossy") and r["batch_size"] == 1}
    assert points >= set(planning.bild_grid(planning.Plan(n=1, latency_n=1, gec_n=1, repeats=1, threads=[1],
                                                          probe_n=1, quick=True)))
    assert len(sweep) == len(points) - 2 and all(r["batch_size"] == 1 and r["bleu"] is not None for r in sweep)
    assert all(r["strategy"] == ("bild" if r["rollback"] == 0 else "bild-lossy") for r in sweep)
    report = (run["out"] / "report.md").read_text()
    assert "## BiLD: a little model over the big model's encoder (issue 15)" in report
    assert "### Sweep at batch 1" in report and "Pareto front, fastest first:" in report
    assert (run["out"] / "bild_pareto.png").stat().st_size > 10_000
    assert "bild_pareto.png" in results["plots"]
    # The sweep's rows stay out of the main tables: one batch-1 BiLD line per default
    main_b1 = report.split("## Multi30k test_2016_flickr En-De, batch 1 (latency)")[1].split("## ")[0]
    assert main_b1.count(f"| {BILD_ROLE} |") == 4  # and CTranslate2's greedy on the big model


@pytest.mark.slow
def test_bild_is_compared_with_ctranslate2_on_the_big_models_weights(run):
    from bench.results import speed

    rows = run["results"]["rows"]
    for batch in (1, 32):
        ct2 = _rows(rows, system="ct2", model=BILD_ROLE, precision="int8", strategy="greedy", batch_size=batch)
        assert len(ct2) == 1 and ct2[0]["bleu"] is not None, batch
        for strategy in ("greedy", "bild", "bild-lossy"):
            row, = _rows(rows, system="pyfastdec", model=BILD_ROLE, strategy=strategy, batch_size=batch)
            assert row["vs_ct2_int8_greedy"] == pytest.approx(speed(row) / speed(ct2[0]))


@pytest.mark.slow
def test_lossless_rows_equal_greedy_decoded_here(run):
    """Every lossless row (gad, gad-shared, bild at rollback 0: both defaults' batch sizes
    and the sweep's rollback-0 points) was checked by the run (a skipped check fails) and
    its outputs equal greedy decoded here; some row accepted drafted tokens."""
    results, out = run["results"], run["out"]
    with gzip.open(out / "outputs.json.gz", "rt") as f:
        texts = json.load(f)
    expected = {role: _greedy_here(run["dirs"]["big" if role == BILD_ROLE else role],
                                   out / "sources" / f"{role}.multi30k.json", shortlist=True)
                for role in ("en-de", BILD_ROLE)}
    lossless = [r for r in results["rows"] + results["bild_sweep"]
                if r["strategy"] in ("gad", "gad-shared", "bild") and r["shortlist"]]
    assert {(r["strategy"], r["batch_size"]) for r in lossless} == \
        {(s, b) for s in ("gad", "gad-shared", "bild") for b in (1, 32)}
    for r in lossless:
        assert r["lossless_equal"] is True, r["job"]
        assert texts[f"{r['job']} {r['workload']}"] == expected[r["model"]], r["job"]
    for r in results["rows"] + results["bild_sweep"]:
        if r["strategy"] == "bild-lossy":
            assert r["lossless_equal"] is None and 0 <= r["identical_to_big_greedy"] <= 1
    if not run["policy"]:  # drafts were verified and some kept, so the check above compared something
        for strategy in ("gad-shared", "bild"):
            assert all(r["decode_stats"]["accepted"] > 0 for r in lossless if r["strategy"] == strategy)
    checked = sum(1 for r in results["rows"] + results["bild_sweep"] if r.get("lossless_equal") is not None)
    assert f"{checked} of {checked} rows identical" in (out / "report.md").read_text()


def test_missing_shared_models_are_reasons(tmp_path):
    """No shared drafter or little model: "not run" with the reason; one over another
    model's encoder: the reason names encoder.shared."""
    from bench import run as bench_run

    out = tmp_path / "out"
    models = REPO_ROOT / "models"
    results = bench_run.main(["--quick", "--limit", "2", "--threads", "1", "--out", str(out),
                              "--systems", "pyfastdec,bild", "--models", f"en-de,{BILD_ROLE}",
                              "--strategies", "greedy", "--precisions", "int8",
                              "--shared-drafter", str(tmp_path / "absent"), "--little", str(models / "en-de-drafter")])
    reasons = {x["what"]: x["reason"] for x in results["not_run"]}
    assert "absent not found" in reasons["pyfastdec en-de GAD with a shared-encoder drafter"]
    assert "'nat-drafter' model, not 'transformer'" in reasons["BiLD"]
    assert not any(r["model"] == BILD_ROLE or r["strategy"] == "gad-shared" for r in results["rows"])


@pytest.mark.slow
def test_a_shared_model_over_another_encoder_is_a_reason(run):
    from bench.models import shared_pairing

    dirs = run["dirs"]
    assert shared_pairing(dirs["en-de"], dirs["drafter"], "nat-drafter", "drafter") is None
    assert "encoder.shared" in shared_pairing(dirs["big"], dirs["drafter"], "nat-drafter", "drafter")
    assert "encoder of its own" in shared_pairing(dirs["en-de"], dirs["separate"], "nat-drafter", "drafter")
