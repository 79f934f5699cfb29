"""pyfastdec.convert.ctranslate2_export against the PyTorch reference (export/): CTranslate2
float32 greedy decoding gives the same tokens as our greedy, and its logits / log-probs
at every step match ours, for pre- and post-norm models; int8 directories convert to
their dequantised float weights; pruned models with per-layer head counts run padded
with zero heads; what CTranslate2 cannot run is refused by name.

Random tiny models only ever repeat one token (with tied embeddings the input token
wins), which would make "same tokens" a weak check, so the models here are first trained
for ~60 Adam steps on a copy task: source-dependent outputs of varied lengths, with EOS.
"""
from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2", reason="the CTranslate2 converter needs the 'bench' extra")
torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")
import sentencepiece  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from export.calibrate import calibrate  # noqa: E402
from export.decode import greedy, pad_batch  # noqa: E402
from export.modeling import LayerSpec, Seq2Seq  # noqa: E402
from export.tiny import TINY_VOCAB, random_sources, tiny_config, tiny_model, tiny_spm  # noqa: E402
from export.writer import read_model_dir, write_model_dir  # noqa: E402
from pyfastdec.convert.command import main  # noqa: E402
from pyfastdec.convert.ctranslate2_export import to_ctranslate2  # noqa: E402

PAD, BOS, EOS = 0, 2, 3
MAX_LEN = 20  # decoding limit for both engines; some hypotheses reach it without EOS
TOL = 1e-3  # the brief's bound; measured differences are ~1e-6


# ----------------------------------------------------------------------------- models
def uniform_heads_config(norm: str):
    """tiny_config with one head count per stack (CTranslate2 has one num_heads per
    encoder / decoder). Encoder 2 heads x head_dim 4 = 8 != d_model 16 exercises an
    explicit head_dim; the FFN sizes still differ per layer, as in pruned models."""
    cfg = tiny_config(norm=norm)
    cfg.encoder_layers = [LayerSpec(2, 24), LayerSpec(2, 32)]
    cfg.decoder_layers = [LayerSpec(4, 16), LayerSpec(4, 40)]
    return cfg


def train_copy(model: Seq2Seq, steps: int = 60, seed: int = 0) -> Seq2Seq:
    """A few Adam steps on "copy the source" so greedy outputs depend on the source."""
    rng = random.Random(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        seqs = [[rng.randrange(5, TINY_VOCAB) for _ in range(rng.randint(1, 8))] for _ in range(24)]
        src = pad_batch([s + [EOS] for s in seqs], PAD)
        tgt_in = pad_batch([[BOS] + s for s in seqs], PAD)
        tgt_out = pad_batch([s + [EOS] for s in seqs], -100)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@functools.cache  # training is most of this file's run time: once per model
def trained_model(norm: str, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return train_copy(Seq2Seq(uniform_heads_config(norm)), seed=seed)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The machine is shared and the models have d=16: more threads only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module")
def pieces(spm):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


@pytest.fixture(scope="module", params=["pre", "post"])
def converted(request, spm, tmp_path_factory):
    """(torch model, pyfastdec model dir, CTranslate2 float32 translator) on the same weights."""
    model = trained_model(request.param)
    root = tmp_path_factory.mktemp(f"ct2-{request.param}")
    path = write_model_dir(model, spm, root / "fastdec")
    out = to_ctranslate2(path, root / "ct2")
    return model, path, translator(out)


def translator(path, compute_type: str = "float32"):
    return ctranslate2.Translator(str(path), device="cpu", compute_type=compute_type,
                                  inter_threads=1, intra_threads=1)


# ----------------------------------------------------------------------------- helpers
def as_pieces(pieces, ids):
    return [pieces[i] for i in ids]


def ct2_source(pieces, source):
    """Our source is sentencepiece ids + EOS; the converted model appends EOS itself
    (add_source_eos), so CTranslate2 gets the plain sentencepiece pieces."""
    assert source[-1] == EOS
    return as_pieces(pieces, source[:-1])


def ct2_greedy(tr, pieces, sources, **kw):
    return tr.translate_batch([ct2_source(pieces, s) for s in sources], beam_size=1,
                              min_decoding_length=0, max_decoding_length=MAX_LEN, **kw)


@torch.no_grad()
def teacher_forced_logits(model: Seq2Seq, source: list[int], target: list[int]) -> np.ndarray:
    """Our logits [len(target) + 1, V] for decoder input BOS + target (last row: after target)."""
    return model(torch.tensor([source]), torch.tensor([[BOS] + target]))[0].numpy()


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


# ----------------------------------------------------------------------------- equivalence
def test_greedy_tokens_identical(converted, pieces):
    model, _, tr = converted
    sources = random_sources(10, seed=3)
    want = greedy(model, sources, max_len=MAX_LEN)
    got = [[pieces.index(p) for p in r.hypotheses[0]] for r in ct2_greedy(tr, pieces, sources)]
    assert got == want
    # The check means something: outputs vary, some stop at EOS before the limit.
    assert len({tuple(w) for w in want}) >= 5
    assert any(len(w) < MAX_LEN for w in want)


def test_every_step_logits_match(converted, pieces):
    """return_logits_vocab gives CTranslate2's raw logits at every greedy step, the EOS
    step included: the whole distribution, not just the argmax, equals ours."""
    model, _, tr = converted
    sources = random_sources(10, seed=4)
    worst = 0.0
    for source, res in zip(sources, ct2_greedy(tr, pieces, sources, return_logits_vocab=True, return_scores=True,
                                               length_penalty=0.0)):
        hyp = [pieces.index(p) for p in res.hypotheses[0]]
        ours = teacher_forced_logits(model, source, hyp)
        theirs = np.stack([np.asarray(step) for step in res.logits[0]])
        ours = ours[: len(theirs)]  # no EOS step when the limit ended the hypothesis
        worst = max(worst, np.abs(log_softmax(theirs) - log_softmax(ours)).max())
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=TOL)
        # length_penalty=0: the score is the plain sum of the chosen tokens' log-probs.
        chosen = (hyp + [EOS])[: len(theirs)]
        ours_sum = log_softmax(ours)[np.arange(len(chosen)), chosen].sum()
        assert res.scores[0] == pytest.approx(ours_sum, abs=TOL)
    assert worst < TOL


def test_score_batch_matches_teacher_forced_logprobs(converted, pieces):
    """score_batch scores given targets (EOS appended): off the greedy path, so positions
    and tokens the greedy outputs never reach are checked too."""
    model, _, tr = converted
    sources = random_sources(10, seed=5)
    targets = random_sources(10, seed=6)  # arbitrary target ids (+ EOS, dropped below)
    results = tr.score_batch([ct2_source(pieces, s) for s in sources],
                             [as_pieces(pieces, t[:-1]) for t in targets])
    for source, target, res in zip(sources, targets, results):
        ours = log_softmax(teacher_forced_logits(model, source, target[:-1]))
        want = ours[np.arange(len(target)), target]
        assert res.tokens == as_pieces(pieces, target)
        np.testing.assert_allclose(res.log_probs, want, rtol=0, atol=TOL)


def test_vocabulary_and_special_tokens(converted, pieces, tmp_path):
    _, path, _ = converted
    out = to_ctranslate2(path, tmp_path / "ct2")
    config = json.loads((out / "config.json").read_text())
    assert json.loads((out / "shared_vocabulary.json").read_text()) == pieces
    assert [config[k] for k in ("unk_token", "bos_token", "eos_token", "decoder_start_token")] == \
        [pieces[1], pieces[BOS], pieces[EOS], pieces[BOS]]
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)
    assert (out / "spm.model").read_bytes() == (path / "spm.model").read_bytes()


def test_positions_beyond_the_table_raise(converted, pieces, tmp_path):
    """max_positions rows: a longer source (EOS included) is an error, never a wrap."""
    _, path, _ = converted
    tr = translator(to_ctranslate2(path, tmp_path / "ct2", max_positions=64))
    assert tr.translate_batch([[pieces[10]] * 63], beam_size=1, max_decoding_length=2)
    with pytest.raises(RuntimeError, match="No position encodings are defined for positions >= 64"):
        tr.translate_batch([[pieces[10]] * 64], beam_size=1, max_decoding_length=2)


# ----------------------------------------------------------------------------- int8 directories
@pytest.fixture(scope="module")
def int8_dir(spm, tmp_path_factory):
    model = trained_model("pre")
    pairs = [(s, s[:-1]) for s in random_sources(20, seed=7)]
    return write_model_dir(model, spm, tmp_path_factory.mktemp("int8") / "fastdec",
                           act_scales=calibrate(model, pairs), int8=True)


def test_int8_dir_converts_to_its_dequantised_weights(int8_dir, pieces, tmp_path):
    dequantised, _ = read_model_dir(int8_dir)  # float32 q * weight_scale, no activation simulation
    tr = translator(to_ctranslate2(int8_dir, tmp_path / "ct2"))
    sources = random_sources(10, seed=8)
    want = greedy(dequantised, sources, max_len=MAX_LEN)
    results = ct2_greedy(tr, pieces, sources, return_logits_vocab=True)
    for source, w, res in zip(sources, want, results):
        assert [pieces.index(p) for p in res.hypotheses[0]] == w
        theirs = np.stack([np.asarray(step) for step in res.logits[0]])
        np.testing.assert_allclose(theirs, teacher_forced_logits(dequantised, source, w)[: len(theirs)],
                                   rtol=0, atol=TOL)


def test_ctranslate2_int8_quantization(int8_dir, pieces, tmp_path):
    """CTranslate2 re-quantises the dequantised weights with its own scales: int8 weights
    on disk, and a model that decodes close to the float one (not equal: other rounding)."""
    fp32 = to_ctranslate2(int8_dir, tmp_path / "fp32")
    q8 = to_ctranslate2(int8_dir, tmp_path / "int8", quantization="int8")
    # (the float32 position table, which CTranslate2 never quantises, dominates a tiny model)
    assert (q8 / "model.bin").stat().st_size < (fp32 / "model.bin").stat().st_size
    sources = random_sources(10, seed=9)
    targets = [r.hypotheses[0] for r in ct2_greedy(translator(fp32), pieces, sources)]
    src = [ct2_source(pieces, s) for s in sources]
    a = translator(fp32).score_batch(src, targets)
    b = translator(q8, "int8").score_batch(src, targets)
    diff = np.abs(np.concatenate([np.subtract(x.log_probs, y.log_probs) for x, y in zip(a, b)]))
    # The median, not the maximum: with d_model 16 a per-row int8 activation scale moves
    # single near-uniform tokens by over a nat (1.37 with torch 2.13 / CTranslate2 4.7-4.8,
    # at every CT2_FORCE_CPU_ISA), while a model left in float32 would give exactly 0.
    assert diff.max() > 0
    assert np.median(diff) < 0.3


# ----------------------------------------------------------------------------- refusals and CLI
def test_ssru_decoder_is_refused(spm, tmp_path):
    path = write_model_dir(tiny_model(seed=2, decoder_self="ssru"), spm, tmp_path / "ssru")
    with pytest.raises(ValueError, match=r"decoder\.self = 'ssru'.*no SSRU"):
        to_ctranslate2(path, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_per_layer_head_counts_are_padded_with_zero_heads(spm, pieces, tmp_path):
    """A pruned model (encoder heads 2 and 4, decoder 4 and 2) converts with zero heads
    up to each stack's largest count, and CTranslate2 computes the very same logits."""
    torch.manual_seed(7)
    cfg = tiny_config()
    cfg.decoder_layers = [LayerSpec(4, 16), LayerSpec(2, 40)]
    model = train_copy(Seq2Seq(cfg), seed=7)
    assert [l.heads for l in model.cfg.encoder_layers] == [2, 4]
    path = write_model_dir(model, spm, tmp_path / "pruned")
    tr = translator(to_ctranslate2(path, tmp_path / "ct2"))
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)
    sources = random_sources(10, seed=8)
    want = greedy(model, sources, max_len=MAX_LEN)
    assert len({tuple(w) for w in want}) >= 5
    results = ct2_greedy(tr, pieces, sources, return_logits_vocab=True)
    assert [[pieces.index(p) for p in r.hypotheses[0]] for r in results] == want
    for source, hyp, res in zip(sources, want, results):
        theirs = np.stack([np.asarray(step) for step in res.logits[0]])
        np.testing.assert_allclose(theirs, teacher_forced_logits(model, source, hyp)[: len(theirs)], rtol=0, atol=TOL)


def test_drafter_is_refused(spm, tmp_path):
    torch.manual_seed(4)
    cfg = uniform_heads_config("pre")
    cfg.arch, cfg.block_size = "nat-drafter", 4
    path = write_model_dir(Seq2Seq(cfg).eval(), spm, tmp_path / "drafter")
    with pytest.raises(ValueError, match=r"arch = 'nat-drafter'"):
        to_ctranslate2(path, tmp_path / "ct2")


def test_output_directory_and_quantization_are_checked(converted, tmp_path):
    _, path, _ = converted
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="force"):
        to_ctranslate2(path, tmp_path / "busy")
    assert (to_ctranslate2(path, tmp_path / "busy", force=True) / "model.bin").is_file()
    assert not (tmp_path / "busy" / "x").exists()
    with pytest.raises(ValueError, match="quantization = 'int4'"):
        to_ctranslate2(path, tmp_path / "q", quantization="int4")
    with pytest.raises(ValueError, match="max_positions = 32 < max_source_len = 64"):
        to_ctranslate2(path, tmp_path / "q", max_positions=32)


def test_cli(converted, spm, tmp_path, capsys):
    _, path, _ = converted
    assert main(["ctranslate2", str(path), str(tmp_path / "ct2"), "--quantization", "int8"]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()
    ssru = write_model_dir(tiny_model(seed=5, decoder_self="ssru"), spm, tmp_path / "ssru")
    assert main(["ctranslate2", str(ssru), str(tmp_path / "ct2-ssru")]) == 2
    assert "decoder.self" in capsys.readouterr().err
