"""bench.run's pyfastdec rows beside CTranslate2's inter_threads: at more than one thread
the batch-32 workload of the lossless strategies again, each batch cut into one
sub-batch per thread and decoded at once by engines of one thread each (bench/plan.py
inter_jobs, bench/systems.py). On the shipped en-de and real sentences the lanes decode
what one engine decodes, in order, and count every sentence once; their 'x greedy' is
against greedy run the same way."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import plan as planning
from bench import systems
from bench.data import multi30k_test, tokenize
from bench.results import _greedy_of

MODEL = Path(__file__).resolve().parents[1] / "models" / "en-de"


def make_plan(**kw) -> planning.Plan:
    return planning.Plan(n=64, latency_n=8, gec_n=8, repeats=1, threads=[1, 2], probe_n=8, **kw)


def test_inter_jobs_repeat_the_batch_32_workload_at_one_thread_per_lane():
    plan = make_plan()
    jobs = planning.pyfastdec_jobs(plan, "en-de", {"int8": MODEL}, True, None, ("greedy", "beam5"))
    inter = planning.inter_jobs(plan, jobs)
    # greedy at 2 threads, with and without the shortlist; not beam, not 1 thread
    assert sorted((j.strategy, j.shortlist) for j in inter) == [("greedy", False), ("greedy", True)]
    for job in inter:
        assert (job.threads, job.setting) == (2, "threads=1 inter=2")
        assert (job.spec["threads"], job.spec["inter"]) == (1, 2)
        assert [w["batch_size"] for w in job.spec["workloads"]] == [32]
        assert job.serves == {"b32": ["multi30k-b32-t2"]}
    assert len({j.id for j in jobs + inter}) == len(jobs) + len(inter)  # rows of their own
    assert planning.inter_jobs(make_plan(quick=True), jobs) == []


@pytest.fixture(scope="module")
def batch() -> list[list[int]]:
    return tokenize(multi30k_test(37).sources, MODEL / "spm.model")


@pytest.mark.parametrize("strategy", ["greedy", "blockwise"])
def test_lanes_decode_what_one_engine_decodes(batch, strategy, monkeypatch):
    spec = {"system": "pyfastdec", "path": str(MODEL), "threads": 1, "shortlist": True, "strategy": strategy,
            "drafter": None}
    one = systems.load(spec)
    sizes = []  # per lane engine: the sizes of the sub-batches it decoded
    load_one = systems.load_pyfastdec

    def recording(lane_spec):
        runner, seen = load_one(lane_spec), []
        decode, runner.decode = runner.decode, lambda part: seen.append(len(part)) or decode(part)
        sizes.append(seen)
        return runner

    monkeypatch.setattr(systems, "load_pyfastdec", recording)
    lanes = systems.load(dict(spec, inter=2))
    assert lanes.info["inter_threads"] == 2
    for part in (batch[:32], batch[32:], batch[:1]):  # 16 + 16, 3 + 2, one lane idle
        expected = one.decode(part)
        assert lanes.decode(part) == expected
    assert sizes == [[16, 3, 1], [16, 2]]
    assert lanes.counters["sentences"] == 32 + 5 + 1  # each sentence once, over both lanes
    assert lanes.counters["generated"] == one.counters["generated"]
    assert not [name for name in lanes.counters if name.endswith("_s")]  # overlapping seconds: not summed


def test_x_greedy_compares_with_greedy_run_the_same_way():
    def row(strategy, setting):
        return dict(system="pyfastdec", model="uk-gec", precision="int8", shortlist=True, strategy=strategy,
                    workload="uagec-b32-t2", setting=setting)

    plain, inter = row("greedy", "threads=2"), row("greedy", "threads=1 inter=2")
    rows = [plain, inter]
    assert _greedy_of(rows, row("iad", "threads=1 inter=2")) is inter
    assert _greedy_of(rows, row("iad", "threads=2")) is plain
    assert _greedy_of(rows, row("iad", "threads=2 policy=off")) is plain  # no such setting: the first
