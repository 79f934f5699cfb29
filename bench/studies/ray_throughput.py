"""`fastdec translate --ray` (2 actors x 1 thread) against `--workers 2 --threads 1` on the
same 20,000 lines (the Multi30k test sources repeated), same model, same options.

    /work/measure.sh python -m bench.studies.ray_throughput [--lines 20000] [-m models/en-de]

Each system runs as the user runs it, in its own process (bench/isolate.py's rule):
- workers: `python -m pyfastdec.cli translate --workers 2 --threads 1` (start, model loads,
  decoding, output), wall time;
- ray, cold: `... --ray --workers 2 --threads 1`, wall time, starting a local Ray instance;
- ray, warm: the same command against a Ray instance already running (`--ray auto`), as
  on a cluster that is up: actor start, model shipping and loading, decoding, output.
Lines/s of each, the ratios to --workers, and whether the outputs are byte-identical.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_input(path: Path, n: int) -> None:
    from bench.data import multi30k_test

    sources = multi30k_test().sources
    path.write_text("".join(sources[i % len(sources)] + "\n" for i in range(n)))


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    r = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(command)}\n{r.stderr}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=20000)
    p.add_argument("-m", "--model", default=str(ROOT / "models" / "en-de"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "in.txt"
        make_input(src, args.lines)
        base = [sys.executable, "-m", "pyfastdec.cli", "translate", "-m", args.model, "--threads", "1",
                "--workers", "2", "-i", str(src), "--no-progress"]
        results = {"workers": timed(base + ["-o", str(tmp / "workers.txt")]),
                   "ray cold": timed(base + ["--ray", "-o", str(tmp / "ray-cold.txt")])}
        # A Ray instance that is already up; the same command joins it.
        subprocess.run(["ray", "start", "--head", "--num-cpus", "2", "--include-dashboard", "false",
                        "--disable-usage-stats"], check=True, capture_output=True, env=_env())
        try:
            results["ray warm"] = timed(base + ["--ray", "auto", "-o", str(tmp / "ray-warm.txt")])
        finally:
            subprocess.run(["ray", "stop"], capture_output=True)
        reference = (tmp / "workers.txt").read_bytes()
        same = all((tmp / f"{name.replace(' ', '-')}.txt").read_bytes() == reference for name in results)
    print(f"{args.lines} lines, {Path(args.model).name}, 2 x 1 thread each, default strategy")
    for name, seconds in results.items():
        ratio = results["workers"] / seconds
        print(f"{name:9s} {seconds:7.2f} s  {args.lines / seconds:8.1f} lines/s  {ratio:6.1%} of --workers 2")
    print(f"outputs identical: {same}")


def _env() -> dict:
    """Workers of the `ray start` instance import this checkout's pyfastdec."""
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


if __name__ == "__main__":
    main()
