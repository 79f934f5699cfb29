"""Size options are bounded in one place (pyfastdec/size_limits.py): the engine agrees
with the top-k bound the beam and beta limits come from; Translator.translate refuses
a value past a bound with ValueError and accepts the bound itself (still greedy's output
where the algorithm is lossless); the CLI refuses it at parse time (exit 2, before any
model is loaded) naming the option and the bound, and --help states every bound."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import models, sentences, translator  # noqa: E402,F401  (fixtures)
from pyfastdec import api, cli  # noqa: E402
from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.size_limits import (ENGINE_MAX_TOPK, MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA,  # noqa: E402
                                   MAX_BLOCK, MAX_N_BEST, MAX_WORKERS, check_size)


def test_the_engine_top_k_bound_is_the_one_the_limits_assume():
    path = api.packaged_model_path("uk-gec")  # a vocabulary larger than the bound
    if not path.is_dir():
        pytest.skip("the packaged uk-gec model is not installed")
    backend = NativeBackend(path, threads=1)
    state = backend.start(backend.encode([[5, 6, 3]]))
    out = backend.step(state, np.array([[2]]), Want(argmax=False, topk=ENGINE_MAX_TOPK))
    assert out.topk_ids.shape == (1, 1, ENGINE_MAX_TOPK)
    with pytest.raises(ValueError, match=f"topk must be in \\[0, {ENGINE_MAX_TOPK}\\]"):
        backend.step(backend.start(backend.encode([[5, 3]])), np.array([[2]]),
                     Want(argmax=False, topk=ENGINE_MAX_TOPK + 1))
    assert 2 * MAX_BEAM_SIZE <= ENGINE_MAX_TOPK and MAX_BETA <= ENGINE_MAX_TOPK


def test_check_size():
    assert check_size("n", np.int64(3), 4) == 3
    for bad in (0, 5, -1, True):
        with pytest.raises(ValueError, match=r"n must be in \[1, 4\]"):
            check_size("n", bad, 4)
    for bad in (2.0, "2", None):
        with pytest.raises(TypeError, match=r"n must be an integer in \[1, 4\]"):
            check_size("n", bad, 4)


@pytest.mark.parametrize("options, message", [
    (dict(algo="beam", beam_size=MAX_BEAM_SIZE + 1), rf"beam_size must be in \[1, {MAX_BEAM_SIZE}\]"),
    (dict(algo="beam", beam_size=MAX_BEAM_SIZE, n_best=MAX_N_BEST + 1), rf"n_best must be in \[1, {MAX_N_BEST}\]"),
    (dict(algo="beam", beam_size=4, n_best=5), "n_best=5 exceeds beam_size=4"),
    (dict(algo="gad", block=MAX_BLOCK + 1), rf"block must be in \[1, {MAX_BLOCK}\]"),
    (dict(algo="gad", block=20000), rf"block must be in \[1, {MAX_BLOCK}\]"),
    (dict(algo="greedy", batch_size=MAX_BATCH_SIZE + 1), rf"batch_size must be in \[1, {MAX_BATCH_SIZE}\]"),
    (dict(algo="gad++", beta=MAX_BETA + 1), rf"beta must be in \[1, {MAX_BETA}\]"),
    (dict(algo="greedy", batch_size=0), r"batch_size must be in \[1, "),
])
def test_translate_refuses_sizes_past_their_bound(translator, options, message):
    with pytest.raises(ValueError, match=message):
        translator.translate(["a man ."], **options)


def test_translate_accepts_every_bound_itself(translator):
    texts = sentences(5, seed=31)
    greedy = translator.translate(texts, algo="greedy")
    assert translator.translate(texts, algo="gad", block=MAX_BLOCK) == greedy
    assert translator.translate(texts, algo="greedy", batch_size=MAX_BATCH_SIZE) == greedy
    nbest = translator.translate(texts[:2], algo="beam", beam_size=MAX_BEAM_SIZE, n_best=MAX_N_BEST)
    assert [len(h) for h in nbest] == [MAX_N_BEST] * 2
    assert translator.translate(texts, algo="gad", block=np.int64(2)) == greedy  # numpy integers are integers


@pytest.mark.parametrize("argv, option, bound", [
    (["--beam-size", str(MAX_BEAM_SIZE + 1)], "--beam-size", MAX_BEAM_SIZE),
    (["--beam-size", "65"], "--beam-size", MAX_BEAM_SIZE),
    (["--n-best", str(MAX_N_BEST + 1)], "--n-best", MAX_N_BEST),
    (["--block", "1000000"], "--block", MAX_BLOCK),
    (["--block", "0"], "--block", MAX_BLOCK),
    (["--beta", str(MAX_BETA + 1)], "--beta", MAX_BETA),
    (["--batch-size", str(MAX_BATCH_SIZE + 1)], "--batch-size", MAX_BATCH_SIZE),
    (["--workers", str(MAX_WORKERS + 1)], "--workers", MAX_WORKERS),
    (["--batch-size", "many"], "--batch-size", MAX_BATCH_SIZE),
])
def test_cli_refuses_sizes_past_their_bound_at_parse_time(tmp_path, capsys, argv, option, bound):
    # the model directory does not exist: refusing at parse time means it is never looked at
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate", "-m", str(tmp_path / "no-model"), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: expected an integer in [1, {bound}]" in err, err
    assert "no-model" not in err


def test_cli_refuses_n_best_above_beam_size_at_parse_time(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate", "-m", str(tmp_path / "no-model"), "--n-best", "4", "--beam-size", "3"])
    assert exit_info.value.code == 2
    assert "argument --n-best: 4 exceeds --beam-size 3" in capsys.readouterr().err


def test_cli_bench_batch_size_is_bounded_too(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "-i", "x", "--batch-size", str(MAX_BATCH_SIZE + 1)])
    assert exit_info.value.code == 2
    assert f"argument --batch-size: expected an integer in [1, {MAX_BATCH_SIZE}]" in capsys.readouterr().err


def test_help_states_the_bounds(capsys):
    with pytest.raises(SystemExit):
        cli.main(["translate", "--help"])
    text = " ".join(capsys.readouterr().out.split()).split("options:", 1)[1]  # argparse wraps lines
    for option, bound in (("--beam-size", MAX_BEAM_SIZE), ("--block", MAX_BLOCK), ("--beta", MAX_BETA),
                          ("--batch-size", MAX_BATCH_SIZE), ("--workers", MAX_WORKERS)):
        help_text = re.search(rf"{option} [A-Z]+ (.{{0,200}})", text).group(1)  # the option's own entry
        assert f"at most {bound}" in help_text, option
    assert "at most --beam-size" in text


@pytest.mark.parametrize("block_size", [MAX_BLOCK + 1, 20000, 1_000_000])
def test_a_drafters_block_size_is_bounded_at_load(tmp_path, block_size):
    """config.json block_size is the block the default strategy drafts, so it carries
    --block's bound: past it the directory is refused at load (one line naming the file
    and the field) instead of taking gigabytes for one sentence."""
    import json
    import shutil
    import subprocess
    import sys

    from child_python import child_env
    from export.rehash import rehash
    from pyfastdec.model_dir import ModelDir, ModelDirError

    drafter = Path(shutil.copytree(api.packaged_model_path("en-de-drafter"), tmp_path / "drafter"))
    config = json.loads((drafter / "config.json").read_text())
    config["block_size"] = MAX_BLOCK
    (drafter / "config.json").write_text(json.dumps(config, indent=2))
    rehash(drafter)  # the bound itself loads
    assert ModelDir.load(drafter).config.block_size == MAX_BLOCK
    config["block_size"] = block_size
    config.pop("checksum")  # as a hand-edited directory has none: the bound, not the checksum, refuses it
    (drafter / "config.json").write_text(json.dumps(config, indent=2))
    expected = f"{drafter / 'config.json'}: block_size: {block_size} (expected an integer in [1, {MAX_BLOCK}]"
    with pytest.raises(ModelDirError) as info:
        ModelDir.load(drafter)
    assert str(info.value).startswith(expected)
    done = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "translate", "--drafter", str(drafter),
                           "--threads", "1"], input=b"A dog runs.\n", capture_output=True, cwd=tmp_path,
                          env=child_env(), timeout=120)
    err = done.stderr.decode()
    assert done.returncode != 0 and err.count("\n") == 1 and "Traceback" not in err and expected in err, err
