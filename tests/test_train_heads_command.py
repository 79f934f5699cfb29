"""`fastdec train-heads` on a model directory converted from a (tiny, random) Hugging Face
Marian checkpoint, trained on real English sentences: the written directory records the
digest of the converted model, `fastdec info` names blockwise for it, and translating
real sentences (Multi30k test_2016, not the training text) with blockwise, and with the
default strategy, gives greedy's output. Bad invocations fail in one line naming the
option or field, and heads trained for another model are refused at load."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from marian_checkpoints import build_tokenizer_files, read_lines, save_marian  # noqa: E402

from pyfastdec.cli import main as fastdec  # noqa: E402
from pyfastdec.convert.hf_marian_import import convert_marian  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError  # noqa: E402
from pyfastdec.model_dir.heads_verifier import verifier_digest  # noqa: E402
from pyfastdec.training.rehash import dump_config  # noqa: E402

ROOT_MODELS = "models"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(converted directory, directory with heads, sources file)."""
    root = tmp_path_factory.mktemp("marian_heads")
    hf = root / "hf"
    vocab = build_tokenizer_files(hf, 400, 500)
    save_marian(hf, vocab, d_model=32, heads=4, ffn=64, layers=2, activation="swish", init_std=0.2, eos_bias=4.0)
    converted = convert_marian(hf, root / "converted")
    sources = root / "sources.en"
    sources.write_text("\n".join(read_lines("val.en.gz", 600)) + "\n\n", encoding="utf-8")  # a blank line: skipped
    out = root / "with-heads"
    assert fastdec(["train-heads", str(converted), "--sources", str(sources), "--out", str(out), "--heads", "3",
                    "--steps", "200", "--held-out", "60", "--threads", "1", "--log-every", "100"]) == 0
    return converted, out, sources


def test_heads_name_the_converted_model_they_were_trained_for(trained):
    converted, out, _ = trained
    heads = ModelDir.load(out).config.heads
    assert (heads.count, heads.hidden) == (3, 32)
    # The digest of the directory without heads: what the heads read is that network.
    assert heads.verifier == verifier_digest(ModelDir.load(converted))
    report = json.loads((out.with_name(out.name + ".run") / "eval.json").read_text())
    assert report["blockwise_check"]["equal_to_greedy"] == report["blockwise_check"]["sentences"] == 60
    assert report["states_agree_with_greedy"] > 0.99


def test_info_names_blockwise_and_translate_equals_greedy_on_real_sentences(trained, tmp_path, capsys):
    _, out, _ = trained
    for info in (["-m", str(out)], [str(out)]):  # fastdec info NEW_DIR is -m NEW_DIR
        assert fastdec(["info", *info]) == 0
        strategy = [line for line in capsys.readouterr().out.splitlines() if "strategy" in line]
        assert len(strategy) == 1 and f"`fastdec translate -m {out}`: blockwise" in strategy[0], strategy
    text = tmp_path / "test.en"
    text.write_text("\n".join(read_lines("test_2016_flickr.en.gz", 100)) + "\n", encoding="utf-8")
    outputs = {}
    for algo in ("greedy", "blockwise", None):
        target = tmp_path / f"{algo}.de"
        assert fastdec(["translate", "-m", str(out), "-i", str(text), "-o", str(target), "--threads", "1",
                        "--batch-size", "8", *(["--algo", algo] if algo else [])]) == 0
        outputs[algo] = target.read_text(encoding="utf-8").splitlines()
    assert len(outputs["greedy"]) == 100
    assert outputs["blockwise"] == outputs["greedy"]
    assert outputs[None] == outputs["greedy"]


@pytest.mark.parametrize("activations", ["static", "dynamic"])
def test_heads_for_an_int8_converted_model(trained, tmp_path, activations):
    """`convert marian --quantize int8`, with calibrated input multipliers or per-row ones
    at run time: the states are simulated as the engine rounds them (static: the
    calibrated grid; dynamic: 127 / max|row|), the heads stored int8, calibrated beside
    the static multipliers. (Before: a dynamic directory was refused for its missing
    activation_scales, and calibration crashed on a batch of empty outputs, whose only
    position, Marian's BOS, is its pad id.)"""
    converted, _, sources = trained
    calibrate = ["--calibrate", str(sources)] if activations == "static" else []
    int8 = tmp_path / "int8"
    assert fastdec(["convert", "marian", str(converted.parent / "hf"), str(int8), "--quantize", "int8",
                    *calibrate]) == 0
    out = tmp_path / "int8-heads"
    assert fastdec(["train-heads", str(int8), "--sources", str(sources), "--out", str(out), "--heads", "2",
                    "--steps", "100", "--held-out", "60", "--threads", "1"]) == 0
    report = json.loads((tmp_path / "int8-heads.run" / "eval.json").read_text())
    assert report["blockwise_check"]["equal_to_greedy"] == 60 and report["states_agree_with_greedy"] > 0.99
    loaded = ModelDir.load(out)
    assert loaded.tensors["heads.1.fc2.weight"].dtype.name == "int8"
    scales = loaded.config.quantization.activation_scales
    assert sorted(n for n in scales if n.startswith("heads.")) == (
        [f"heads.{i}.{fc}" for i in range(2) for fc in ("fc1", "fc2")] if activations == "static" else [])


def fails(capsys, *argv) -> str:
    assert fastdec(["train-heads", *map(str, argv)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("fastdec train-heads: error: ")
    return err


def test_bad_invocations_fail_in_one_line(trained, tmp_path, capsys):
    converted, out, sources = trained
    new = tmp_path / "new"
    assert f"--sources {tmp_path / 'none.en'}: file not found" in fails(capsys, converted, "--sources",
                                                                        tmp_path / "none.en", "--out", new)
    blank = tmp_path / "blank.en"
    blank.write_text("\n  \n\n", encoding="utf-8")
    assert f"--sources {blank}: no text" in fails(capsys, converted, "--sources", blank, "--out", new)
    assert f"--out {out}: already exists" in fails(capsys, converted, "--sources", sources, "--out", out)
    assert "must differ from MODEL_DIR" in fails(capsys, converted, "--sources", sources, "--out", converted)
    assert "--heads 0: expected an integer >= 1" in fails(capsys, converted, "--sources", sources, "--out", new,
                                                          "--heads", "0")
    # A GAD drafter proposes blocks itself; a BiLD little model reads another model's encoder.
    assert "config.json: arch: 'nat-drafter'" in fails(capsys, f"{ROOT_MODELS}/en-de-drafter", "--sources", sources,
                                                       "--out", new)
    assert "config.json: encoder.shared: " in fails(capsys, f"{ROOT_MODELS}/en-de-little", "--sources", sources,
                                                    "--out", new)
    assert not new.exists()


def test_without_torch_it_says_which_extra_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # importlib.util.find_spec then finds no torch
    assert fastdec(["train-heads", str(tmp_path), "--sources", str(tmp_path / "s.en")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ('fastdec train-heads: error: needs torch, which this installation lacks: '
                   'pip install "pyfastdec[train]"')


def test_heads_trained_for_another_model_are_refused_at_load(trained, tmp_path):
    converted, out, _ = trained
    import numpy as np
    from safetensors.numpy import load_file, save_file

    # The same heads over a network that differs in one weight (a retrained model): the
    # shapes all fit, so only heads.verifier can tell.
    other = shutil.copytree(out, tmp_path / "other")
    tensors = load_file(str(other / "model.safetensors"))
    name = next(n for n in sorted(tensors) if n.startswith("decoder.") and n.endswith(".bias"))
    tensors[name] = (tensors[name] + np.float32(0.01)).astype(np.float32)
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "fastdec", "version": "1"})
    config = json.loads((other / "config.json").read_text())
    config.pop("checksum")  # the checksum would refuse the edit first
    (other / "config.json").write_text(dump_config(config))
    with pytest.raises(ModelDirError) as err:
        ModelDir.load(other)
    message = str(err.value)
    assert message.startswith(f"{other / 'config.json'}: heads.verifier: {config['heads']['verifier']} is not")
    assert "trained for another model" in message
    # Only the heads changed (retrained, removed): still the model they name.
    tensors[name] = load_file(str(out / "model.safetensors"))[name]
    tensors["heads.0.fc1.bias"] = tensors["heads.0.fc1.bias"] + np.float32(0.5)
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "fastdec", "version": "1"})
    assert ModelDir.load(other).config.heads.verifier == config["heads"]["verifier"]
    assert fastdec(["info", "-m", str(other)]) == 0
