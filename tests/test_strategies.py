"""The strategy registry (pyfastdec/decoding/strategies.py): every algorithm the API takes
has one entry, its requirements refuse the wrong models with the API's messages, and an
entry added to the registry is all it takes for Translator.translate(algo=...) to run it,
check its options and keep its policy for the Translator's lifetime."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api import models, sentences, translator  # noqa: E402,F401  (fixtures)
from pyfastdec import api  # noqa: E402
from pyfastdec.api import Translator  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.decoding import gad, greedy, iad, strategies  # noqa: E402
from pyfastdec.decoding.strategies import EDIT_MARGIN, PolicySlot, Strategy  # noqa: E402

TEXTS = sentences(6, seed=33)


def test_every_algorithm_the_api_takes_has_one_entry():
    assert api.ALGOS == strategies.names() == ("greedy", "beam", "iad", "gad", "gad++", "blockwise", "bild",
                                               "bild-lossy")
    assert all(strategies.get(name).name == name for name in api.ALGOS)
    assert not strategies.get("sample").public  # chosen by sampling_topk, never by algo=
    with pytest.raises(ValueError, match="algo must be one of greedy, beam, iad, gad, gad\\+\\+, blockwise, bild, "
                                         "bild-lossy, got 'nat'"):
        strategies.get("nat")


@pytest.mark.parametrize("algo, drafter, message", [
    ("gad", None, "algo 'gad' needs a drafter \\(arch nat-drafter\\)"),
    ("gad++", "transformer", "algo 'gad\\+\\+' needs a drafter \\(arch nat-drafter\\)"),
    ("bild", None, "algo 'bild' needs a little model"),
    ("bild-lossy", "nat-drafter", "algo 'bild-lossy' needs a little model"),
    ("blockwise", "nat-drafter", "algo 'blockwise' needs proposal heads in the model: m/config.json"),
])
def test_requirements_refuse_the_wrong_models(algo, drafter, message):
    models = SimpleNamespace(verifier=SimpleNamespace(proposal_heads=0), model_dir=SimpleNamespace(path="m"),
                             drafter=None if drafter is None else SimpleNamespace(arch=drafter))
    with pytest.raises(ValueError, match=message):
        strategies.get(algo).needs(models, algo)


def test_the_no_heads_refusals_name_a_command_the_installed_package_has(capsys):
    """A wheel has no export/: the command that the two 'no proposal heads' refusals
    suggest must be a `fastdec` subcommand, whose --help works without torch."""
    from pyfastdec import cli
    from pyfastdec.decoding.blockwise import proposal_heads

    models = SimpleNamespace(verifier=SimpleNamespace(proposal_heads=0), model_dir=SimpleNamespace(path="m"))
    messages = []
    for refuse in (lambda: strategies.get("blockwise").needs(models, "blockwise"),
                   lambda: proposal_heads(SimpleNamespace(proposal_heads=0, describe=lambda: "m"))):
        with pytest.raises(ValueError) as info:
            refuse()
        messages.append(str(info.value))
    for message in messages:
        command = re.search(r"with fastdec ([\w-]+)\)", message)
        assert command, message
        with pytest.raises(SystemExit) as done:
            cli.main([command.group(1), "--help"])
        assert done.value.code == 0 and "--sources" in capsys.readouterr().out


def test_the_translator_refuses_through_the_registry(models, translator):
    alone = Translator(models["verifier"], threads=1, compute_type="float32")
    with pytest.raises(ValueError, match="algo 'gad' needs a drafter \\(arch nat-drafter\\): "
                                         "Translator\\(model, drafter='path/to/drafter'\\)"):
        alone.translate(TEXTS, algo="gad")
    with pytest.raises(ValueError, match="algo 'bild' needs a little model: "):
        translator.translate(TEXTS, algo="bild")  # its drafter is a nat-drafter
    with pytest.raises(ValueError, match=f"algo 'blockwise' needs proposal heads in the model: "
                                         f"{models['verifier']}/config.json has no \"heads\""):
        translator.translate(TEXTS, algo="blockwise")


def test_an_added_entry_is_reachable_through_translate(models, monkeypatch):
    """One entry: algo= takes it, its options are checked as declared, the messages name
    it where its options apply, and its policy is made once per Translator."""
    calls, made = [], []

    def run(call):
        calls.append(call.policy)
        return greedy(call.verifier, call.src, call.max_len, edit_margin=call.options.edit_margin)

    def make(holder):
        made.append(holder)
        return object()

    entry = Strategy("greedy-again", run, options=frozenset({EDIT_MARGIN}), policy=PolicySlot("_again", make))
    monkeypatch.setitem(strategies.STRATEGIES, "greedy-again", entry)
    t = Translator(models["verifier"], threads=1, compute_type="float32")
    assert t.translate(TEXTS, algo="greedy-again") == t.translate(TEXTS, algo="greedy")
    assert t.translate(TEXTS, algo="greedy-again", edit_margin=1.0) == \
        t.translate(TEXTS, algo="greedy", edit_margin=1.0)
    assert len(calls) == 2 and calls[0] is calls[1] and made == [t]  # one policy for the Translator's lifetime
    with pytest.raises(ValueError, match="block=2: a draft block size applies to algo 'gad' and 'gad\\+\\+' only"):
        t.translate(TEXTS, algo="greedy-again", block=2)
    with pytest.raises(ValueError, match="the edit-margin rule applies to algo 'greedy' and 'iad' and "
                                         "'greedy-again' only, got 'beam'"):
        t.translate(TEXTS, algo="beam", edit_margin=1.0)
    with pytest.raises(ValueError, match="algo must be one of greedy, .*, bild-lossy, greedy-again, got 'x'"):
        t.translate(TEXTS, algo="x")


def test_batch_runner_runs_the_free_functions(models):
    """What bench and export's choosers call: the entry's run over backends, with or
    without the entry's policy."""
    verifier = NativeBackend(models["verifier"], threads=1)
    drafter = NativeBackend(models["drafter"], threads=1)
    ids = [[5 + (i * 7 + j) % 30 for j in range(4 + i)] + [3] for i in range(5)]
    by_registry = strategies.batch_runner("gad", verifier, drafter, policy=False, block=3)(ids)
    direct = gad(verifier, drafter, ids, k=3)
    assert by_registry[0] == direct[0] == greedy(verifier, ids)[0]
    assert (by_registry[1].iterations, by_registry[1].drafted) == (direct[1].iterations, direct[1].drafted)
    copying = strategies.batch_runner("greedy", verifier, edit_margin=1e9)(ids)[0]  # never edits: copies the source
    assert copying == greedy(verifier, ids, edit_margin=1e9)[0] != greedy(verifier, ids)[0]
    run = strategies.batch_runner("iad", verifier)
    assert run(ids)[0] == run(ids)[0] == iad(verifier, ids)[0]


# The CLI's defaults (its DecodeOptions): None is "the model's own" / "not given".
CLI_DEFAULTS = dict(beam_size=1, batch_size=32, n_best=1, block=None, beta=None, tau=None, max_decoding_length=None,
                    length_penalty=1.0, sampling_topk=1, sampling_temperature=1.0, sampling_seed=None,
                    beam_rule="pyfastdec", edit_margin=None, fallback=None, rollback=None, repetition_guard=None,
                    sampling_topp=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0, min_decoding_length=0)


@pytest.mark.parametrize("algo, options, line", [
    ("greedy", {}, "algo greedy, batch size 32"),
    ("greedy", dict(sampling_topk=0, sampling_seed=3, edit_margin=0.5, repetition_guard=False),
     "algo greedy, batch size 32, sampling top-all, temperature 1.0, seed 3, edit margin 0.5, no repetition guard"),
    ("beam", dict(beam_size=5, n_best=2, beam_rule="hf", length_penalty=0.6),
     "algo beam, batch size 32, beam size 5, n-best 2, length penalty 0.6, beam rule hf"),
    ("greedy", dict(beam_rule="hf"), "algo greedy, batch size 32"),
    ("gad", {}, "algo gad, batch size 32, block drafter default"),
    ("gad++", dict(block=3, beta=2), "algo gad++, batch size 32, block 3, beta 2, tau 0.0"),
    ("iad", dict(max_decoding_length=40), "algo iad, batch size 32, max decoding length 40"),
    ("bild", dict(fallback=0.4), "algo bild, batch size 32, fallback 0.4"),
    ("bild-lossy", {}, "algo bild-lossy, batch size 32, fallback model default, rollback model default"),
    ("blockwise", dict(repetition_penalty=1.2), "algo blockwise, batch size 32, repetition penalty 1.2, no repeat "
                                                "n-gram size 0, min decoding length 0"),
])
def test_describe_names_the_options_that_apply(algo, options, line):
    """The line `fastdec` prints for a call (the CLI's DecodeOptions.describe)."""
    assert strategies.describe(SimpleNamespace(**{**CLI_DEFAULTS, **options, "algo": algo})) == line
