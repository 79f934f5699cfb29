"""PNG plots of a bench.run (matplotlib, Agg backend: no display needed).

- quality_vs_latency.png: BLEU against ms/sentence p50 at batch 1 (1 thread, or the
  fewest measured), one panel per model, one point per configuration, colour per system,
  the Pareto front (fastest at each BLEU) marked, labels in a column that cannot overlap.
- speedup_by_length.png: the drafting strategies (GAD, GAD++, IAD, blockwise, BiLD)
  against greedy of the same model, precision and shortlist, per source-length bucket
  (sentence quintiles): sum of greedy's per-sentence times over the strategy's, at batch 1.
- bild_pareto.png: BiLD's (fallback, rollback) sweep, BLEU against ms/sentence p50 at
  batch 1, big greedy as the reference point (with the band of BLEU within 0.3 of it),
  the Pareto front marked as in quality_vs_latency.png.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.plan import LATENCY_BATCH

COLOURS = {"pyfastdec": "tab:blue", "ct2": "tab:red", "marian": "tab:purple", "onnx": "tab:green",
           "torch": "tab:orange"}
MARKERS = {"greedy": "o", "beam5": "s", "gad": "^", "gad-shared": "<", "gad++": "v", "iad": "D", "blockwise": "P",
           "blockwise-all": "X", "bild": "*", "bild-lossy": "h"}
DRAFTING = ("gad", "gad-shared", "gad++", "iad", "blockwise", "blockwise-all", "bild", "bild-lossy")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(r: dict) -> str:
    sl = "+sl" if r["shortlist"] else ""
    return f"{r['model']} {r['precision']} {r['strategy']}{sl}"


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: none is at least as fast (ms <=) and at
    least as good (BLEU >=) while strictly better in one. Ordered by ms: the fastest
    configuration at each quality level."""
    front = []
    for i, (ms, bleu) in enumerate(points):
        dominated = any(m <= ms and b >= bleu and (m < ms or b > bleu) for j, (m, b) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i])


LABEL_PITCH_IN = 0.15  # vertical inches per label in the label column: 6-point text never touches


def quality_vs_latency(rows: list[dict], out: Path) -> Path | None:
    """One panel per model (the peers appear in the panel of the model they ran). Labels
    sit in a column right of each panel, ordered by BLEU and joined to their points by
    thin lines, so none overlaps however many rows there are; the Pareto front is the
    dashed step line through ringed points."""
    lat = [r for r in rows if r["dataset"] == "multi30k" and r["batch_size"] == LATENCY_BATCH]
    if not lat:
        return None
    threads = min(r["threads"] for r in lat)
    lat = [r for r in lat if r["threads"] == threads]
    models = sorted({r["model"] for r in lat})
    plt = _plt()
    import matplotlib.ticker
    from matplotlib.lines import Line2D

    heights = [max(3.2, LABEL_PITCH_IN * (sum(r["model"] == m for r in lat) + 2)) for m in models]
    fig, axes = plt.subplots(len(models), 1, figsize=(10, sum(heights) + 1.4), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, model in zip(axes[:, 0], models):
        mine = sorted((r for r in lat if r["model"] == model), key=lambda r: -r["bleu"])
        for r in mine:  # colour: system; marker: strategy; hollow: float32
            colour = COLOURS.get(r["system"], "black")
            ax.scatter(r["ms_p50"], r["bleu"], s=36, marker=MARKERS.get(r["strategy"], "o"), edgecolors=colour,
                       facecolors=colour if r["precision"] == "int8" else "none", zorder=3)
        front = [mine[i] for i in pareto_front([(r["ms_p50"], r["bleu"]) for r in mine])]
        xs = [r["ms_p50"] for r in front]
        ys = [r["bleu"] for r in front]
        ax.step(xs, ys, where="post", ls="--", lw=0.9, color="black", zorder=2)
        ax.scatter(xs, ys, s=130, facecolors="none", edgecolors="black", lw=0.8, zorder=2)
        on_front = {id(r) for r in front}
        for i, r in enumerate(mine):
            sl = " +sl" if r["shortlist"] else ""
            text = f"{r['system']} {r['precision']} {r['strategy']}{sl}" + (" *" if id(r) in on_front else "")
            ax.annotate(text, (r["ms_p50"], r["bleu"]), xytext=(1.02, 1 - (i + 0.5) / len(mine)),
                        textcoords="axes fraction", fontsize=6, va="center", color=COLOURS.get(r["system"], "black"),
                        arrowprops={"arrowstyle": "-", "lw": 0.3, "color": "grey", "alpha": 0.6})
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())  # 2, 5, 10 rather than 2x10^0
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylabel("BLEU (sacreBLEU)")
        ax.set_title(f"{model}: Multi30k test_2016_flickr En-De, first {mine[0]['sentences']} sentences", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[-1, 0].set_xlabel(f"ms per sentence, p50 (batch 1, {threads} thread{'s' if threads > 1 else ''}; log scale)")
    handles = [Line2D([], [], ls="", marker="o", color=c, label=s) for s, c in COLOURS.items()
               if any(r["system"] == s for r in lat)]
    handles += [Line2D([], [], ls="", marker=m, color="grey", label=s) for s, m in MARKERS.items()
                if any(r["strategy"] == s for r in lat)]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="grey", label="float32 (hollow)"))
    handles.append(Line2D([], [], ls="--", color="black", label="Pareto front (* in labels)"))
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=6, frameon=False)  # below, over no point
    fig.subplots_adjust(left=0.08, right=0.62, top=1 - 0.35 / fig.get_figheight(),
                        bottom=1.1 / fig.get_figheight(), hspace=0.35)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def speedup_by_length(rows: list[dict], source_lengths: dict[tuple[str, str], list[int]], out: Path,
                      buckets: int = 5) -> Path | None:
    """source_lengths: (model, dataset) -> source lengths in tokens (EOS included)."""
    pairs = []
    for r in rows:
        if r["strategy"] not in DRAFTING or "sentence_ms" not in r or r["system"] != "pyfastdec":
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


def bild_pareto(points: dict | None, out: Path, within: float = 0.3) -> Path | None:
    """points: bench.shared_encoder_report.bild_sweep_points (the BiLD rows at batch 1,
    big greedy, the Pareto front). One point per (fallback, rollback), coloured by
    rollback (0 = lossless), labelled in a column right of the axes as in
    quality_vs_latency.png; big greedy a black star with dotted lines through it and the
    band of BLEU within `within` of it shaded; the front ringed and joined by a dashed step."""
    if points is None:
        return None
    plt = _plt()
    import matplotlib.ticker

    mine, greedy, front = points["points"], points["greedy"], points["front"]
    everything = mine + ([greedy] if greedy else [])
    rollbacks = sorted({r["rollback"] for r in mine})
    cmap = plt.get_cmap("viridis")
    colour = {rb: cmap(0.8 * i / max(1, len(rollbacks) - 1)) for i, rb in enumerate(rollbacks)}  # no pale yellow
    fig, ax = plt.subplots(figsize=(10, max(4.5, LABEL_PITCH_IN * (len(everything) + 2) + 1.4)))
    if greedy is not None:
        ax.axhspan(greedy["bleu"] - within, greedy["bleu"], color="tab:green", alpha=0.12, lw=0,
                   label=f"BLEU within {within:g} of big greedy")
        ax.axhline(greedy["bleu"], color="black", lw=0.6, ls=":")
        ax.axvline(greedy["ms_p50"], color="black", lw=0.6, ls=":")
        ax.scatter(greedy["ms_p50"], greedy["bleu"], s=160, marker="*", color="black", zorder=4, label="big greedy")
    for rb in rollbacks:
        part = [r for r in mine if r["rollback"] == rb]
        ax.scatter([r["ms_p50"] for r in part], [r["bleu"] for r in part], s=40, color=colour[rb], zorder=3,
                   marker=MARKERS["bild"] if rb == 0 else "o",
                   label=f"rollback {rb:g}" + (" (lossless)" if rb == 0 else ""))
    ax.step([r["ms_p50"] for r in front], [r["bleu"] for r in front], where="post", ls="--", lw=0.9,
            color="black", zorder=2)
    ax.scatter([r["ms_p50"] for r in front], [r["bleu"] for r in front], s=150, facecolors="none",
               edgecolors="black", lw=0.8, zorder=2, label="Pareto front (* in labels)")
    on_front = {id(r) for r in front}
    ordered = sorted(everything, key=lambda r: (-r["bleu"], r["ms_p50"]))
    for i, r in enumerate(ordered):
        text = "big greedy" if r["strategy"] == "greedy" else \
            f"f={r['fallback']:g} r={r['rollback']:g}" + (f" ({r['bild_default']} default)" if r.get("bild_default")
                                                         else "")
        ax.annotate(text + (" *" if id(r) in on_front else ""), (r["ms_p50"], r["bleu"]),
                    xytext=(1.02, 1 - (i + 0.5) / len(ordered)), textcoords="axes fraction", fontsize=6,
                    va="center", color="black" if r["strategy"] == "greedy" else colour[r["rollback"]],
                    arrowprops={"arrowstyle": "-", "lw": 0.3, "color": "grey", "alpha": 0.6})
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    threads = points["threads"]
    ax.set_xlabel(f"ms per sentence, p50 (batch 1, {threads} thread{'s' if threads > 1 else ''}; log scale)")
    ax.set_ylabel("BLEU (sacreBLEU)")
    ax.set_title(f"BiLD fallback x rollback sweep on {mine[0]['model']} {mine[0]['precision']}"
                 f"{' +shortlist' if mine[0]['shortlist'] else ''}: Multi30k test_2016_flickr En-De, first "
                 f"{mine[0]['sentences']} sentences", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=4, frameon=False)
    fig.subplots_adjust(left=0.08, right=0.72, top=1 - 0.35 / fig.get_figheight(), bottom=1.05 / fig.get_figheight())
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def verify_cost_by_shape(rows: list[dict], out: Path) -> Path | None:
    """bench.verify_cost_shapes: t(n)/t(1) against n, one panel per batch size, one colour
    per model and shortlist setting (greys: the shipped students; colours: bench.model_shapes'
    base and big shapes), solid 1 thread, dashed 2; the dotted line y = 1.5."""
    if not rows:
        return None
    plt = _plt()
    batches = sorted({r["batch"] for r in rows})
    configs = list(dict.fromkeys((r["model"], r["shortlist"]) for r in rows))
    # the shipped students in greys, the random-weight shapes in colours
    shipped = [c for c in configs if not c[0].startswith(("base", "big"))]
    shaped = [c for c in configs if c not in shipped]
    colours = {c: plt.cm.Greys(0.35 + 0.6 * i / max(1, len(shipped) - 1)) for i, c in enumerate(shipped)}
    colours.update({c: plt.cm.tab10(i % 10) for i, c in enumerate(shaped)})
    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4), sharey=True, squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for r in (r for r in rows if r["batch"] == batch):
            ms = {int(n): v for n, v in r["ms"].items()}
            ns = sorted(ms)
            label = f"{r['model']}{' +sl' if r['shortlist'] else ''}" if r["threads"] == 1 else None
            ax.plot(ns, [ms[n] / ms[1] for n in ns], "-" if r["threads"] == 1 else "--", marker=".",
                    color=colours[(r["model"], r["shortlist"])], label=label, linewidth=1)
        ax.axhline(1.5, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("positions verified per row (n)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("t(n) / t(1)  (solid: 1 thread, dashed: 2)")
    axes[0][-1].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
