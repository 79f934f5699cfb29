"""Checks on the trained models of models/ over whole test sets (slow: run with -m slow).

Engine (issue 4): the native engine in float32 gives greedy outputs token-identical to the
PyTorch reference on all of test_2016_flickr; int8 stays within 0.5 BLEU of float32; the
shortlist within 0.3 BLEU of the full vocabulary; batch 32 = one sentence at a time; 1
thread = 2 threads.
Decoding (issues 5, 15): GAD (beta 1, tau 0) with models/en-de-drafter, lossless BiLD with
models/en-de-little over en-de-big, and IAD give exactly greedy's outputs at batch sizes
1 and 16 (BiLD: 1 and 32), on all of test_2016_flickr and the UA-GEC test.

The shipped students are int8 directories; their float32 twin is written here from the
same dequantised weights (export.writer.read_model_dir), so float32 and int8 share weights.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu

from export.data import load_pairs
from export.model_report import batched
from export.model_report import encode as encode_with_tokenizer
from export.torch_backend import TorchBackend
from export.uagec import ensure_corpus
from export.writer import write_float_twin
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import gad, greedy, iad
from pyfastdec.decoding.bild import bild
from pyfastdec.decoding.policies import DraftOrPlain
from pyfastdec.model_dir import read_config
from pyfastdec.text import Tokenizer

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parents[1] / "models"
STUDENTS = ["en-de", "en-de-attn"]


def model_path(name: str) -> Path:
    path = MODELS / name
    assert (path / "config.json").is_file(), f"{path}: missing; rebuild it as models/README.md says"
    return path


@pytest.fixture(scope="module")
def flickr():
    return load_pairs("test_2016_flickr", "en", "de", "multi30k")


@pytest.fixture(scope="module")
def float_twin(tmp_path_factory):
    """name -> a float32 directory holding the dequantised weights of models/<name>."""
    made = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = write_float_twin(model_path(name), tmp_path_factory.mktemp(name) / "float32")
        return made[name]

    return get


def encode(model_dir: Path, sources: list[str]) -> list[list[int]]:
    """Source ids ending in EOS, as every strategy takes them."""
    return encode_with_tokenizer(model_dir, sources)[1]


def decode_batches(fn, src_ids: list[list[int]], batch_size: int) -> list[list[int]]:
    return batched(fn, src_ids, batch_size)[0]


def bleu(model_dir: Path, outputs: list[list[int]], refs: list[str]) -> float:
    tok = Tokenizer(model_dir / "spm.model")
    return sacrebleu.corpus_bleu([tok.decode(o) for o in outputs], [refs]).score


@pytest.mark.parametrize("name", STUDENTS)
def test_float32_greedy_is_token_identical_to_torch(name, float_twin, flickr):
    path = float_twin(name)
    src = encode(path, [s for s, _ in flickr])
    native = decode_batches(lambda b: greedy(NativeBackend(path, threads=1), b), src, 32)
    reference = decode_batches(lambda b: greedy(TorchBackend.from_dir(path), b), src, 32)
    differ = [i for i, (a, b) in enumerate(zip(native, reference)) if a != b]
    assert not differ, f"{len(differ)} of {len(src)} outputs differ from torch, first at line {differ[0] + 1}"


@pytest.mark.parametrize("name", STUDENTS)
def test_int8_and_shortlist_bleu_close_to_float32(name, float_twin, flickr):
    refs = [t for _, t in flickr]
    int8_dir = model_path(name)
    src = encode(int8_dir, [s for s, _ in flickr])
    f32 = bleu(int8_dir, decode_batches(lambda b: greedy(NativeBackend(float_twin(name), threads=1), b), src, 32), refs)
    full = NativeBackend(int8_dir, threads=1, shortlist=False)
    int8 = bleu(int8_dir, decode_batches(lambda b: greedy(full, b), src, 32), refs)
    assert int8 >= f32 - 0.5, f"int8 {int8:.2f} vs float32 {f32:.2f}"
    listed = NativeBackend(int8_dir, threads=1, shortlist=True)
    assert listed.shortlist is not None, f"{int8_dir}: no shortlist.bin"
    short = bleu(int8_dir, decode_batches(lambda b: greedy(listed, b), src, 32), refs)
    assert short >= int8 - 0.3, f"shortlist {short:.2f} vs full vocabulary {int8:.2f}"


@pytest.mark.parametrize("name", STUDENTS)
def test_batch_and_threads_do_not_change_outputs(name, flickr):
    path = model_path(name)
    src = encode(path, [s for s, _ in flickr[:256]])
    one = NativeBackend(path, threads=1)
    alone = decode_batches(lambda b: greedy(one, b), src, 1)
    assert decode_batches(lambda b: greedy(one, b), src, 32) == alone
    assert decode_batches(lambda b: greedy(NativeBackend(path, threads=2), b), src, 32) == alone


@pytest.mark.parametrize("batch_size", [1, 16])
def test_gad_is_lossless_on_the_test_set(batch_size, flickr):
    """The packaged drafter reads en-de's encoder, so en-de is its only verifier."""
    path = model_path("en-de")
    verifier = NativeBackend(path, threads=1)
    drafter = NativeBackend(model_path("en-de-drafter"), threads=1)
    src = encode(path, [s for s, _ in flickr])
    expected = decode_batches(lambda b: greedy(verifier, b), src, batch_size)
    got = decode_batches(lambda b: gad(verifier, drafter, b), src, batch_size)
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differ, f"GAD differs from greedy on {len(differ)} lines, first {differ[0] + 1}"


@pytest.mark.parametrize("batch_size", [1, 32])
def test_bild_is_lossless_on_the_test_set(batch_size, flickr):
    """Lossless BiLD (the little model's own fallback, and the draft-or-plain policy)
    equals en-de-big's greedy output on the whole test set."""
    path = model_path("en-de-big")
    big, little = NativeBackend(path, threads=1), NativeBackend(model_path("en-de-little"), threads=1)
    src = encode(path, [s for s, _ in flickr])
    expected = decode_batches(lambda b: greedy(big, b), src, batch_size)
    policy = DraftOrPlain()
    got = decode_batches(lambda b: bild(big, little, b, fallback=little.config.bild["fallback"], policy=policy), src,
                         batch_size)
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differ, f"BiLD differs from greedy on {len(differ)} lines, first {differ[0] + 1}"


@pytest.mark.parametrize("batch_size", [1, 32])
@pytest.mark.parametrize("margin", ["model", 0.0])
def test_iad_is_lossless_on_uagec_test(batch_size, margin):
    """IAD = greedy on the whole UA-GEC test set, with the model's edit margin (what
    `fastdec correct` runs) and without (plain greedy)."""
    pairs = load_pairs("test", "src", "tgt", str(ensure_corpus()))
    path = model_path("uk-gec")
    if margin == "model":
        margin = read_config(path / "config.json").edit_margin
        assert margin > 0
    backend = NativeBackend(path, threads=1)
    src = encode(path, [s for s, _ in pairs])
    expected = decode_batches(lambda b: greedy(backend, b, edit_margin=margin), src, batch_size)
    got = decode_batches(lambda b: iad(backend, b, edit_margin=margin), src, batch_size)
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differ, f"IAD differs from greedy on {len(differ)} lines, first {differ[0] + 1}"
