"""PNG plots of a bench.run (matplotlib, Agg backend: no display needed).

- quality_vs_latency.png: BLEU against ms/sentence p50 at batch 1 (1 thread, or the
  fewest measured), one point per configuration, colour per system.
- speedup_by_length.png: GAD / GAD++ / IAD against greedy of the same model, precision
  and shortlist, per source-length bucket (sentence quintiles): sum of greedy's
  per-sentence times over the strategy's, at batch 1.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.plan import LATENCY_BATCH

COLOURS = {"pyfastdec": "tab:blue", "ct2": "tab:red", "marian": "tab:purple", "onnx": "tab:green", "torch": "tab:orange"}
MARKERS = {"greedy": "o", "beam5": "s", "gad": "^", "gad++": "v", "iad": "D", "blockwise": "P", "blockwise-all": "X"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(r: dict) -> str:
    sl = "+sl" if r["shortlist"] else ""
    return f"{r['model']} {r['precision']} {r['strategy']}{sl}"



def quality_vs_latency(rows: list[dict], out: Path) -> Path | None:
    lat = [r for r in rows if r["dataset"] == "multi30k" and r["batch_size"] == LATENCY_BATCH]
    if not lat:
        return None
    threads = min(r["threads"] for r in lat)
    lat = [r for r in lat if r["threads"] == threads]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    for r in lat:  # colour: system; marker: strategy; hollow: float32
        colour = COLOURS[r["system"]]
        ax.scatter(r["ms_p50"], r["bleu"], s=36, marker=MARKERS[r["strategy"]], edgecolors=colour,
                   facecolors=colour if r["precision"] == "int8" else "none")
        ax.annotate(_short(r), (r["ms_p50"], r["bleu"]), fontsize=6, xytext=(3, 2), textcoords="offset points",
                    color=colour)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=c, label=s) for s, c in COLOURS.items()
               if any(r["system"] == s for r in lat)]
    handles += [Line2D([], [], ls="", marker=m, color="grey", label=s) for s, m in MARKERS.items()
                if any(r["strategy"] == s for r in lat)]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="grey", label="float32 (hollow)"))
    ax.set_xscale("log")
    ax.set_xlabel(f"ms per sentence, p50 (batch 1, {threads} thread{'s' if threads > 1 else ''}; log scale)")
    ax.set_ylabel("BLEU (sacreBLEU)")
    ax.set_title(f"Multi30k test_2016_flickr En-De, first {lat[0]['sentences']} sentences")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles=handles, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def speedup_by_length(rows: list[dict], source_lengths: dict[tuple[str, str], list[int]], out: Path,
                      buckets: int = 5) -> Path | None:
    """source_lengths: (model, dataset) -> source lengths in tokens (EOS included)."""
    pairs = []
    for r in rows:
        if r["strategy"] not in ("gad", "gad++", "iad", "blockwise", "blockwise-all") or "sentence_ms" not in r or r["system"] != "pyfastdec":
            continue
        greedy = next((g for g in rows if g["strategy"] == "greedy" and g["workload"] == r["workload"]
                       and g["model"] == r["model"] and g["precision"] == r["precision"]
                       and g["shortlist"] == r["shortlist"] and g["system"] == r["system"]
                       and "sentence_ms" in g), None)
        if greedy is not None and min(r["threads"] for r in rows) == r["threads"]:
            pairs.append((r, greedy))
    if not pairs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r, greedy in pairs:
        lengths = np.asarray(source_lengths[(r["model"], r["dataset"])][:len(r["sentence_ms"])])
        edges = np.unique(np.quantile(lengths, np.linspace(0, 1, buckets + 1)).round())
        which = np.clip(np.searchsorted(edges, lengths, side="right") - 1, 0, len(edges) - 2)
        mine, ref = np.asarray(r["sentence_ms"]), np.asarray(greedy["sentence_ms"])
        xs, ys = [], []
        for b in range(len(edges) - 1):
            sel = which == b
            if sel.any():
                xs.append(float(np.median(lengths[sel])))
                ys.append(float(ref[sel].sum() / mine[sel].sum()))
        ax.plot(xs, ys, marker=MARKERS[r["strategy"]], label=f"{_short(r)} ({r['dataset']})")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("source length in tokens (median of each quintile bucket)")
    ax.set_ylabel("speed-up over greedy (sum of per-sentence times)")
    ax.set_title("Drafting strategies vs greedy by source length, batch 1")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
