"""pyfastdec.convert.marian_npz_import (Marian .npz -> our model directory) against Marian.

Default suite: two tiny models trained by Marian itself (tests/data/marian_tiny, made by
tests/marian_tiny.py: SSRU decoder, tied embeddings, post-norm relu and pre-norm swish)
convert, and pyfastdec's float32 greedy equals Marian's stored greedy output on all 60
real sentences. Bad checkpoints are refused in one line naming file and tensor/option,
leaving nothing behind. Slow (needs pymarian): the stored data regenerates, and a
round trip through `convert marian-npz` decodes as Marian does.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy
from pyfastdec.convert.command import main
from pyfastdec.convert.marian_npz_export import lexical_shortlist_lines
from pyfastdec.convert.marian_npz_import import META, MarianNpzError, from_marian_npz, read_lexical_shortlist
from pyfastdec.model_dir import ModelDir
from pyfastdec.model_dir.shortlist import Shortlist

DATA = Path(__file__).resolve().parent / "data" / "marian_tiny"
MODELS = ("post", "pre")


def sources() -> list[str]:
    return (DATA / "sources.txt").read_text(encoding="utf-8").splitlines()


def ours_greedy(model_dir: Path, lines: list[str], shortlist: bool = False) -> list[str]:
    """pyfastdec float32 greedy, each sentence with Marian's output limit: its default
    --max-length-factor 3 times the source length (EOS included); ours is 2 * len + 10."""
    import sentencepiece

    backend = NativeBackend(model_dir, threads=1, shortlist=shortlist)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "target.spm"))
    eos = backend.model_dir.config.tokens["eos"] if hasattr(backend, "model_dir") else sp.eos_id()
    out = []
    for line in lines:
        src = sp.encode(line) + [eos]  # vocab.json gives every piece its spm id (checked by the reader)
        ids, _ = greedy(backend, [src], max_len=3 * len(src))
        out.append(sp.decode(ids[0]))
    return out


@pytest.fixture(scope="module", params=MODELS)
def converted(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("marian-in") / request.param
    return request.param, from_marian_npz(DATA / f"{request.param}.npz", DATA / "vocab.spm", out)


def test_greedy_equals_marians_on_real_sentences(converted):
    name, out = converted
    want = (DATA / f"{name}.greedy.txt").read_text(encoding="utf-8").splitlines()
    lines = sources()
    assert len(lines) == len(want) >= 50
    assert len(set(want)) > len(want) // 2  # the tiny model's outputs depend on the source
    got = ours_greedy(out, lines)
    assert [i for i, (a, b) in enumerate(zip(got, want)) if a != b] == []


def test_shortlisted_greedy_equals_marians(tmp_path):
    """Marian's text lexical shortlist (FIRST / BEST) read into shortlist.bin: at batch 1
    pyfastdec's shortlisted greedy equals Marian's (which differs from the full-vocabulary
    output on most of these sentences, so the shortlist is really in force)."""
    from tests.marian_tiny import SHORTLIST_BEST, SHORTLIST_FIRST

    out = from_marian_npz(DATA / "post.npz", DATA / "vocab.spm", tmp_path / "sl",
                          shortlist=(DATA / "lex.s2t.gz", SHORTLIST_FIRST, SHORTLIST_BEST))
    want = (DATA / "post.greedy.shortlist.txt").read_text(encoding="utf-8").splitlines()
    full = (DATA / "post.greedy.txt").read_text(encoding="utf-8").splitlines()
    assert sum(a != b for a, b in zip(want, full)) >= 20
    got = ours_greedy(out, sources(), shortlist=True)
    assert [i for i, (a, b) in enumerate(zip(got, want)) if a != b] == []


def test_config_says_what_marian_computes(converted):
    name, out = converted
    cfg = ModelDir.load(out).config
    assert (cfg.positions, cfg.layer_norm_eps, cfg.tokenizer) == ("marian", 1e-6, "marian")
    assert cfg.norm == {"post": "post", "pre": "pre"}[name]
    assert cfg.activation == {"post": "relu", "pre": "swish"}[name]
    assert cfg.decoder_self == "ssru" and cfg.vocab_size == 501
    start = cfg.tokens["bos"]
    assert start == 500 == cfg.tokens["pad"] and set(cfg.suppress) == {start, cfg.tokens["unk"]}
    assert not ModelDir.load(out).tensors["embed.weight"][start].any()  # Marian's zero start embedding


def _rewrite(src: Path, dst: Path, change) -> Path:
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    np.savez(dst, **arrays)
    return dst


def _with_option(arrays, line: str):
    text = arrays[META].tobytes().split(b"\0")[0].decode().rstrip("\n") + "\n" + line + "\n"
    raw = text.encode() + b"\0"
    arrays[META] = np.frombuffer(raw + b"\0" * (-len(raw) % 256), dtype=np.int8)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("decoder_l2_rnn_Wf"), r"post\.npz: missing tensor decoder_l2_rnn_Wf \(expected shape \[16, 16\]\)"),
    (lambda a: a.__setitem__("encoder_l1_ffn_W1", a["encoder_l1_ffn_W1"].T.copy()),
     r"tensor encoder_l1_ffn_W1 has shape \[32, 16\] \(expected \[16, 32\]\)"),
    (lambda a: a.__setitem__("extra_W", np.zeros((2, 2), np.float32)), r"unexpected tensor extra_W"),
    (lambda a: a.__setitem__("Wemb", a["Wemb"].astype(np.float16)), r"tensor Wemb has dtype float16"),
    (lambda a: a.pop(META), r"no special:model\.yml item"),
    (lambda a: _with_option(a, "transformer-rnn-projection: true"), r"option transformer-rnn-projection = True"),
    (lambda a: _with_option(a, "dec-cell: lstm"), r"option dec-cell = 'lstm' \(expected ssru"),
    (lambda a: _with_option(a, "tied-embeddings-all: false"), r"option tied-embeddings-all = False"),
    (lambda a: _with_option(a, "transformer-ffn-activation: tanh"), r"option transformer-ffn-activation = 'tanh'"),
])
def test_bad_checkpoints_are_refused_in_one_line(tmp_path, change, message):
    bad = _rewrite(DATA / "post.npz", tmp_path / "post.npz", change)
    with pytest.raises(MarianNpzError, match=message) as err:
        from_marian_npz(bad, DATA / "vocab.spm", tmp_path / "out")
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


def test_cli(tmp_path, capsys):
    assert main(["marian-npz-in", str(DATA / "post.npz"), str(DATA / "vocab.spm"), str(tmp_path / "m")]) == 0
    assert ModelDir.load(tmp_path / "m").config.decoder_self == "ssru"
    assert main(["marian-npz-in", str(DATA / "post.npz"), str(DATA / "vocab.spm"), str(tmp_path / "m")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["marian-npz-in", str(tmp_path / "none.npz"), str(DATA / "vocab.spm"), str(tmp_path / "n")]) == 2
    assert "none.npz: no such file" in capsys.readouterr().err
    (tmp_path / "junk.npz").write_text("junk")
    assert main(["marian-npz-in", str(tmp_path / "junk.npz"), str(DATA / "vocab.spm"), str(tmp_path / "j")]) == 2
    assert "junk.npz: not a .npz (zip) file" in capsys.readouterr().err


def test_lexical_shortlist_round_trip(tmp_path):
    """Our shortlist -> Marian's lex (convert marian-npz) -> ours again: same candidates
    (FIRST = 0: every frequent id rides on the EOS row, as the writer puts them)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(DATA / "vocab.spm"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    V, eos, unk = len(pieces), sp.eos_id(), sp.unk_id()
    rng = np.random.default_rng(1)
    rows = [sorted(rng.choice(np.arange(2, V), size=rng.integers(0, 5), replace=False).tolist()) for _ in range(V)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    ours = Shortlist(V, sorted({eos, unk, 7, 11}), indptr, [t for r in rows for t in r], best=5, first_fill_id=2)
    lex = tmp_path / "lex.s2t"
    lex.write_text("".join(lexical_shortlist_lines(ours, pieces, eos)), encoding="utf-8")
    back = read_lexical_shortlist(lex, pieces, 0, 100, {"eos": eos, "unk": unk}, V, shared=False)
    for s in range(2, V, 7):
        src = [s, eos]
        want = set(ours.frequent.tolist()) | {t for x in src for t in ours.translations(x)[0].tolist()}
        got = set(back.frequent.tolist()) | {t for x in src for t in back.translations(x)[0].tolist()}
        assert got == want


# ----------------------------------------------------------------------------- with Marian itself
@pytest.mark.slow
def test_stored_data_regenerates_with_pymarian(tmp_path):
    pytest.importorskip("pymarian", reason="needs the 'bench-marian' extra (pymarian)")
    from tests.marian_tiny import generate, marian_greedy

    # Marian's greedy on the stored models is the stored output ...
    for name in MODELS:
        assert marian_greedy(DATA / f"{name}.npz", DATA / "vocab.spm", sources()) == \
            (DATA / f"{name}.greedy.txt").read_text(encoding="utf-8").splitlines()
    assert marian_greedy(DATA / "post.npz", DATA / "vocab.spm", sources(), shortlist=DATA / "lex.s2t.gz") == \
        (DATA / "post.greedy.shortlist.txt").read_text(encoding="utf-8").splitlines()
    # ... and freshly trained models (training may differ by a float ulp) decode alike in both engines.
    fresh = generate(tmp_path / "fresh")
    for name in MODELS:
        out = from_marian_npz(fresh / f"{name}.npz", fresh / "vocab.spm", tmp_path / name)
        assert ours_greedy(out, sources()) == (fresh / f"{name}.greedy.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_round_trip_through_marian_npz_decodes_like_marian(tmp_path):
    """Marian npz -> ours -> Marian npz (convert marian-npz): Marian's greedy is unchanged
    (the start id's zero row and the permutation of a "marian"-positions model are exact)."""
    pytest.importorskip("pymarian")
    from pyfastdec.convert.marian_npz_export import to_marian_npz
    from tests.marian_tiny import marian_greedy

    ours = from_marian_npz(DATA / "pre.npz", DATA / "vocab.spm", tmp_path / "ours")
    back = to_marian_npz(ours, tmp_path / "back")
    shutil.copyfile(DATA / "vocab.spm", tmp_path / "v.spm")
    assert marian_greedy(back / "model.npz", tmp_path / "v.spm", sources()) == \
        (DATA / "pre.greedy.txt").read_text(encoding="utf-8").splitlines()
