"""export.train_joint end to end on the tiny trained int8 verifier with frozen heads
(export.train_heads): joint training makes blockwise commit more tokens per iteration
than the frozen heads it started from, blockwise on the written directory equals its
greedy output, the encoder and embedding stay bit for bit what they were, a run split
in two (budget reached, then resumed) writes the same model as one uninterrupted run,
and bad invocations fail in one line."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_decoding_support import heads_dirs

from export.train_heads import source_ids
from export.train_joint import main as train_joint
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import blockwise, greedy
from pyfastdec.model_dir import ModelDir
from pyfastdec.model_dir.safetensors_io import read_header

STEPS = 150


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_joint")
    start = heads_dirs(root)["int8"]

    def joint(out, *extra):
        return train_joint([str(start), "--sources", str(root / "sources.txt"), "--out", str(root / out),
                            "--held-out", "60", "--threads", "1", "--batch-tokens", "512", "--lr", "1e-3",
                            "--warmup", "10", "--save-every", "25", *extra])

    assert joint("joint", "--steps", str(STEPS)) == 0
    return root, start, joint


def held_out(root, model_dir):
    return source_ids(root / "sources.txt", ModelDir.load(model_dir), None)[-60:]


def tensors(path):
    from safetensors.numpy import load_file
    return load_file(str(path / "model.safetensors"))


def test_joint_heads_commit_more_tokens_per_iteration_than_the_frozen_ones(made):
    root, start, _ = made
    src = held_out(root, start)
    rates = {}
    for name, directory in (("frozen", start), ("joint", root / "joint")):
        backend = NativeBackend(directory, threads=1)
        outs, stats = blockwise(backend, src, policy=None)
        assert outs == greedy(backend, src)[0]  # lossless on its own greedy output
        rates[name] = stats.generated / stats.row_steps
    assert rates["joint"] > rates["frozen"] + 0.05, rates
    report = json.loads((root / "joint.run" / "eval.json").read_text())
    assert report["blockwise_check"]["equal_to_greedy"] == 60
    assert report["blockwise_check"]["mean_tokens_per_iteration"] == pytest.approx(rates["joint"])


def test_the_encoder_and_embedding_are_unchanged_and_the_decoder_trained(made):
    root, start, _ = made
    before, after = tensors(start), tensors(root / "joint")
    assert set(before) == set(after)
    frozen = [n for n in before if n.startswith(("encoder.", "embed."))]
    assert frozen and all(np.array_equal(before[n], after[n]) for n in frozen)
    assert not np.array_equal(before["decoder.layers.0.ffn.fc1.weight"], after["decoder.layers.0.ffn.fc1.weight"])
    assert not np.array_equal(before["heads.0.fc1.weight"], after["heads.0.fc1.weight"])
    assert read_header(root / "joint" / "model.safetensors").tensors["heads.0.fc1.weight"].dtype == "I8"
    # The model still translates: its outputs vary with the input.
    outs = greedy(NativeBackend(root / "joint", threads=1), held_out(root, start))[0]
    assert len({tuple(o) for o in outs}) > 40


def test_a_run_stopped_and_resumed_writes_the_same_model(made, capsys):
    root, _, joint = made
    assert joint("split", "--steps", str(STEPS // 2)) == 0
    assert joint("split", "--steps", str(STEPS)) == 0
    assert f"resumed at step {STEPS // 2}" in capsys.readouterr().out
    one, two = tensors(root / "joint"), tensors(root / "split")
    assert all(np.array_equal(one[n], two[n]) for n in one)


def test_bad_invocations_fail_in_one_line(made, tmp_path, capsys):
    root, start, _ = made

    def fails(*args) -> str:
        assert train_joint([str(start), "--threads", "1", *args]) == 1
        out = capsys.readouterr().out.strip()
        assert len(out.splitlines()) == 1
        return out

    sources = str(root / "sources.txt")
    assert "must differ from MODEL_DIR" in fails("--sources", sources, "--out", str(start))
    assert "none.txt: file not found" in fails("--sources", str(tmp_path / "none.txt"))
    assert "--bleu-src and --bleu-ref go together" in fails("--sources", sources, "--bleu-src", sources)
    assert "run.json: this run was started with other settings (lr); use another --run" in \
        fails("--sources", sources, "--out", str(root / "joint"), "--held-out", "60", "--batch-tokens", "512",
              "--warmup", "10", "--lr", "5e-4")
