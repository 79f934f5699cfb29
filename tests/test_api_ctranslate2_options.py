"""The CTranslate2-style Translator options against independent references: target
prefixes (every algorithm) against greedy with the prefix teacher-forced through the
torch model (no cache, no Backend), max_decoding_length, length_penalty and scores
against torch rescoring, sampling (top-1 = greedy, seeded, top-k within the torch top-k),
token input against text input, and Translator(model) on a bare model directory."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec.api import Translator, packaged_model_path  # noqa: E402
from pyfastdec.decoding import default_max_len  # noqa: E402
from pyfastdec.decoding.policies import FixedDraftLength  # noqa: E402

torch.set_num_threads(1)
BOS, EOS = 2, 3
SPECIAL_OUTPUTS = [0, 1, 2, 4]  # pad, unk, bos, mask: never emitted


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random verifier (torch model and float32 directory) and a drafter."""
    root = tmp_path_factory.mktemp("ct2opts")
    spm = tiny_spm(root / "spm.model")
    model = tiny_model(seed=4)
    with torch.no_grad():
        model.output.bias[SPECIAL_OUTPUTS] = -30.0
    model.eval()
    verifier = write_model_dir(model, spm, root / "verifier")
    drafter = write_model_dir(tiny_model(arch="nat-drafter", seed=9), spm, root / "drafter")
    translator = Translator(verifier, drafter=drafter, threads=1, compute_type="float32",
                           draft_policy=FixedDraftLength(4, [4, 0, 2, 1]))
    return {"model": model, "dir": verifier, "drafter": drafter, "translator": translator}


def sources(n: int, seed: int) -> list[list[int]]:
    """Source ids without EOS (the Translator appends it), 3..12 tokens."""
    return [s[:-1] for s in random_sources(n, seed=seed)]


@torch.no_grad()
def torch_continue(model, src: list[int], prefix: list[int], limit: int) -> list[int]:
    """prefix, then greedy tokens: the whole sequence re-run through torch every step."""
    seq = [BOS] + list(prefix)
    while len(seq) - 1 < limit:
        token = int(model(torch.tensor([src]), torch.tensor([seq]))[0, -1].argmax())
        if token == EOS:
            break
        seq.append(token)
    return seq[1:]


@torch.no_grad()
def torch_logprob(model, src: list[int], out: list[int], eos: bool = True) -> float:
    """Summed log-prob of out (then EOS) teacher-forced through torch."""
    targets = list(out) + ([EOS] if eos else [])
    logits = model(torch.tensor([src]), torch.tensor([[BOS] + targets[:-1]]))[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return float(sum(logp[i, t] for i, t in enumerate(targets)))


def random_prefixes(srcs, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(5, 40, size=int(rng.integers(0, 5)))] for _ in srcs]


# ----------------------------------------------------------------------------- target prefix
@pytest.mark.parametrize("algo", ["greedy", "iad", "gad", "gad++", "beam"])
def test_target_prefix_continues_as_torch_greedy_with_the_prefix_teacher_forced(tiny, algo):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(24, seed=31)
    prefixes = random_prefixes(srcs, seed=32)  # random tokens: not what the model would say
    assert sum(bool(p) for p in prefixes) >= 12 and any(not p for p in prefixes)
    got = t.translate(srcs, algo=algo, target_prefix=prefixes, batch_size=7)  # ragged batches
    want = [torch_continue(model, s + [EOS], p, default_max_len(len(s) + 1)) for s, p in zip(srcs, prefixes)]
    assert got == want  # beam size 1 is greedy; gad++ with beta 1, tau 0 is gad


def test_target_prefix_of_the_models_own_output_changes_nothing(tiny):
    t = tiny["translator"]
    srcs = sources(20, seed=41)
    plain = t.translate(srcs, algo="greedy")
    cut = [o[:k] for o, k in zip(plain, np.random.default_rng(3).integers(0, 6, size=len(plain)))]
    for algo in ("greedy", "iad", "gad"):
        assert t.translate(srcs, algo=algo, target_prefix=cut) == plain
    beam = t.translate(srcs, algo="beam", beam_size=4)
    assert t.translate(srcs, algo="beam", beam_size=4, target_prefix=[None] * len(srcs)) == beam


def test_beam_with_prefix_returns_hypotheses_that_start_with_it_scored_by_torch(tiny):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(6, seed=51)
    prefixes = random_prefixes(srcs, seed=52)
    for lp in (0.0, 1.0, 2.0):
        got = t.translate(srcs, algo="beam", beam_size=4, n_best=3, return_scores=True, length_penalty=lp,
                          target_prefix=prefixes)
        for s, p, hyps in zip(srcs, prefixes, got):
            assert len(hyps) >= 1
            for out, score in hyps:
                assert out[:len(p)] == p
                # unfinished hypotheses (cut at max_len) have no EOS scored
                finished = len(out) < default_max_len(len(s) + 1)
                ref = torch_logprob(model, s + [EOS], out, eos=finished) / (len(out) + 1) ** lp
                assert score == pytest.approx(ref, rel=1e-4, abs=1e-4)
            assert [sc for _, sc in hyps] == sorted((sc for _, sc in hyps), reverse=True)


def test_scores_with_a_prefix_cover_the_prefix_tokens(tiny):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(8, seed=61)
    prefixes = random_prefixes(srcs, seed=62)
    for algo in ("greedy", "gad"):
        got = t.translate(srcs, algo=algo, target_prefix=prefixes, return_scores=True)
        for s, (out, score) in zip(srcs, got):
            finished = len(out) < default_max_len(len(s) + 1)
            ref = torch_logprob(model, s + [EOS], out, eos=finished) / (len(out) + 1)
            assert score == pytest.approx(ref, rel=1e-4, abs=1e-4)


def test_prefix_as_text_pieces_and_ids_are_the_same_prefix(tiny):
    t = tiny["translator"]
    sp = t.tokenizer.sp
    texts = ["a man rides a bike .", "the dog runs ."]
    prefix_text = ["the man", "a"]
    ids = [t.tokenizer.encode(p) for p in prefix_text]
    pieces = [[sp.IdToPiece(i) for i in p] for p in ids]
    as_text = t.translate(texts, algo="greedy", target_prefix=prefix_text)
    assert t.translate(texts, algo="greedy", target_prefix=pieces) == as_text
    assert t.translate(texts, algo="greedy", target_prefix=ids) == as_text
    assert all(o.startswith(p) for o, p in zip(as_text, prefix_text))


@pytest.mark.skipif(not (packaged_model_path("en-de") / "config.json").is_file(), reason="packaged en-de missing")
def test_target_prefix_with_blockwise_and_gad_on_the_packaged_model():
    t = Translator(packaged_model_path("en-de"), drafter=packaged_model_path("en-de-drafter"), threads=1)
    texts = ["A man rides a bike down the street.", "Two dogs play in the snow.",
             "A woman in a red dress is singing on a stage.", "Kids play soccer in a park."]
    prefixes = ["Ein Hund", None, "Eine Frau in", "Drei"]
    ref = t.translate(texts, algo="greedy", target_prefix=prefixes)
    assert [o.startswith(p or "") for o, p in zip(ref, prefixes)] == [True] * 4
    for algo in ("blockwise", "gad", "iad"):
        assert t.translate(texts, algo=algo, target_prefix=prefixes) == ref


# ----------------------------------------------------------------------------- lengths
def test_max_decoding_length_cuts_greedy_and_counts_the_prefix(tiny):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(16, seed=71)
    full = t.translate(srcs, algo="greedy")
    for n in (1, 3, 6):
        for algo in ("greedy", "iad", "gad"):
            assert t.translate(srcs, algo=algo, max_decoding_length=n) == [o[:n] for o in full], (algo, n)
        # beam search ranks cut hypotheses against finished ones: only the bound is common
        assert all(len(o) <= n for o in t.translate(srcs, algo="beam", beam_size=3, max_decoding_length=n))
    prefixes = random_prefixes(srcs, seed=72)
    got = t.translate(srcs, algo="greedy", target_prefix=prefixes, max_decoding_length=5)
    want = [torch_continue(model, s + [EOS], p, 5) if len(p) < 5 else p for s, p in zip(srcs, prefixes)]
    assert got == want and all(len(o) <= max(5, len(p)) for o, p in zip(got, prefixes))
    full = [[7] * 5 for _ in srcs]  # as long as the limit: returned as it is
    assert t.translate(srcs, algo="greedy", target_prefix=full, max_decoding_length=5) == full
    # longer than a given limit (300 tokens at 5 came back whole): refused, naming the input
    for algo in ("greedy", "beam", "gad"):
        with pytest.raises(ValueError, match=r"^target_prefix: input 3 has 6 tokens, more than max_decoding_length=5 "):
            t.translate(srcs, algo=algo, target_prefix=full[:3] + [[7] * 6] + full[4:], max_decoding_length=5)
    # under the default limit (no limit given) a longer prefix is returned as it is
    over = [[7] * (default_max_len(len(s) + 1) + 2) for s in srcs[:2]]
    assert t.translate(srcs[:2], algo="greedy", target_prefix=over) == over


def test_length_penalty_ranks_beam_hypotheses_as_defined(tiny):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(10, seed=81)
    for lp in (0.0, 0.6, 2.0):
        got = t.translate(srcs, algo="beam", beam_size=5, n_best=5, length_penalty=lp, return_scores=True)
        for s, hyps in zip(srcs, got):
            for out, score in hyps:
                finished = len(out) < default_max_len(len(s) + 1)
                assert score == pytest.approx(torch_logprob(model, s + [EOS], out, finished) / (len(out) + 1) ** lp,
                                              rel=1e-4, abs=1e-4)
    short = t.translate(srcs, algo="beam", beam_size=5, length_penalty=0.0)
    long = t.translate(srcs, algo="beam", beam_size=5, length_penalty=2.0)
    assert sum(map(len, short)) <= sum(map(len, long))  # no normalisation favours short outputs


# ----------------------------------------------------------------------------- sampling
def test_sampling_topk_1_is_greedy_whatever_the_temperature(tiny):
    t = tiny["translator"]
    srcs = sources(16, seed=91)
    greedy = t.translate(srcs, algo="greedy")
    for temperature in (0.3, 1.0, 5.0):
        assert t.translate(srcs, sampling_topk=1, sampling_temperature=temperature) == greedy
    # top-0 (full vocabulary) at a near-zero temperature: the top token every time
    assert t.translate(srcs, sampling_topk=0, sampling_temperature=1e-6, sampling_seed=0) == greedy


def test_seeded_sampling_is_reproducible_batch_independent_and_seed_dependent(tiny):
    t = tiny["translator"]
    srcs = sources(16, seed=92)
    a = t.translate(srcs, sampling_topk=0, sampling_seed=7)
    assert t.translate(srcs, sampling_topk=0, sampling_seed=7, batch_size=3) == a
    b = t.translate(srcs, sampling_topk=0, sampling_seed=8)
    assert a != b and sum(x != y for x, y in zip(a, b)) >= 8
    assert a != t.translate(srcs, algo="greedy")


def test_top_k_sampling_of_real_sentences_does_not_depend_on_the_batch_size():
    """The packaged En-De on 50 Multi30k sentences with top-10 sampling: batch 16 (rows of
    a batch finish at different steps) samples what batch 1 does. With a row drawing from
    the generator of its place among the live rows, 16 of the 50 differ (measured)."""
    from export.data import corpus_path, read_lines
    from pyfastdec import Translator

    t = Translator(threads=1)
    sentences = read_lines(corpus_path("test_2016_flickr", "en"))[:50]
    one = t.translate(sentences, sampling_topk=10, sampling_seed=1, batch_size=1)
    assert t.translate(sentences, sampling_topk=10, sampling_seed=1, batch_size=16) == one
    assert sum(a != b for a, b in zip(one, t.translate(sentences, algo="greedy"))) >= 25  # it does sample


@torch.no_grad()
def test_sampled_tokens_are_within_the_torch_top_k(tiny):
    model, t = tiny["model"], tiny["translator"]
    srcs = sources(12, seed=93)
    outs = t.translate(srcs, sampling_topk=3, sampling_temperature=2.0, sampling_seed=1)
    ranks = []
    for s, out in zip(srcs, outs):
        seq = [BOS] + out
        logits = model(torch.tensor([s + [EOS]]), torch.tensor([seq]))[0]
        top = torch.topk(logits, 3, dim=-1).indices
        for i, token in enumerate(out + ([EOS] if len(out) < default_max_len(len(s) + 1) else [])):
            assert token in top[i].tolist()
            ranks.append(top[i].tolist().index(token))
    assert set(ranks) == {0, 1, 2}  # all three ranks drawn: not greedy in disguise


# ----------------------------------------------------------------------------- token input
def test_token_input_equals_text_input(tiny):
    t = tiny["translator"]
    texts = ["a man rides a bike .", "the dog runs fast .", "two women sit ."]
    ids = [t.tokenizer.encode(x) for x in texts]
    pieces = [[t.tokenizer.sp.IdToPiece(i) for i in x] for x in ids]
    as_text = t.translate(texts, algo="greedy", return_scores=True)
    as_pieces = t.translate(pieces, algo="greedy", return_scores=True)
    as_ids = t.translate(ids, algo="greedy", return_scores=True)
    assert [t.tokenizer.sp.DecodePieces(p) for p, _ in as_pieces] == [x for x, _ in as_text]
    assert [t.tokenizer.decode(i) for i, _ in as_ids] == [x for x, _ in as_text]
    assert [s for _, s in as_ids] == [s for _, s in as_text] == [s for _, s in as_pieces]
    assert [[t.tokenizer.sp.PieceToId(p) for p in x] for x, _ in as_pieces] == [x for x, _ in as_ids]


def test_translator_on_a_bare_model_directory_needs_no_drafter(tiny):
    t = Translator(tiny["dir"], threads=1, compute_type="float32")
    assert t.drafter is None and t.strategy.algo == "greedy"
    srcs = sources(6, seed=95)
    assert t.translate(srcs) == tiny["translator"].translate(srcs, algo="greedy")
