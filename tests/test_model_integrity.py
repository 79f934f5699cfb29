"""Damaged model directories are refused at load, never run (issue 10, item 6).

Each kind of damage that used to load silently gets a test: non-finite or absurd
weights and scales, activation multipliers of 1e30, heads/head_dim swapped, another
model's spm.model, a key twice in config.json, and random corruption of the weights,
which config.json "checksum" (export/FORMAT.md, *Checksum*) catches. The references are
independent of the reader: hashlib over the files' bytes, numpy-built weights with
known bad entries, and the shipped models' own bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from export.rehash import main as rehash_main
from export.rehash import rehash
import pyfastdec
from pyfastdec.model_dir import ModelDir, ModelDirError, expected_tensors, parse_config
from test_model_dir import VOCAB, WORDS, make_config, random_tensors, spm_path, train_spm, write_dir  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ("en-de", "en-de-attn", "en-de-big", "en-de-drafter", "en-de-drafter-separate", "en-de-little", "uk-gec")


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def canonical_sha256(config: dict) -> str:
    """export/FORMAT.md's definition of checksum.config, written out independently."""
    content = {k: v for k, v in config.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"))
                                      .encode("utf-8")).hexdigest()


def refused(path: Path, file: str, field: str, what: str) -> str:
    """ModelDir.load(path) raises ModelDirError reading '<path>/<file>: <field>: <what>...'."""
    with pytest.raises(ModelDirError) as info:
        ModelDir.load(path)
    message = str(info.value)
    assert message.startswith(f"{path / file}: {field}: "), message
    assert re.search(what, message), message
    assert "\n" not in message
    return message


def checksummed(path: Path, config: dict, spm: Path, tensors: dict | None = None) -> Path:
    write_dir(path, config, spm, tensors)
    rehash(path)
    return path


def edit_config(d: Path, edit) -> None:
    config = json.loads((d / "config.json").read_text())
    edit(config)
    (d / "config.json").write_text(json.dumps(config, indent=2))


# ----------------------------------------------------------------------------- weights and scales
@pytest.mark.parametrize("name,index,value,what", [
    ("decoder.layers.1.ffn.fc2.bias", (3,), np.nan, r"nan at \[3\], 1 such value\(s\) in all \(expected finite values within \+-10000\)"),
    ("embed.weight", (7, 2), np.inf, r"inf at \[7, 2\], 1 such"),
    ("encoder.layers.0.ln_attn.weight", (0,), -np.inf, r"-inf at \[0\]"),
    ("output.bias", (VOCAB - 1,), 1e30, rf"1e\+30 at \[{VOCAB - 1}\]"),  # an exponent bit flipped
])
def test_refuses_nonfinite_or_absurd_float_weights(name, index, value, what, spm_path, tmp_path):
    config = make_config()
    tensors = random_tensors(config)
    tensors[name][index] = value
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "model.safetensors", name, what)


@pytest.mark.parametrize("value,what", [
    (np.nan, r"nan at \[2\]"), (np.inf, r"inf at \[2\]"), (0.0, r"0\.0 at \[2\]"), (-0.01, r"-0\.01 at \[2\]"),
    (1e3, r"1000\.0 at \[2\]"),
])
def test_refuses_bad_weight_scales(value, what, spm_path, tmp_path):
    config = make_config(int8=True)
    tensors = random_tensors(config)
    name = "decoder.layers.0.cross_attn.v.weight_scale"
    tensors[name][2] = value
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "model.safetensors", name, what + r".*\(expected finite scales > 0 and <= 78\.74\)")


def test_largest_legal_values_load(spm_path, tmp_path):
    """The bounds themselves load: they refuse damage, not unusual but real models."""
    config = make_config(int8=True)
    tensors = random_tensors(config)
    tensors["embed.weight"][0, 0] = -1e4
    tensors["output.bias"][1] = 1e4
    tensors["encoder.layers.0.ffn.fc1.weight_scale"][0] = 1e4 / 127
    tensors["encoder.layers.0.ffn.fc1.weight_scale"][1] = 1e-14  # a row of zeros, as export.writer scales it
    config["quantization"]["activation_scales"]["encoder.layers.0.ffn.fc2"] = 1e-4
    config["quantization"]["activation_scales"]["encoder.layers.1.ffn.fc2"] = 1e6
    ModelDir.load(write_dir(tmp_path / "m", config, spm_path, tensors))


@pytest.mark.parametrize("value", [1e30, 1e-30, 1e7, 5e-5])
def test_refuses_absurd_activation_scales(value, spm_path, tmp_path):
    config = make_config(int8=True)
    tensors = random_tensors(config)
    config["quantization"]["activation_scales"]["decoder.layers.1.self_attn.k"] = value
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "config.json", "quantization.activation_scales.decoder.layers.1.self_attn.k",
            re.escape(f"{json.dumps(value)} (expected a finite number from 0.0001 to 1e+06"))


# ----------------------------------------------------------------------------- config.json
def _json_with_duplicate(config: dict, path: tuple, value) -> str:
    """config.json text in which the key at `path` appears twice (the copy first)."""
    marker = "__duplicate_marker__"
    obj = config
    for key in path[:-1]:
        obj = obj[key]
    obj[marker] = value
    text = json.dumps(config, indent=2)
    return text.replace(json.dumps(marker), json.dumps(path[-1]))


@pytest.mark.parametrize("path,value,field", [
    (("d_model",), 16, "d_model"),
    (("encoder", "layers", 1, "heads"), 4, r"encoder.layers[1].heads"),
    (("quantization", "activation_scales", "encoder.layers.0.ffn.fc1"), 1.0,
     "quantization.activation_scales.encoder.layers.0.ffn.fc1"),
])
def test_refuses_duplicate_keys(path, value, field, spm_path, tmp_path):
    config = make_config(int8=True)
    d = write_dir(tmp_path / "m", config, spm_path)
    text = _json_with_duplicate(config, path, value)
    assert text.count(json.dumps(path[-1]) + ":") >= 2
    (d / "config.json").write_text(text)
    refused(d, "config.json", field, re.escape("duplicate key (expected each key once per object)"))


def test_swapped_heads_and_head_dim_are_caught_by_the_config_checksum(spm_path, tmp_path):
    uniform = {"layers": [{"heads": 2, "ffn": 12}, {"heads": 2, "ffn": 8}]}
    config = make_config(encoder=uniform, decoder=dict(uniform, self="attention"))  # d_model 8 = 2 heads x 4
    swapped = json.loads(json.dumps(config))
    swapped["head_dim"] = 2
    for stack in ("encoder", "decoder"):
        for layer in swapped[stack]["layers"]:
            layer["heads"] = 4
    # Why no shape check can see it: every tensor holds heads * head_dim, never either alone,
    # and 4 heads of 2 is as legal an architecture as 2 heads of 4.
    assert expected_tensors(parse_config(swapped)) == expected_tensors(parse_config(config))
    ModelDir.load(write_dir(tmp_path / "plain", swapped, spm_path))  # no checksum: nothing to compare with

    d = checksummed(tmp_path / "m", config, spm_path)
    recorded = json.loads((d / "config.json").read_text())["checksum"]
    edit_config(d, lambda c: c.update({k: v for k, v in swapped.items() if k in ("head_dim", "encoder", "decoder")}))
    refused(d, "config.json", "checksum.config",
            re.escape(f"content is {canonical_sha256(swapped)} (expected {recorded['config']} of "))


def test_config_checksum_survives_reformatting_but_not_edits(spm_path, tmp_path):
    d = checksummed(tmp_path / "m", make_config(int8=True), spm_path)
    config = json.loads((d / "config.json").read_text())
    assert config["checksum"]["config"] == canonical_sha256(config)
    # Another indentation and key order is the same content.
    (d / "config.json").write_text(json.dumps(dict(reversed(list(config.items()))), separators=(",", ":")))
    ModelDir.load(d)
    edit_config(d, lambda c: c.update(max_source_len=33))
    refused(d, "config.json", "checksum.config", r"python -m pyfastdec\.training\.rehash DIR\)$")
    rehash(d)  # an edit on purpose is recorded, and the directory loads again
    assert ModelDir.load(d).config.max_source_len == 33


@pytest.mark.parametrize("edit,field,what", [
    (lambda c: c.update(checksum="sha256:00"), "checksum", r"\"sha256:00\" \(expected an object with"),
    (lambda c: c["checksum"].pop("spm.model"), "checksum.spm.model", r"missing"),
    (lambda c: c["checksum"].update({"lex.s2t": "sha256:" + "0" * 64}), "checksum.lex.s2t", "unknown field"),
    (lambda c: c["checksum"].update({"shortlist.bin": "sha256:00"}), "checksum.shortlist.bin", "expected \"sha256:"),
    (lambda c: c["checksum"].update({"model.safetensors": "md5:" + "0" * 32}), "checksum.model.safetensors",
     r"\"md5:0+\" \(expected \"sha256:<64 lowercase hex digits>\"\)"),
    (lambda c: c["checksum"].update({"config": "sha256:" + "A" * 64}), "checksum.config", "expected \"sha256:"),
])
def test_refuses_malformed_checksum_field(edit, field, what, spm_path, tmp_path):
    d = checksummed(tmp_path / "m", make_config(), spm_path)
    edit_config(d, edit)
    refused(d, "config.json", field, what)


# ----------------------------------------------------------------------------- other files
def test_refuses_another_models_spm(spm_path, tmp_path):
    """Same piece count and special ids, other pieces: only the checksum can tell."""
    d = checksummed(tmp_path / "m", make_config(), spm_path)
    (d / "spm.model").write_bytes(train_spm([w[::-1] for w in WORDS], seed=99))
    message = refused(d, "spm.model", "(content)",
                      re.escape(f"content is {sha256(d / 'spm.model')} (expected {sha256(spm_path)} of "
                                f"{d / 'config.json'} checksum.spm.model"))
    edit_config(d, lambda c: c.pop("checksum"))
    ModelDir.load(d)  # what the piece count and ids alone let through


def test_the_rehash_command_a_refusal_names_runs_from_an_installed_package(spm_path, tmp_path):
    """A wheel has no export/: the command the refusal suggests must run with nothing but
    the pyfastdec package importable, and then the directory loads."""
    d = checksummed(tmp_path / "m", make_config(), spm_path)
    (d / "spm.model").write_bytes(train_spm([w[::-1] for w in WORDS], seed=99))
    with pytest.raises(ModelDirError) as info:
        ModelDir.load(d)
    command = re.search(r"record the new content with (python -m \S+) DIR\)", str(info.value))
    assert command, str(info.value)
    site = tmp_path / "site"  # what an installed wheel puts on sys.path: the package alone
    site.mkdir()
    (site / "pyfastdec").symlink_to(Path(pyfastdec.__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run([sys.executable, *command.group(1).split()[1:], str(d)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ModelDir.load(d)


def test_refuses_another_models_weights(spm_path, tmp_path):
    config = make_config()
    d = checksummed(tmp_path / "m", config, spm_path)
    recorded = sha256(d / "model.safetensors")
    write_dir(tmp_path / "other", config, spm_path, random_tensors(config, seed=7))
    shutil.copyfile(tmp_path / "other" / "model.safetensors", d / "model.safetensors")
    refused(d, "model.safetensors", "(content)",
            re.escape(f"content is {sha256(d / 'model.safetensors')} (expected {recorded} of "))


def test_random_data_corruption_of_a_shipped_model_is_always_refused(tmp_path):
    """100 seeded one-byte corruptions of en-de's data section, each refused at load."""
    d = tmp_path / "en-de"
    d.mkdir()
    for name in ("config.json", "model.safetensors", "spm.model"):
        shutil.copyfile(REPO / "models" / "en-de" / name, d / name)
    weights = d / "model.safetensors"
    raw = weights.read_bytes()
    data_start = 8 + struct.unpack("<Q", raw[:8])[0]
    recorded = json.loads((d / "config.json").read_text())["checksum"]["model.safetensors"]
    rng = random.Random(10)
    for trial in range(100):
        offset = rng.randrange(data_start, len(raw))
        damaged = raw[offset] ^ rng.randrange(1, 256)
        with open(weights, "r+b") as f:
            f.seek(offset)
            f.write(bytes([damaged]))
        try:
            with pytest.raises(ModelDirError) as info:
                ModelDir.load(d)
        finally:
            with open(weights, "r+b") as f:
                f.seek(offset)
                f.write(raw[offset:offset + 1])
        assert str(info.value).startswith(f"{weights}: (content): content is sha256:"), (trial, offset, str(info.value))
        assert f"(expected {recorded} of " in str(info.value)
    assert ModelDir.load(d).config.checksum["model.safetensors"] == recorded  # restored: loads again


# ----------------------------------------------------------------------------- the shipped models, the rehash command
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_models_carry_their_checksums(name):
    d = REPO / "models" / name
    config = json.loads((d / "config.json").read_text())
    shortlist = {"shortlist.bin": sha256(d / "shortlist.bin")} if (d / "shortlist.bin").exists() else {}
    assert config["checksum"] == {"config": canonical_sha256(config), "model.safetensors": sha256(d / "model.safetensors"),
                                  "spm.model": sha256(d / "spm.model"), **shortlist}
    assert ModelDir.load(d).config.checksum == config["checksum"]


def test_rehash_changes_config_json_only_and_is_idempotent(spm_path, tmp_path, capsys):
    d = write_dir(tmp_path / "m", make_config(int8=True), spm_path)
    before = {name: (d / name).read_bytes() for name in ("model.safetensors", "spm.model")}
    original = json.loads((d / "config.json").read_text())
    assert rehash_main([str(d)]) == 0
    assert capsys.readouterr().out == f"{d}: model.safetensors {sha256(d / 'model.safetensors')}\n"
    text = (d / "config.json").read_text()
    config = json.loads(text)
    assert {k: v for k, v in config.items() if k != "checksum"} == original
    assert config["checksum"] == {"config": canonical_sha256(original), "model.safetensors": sha256(d / "model.safetensors"),
                                  "spm.model": sha256(d / "spm.model")}
    assert {name: (d / name).read_bytes() for name in before} == before
    rehash(d)
    assert (d / "config.json").read_text() == text
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors", "spm.model"]


def test_rehash_refuses_a_broken_directory_and_keeps_its_config(spm_path, tmp_path, capsys):
    config = make_config()
    tensors = random_tensors(config)
    tensors["embed.weight"][1, 1] = np.nan
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    before = (d / "config.json").read_bytes()
    assert rehash_main([str(d)]) == 1
    assert capsys.readouterr().out.startswith(f"export.rehash: {d / 'model.safetensors'}: embed.weight: nan at [1, 1]")
    assert (d / "config.json").read_bytes() == before

    (d / "config.json").write_text(_json_with_duplicate(make_config(), ("vocab_size",), 61))
    with pytest.raises(ModelDirError, match=re.escape(f"{d / 'config.json'}: vocab_size: duplicate key")):
        rehash(d)


def test_export_writer_records_checksums(spm_path, tmp_path):
    pytest.importorskip("torch")
    from export.tiny import tiny_model
    from export.writer import write_model_dir

    d = write_model_dir(tiny_model(vocab_size=VOCAB), spm_path, tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    assert config["checksum"] == {"config": canonical_sha256(config), "model.safetensors": sha256(d / "model.safetensors"),
                                  "spm.model": sha256(spm_path)}


# ----------------------------------------------------------------------------- every loader validates
@pytest.fixture()
def damaged_en_de(tmp_path) -> Path:
    """A copy of en-de whose weights differ from its checksum in one byte of the data."""
    d = tmp_path / "en-de"
    shutil.copytree(REPO / "models" / "en-de", d)
    raw = bytearray((d / "model.safetensors").read_bytes())
    raw[-100] ^= 0x01
    (d / "model.safetensors").write_bytes(bytes(raw))
    return d


def test_native_backend_refuses_damage_and_reuses_a_loaded_directory(damaged_en_de):
    from pyfastdec.backends.native import NativeBackend

    with pytest.raises(ModelDirError, match=re.escape(f"{damaged_en_de / 'model.safetensors'}: (content): ")):
        NativeBackend(damaged_en_de, threads=1)
    loaded = ModelDir.load(REPO / "models" / "en-de")
    backend = NativeBackend(loaded, threads=1)
    assert backend.model_dir is loaded and backend.shortlist is not None  # shortlist.bin found next to it


def test_translator_loads_each_directory_once(monkeypatch):
    """The checksum pass is paid once per directory, not again when the engine is built."""
    from pyfastdec import Translator

    calls: list[Path] = []
    original = ModelDir.load.__func__

    def counting(cls, path):
        calls.append(Path(path))
        return original(cls, path)

    monkeypatch.setattr(ModelDir, "load", classmethod(counting))
    Translator(REPO / "models" / "en-de", drafter=REPO / "models" / "en-de-drafter", threads=1)
    assert calls == [REPO / "models" / "en-de", REPO / "models" / "en-de-drafter"]


def test_other_loaders_refuse_damage(damaged_en_de, tmp_path):
    message = re.escape(f"{damaged_en_de / 'model.safetensors'}: (content): content is sha256:")
    with pytest.raises(ModelDirError, match=message):
        from pyfastdec.convert.ctranslate2_export import to_ctranslate2
        to_ctranslate2(damaged_en_de, tmp_path / "ct2")
    pytest.importorskip("torch")
    from export.writer import read_model_dir
    with pytest.raises(ModelDirError, match=message):
        read_model_dir(damaged_en_de)


def test_onnx_backend_validates_its_config_and_spm(tmp_path):
    pytest.importorskip("onnxruntime")
    from pyfastdec.backends.onnx import OnnxBackend

    d = tmp_path / "onnx"
    d.mkdir()
    shutil.copyfile(REPO / "models" / "en-de" / "config.json", d / "config.json")
    shutil.copyfile(REPO / "models" / "uk-gec" / "spm.model", d / "spm.model")  # another model's vocabulary
    with pytest.raises(ModelDirError, match=re.escape(f"{d / 'spm.model'}: ")):
        OnnxBackend(d)
    shutil.copyfile(REPO / "models" / "en-de" / "spm.model", d / "spm.model")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(_json_with_duplicate(config, ("head_dim",), 4))
    with pytest.raises(ModelDirError, match=re.escape(f"{d / 'config.json'}: head_dim: duplicate key")):
        OnnxBackend(d)
