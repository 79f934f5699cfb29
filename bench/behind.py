"""Issue 12: every pyfastdec row against the faster of the peer engines (CTranslate2,
Marian) running the same configuration in the same run, and the "behind" table of every
row below the target ratio, so no slow configuration hides among the fast ones.

The same configuration: the same workload (dataset, batch size, threads), model,
precision and shortlist setting (CTranslate2's vmap stands for our shortlist), and the
peer's strategy that computes what ours does: beam 5 against beam 5, greedy and every
lossless drafting strategy against greedy (they return greedy's output). A peer that did
not run that configuration (CTranslate2 cannot run SSRU decoders, for instance) is not
a comparison; rows with no peer at all are listed as such, never dropped silently.
"""
from __future__ import annotations

from bench.results import LOSSLESS, speed

PEERS = ("ct2", "marian")
TARGET_VS_PEER = 1.5  # issue 12: >= 1.5x the faster of CTranslate2 and Marian


def peer_strategy(strategy: str) -> str | None:
    """The peer strategy whose output ours equals or competes with; None for lossy
    strategies (GAD++), which no peer runs."""
    if strategy in LOSSLESS:
        return "greedy"
    return strategy if strategy.startswith("beam") else None


def peer_rows(rows: list[dict], r: dict, same_weights: dict[str, str] | None = None) -> list[dict]:
    """same_weights: model role -> the role the peers ran on the same weights (the heads
    roles default to the shipped students, which carry the heads: models/en-de is both
    "en-de" and "en-de-heads")."""
    want = peer_strategy(r["strategy"])
    model = (same_weights or {}).get(r["model"], r["model"])
    return [p for p in rows if p["system"] in PEERS and p["strategy"] == want
            and p["workload"] == r["workload"] and p["model"] == model
            and p["precision"] == r["precision"] and p["shortlist"] == r["shortlist"]]


def add_peer_ratios(rows: list[dict], same_weights: dict[str, str] | None = None) -> None:
    """`vs_best_peer`: how many times faster than the fastest peer row of the same
    configuration (None without one); `best_peer`: that row's label."""
    for r in rows:
        r["vs_best_peer"] = r["best_peer"] = None
        if r["system"] != "pyfastdec":
            continue
        peers = peer_rows(rows, r, same_weights)
        if peers:
            best = max(peers, key=speed)
            r["vs_best_peer"] = speed(r) / speed(best)
            r["best_peer"] = f"{best['system']} {best['strategy']} ({best['setting']})"


def _config(r: dict) -> str:
    sl = " +shortlist" if r["shortlist"] else ""
    return f"{r['model']} {r['precision']} {r['strategy']}{sl}, batch {r['batch_size']}, {r['threads']}t"


def behind_section(rows: list[dict], target: float = TARGET_VS_PEER) -> list[str]:
    ours = [r for r in rows if r["system"] == "pyfastdec" and peer_strategy(r["strategy"]) is not None]
    if not ours:
        return []
    compared = [r for r in ours if r.get("vs_best_peer") is not None]
    behind = sorted((r for r in compared if r["vs_best_peer"] < target), key=lambda r: r["vs_best_peer"])
    lines = [f"## Behind: pyfastdec rows below {target:g}x the faster peer (issue 12)", "",
             f"{len(compared)} pyfastdec rows have a peer row of the same configuration (CTranslate2, Marian; "
             f"greedy for lossless strategies, beam for beam); {len(behind)} of them are below {target:g}x."]
    if behind:
        lines += ["", "| configuration | dataset | x faster peer | faster peer |", "|---|---|---:|---|"]
        lines += [f"| {_config(r)} | {r['dataset']} | {r['vs_best_peer']:.2f}x | {r['best_peer']} |" for r in behind]
    alone = [r for r in ours if r.get("vs_best_peer") is None]
    if alone:
        lines += ["", "No peer ran the same configuration (not compared): " +
                  "; ".join(sorted({_config(r) for r in alone})) + "."]
    return lines + [""]
