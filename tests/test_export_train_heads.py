"""export.train_heads end to end on the tiny trained verifier (float32 and int8
directories): the heads learn the verifier's own continuation (far better than chance),
the written directory loads with the same greedy outputs, blockwise on it equals greedy
and commits exactly the tokens per iteration the evaluation predicted, int8 heads are
stored and calibrated like the other linears, a second run resumes, and bad
invocations fail in one line."""
from __future__ import annotations

import json
import shutil

import pytest
from test_decoding_support import heads_dirs

from export.tiny_task import task_sources
from pyfastdec.training.heads import targets
from pyfastdec.training.heads_command import main as train_heads
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy
from pyfastdec.model_dir import ModelDir
from pyfastdec.model_dir.safetensors_io import read_header


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_heads")
    return root, heads_dirs(root)


def test_targets_are_the_tokens_two_to_k_plus_one_places_ahead():
    # Output 10 11 12 (+ EOS 3): position 0 (BOS) predicts 10, so heads say 11 12 3;
    # position 3 (after 12) predicts EOS: nothing after it.
    assert targets([[10, 11, 12]], 3, eos=3).tolist() == [
        [11, 12, 3], [12, 3, -100], [3, -100, -100], [-100, -100, -100]]
    assert targets([[], [9]], 2, eos=3).tolist() == [[-100, -100], [3, -100], [-100, -100]]
    # Cut at its length limit, an output has no EOS to predict: the verifier would go on.
    assert targets([[10, 11, 12], [9]], 3, eos=3, cut=[True, False]).tolist() == [
        [11, 12, -100], [12, -100, -100], [-100, -100, -100], [-100, -100, -100], [3, -100, -100],
        [-100, -100, -100]]


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_trained_heads_predict_the_verifiers_continuation(dirs, kind):
    _, made = dirs
    report = json.loads((made[kind].with_name(made[kind].name + ".run") / "eval.json").read_text())
    assert len(report["head_accuracy"]) == 3
    assert report["head_accuracy"][0] > 0.3 and min(report["head_accuracy"]) > 0.1  # chance: 1 in 35
    assert report["states_agree_with_greedy"] > 0.99
    check = report["blockwise_check"]
    assert check["equal_to_greedy"] == check["sentences"] == report["held_out_sentences"] == 60
    # The evaluation simulates blockwise on the cached states: the engine must commit
    # exactly what it predicted (same states, same heads, same acceptance).
    assert check["mean_tokens_per_iteration"] == pytest.approx(report["expected_tokens_per_iteration"], abs=0.02)
    assert check["mean_tokens_per_iteration"] > 1.15


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_the_written_directory_is_the_verifier_plus_heads(dirs, kind):
    root, made = dirs
    plain, with_heads = ModelDir.load(root / "plain" / kind), ModelDir.load(made[kind])
    assert with_heads.config.heads.count == 3 and with_heads.config.heads.hidden == 16
    header = read_header(made[kind] / "model.safetensors")
    added = sorted(set(header.tensors) - set(read_header(root / "plain" / kind / "model.safetensors").tensors))
    int8 = kind == "int8"
    assert added == sorted(f"heads.{i}.{fc}.{p}" for i in range(3) for fc in ("fc1", "fc2")
                           for p in (("bias", "weight", "weight_scale") if int8 else ("bias", "weight")))
    if int8:
        assert header.tensors["heads.0.fc1.weight"].dtype == "I8"
        scales = with_heads.config.quantization.activation_scales
        assert {f"heads.{i}.{fc}" for i in range(3) for fc in ("fc1", "fc2")} <= set(scales)
        assert {n: v for n, v in scales.items() if not n.startswith("heads.")} == \
            dict(plain.config.quantization.activation_scales)
    sources = task_sources(40, seed=70)
    assert greedy(NativeBackend(made[kind], threads=1), sources)[0] == \
        greedy(NativeBackend(root / "plain" / kind, threads=1), sources)[0]


def test_a_second_run_resumes_training_and_reuses_the_cache(dirs, capsys):
    root, made = dirs
    run = made["float32"].with_name(made["float32"].name + ".run")
    greedy_file = run / "greedy.txt"
    stamp = greedy_file.stat().st_mtime_ns, (run / "states.f16").stat().st_mtime_ns
    shutil.rmtree(made["float32"])  # an existing --out is refused; the run directory is what resumes
    rc = train_heads([str(root / "plain" / "float32"), "--sources", str(root / "sources.txt"), "--out",
                      str(made["float32"]), "--heads", "3", "--hidden", "16", "--steps", "400", "--batch", "128",
                      "--held-out", "60", "--threads", "1", "--save-every", "100"])
    assert rc == 0
    printed = capsys.readouterr().err
    assert "resumed at step 300" in printed and "greedy: " not in printed and "states: " not in printed
    assert (greedy_file.stat().st_mtime_ns, (run / "states.f16").stat().st_mtime_ns) == stamp
    assert (run / "log.txt").read_text().splitlines()[-1].startswith("step 400 ")
    assert json.loads((run / "eval.json").read_text())["blockwise_check"]["equal_to_greedy"] == 60


def test_bad_invocations_fail_in_one_line(dirs, tmp_path, capsys):
    root, made = dirs
    plain, sources = root / "plain" / "float32", root / "sources.txt"

    def fails(*args) -> str:
        assert train_heads([str(plain), "--sources", str(sources), "--threads", "1", *args]) == 1
        out = capsys.readouterr().err.strip()
        assert len(out.splitlines()) == 1
        return out

    assert "must differ from MODEL_DIR" in fails("--out", str(plain))
    run = made["float32"].with_name(made["float32"].name + ".run")
    assert "run.json: field 'limit' is 0, this run has 100" in fails("--run", str(run), "--out", str(tmp_path / "o"),
                                                                     "--limit", "100")
    assert "(use another --run)" in fails("--run", str(run), "--out", str(tmp_path / "o2"), "--hidden", "8",
                                          "--save-every", "100")
    assert "632 sources (sentences), need more than --held-out 100000" in fails("--out", str(tmp_path / "o"), "--held-out", "100000")
    assert "none.txt: file not found" in fails("--sources", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o"))
