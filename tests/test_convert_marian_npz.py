"""pyfastdec.convert.marian_npz_export (our model directory -> Marian .npz) without pymarian.

The written npz is run by an independent numpy forward pass of Marian's transformer
(tests/marian_reference.py, from marian-dev's transformer.h) and compared with our
PyTorch reference under Marian's three semantics that no conversion can change
(position frequencies, layer-norm eps, zero decoder start): equal logits prove names,
transposes and the stream permutation. The lexical shortlist gives our candidates. The
check against Marian itself is tests/test_marian_peer.py (slow, needs pymarian).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")
import sentencepiece  # noqa: E402

from export.decode import pad_batch  # noqa: E402
from export.modeling import LayerSpec, Seq2Seq  # noqa: E402
from export.tiny import random_sources, tiny_config, tiny_spm  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec.convert.command import main  # noqa: E402
from pyfastdec.convert.marian_npz_export import (lexical_shortlist_lines, marian_options, meta_item,  # noqa: E402
                                                 shortlist_best, stream_permutation, to_marian_npz)
from pyfastdec.model_dir import ModelDir  # noqa: E402
from pyfastdec.model_dir.shortlist import Shortlist  # noqa: E402
from tests.marian_reference import marian_logits, marian_positions, marian_semantics  # noqa: E402


def uniform_model(decoder_self: str, seed: int = 0) -> Seq2Seq:
    """tiny_config with one head count and one FFN size per stack (Marian has one of each)."""
    cfg = tiny_config(decoder_self=decoder_self)
    cfg.encoder_layers = [LayerSpec(4, 24), LayerSpec(4, 24)]
    cfg.decoder_layers = [LayerSpec(4, 32), LayerSpec(4, 32)]
    torch.manual_seed(seed)
    model = Seq2Seq(cfg).eval()
    with torch.no_grad():  # non-trivial layer norms and bias, as in a trained model
        for name, p in model.named_parameters():
            if "ln" in name or name == "output.bias":
                p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def load_npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def teacher_forced(model: Seq2Seq, source, target) -> np.ndarray:
    with torch.no_grad():
        src = pad_batch([source], model.pad)
        tgt = pad_batch([[model.bos] + target], model.pad)
        return model(src, tgt)[0].double().numpy()


def pruned_model(decoder_self: str, seed: int = 0) -> Seq2Seq:
    """tiny_config's per-layer shapes (heads 2 and 4, FFN 24, 32, 16, 40), as pruning
    leaves them: the converter pads them with zero heads and units."""
    model = uniform_model(decoder_self, seed)
    torch.manual_seed(seed)
    pruned = Seq2Seq(tiny_config(decoder_self=decoder_self)).eval()
    with torch.no_grad():
        for name, p in pruned.named_parameters():
            if "ln" in name or name == "output.bias":
                p.copy_(dict(model.named_parameters())[name])
    return pruned


@pytest.mark.parametrize("shapes", ["uniform", "pruned"])
@pytest.mark.parametrize("decoder_self", ["ssru", "attention"])
def test_npz_computes_our_model_under_marian_semantics(spm, tmp_path, decoder_self, shapes):
    model = (uniform_model if shapes == "uniform" else pruned_model)(decoder_self)
    out = to_marian_npz(write_model_dir(model, spm, tmp_path / "fastdec"), tmp_path / "marian")
    tensors = load_npz(out / "model.npz")
    options = marian_options(ModelDir.load(tmp_path / "fastdec").config)
    sources = random_sources(6, seed=3)
    with marian_semantics(model):
        for source in sources:
            target = [5 + (3 * j + len(source)) % 30 for j in range(len(source) + 2)]
            theirs = marian_logits(tensors, options, source, target)
            ours = teacher_forced(model, source, target)
            # The BOS column is the one marian_semantics changes (its zeroed embedding row).
            keep = np.arange(ours.shape[1]) != model.bos
            np.testing.assert_allclose(theirs[:, keep], ours[:, keep], rtol=0, atol=2e-4)


def test_model_yml_is_embedded_as_marian_writes_it(spm, tmp_path):
    out = to_marian_npz(write_model_dir(uniform_model("ssru"), spm, tmp_path / "fastdec"), tmp_path / "marian")
    item = load_npz(out / "model.npz")["special:model.yml"]
    assert item.dtype == np.int8 and item.size % 256 == 0
    text = item.tobytes().split(b"\0")[0].decode()
    assert "type: \"transformer\"" in text and "transformer-decoder-autoreg: \"rnn\"" in text
    assert "dec-cell: \"ssru\"" in text and "tied-embeddings-all: true" in text
    assert meta_item("x").tobytes()[:2] == b"x\0"
    # Marian's vectors are [1, n] parameters; a [n] array would fail its shape check at load.
    assert load_npz(out / "model.npz")["decoder_ff_logit_out_b"].shape == (1, 40)


def test_permutation_maps_our_positions_onto_marian_layout():
    """Same frequencies, our interleaved table permuted = Marian's halves table."""
    d = 16
    perm = stream_permutation(d)
    half = d // 2
    w = np.exp(np.arange(half) * -(np.log(10000.0) / (half - 1)))
    angle = np.arange(7)[:, None] * w[None, :]
    ours = np.stack([np.sin(angle), np.cos(angle)], -1).reshape(7, d)
    np.testing.assert_allclose(ours[:, perm], marian_positions(7, d), atol=1e-6)


def test_lexical_shortlist_gives_our_candidates(spm):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    V, eos = len(pieces), 3
    rng = np.random.default_rng(0)
    rows = [sorted(rng.choice(np.arange(5, V), size=rng.integers(0, 6), replace=False).tolist()) for _ in range(V)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    sl = Shortlist(V, [1, 2, 3, 7, 9], indptr, [t for r in rows for t in r], best=6, first_fill_id=5)
    # Marian's LexicalShortlistGenerator: per source id, the targets of lines "trg src prob", best by prob.
    table: dict[int, dict[int, float]] = {}
    for line in lexical_shortlist_lines(sl, pieces, eos):
        trg, src, prob = line.split()
        table.setdefault(pieces.index(src), {})[pieces.index(trg)] = float(prob)
    best = shortlist_best(sl, eos)
    for source in random_sources(20, vocab_size=V, seed=5):
        marian = set()
        for s in set(source):
            ranked = sorted(table.get(s, {}).items(), key=lambda kv: -kv[1])[:best]
            marian |= {t for t, p in ranked if p > 0}
        ours = set(sl.candidates(source).tolist())
        assert marian <= ours  # ours adds only its multiple-of-8 padding
        assert ours - marian == set(ours) - set(sl.frequent.tolist()) - {
            t for s in source for t in sl.translations(s)[0].tolist()}


def test_refusals_name_the_field(spm, tmp_path):
    cfg = tiny_config(decoder_self="ssru")  # per-layer heads 2, 4 of head_dim 6: 24 > d_model 16
    cfg.head_dim = 6
    torch.manual_seed(1)
    path = write_model_dir(Seq2Seq(cfg).eval(), spm, tmp_path / "pruned")
    with pytest.raises(ValueError, match=r"heads up to 4, head_dim = 6, d_model = 16: Marian's attention"):
        to_marian_npz(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))  # no temporary directory left behind


def test_cli_writes_and_refuses_a_busy_directory(spm, tmp_path, capsys):
    path = write_model_dir(uniform_model("attention"), spm, tmp_path / "fastdec")
    assert main(["marian-npz", str(path), str(tmp_path / "m")]) == 0
    assert {p.name for p in (tmp_path / "m").iterdir()} >= {"model.npz", "vocab.src.spm", "vocab.trg.spm",
                                                            "decoder.yml"}
    assert main(["marian-npz", str(path), str(tmp_path / "m")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["marian-npz", str(path), str(tmp_path / "m"), "--force"]) == 0
