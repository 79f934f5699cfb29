"""The shortlisted output layer at batch > 1 as one GEMM over the union of the rows'
candidate lists (csrc/model/shortlist_union.h): every row's log-probs, top-k and argmax
are bit for bit those of the per-row path (each row computing only its own columns), at
1 and 2 threads, batch 1, 7 and 32, on every ISA, on tiny int8 models and on the shipped
models with their shortlists; and a row's output does not depend on its neighbours.

The per-row path is itself checked against numpy (test_gemm_i8_shared_columns.py) and
torch (test_native_engine.py); here the kernel-level tests also compare with the numpy
model of the kernel (kernel_reference.gemm_i8_reference)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from child_python import NEUTRAL_CWD, child_env
from kernel_reference import available_isas, int8_isas, gemm_i8_reference
from pyfastdec import _engine
from pyfastdec.backends.base import Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
SHIPPED = [m for m in ("en-de", "en-de-attn") if (MODELS / m / "shortlist.bin").is_file()]
ISAS = int8_isas()


# ---------------------------------------------------------------- kernel level
def random_lists(rng, rows, N, sizes):
    return [np.sort(rng.choice(N, size=int(rng.choice(sizes)), replace=False)).astype(np.int32)
            for _ in range(rows)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("K", [64, 256, 301])
@pytest.mark.parametrize("act_scale", [None, 30.0])
def test_gathered_gemm_equals_the_per_row_kernel_and_the_reference(isa, K, act_scale):
    rng = np.random.default_rng(K)
    N = 1000
    lists = random_lists(rng, 9, N, [1, 15, 16, 17, 40, 333])
    a = rng.standard_normal((len(lists), K)).astype(np.float32)
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    scales = (rng.random(N) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    cols = np.concatenate(lists)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in lists])]).astype(np.int64)
    union = np.unique(cols).astype(np.int32)
    per_row = _engine.gemm_i8_columns(a, W, cols, offsets, bias=bias, act_scale=act_scale)
    reference = gemm_i8_reference(a, w, scales, bias, act_scale=act_scale)
    for pool in (None, _engine.ThreadPool(2)):
        G = W.gathered(union, pool=pool)
        assert G.shape == (union.size, K) and G.isa == W.isa
        got = _engine.gemm_i8(a, G, bias=bias[union], act_scale=act_scale, pool=pool)
        np.testing.assert_array_equal(got, reference[:, union])
        for m, row in enumerate(lists):
            np.testing.assert_array_equal(got[m, np.searchsorted(union, row)], per_row[offsets[m]:offsets[m + 1]])


@pytest.mark.parametrize("isa", ISAS)
def test_gathered_columns_keep_their_given_order(isa):
    # Column i of the gathered matrix is cols[i], whatever the order, repeats included.
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (300, 128)).astype(np.int8)
    scales = np.full(300, 0.01, np.float32)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    cols = np.array([299, 0, 17, 17, 150, 1] * 7, np.int32)
    a = rng.standard_normal((5, 128)).astype(np.float32)
    np.testing.assert_array_equal(_engine.gemm_i8(a, W.gathered(cols)), gemm_i8_reference(a, w, scales, None)[:, cols])


def test_gathered_rejects_bad_input():
    w = np.ones((10, 8), np.int8)
    s = np.full(10, 0.1, np.float32)
    with pytest.raises(ValueError, match="without columns=True"):
        _engine.Int8Matrix(w, s).gathered(np.array([1], np.int32))
    W = _engine.Int8Matrix(w, s, columns=True)
    with pytest.raises(ValueError, match=r"'cols' has id 10 at index 1, outside \[0, 10\)"):
        W.gathered(np.array([0, 10], np.int32))
    with pytest.raises(ValueError, match="'cols' is empty"):
        W.gathered(np.zeros(0, np.int32))


# ---------------------------------------------------------------- model level
def steps(backend, sources, mode, n_steps, bos):
    """Per step: argmax, top-4 ids and log-probs, full log-probs, log-prob of id 5."""
    backend._model.shortlist_gemm = mode
    state = backend.start(backend.encode(sources))
    tokens = np.full((len(sources), 1), bos, np.int64)
    out = []
    for _ in range(n_steps):
        r = backend.step(state, tokens, Want(argmax=True, topk=4, logprobs=True,
                                             ids=np.full((len(sources), 1), 5, np.int64)))
        out.append((r.argmax, r.topk_ids, r.topk_logprobs, r.logprobs, r.id_logprobs))
        tokens = r.argmax
    return out


def assert_same_bits(x, y):
    for a, b in zip(x, y):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


@pytest.fixture(scope="module")
def tiny_int8(tmp_path_factory):
    """Tiny int8 models (attention and SSRU decoders) with a shortlist whose rows differ
    per source id, so the rows of a batch have different lists and a wide union."""
    pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")
    from export.calibrate import calibrate
    from export.rehash import rehash
    from export.tiny import random_sources, tiny_model, tiny_spm
    from export.writer import write_model_dir
    from pyfastdec.model_dir.shortlist import Shortlist

    root = tmp_path_factory.mktemp("union")
    spm = tiny_spm(root / "spm.model")
    paths = []
    for i, kw in enumerate([dict(), dict(decoder_self="ssru")]):
        model = tiny_model(seed=40 + i, **kw)
        pairs = [(s, s[:-1][::-1] + [3]) for s in random_sources(20, seed=40 + i)]
        path = write_model_dir(model, spm, root / f"m{i}", act_scales=calibrate(model, pairs), int8=True)
        V = model.cfg.vocab_size
        rng = np.random.default_rng(i)
        per_source = [np.sort(rng.choice(np.arange(5, V), size=6, replace=False)) for _ in range(V)]
        indptr = np.concatenate([[0], np.cumsum([len(t) for t in per_source])]).astype(np.uint64)
        Shortlist(V, [1, 2, 3, 4], indptr, np.concatenate(per_source), best=6, first_fill_id=5).save(
            path / "shortlist.bin")
        rehash(path)  # the checksum lists the shortlist
        paths.append(path)
    return paths


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 7, 32])
def test_tiny_models_union_equals_per_row(tiny_int8, threads, batch):
    from export.tiny import random_sources

    sources = random_sources(batch, seed=batch)
    for path in tiny_int8:
        backend = NativeBackend(path, threads=threads)
        per_row = steps(backend, sources, "per-row", 5, 2)
        union = steps(backend, sources, "union", 5, 2)
        assert_same_bits(union, per_row)
        assert_same_bits(steps(backend, sources, "auto", 5, 2), per_row)
        assert np.isneginf(per_row[0][3]).any()  # the shortlist did restrict the rows
        stats = backend._model.shortlist_gemm_stats()
        assert stats["union_calls"] >= 5 and stats["blocks_built"] >= 1


def test_a_row_in_a_union_batch_equals_the_row_alone(tiny_int8):
    from export.tiny import random_sources

    sources = random_sources(12, seed=5)
    backend = NativeBackend(tiny_int8[0], threads=2)
    together = steps(backend, sources, "union", 4, 2)
    for r in (0, 5, 11):
        alone = steps(backend, [sources[r]], "per-row", 4, 2)
        for step_all, step_one in zip(together, alone):
            for u, v in zip(step_all, step_one):
                np.testing.assert_array_equal(u[r:r + 1], v)


def multi30k_ids(backend, model_dir, n):
    from export.data import load_pairs
    from pyfastdec.text import Tokenizer

    tok = Tokenizer(model_dir / "spm.model")
    return [tok.encode(s) + [backend.tokens["eos"]] for s, _ in load_pairs("test_2016_flickr", "en", "de")[:n]]


@pytest.mark.parametrize("model", SHIPPED)
@pytest.mark.parametrize("threads", [1, 2])
def test_shipped_models_union_equals_per_row(model, threads):
    backend = NativeBackend(MODELS / model, threads=threads)
    sources = multi30k_ids(backend, MODELS / model, 32)
    for batch in (1, 7, 32):
        rows = sources[:batch]
        bos = backend.tokens["bos"]
        assert_same_bits(steps(backend, rows, "union", 4, bos), steps(backend, rows, "per-row", 4, bos))


@pytest.mark.parametrize("model", SHIPPED)
def test_shipped_models_greedy_outputs_equal_with_rows_leaving(model):
    # Whole greedy runs: rows finish and leave, so the cached union block is reused while
    # it covers the live rows and rebuilt when the cost model says a narrower one pays.
    backend = NativeBackend(MODELS / model, threads=2)
    sources = multi30k_ids(backend, MODELS / model, 40)
    backend._model.shortlist_gemm = "per-row"
    expected, _ = greedy(backend, sources)
    for mode in ("union", "auto"):
        backend._model.shortlist_gemm = mode
        got, _ = greedy(backend, sources)
        assert got == expected, mode


def test_mode_is_checked():
    backend = NativeBackend(MODELS / SHIPPED[0], threads=1) if SHIPPED else pytest.skip("no shipped model")
    assert backend._model.shortlist_gemm == "auto"
    with pytest.raises(ValueError, match="'fastest' is not one of 'auto', 'union', 'per-row'"):
        backend._model.shortlist_gemm = "fastest"


PROBE = """
import json, sys
import numpy as np
from pyfastdec import _engine
from pyfastdec.backends.base import Want
from pyfastdec.backends.native import NativeBackend
b = NativeBackend(sys.argv[1], threads=2)
src = json.loads(sys.argv[2])
def run(mode):
    b._model.shortlist_gemm = mode
    st = b.start(b.encode(src))
    t = np.full((len(src), 1), b.tokens["bos"], np.int64)
    out = []
    for _ in range(3):
        r = b.step(st, t, Want(argmax=True, logprobs=True))
        out.append(r.logprobs)
        t = r.argmax
    return np.stack(out)
print(json.dumps({"isa": _engine.cpu_info()["isa"], "same": bool(np.array_equal(run("union"), run("per-row")))}))
"""


@pytest.mark.parametrize("isa", available_isas())  # FASTDEC_ISA: no emulated table
def test_every_isa_gives_union_equal_to_per_row(isa):
    if not SHIPPED:
        pytest.skip("no shipped model with a shortlist")
    model = MODELS / SHIPPED[-1]
    sources = multi30k_ids(NativeBackend(model, threads=1), model, 7)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(model), json.dumps(sources)],
                          env=child_env(FASTDEC_ISA=isa), cwd=NEUTRAL_CWD, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"isa": isa, "same": True}


def test_auto_follows_the_cost_model():
    # Rows whose lists coincide (one sentence 32 times): the union is one list, so one
    # GEMM beats 32 GEMVs. 32 different Multi30k sentences: lists of ~360 columns whose
    # union is ~5x wider, where the per-row kernel is cheaper (bench/README.md).
    if "en-de-attn" not in SHIPPED:
        pytest.skip("models/en-de-attn with its shortlist is needed")
    backend = NativeBackend(MODELS / "en-de-attn", threads=1)
    sources = multi30k_ids(backend, MODELS / "en-de-attn", 32)
    bos = backend.tokens["bos"]

    def calls(rows):
        before = backend._model.shortlist_gemm_stats()
        steps(backend, rows, "auto", 2, bos)
        after = backend._model.shortlist_gemm_stats()
        return {k: after[k] - before[k] for k in after}

    assert calls([sources[3]] * 32) == {"union_calls": 2, "per_row_calls": 0, "blocks_built": 1}
    assert calls(sources) == {"union_calls": 0, "per_row_calls": 2, "blocks_built": 0}
    assert calls(sources[:1]) == {"union_calls": 0, "per_row_calls": 2, "blocks_built": 0}
