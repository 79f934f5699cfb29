"""bench.model_shapes writes a loadable model directory of the shape asked for, and
bench.verify_cost_shapes measures it into the fields its table and plot read (a tiny
shape: seconds, not the benchmark)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import model_shapes, verify_cost_shapes
from bench.model_shapes import Shape

TINY = Shape("tiny", encoder_layers=1, decoder_layers=2, d_model=64, heads=2, ffn=96, vocab=700, head_dim=32,
             spm_pieces=200)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    cache = tmp_path_factory.mktemp("shapes")
    return model_shapes.cached(TINY, cache), cache


def test_directory_has_the_requested_shape(tiny_dir):
    from pyfastdec import Translator
    from pyfastdec.model_dir import ModelDir
    from pyfastdec.model_dir.shortlist import Shortlist

    path, _ = tiny_dir
    model = ModelDir.load(path)  # validates config, tensors, tokenizer files and checksums
    cfg = model.config
    assert (cfg.d_model, cfg.head_dim, cfg.vocab_size, cfg.decoder_self) == (64, 32, 700, "attention")
    assert [(l.heads, l.ffn) for l in cfg.encoder_layers] == [(2, 96)]
    assert [(l.heads, l.ffn) for l in cfg.decoder_layers] == [(2, 96)] * 2
    assert cfg.quantization.activations == "int8_static_per_tensor"
    t = model.tensors
    # the shapes of export/FORMAT.md's table, written out for this shape by hand
    assert t["embed.weight"].shape == (700, 64) and t["embed.weight"].dtype == np.int8
    assert t["decoder.layers.1.self_attn.q.weight"].shape == (2 * 32, 64)
    assert t["decoder.layers.1.ffn.fc1.weight"].shape == (96, 64)
    assert t["decoder.layers.1.ffn.fc2.weight"].shape == (64, 96)
    assert "encoder.layers.1.ffn.fc1.weight" not in t and "decoder.layers.2.ffn.fc1.weight" not in t
    # unit-variance outputs: scale 1 / (127 sqrt(fan_in)), fan_in = the FFN width for fc2
    np.testing.assert_allclose(t["decoder.layers.0.ffn.fc2.weight_scale"], 1 / (127 * math.sqrt(96)), rtol=1e-6)
    np.testing.assert_allclose(t["decoder.layers.0.ffn.fc1.weight_scale"], 1 / (127 * math.sqrt(64)), rtol=1e-6)
    shortlist = Shortlist.load(path / "shortlist.bin")
    assert shortlist.vocab_size == 700 and len(shortlist.frequent) == model_shapes.FREQUENT
    rows = np.diff(shortlist.indptr.astype(np.int64))
    assert (rows == model_shapes.PER_SOURCE).all()
    for f in (0, 5, 699):  # distinct targets in each source id's list
        assert len(set(shortlist.translations(f)[0].tolist())) == model_shapes.PER_SOURCE
    assert json.loads((path / "shape.json").read_text())["d_model"] == 64
    out = Translator(path, threads=1).translate(["A man rides a bike."], max_decoding_length=5)
    assert isinstance(out[0], str)


def test_measurement_fills_the_table(tiny_dir, tmp_path):
    from pyfastdec.model_dir import ModelDir

    path, cache = tiny_dir
    ns = [1, 2, 8]
    configs = [("tiny", "tiny", True, ns), ("tiny", "tiny", False, ns)]
    report = verify_cost_shapes.run(configs, batches=[1, 3], threads=[1], rounds=3, cache=cache,
                                    shapes={"tiny": TINY}, log=lambda *a, **k: None)
    rows = report["rows"]
    assert [(r["shortlist"], r["batch"]) for r in rows] == [(True, 1), (False, 1), (True, 3), (False, 3)]
    weights = (path / "model.safetensors").stat().st_size / 1e6
    for r in rows:
        assert r["threads"] == 1 and r["rounds"] == (3 if r["batch"] == 1 else 5)
        assert sorted(r["ms"]) == ns and all(v > 0 for v in r["ms"].values())
        assert r["weights_mb"] == pytest.approx(weights)
        assert set(r["profile"]) == {1, 8} and r["profile"][8]["gemm"] > 0
        assert r["macs_per_position"] == verify_cost_shapes.step_macs(ModelDir.load(path).config, r["candidates"])
    # 24 positions against 3 per call: the median GEMM time must grow (it cannot at random)
    assert rows[3]["profile"][8]["gemm"] > 2 * rows[3]["profile"][1]["gemm"]
    with_sl = rows[0]["candidates"]
    # 100 frequent + 16 per distinct source id, padded to a multiple of 8: between those bounds
    assert model_shapes.FREQUENT + model_shapes.PER_SOURCE <= with_sl <= 700 and rows[1]["candidates"] is None
    table = verify_cost_shapes.ratio_table(rows).splitlines()
    assert len(table) == 2 + 4 and table[2].startswith("| tiny | on | 1 | 1 |")
    assert "gemm %" in verify_cost_shapes.profile_table(rows)
    # a report written with --out reads back into the same rows, summary and plot
    out = tmp_path / "report.json"
    out.write_text(json.dumps(report))
    assert verify_cost_shapes.load_rows([out]) == rows
    rerun = tmp_path / "rerun.json"  # a later report's row replaces the same configuration's
    rerun.write_text(json.dumps({"rows": [dict(rows[1], rounds=99)]}))
    merged = verify_cost_shapes.load_rows([out, rerun])
    assert [r["rounds"] for r in merged] == [3, 99, 5, 5]
    plot = tmp_path / "plot.png"
    assert verify_cost_shapes.main(["--from", str(out), "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fits = {r["ms"][8] / r["ms"][1] <= 1.5 for r in rows if r["batch"] == 1}
    best = verify_cost_shapes.smallest_within(rows)
    assert (best is not None) == (True in fits)


def test_step_macs_counts_the_weights_a_position_reads(tiny_dir):
    from pyfastdec.model_dir import ModelDir

    model = ModelDir.load(tiny_dir[0])
    # every decoder weight matrix but cross-attention k / v (read once, at start), plus the output layer
    read = sum(t.size for name, t in model.tensors.items() if name.startswith("decoder.layers.")
               and name.endswith(".weight") and t.ndim == 2
               and not name.endswith(("cross_attn.k.weight", "cross_attn.v.weight")))
    assert verify_cost_shapes.step_macs(model.config, None) == read + 700 * 64
    assert verify_cost_shapes.step_macs(model.config, 120) == read + 120 * 64
