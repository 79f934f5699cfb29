"""bench.run end to end on tiny random models (about a minute; not in the default test
run, and skipped under --benchmark-only): every system produces rows with figures and
quality, missing pieces become 'not run' entries, and the report and plots are written.

    pytest bench/test_run_smoke.py

Each preparation path is exercised: a float32 model with an int8 `-int8` sibling
(en-de-attn), a float32 model the benchmark calibrates itself (en-de, SSRU, on the
Multi30k validation split), and an int8 model whose float32 twin is dequantised (uk-gec).
The correction rows (issue 16: greedy and IAD at batch 1 and 32, CTranslate2 int8 greedy
on the same weights, iterations per sentence and tokens per iteration) are checked in the
full run and in one restricted to them (`--models uk-gec --systems gec,ct2`).
"""
from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch", reason="building the tiny models needs torch")
pytest.importorskip("ctranslate2", reason="the 'bench' extra")
pytest.importorskip("onnxruntime", reason="the 'bench' extra")

from export.calibrate import calibrate  # noqa: E402
from export.modeling import LayerSpec, ModelConfig, Seq2Seq  # noqa: E402
from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.writer import write_model_dir  # noqa: E402

UAGEC_LINES = ["a man runs in the park .", "two dogs plays with a ball .", "the girl sits near water ."]


def uniform_model(seed: int, decoder_self: str = "attention") -> Seq2Seq:
    """Tiny, with one head count per stack (CTranslate2 cannot express per-layer heads)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=16, head_dim=4, vocab_size=40, norm="pre", encoder_layers=[LayerSpec(4, 32)] * 2,
                      decoder_layers=[LayerSpec(4, 32)] * 2, decoder_self=decoder_self, max_source_len=256)
    return Seq2Seq(cfg).eval()


def int8_dir(model, spm, out):
    pairs = [(s[:-1], s[:-1][::-1]) for s in random_sources(16, seed=5)]
    return write_model_dir(model, spm, out, act_scales=calibrate(model, pairs), int8=True)


# Every test that takes `run` or `gec_run` is marked slow: the fixture builds models (tiny ones trained
# here, or the shipped ones converted) and runs bench.run, each measurement in a child process.
@pytest.fixture(scope="module")
def models_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    spm = tiny_spm(root / "spm.model")
    attn = uniform_model(1)
    write_model_dir(attn, spm, root / "en-de-attn")
    int8_dir(attn, spm, root / "en-de-attn-int8")
    write_model_dir(uniform_model(2, "ssru"), spm, root / "en-de")
    write_model_dir(tiny_model(seed=3, arch="nat-drafter"), spm, root / "drafter")
    int8_dir(uniform_model(4), spm, root / "uk-gec")
    gec = root / "uagec"
    gec.mkdir()
    for name in ("test.src", "test.tgt", "val.src", "val.tgt"):
        with gzip.open(gec / f"{name}.gz", "wt") as f:
            f.write("\n".join(UAGEC_LINES) + "\n")
    (gec / "stats.json").write_text('{"layer": "gec-only"}')  # marks the corpus complete (export.uagec)
    return root


def bench_main(root, out, *args):
    import bench.models
    from bench import run as bench_run

    mp = pytest.MonkeyPatch()
    mp.setenv("FASTDEC_UAGEC", str(root / "uagec"))
    mp.setattr(bench.models, "CACHE", root / "cache")
    try:
        bench_run.main(["--threads", "1", "--out", str(out), "--en-de", str(root / "en-de"),
                        "--en-de-attn", str(root / "en-de-attn"), "--drafter", str(root / "drafter"),
                        "--uk-gec", str(root / "uk-gec"), *args])
    finally:
        mp.undo()
    return out


@pytest.fixture(scope="module")
def run(models_root):
    # Only the tiny models: the heads roles default to the shipped models/en-de when it has
    # proposal heads (bench/test_run_blockwise.py runs them on a tiny model of their own)
    return bench_main(models_root, models_root / "out", "--limit", "6", "--repeats", "2",
                      "--models", "en-de,en-de-attn,uk-gec")


@pytest.fixture(scope="module")
def gec_run(models_root):
    return bench_main(models_root, models_root / "out-gec", "--limit", "6", "--repeats", "1",
                      "--models", "uk-gec", "--systems", "gec,ct2", "--precisions", "int8")


@pytest.mark.slow
def test_every_system_has_rows_with_figures(run):
    results = json.loads((run / "results.json").read_text())
    rows = results["rows"]
    seen = {(r["system"], r["model"], r["precision"], r["strategy"]) for r in rows}
    for precision in ("int8", "float32"):
        for model in ("en-de", "en-de-attn"):
            for strategy in ("greedy", "beam5", "gad", "gad++"):
                assert ("pyfastdec", model, precision, strategy) in seen
        for strategy in ("greedy", "beam5"):
            assert ("ct2", "en-de-attn", precision, strategy) in seen
        assert ("onnx", "en-de-attn", precision, "greedy") in seen
        assert ("pyfastdec", "uk-gec", precision, "iad") in seen
    assert ("torch", "en-de-attn", "float32", "greedy") in seen
    assert ("ct2", "uk-gec", "int8", "greedy") in seen
    for r in rows:
        assert len(r["repeats"]) == 2 and r["sentences"] == (3 if r["dataset"] == "uagec" else 6)
        assert r["peak_rss_mb"] > 0 and r["load_s"] > 0 and r["bleu"] is not None
        if r["batch_size"] == 1:
            assert r["ms_p50_min"] <= r["ms_p50"] <= r["ms_p50_max"] and len(r["sentence_ms"]) == r["sentences"]
        if r["system"] != "ct2" or r["precision"] == "int8":
            assert r["vs_ct2_int8_greedy"] is not None, r["job"]


@pytest.mark.slow
def test_lossless_strategies_equal_greedy(run):
    rows = json.loads((run / "results.json").read_text())["rows"]
    for r in rows:
        if r["system"] == "pyfastdec" and r["strategy"] in ("greedy", "gad", "iad"):
            assert r["identical_to_greedy"] == 1.0, r["job"]
        if r["system"] in ("torch", "onnx") and r["precision"] == "float32":
            assert r["identical_reference"].startswith("pyfastdec/en-de-attn/float32/greedy")


@pytest.mark.slow
def test_ct2_settings_are_probed_and_reported(run):
    results = json.loads((run / "results.json").read_text())
    probes = results["ct2_settings"]["probes"]
    # Forcing AVX512 is probed everywhere; on a CPU without it that probe fails, which
    # bench.run reports as not run, so only the default remains in the table.
    import pyfastdec

    avx512 = pyfastdec.cpu_info()["detected"] in ("avx512", "vnni", "amx")
    assert {p["isa"] for p in probes} == ({"default", "AVX512"} if avx512 else {"default"})
    assert all(p["selected_isa"] for p in probes)  # parsed from CTranslate2's own log
    chosen = {(c["model"], c["workload"], c["precision"]) for c in results["ct2_settings"]["chosen"]}
    assert chosen == {("en-de-attn", w, p) for w in ("multi30k-b1-t1", "multi30k-b32-t1") for p in ("int8", "float32")
                      } | {("uk-gec", w, "int8") for w in ("uagec-b1-t1", "uagec-b32-t1")}
    assert {p["model"] for p in probes} == {"en-de-attn", "uk-gec"}


@pytest.mark.slow
def test_missing_pieces_are_reported_not_fatal(run):
    not_run = json.loads((run / "results.json").read_text())["not_run"]
    assert any("shortlist" in x["what"] and "no shortlist.bin" in x["reason"] for x in not_run)
    report = (run / "report.md").read_text()
    assert "not run: no shortlist.bin" in report and "## Targets (issue 6)" in report
    assert (run / "quality_vs_latency.png").stat().st_size > 0
    assert (run / "speedup_by_length.png").stat().st_size > 0


def test_missing_model_directory_is_a_reason(tmp_path):
    from bench import run as bench_run

    out = tmp_path / "out"
    results = bench_run.main(["--limit", "2", "--repeats", "1", "--threads", "1", "--out", str(out),
                              "--systems", "pyfastdec", "--en-de", str(tmp_path / "nope"),
                              "--en-de-attn", str(tmp_path / "nope-either")])
    assert results["rows"] == []
    reasons = " ".join(x["reason"] for x in results["not_run"])
    assert "nope not found" in reasons and "nope-either not found" in reasons
    assert (out / "report.md").is_file()


def _gec_rows(out):
    return [r for r in json.loads((out / "results.json").read_text())["rows"] if r["dataset"] == "uagec"]


@pytest.mark.slow
def test_correction_rows_at_batch_1_and_32_with_iterations(run):
    """Issue 16's rows: greedy and IAD at both batch sizes and CTranslate2 int8 greedy on
    the same weights; IAD's outputs equal greedy decoded here, in this process; the
    iteration figures agree with the outputs they produced."""
    from bench.data import detokenize
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import greedy

    rows = _gec_rows(run)
    root = run.parent
    sources = json.loads((run / "sources" / "uk-gec.uagec.json").read_text())
    with gzip.open(run / "outputs.json.gz", "rt") as f:
        texts = json.load(f)
    for batch in (1, 32):
        ct2 = [r for r in rows if r["system"] == "ct2" and r["batch_size"] == batch]
        assert len(ct2) == 1 and ct2[0]["model"] == "uk-gec" and ct2[0]["precision"] == "int8"
        for precision, model_dir in (("int8", root / "uk-gec"), ("float32", None)):
            if model_dir is not None:
                ids, _ = greedy(NativeBackend(model_dir, threads=1, shortlist=False), sources)
                expected = detokenize(ids, model_dir / "spm.model")
            for strategy in ("greedy", "iad"):
                mine = [r for r in rows if r["system"] == "pyfastdec" and r["precision"] == precision
                        and r["strategy"] == strategy and r["batch_size"] == batch]
                assert len(mine) == 1, (precision, strategy, batch)
                r = mine[0]
                assert r["vs_ct2_int8_greedy"] > 0 and r["vs_greedy"] > 0
                if model_dir is not None:
                    assert texts[f"{r['job']} {r['workload']}"] == expected
                assert r["lossless_equal"] is (None if strategy == "greedy" else True)
                # tokens committed = output tokens, plus one EOS for each row that ended with one
                committed = r["iterations_per_sentence"] * r["tokens_per_iteration"] * r["sentences"]
                assert r["output_tokens"] - 1e-6 <= committed <= r["output_tokens"] + r["sentences"] + 1e-6
                if strategy == "greedy":
                    assert r["tokens_per_iteration"] == 1.0
                if batch == 1:  # one row per verifier call
                    assert r["verifier_calls"] == pytest.approx(r["iterations_per_sentence"] * r["sentences"])
                else:  # one call serves every live row
                    assert r["verifier_calls"] < r["iterations_per_sentence"] * r["sentences"]
    report = (run / "report.md").read_text()
    assert "## Correction with IAD (issue 16)" in report and "## UA-GEC test, batch 32" in report
    assert "- uagec-b1-t1: IAD is" in report and "- uagec-b32-t1: IAD is" in report
    assert "times faster" in report and "CTranslate2 int8 greedy on the same weights" in report


@pytest.mark.slow
def test_models_flag_runs_only_the_correction_rows(gec_run):
    results = json.loads((gec_run / "results.json").read_text())
    assert {(r["system"], r["model"], r["precision"]) for r in results["rows"]} == \
        {("pyfastdec", "uk-gec", "int8"), ("ct2", "uk-gec", "int8")}
    assert {(r["strategy"], r["batch_size"]) for r in results["rows"] if r["system"] == "pyfastdec"} == \
        {(s, b) for s in ("greedy", "iad") for b in (1, 32)}
    assert {p["model"] for p in results["ct2_settings"]["probes"]} == {"uk-gec"}
    assert all(r["lossless_equal"] for r in results["rows"] if r["strategy"] == "iad")
    assert "## Targets (issue 16)" in (gec_run / "report.md").read_text()
