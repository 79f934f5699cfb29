"""The measuring process of bench.run: one system configuration, every workload it is
asked for, in a fresh Python (bench/isolate.py says why).

    python -m bench.child --measure SPEC.json --result OUT.json      (bench.run calls this)

Per workload (a batch size over the first `limit` of the spec's sources): one untimed warm-up batch, then
`repeats` timed passes over all sentences. Outputs come from the first pass; later passes
are checked to reproduce them. The strategy's statistics (bench/systems.py: iterations,
tokens, encoder and total seconds) are kept per pass. Also reported: model load time (constructing the engine,
drafter included) and the process's peak RSS at the end: VmHWM of /proc/self/status,
not ru_maxrss, because Linux carries ru_maxrss over from the parent through fork and exec
(every child then reported the parent's torch-sized peak); VmHWM belongs to the address
space exec created. ru_maxrss is the fallback where /proc is missing.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

from bench.systems import load
from bench.timing import batches_of, pass_figures, timed_pass


def run_workload(runner, sources: list[list[int]], batch_size: int, repeats: int) -> dict:
    batches = batches_of(sources, batch_size)
    runner.decode(batches[0])  # warm-up
    runner.counters.clear()
    passes, per_batch, outputs, counters, reproducible = [], [], None, [], True
    for r in range(repeats):
        seconds, results = timed_pass(runner.decode, batches)
        outs = [list(map(int, o)) for batch in results for o in batch]
        if r == 0:
            outputs = outs
        else:
            reproducible &= outs == outputs
        counters.append(dict(runner.counters))  # this pass's own (a policy may decide otherwise per pass)
        runner.counters.clear()
        passes.append(pass_figures(seconds, len(sources), batch_size))
        per_batch.append(seconds)
    result = {"batch_size": batch_size, "sentences": len(sources), "repeats": passes,
              "output_tokens": sum(len(o) for o in outputs), "outputs": outputs,
              "reproducible": reproducible, "decode_stats": counters[0], "decode_stats_passes": counters}
    if batch_size == 1:  # per sentence, the median over the passes (for the length plot)
        result["sentence_ms"] = [round(1e3 * statistics.median(t), 4) for t in zip(*per_batch)]
    return result


def measure(spec: dict) -> dict:
    sources = json.loads(Path(spec["sources_file"]).read_text())
    start = time.perf_counter()
    runner = load(spec)
    load_s = time.perf_counter() - start
    workloads = {w["name"]: run_workload(runner, sources[:w.get("limit")], w["batch_size"], spec["repeats"])
                 for w in spec["workloads"]}
    return {"load_s": load_s, "peak_rss_mb": peak_rss_kib() / 1024, "info": runner.info, "workloads": workloads}


def peak_rss_kib() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])  # "VmHWM:   123456 kB"
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    result = measure(json.loads(Path(args.measure).read_text()))
    Path(args.result).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
