"""`fastdec train-heads` from the wheel, as a user with their own model runs it: the wheel
built from this checkout installed in a fresh virtual environment (no system
site-packages), run from a directory outside any checkout. Without the `train` extra the
command says to install it; with it (torch from the machine's wheel), it trains heads for
a tiny random Hugging Face Marian model converted there (`fastdec convert marian`) on real
English sentences, `fastdec info` names blockwise for the result, and translating 100
Multi30k test sentences with blockwise and with the default strategy gives greedy's
output. Before the trainer moved into the package it was `python -m export.train_heads`,
which no wheel has.

Slow: building the wheel compiles the engine and installing torch takes minutes."""
from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("transformers")

from marian_checkpoints import build_tokenizer_files, read_lines, save_marian  # noqa: E402
from test_wheel_convert import build_wheel, fresh_venv  # noqa: E402

pytestmark = [pytest.mark.slow]


def test_heads_for_an_imported_marian_model_from_the_wheel(tmp_path):
    wheel = build_wheel(tmp_path)
    env_dir, env, work = fresh_venv(tmp_path)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q"]
    fastdec = str(env_dir / "bin" / "fastdec")

    def run(*argv, **kw):
        return subprocess.run([fastdec, *map(str, argv)], capture_output=True, text=True, cwd=work, env=env,
                              timeout=900, **kw)

    hf = tmp_path / "hf"
    vocab = build_tokenizer_files(hf, 400, 500)
    save_marian(hf, vocab, d_model=32, heads=4, ffn=64, layers=2, activation="swish", init_std=0.2, eos_bias=4.0)
    sources, test = tmp_path / "mine.en", tmp_path / "test.en"
    sources.write_text("\n".join(read_lines("val.en.gz", 800)) + "\n", encoding="utf-8")
    test.write_text("\n".join(read_lines("test_2016_flickr.en.gz", 100)) + "\n", encoding="utf-8")

    subprocess.run([*pip, str(wheel)], check=True, timeout=900, cwd=work, env=env)
    converted = tmp_path / "converted"
    done = run("convert", "marian", hf, converted)
    assert done.returncode == 0, done.stderr
    heads = tmp_path / "with-heads"
    args = ("train-heads", converted, "--sources", sources, "--out", heads, "--heads", "3", "--steps", "200",
            "--held-out", "60", "--threads", "2", "--log-every", "100")
    done = run(*args)
    assert done.returncode == 1
    assert done.stderr.strip() == ('fastdec train-heads: error: needs torch and safetensors, which this '
                                   'installation lacks: pip install "pyfastdec[train]"')

    subprocess.run([*pip, f"{wheel}[train]"], check=True, timeout=1800, cwd=work, env=env)
    done = run(*args)
    assert done.returncode == 0, done.stderr
    assert "train: 200/200 steps" in done.stderr and "ETA" in done.stderr
    assert "60/60 held-out sentences equal to greedy" in done.stderr

    info = run("info", "-m", heads)
    assert info.returncode == 0, info.stderr
    assert any("strategy" in line and "blockwise" in line for line in info.stdout.splitlines()), info.stdout
    outputs = {}
    for algo in ("greedy", "blockwise", None):
        done = run("translate", "-m", heads, "-i", test, "--threads", "1", *(["--algo", algo] if algo else []))
        assert done.returncode == 0, done.stderr
        outputs[algo] = done.stdout.splitlines()
    assert len(outputs["greedy"]) == 100
    assert outputs["blockwise"] == outputs["greedy"] and outputs[None] == outputs["greedy"]
