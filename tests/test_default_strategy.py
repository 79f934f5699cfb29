"""The strategy that runs when none is asked for: the fastest lossless one the model
directories support (default_strategy.py), checked against greedy decoding of the same
model, through the API, the CLI and `fastdec info`."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from child_python import NEUTRAL_CWD, child_env

from pyfastdec import Corrector, Translator
from pyfastdec.api import ALGOS
from pyfastdec.default_strategy import default_strategy
from pyfastdec.model_dir import ModelDirError

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
SOURCES = [line.strip() for _, line in zip(range(24), gzip.open(ROOT / "data/multi30k/test_2016_flickr.en.gz", "rt"))]


def fake_dir(path: str, heads=None, arch: str = "nat-drafter"):
    return SimpleNamespace(path=Path(path), config=SimpleNamespace(heads=heads, arch=arch))


@pytest.fixture(scope="module")
def alone():
    """The shipped En-De verifier (with its proposal heads) without its drafter."""
    return Translator(MODELS / "en-de", threads=1)


def test_a_model_with_heads_runs_blockwise_with_greedys_output(alone):
    assert alone.strategy.algo == "blockwise" and "4 proposal heads" in alone.strategy.reason
    out = alone.translate(SOURCES)
    assert out == alone.translate(SOURCES, algo="greedy") and len(set(out)) == len(out)


def test_a_model_without_heads_or_drafter_translates_greedily():
    plain = Translator(MODELS / "en-de-attn", threads=1)
    assert plain.strategy.algo == "greedy" and "no drafter" in plain.strategy.reason
    out, stats = plain.translate(SOURCES, return_stats=True)
    assert out == plain.translate(SOURCES, algo="greedy")
    assert len(set(out)) == len(out) and stats.drafted == 0


def test_a_little_model_without_heads_runs_bild_with_greedys_output():
    big = Translator(MODELS / "en-de-big", MODELS / "en-de-little", threads=1)
    assert big.strategy.algo == "bild" and "little model" in big.strategy.reason
    assert big.translate(SOURCES) == big.translate(SOURCES, algo="greedy")


def test_bild_by_default_runs_the_little_models_lossless_threshold(monkeypatch):
    """No algo (and algo "bild") decodes with the little model's config.json
    decoding.fallback and rollback 0: lossless, greedy's output. Its lossy thresholds
    (lossy_fallback, rollback) are bild-lossy's alone. A default swapped to them changed
    the speed and passed every output check, so the thresholds passed are checked here."""
    import json

    from pyfastdec.decoding import strategies

    decoding = json.loads((MODELS / "en-de-little" / "config.json").read_text())["decoding"]
    assert decoding["fallback"] != decoding["lossy_fallback"] and decoding["rollback"] > 0
    calls, real = [], strategies.bild

    def recording(*args, **kw):
        calls.append((kw["fallback"], kw["rollback"]))
        return real(*args, **kw)

    monkeypatch.setattr(strategies, "bild", recording)
    big = Translator(MODELS / "en-de-big", MODELS / "en-de-little", threads=1)
    greedy = big.translate(SOURCES, algo="greedy")
    assert big.translate(SOURCES) == greedy and big.translate(SOURCES, algo="bild", batch_size=5) == greedy
    assert calls and set(calls) == {(decoding["fallback"], 0.0)}
    calls.clear()
    big.translate(SOURCES, algo="bild-lossy")
    assert calls and set(calls) == {(decoding["lossy_fallback"], decoding["rollback"])}


def test_the_packaged_drafter_reads_en_de_s_encoder_only():
    with_drafter = Translator(MODELS / "en-de", MODELS / "en-de-drafter", threads=1)
    assert with_drafter.translate(SOURCES, algo="gad") == with_drafter.translate(SOURCES, algo="greedy")
    with pytest.raises(ModelDirError, match=r"en-de-drafter/config\.json: encoder\.shared: .* is not the encoder of"):
        Translator(MODELS / "en-de-attn", MODELS / "en-de-drafter", threads=1)


def test_the_packaged_pair_prefers_the_heads(alone):
    both = Translator(threads=1)
    assert both.strategy.algo == "blockwise"
    assert both.translate(SOURCES) == alone.translate(SOURCES, algo="greedy")


def test_a_correction_model_runs_iad():
    corrector = Corrector(threads=1)
    assert corrector.strategy.algo == "iad"
    texts = ["Я хочу пити каву з молоко.", "Він пішов до магазін."]
    assert corrector.translate(texts) == corrector.correct(texts) == corrector.translate(texts, algo="greedy")


def test_beam_options_without_an_algo_mean_beam(alone):
    expected = alone.translate(SOURCES[:3], algo="beam", beam_size=3, n_best=2)
    assert alone.translate(SOURCES[:3], beam_size=3, n_best=2) == expected


def test_the_choice_order_heads_then_drafter_then_greedy():
    model, drafter = fake_dir("m"), fake_dir("d")
    with_heads = fake_dir("h", heads=SimpleNamespace(count=4, hidden=8))
    assert default_strategy(with_heads, drafter, "translate", ALGOS + ("blockwise",)).algo == "blockwise"
    # a build without the blockwise strategy falls back to what it has
    assert default_strategy(with_heads, drafter, "translate", tuple(a for a in ALGOS if a != "blockwise")).algo == "gad"
    assert default_strategy(model, drafter, "translate", ALGOS).algo == "gad"
    little = fake_dir("l", arch="transformer")  # a BiLD little model (load_checked: encoder.shared)
    assert default_strategy(model, little, "translate", ALGOS).algo == "bild"
    assert default_strategy(with_heads, little, "translate", ALGOS).algo == "blockwise"
    assert default_strategy(model, None, "translate", ALGOS).algo == "greedy"
    assert default_strategy(with_heads, None, "correct", ALGOS).algo == "iad"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyfastdec.cli", *args], input=b"A dog runs.\n", capture_output=True,
                          cwd=NEUTRAL_CWD, env=child_env(), timeout=120)


def test_cli_info_says_which_strategy_runs_and_why(alone):
    done = run_cli("info", "-m", str(MODELS / "en-de"))
    assert done.returncode == 0, done.stderr
    assert f"strategy of `fastdec translate -m {MODELS / 'en-de'}`: blockwise (" in done.stdout.decode()
    done = run_cli("info", "-m", str(MODELS / "en-de-attn"))
    assert f"strategy of `fastdec translate -m {MODELS / 'en-de-attn'}`: greedy (" in done.stdout.decode()
    done = run_cli("info", "-m", str(MODELS / "en-de-big"), "--drafter", str(MODELS / "en-de-little"))
    assert ": bild (a little model" in done.stdout.decode()
    plain = run_cli("info").stdout.decode()
    assert "strategy of `fastdec translate`: blockwise (" in plain and "strategy of `fastdec correct`: iad (" in plain
    done = run_cli("info", "--drafter", str(MODELS / "en-de-drafter"))
    assert done.returncode == 2 and "--drafter needs -m MODEL" in done.stderr.decode()


def test_cli_translates_with_a_model_alone(alone):
    done = run_cli("translate", "-m", str(MODELS / "en-de"), "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == alone.translate(["A dog runs."], algo="greedy")[0] + "\n"
