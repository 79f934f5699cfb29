"""bench.amx_gemm: the crossover it suggests for kAmxMinRows, and a dry run on the
emulated AMX table (any CPU)."""
import json

from bench.amx_gemm import crossover, main


def rows(shape, times):
    K, N = shape
    return [{"M": M, "K": K, "N": N, "us": {"vnni": v, "amx-tiles": t}} for M, (v, t) in times.items()]


def test_crossover_is_where_tiles_win_from_there_on():
    got = rows((256, 256), {1: (1, 2), 2: (2, 1), 4: (3, 4), 8: (4, 3), 16: (5, 2)})  # loses again at 4
    got += rows((512, 2048), {1: (1, 2), 2: (3, 2), 4: (5, 2), 8: (9, 2), 16: (20, 3)})
    per_shape, overall = crossover(got)
    assert per_shape == {(256, 256): 8, (512, 2048): 2}
    assert overall == 8
    never = rows((64, 64), {1: (1, 2), 2: (1, 2)})
    assert crossover(got + never) == ({(64, 64): None, (256, 256): 8, (512, 2048): 2}, None)


def test_dry_run_on_the_emulated_table(tmp_path, capsys):
    out = tmp_path / "amx.json"
    report = main(["--isas", "scalar,amx-emulated", "--m", "1,3", "--shapes", "70x33", "--repeats", "1",
                   "--out", str(out)])
    assert [(r["M"], r["K"], r["N"]) for r in report["rows"]] == [(1, 70, 33), (3, 70, 33)]
    assert json.loads(out.read_text())["isas"] == ["scalar", "amx-emulated"]
    assert "| 70 | 33 | 3 |" in capsys.readouterr().out
