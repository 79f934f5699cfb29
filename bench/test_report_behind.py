"""The issue-12 report parts on synthetic rows (seconds; run with `pytest bench/test_report_behind.py`):
each pyfastdec row is compared with the faster peer of the same configuration, the
"behind" table lists exactly the rows below the target, and the quality-vs-latency plot
has one panel per model, a correct Pareto front and no overlapping labels."""
from __future__ import annotations

import itertools
import random

import pytest

from bench import behind, plots

pytest.importorskip("matplotlib", reason="the 'bench' extra")


def row(system, strategy, ms, bleu, model="en-de-attn", precision="int8", shortlist=False, batch=1, threads=1):
    return {"system": system, "strategy": strategy, "model": model, "precision": precision, "shortlist": shortlist,
            "batch_size": batch, "threads": threads, "workload": f"multi30k-b{batch}-t{threads}",
            "dataset": "multi30k", "ms_p50": ms, "sentences_per_s": 1000.0 / ms, "bleu": bleu,
            "sentences": 100, "setting": "s"}


def test_each_row_is_compared_with_the_faster_peer_of_its_configuration():
    rows = [row("pyfastdec", "greedy", 2.0, 30), row("pyfastdec", "blockwise", 1.0, 30),
            row("pyfastdec", "beam5", 8.0, 31), row("pyfastdec", "greedy", 6.0, 30, precision="float32"),
            row("pyfastdec", "gad++", 1.0, 29),  # lossy: no peer strategy
            row("pyfastdec", "greedy", 3.0, 30, model="en-de"),  # SSRU: CTranslate2 cannot run it
            row("ct2", "greedy", 4.0, 30), row("marian", "greedy", 5.0, 30), row("ct2", "beam5", 10.0, 31),
            row("marian", "beam5", 9.0, 31), row("ct2", "greedy", 7.0, 30, precision="float32"),
            row("ct2", "greedy", 1.0, 30, threads=2)]  # another workload: never a peer of 1-thread rows
    behind.add_peer_ratios(rows)
    got = {(r["model"], r["precision"], r["strategy"]): r["vs_best_peer"] for r in rows if r["system"] == "pyfastdec"}
    assert got[("en-de-attn", "int8", "greedy")] == pytest.approx(2.0)  # ct2 (4 ms) beats marian (5 ms)
    assert got[("en-de-attn", "int8", "blockwise")] == pytest.approx(4.0)  # lossless: against greedy
    assert got[("en-de-attn", "int8", "beam5")] == pytest.approx(9.0 / 8.0)  # marian is the faster beam
    assert got[("en-de-attn", "float32", "greedy")] == pytest.approx(7.0 / 6.0)
    assert got[("en-de-attn", "int8", "gad++")] is None
    assert got[("en-de", "int8", "greedy")] is None
    text = "\n".join(behind.behind_section(rows))
    table = [line for line in text.splitlines() if line.startswith("| en-de")]
    assert [line.split(" | ")[0] for line in table] == ["| en-de-attn int8 beam5, batch 1, 1t",
                                                       "| en-de-attn float32 greedy, batch 1, 1t"]
    assert "1.12x" in table[0] and "marian beam5" in table[0]
    assert "en-de int8 greedy, batch 1, 1t" in text.split("No peer ran")[1]
    # a model role with the peers' weights under another name (the heads roles) is compared with them
    heads = row("pyfastdec", "blockwise", 1.0, 30, model="en-de-attn-heads")
    behind.add_peer_ratios(rows + [heads], {"en-de-attn-heads": "en-de-attn"})
    assert heads["vs_best_peer"] == pytest.approx(4.0)


def test_pareto_front_is_the_set_no_point_dominates():
    rng = random.Random(3)
    for _ in range(50):
        pts = [(rng.choice([1.0, 2.0, 3.0, 4.0]), rng.choice([28.0, 29.0, 30.0])) for _ in range(rng.randint(1, 9))]
        front = plots.pareto_front(pts)
        for i, (ms, bleu) in enumerate(pts):
            beaten = any(m <= ms and b >= bleu and (m, b) != (ms, bleu) for m, b in pts)
            assert (i in front) == (not beaten)
        assert [pts[i][0] for i in front] == sorted(pts[i][0] for i in front)


def test_plot_has_a_panel_per_model_and_no_overlapping_labels(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    systems = [("pyfastdec", s) for s in ("greedy", "beam5", "gad", "iad", "blockwise", "blockwise-all")] + \
        [("ct2", "greedy"), ("ct2", "beam5"), ("marian", "greedy"), ("marian", "beam5")]
    rng = random.Random(0)
    for model in ("en-de", "en-de-attn", "uk-gec"):
        for (system, strategy), precision, shortlist in itertools.product(systems, ("int8", "float32"), (False, True)):
            # many near-identical points: the case that overlapped labels placed beside their points
            rows.append(row(system, strategy, 2.0 + rng.random() * 0.05, 30 + rng.random() * 0.05, model=model,
                            precision=precision, shortlist=shortlist))
    captured = {}
    real_close = plt.close
    plt.close = lambda fig: captured.setdefault("fig", fig)  # keep the figure to inspect it
    try:
        assert plots.quality_vs_latency(rows, tmp_path / "q.png").exists()
    finally:
        plt.close = real_close
    fig = captured["fig"]
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == ["en-de", "en-de-attn", "uk-gec"]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        # the text itself, without the leader line an Annotation's extent includes
        boxes = [matplotlib.text.Text.get_window_extent(t, renderer) for t in ax.texts]
        assert len(boxes) == len(systems) * 4
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), "two labels overlap"
    real_close(fig)
