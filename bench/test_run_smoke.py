"""bench.run end to end on tiny random models (about a minute; not in the default test
run, and skipped under --benchmark-only): every system produces rows with figures and
quality, missing pieces become 'not run' entries, and the report and plots are written.

    pytest bench/test_run_smoke.py

Each preparation path is exercised: a float32 model with an int8 `-int8` sibling
(en-de-attn), a float32 model the benchmark calibrates itself (en-de, SSRU, on the
Multi30k validation split), and an int8 model whose float32 twin is dequantised (uk-gec).
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


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import bench.models
    from bench import run as bench_run

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
    mp = pytest.MonkeyPatch()
    mp.setenv("FASTDEC_UAGEC", str(gec))
    mp.setattr(bench.models, "CACHE", root / "cache")
    try:
        out = root / "out"
        bench_run.main(["--limit", "6", "--repeats", "2", "--threads", "1", "--out", str(out),
                        "--en-de", str(root / "en-de"), "--en-de-attn", str(root / "en-de-attn"),
                        "--drafter", str(root / "drafter"), "--uk-gec", str(root / "uk-gec")])
    finally:
        mp.undo()
    return out


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
    for r in rows:
        assert len(r["repeats"]) == 2 and r["sentences"] == (3 if r["dataset"] == "uagec" else 6)
        assert r["peak_rss_mb"] > 0 and r["load_s"] > 0 and r["bleu"] is not None
        if r["batch_size"] == 1:
            assert r["ms_p50_min"] <= r["ms_p50"] <= r["ms_p50_max"] and len(r["sentence_ms"]) == r["sentences"]
        if r["system"] != "ct2" or r["precision"] == "int8":
            assert r["vs_ct2_int8_greedy"] is not None or r["dataset"] == "uagec"


def test_lossless_strategies_equal_greedy(run):
    rows = json.loads((run / "results.json").read_text())["rows"]
    for r in rows:
        if r["system"] == "pyfastdec" and r["strategy"] in ("greedy", "gad", "iad"):
            assert r["identical_to_greedy"] == 1.0, r["job"]
        if r["system"] in ("torch", "onnx") and r["precision"] == "float32":
            assert r["identical_reference"].startswith("pyfastdec/en-de-attn/float32/greedy")


def test_ct2_settings_are_probed_and_reported(run):
    results = json.loads((run / "results.json").read_text())
    probes = results["ct2_settings"]["probes"]
    assert {p["isa"] for p in probes} == {"default", "AVX512"}
    assert all(p["selected_isa"] for p in probes)  # parsed from CTranslate2's own log
    chosen = {(c["workload"], c["precision"]) for c in results["ct2_settings"]["chosen"]}
    assert chosen == {(w, p) for w in ("multi30k-b1-t1", "multi30k-b32-t1") for p in ("int8", "float32")}


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
