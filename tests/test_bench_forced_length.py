"""bench/forced_length.py: both engines emit exactly the requested number of tokens per
row on a Marian checkpoint, so bench.marian_base times the same amount of work.

The checkpoint is random with a strong bias toward EOS (unforced, greedy stops within a
few tokens), so a forced length can only come from the mechanism. The float32 tokens are
also checked against transformers' own forced-length greedy (min_new_tokens =
max_new_tokens = L, which masks EOS below the minimum as CTranslate2 does).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

from marian_checkpoints import build_tokenizer_files, read_lines, save_marian  # noqa: E402

from bench.forced_length import ForcedLengthTranslator, ct2_decode  # noqa: E402
from pyfastdec.api import Translator  # noqa: E402
from pyfastdec.convert.command import main as convert_main  # noqa: E402

LENGTHS = (1, 9, 31)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(hf model, MarianTokenizer, ours fp32, ours int8, CTranslate2 int8, source pieces)."""
    root = tmp_path_factory.mktemp("forced")
    hf_dir = root / "hf"
    vocab = build_tokenizer_files(hf_dir, 400, 500)
    model, tokenizer = save_marian(hf_dir, vocab, d_model=32, heads=4, ffn=64, layers=2, init_std=0.2,
                                   eos_bias=6.0)
    calib = root / "calib.en"
    calib.write_text("\n".join(read_lines("val.en.gz", 64)) + "\n")
    assert convert_main(["marian", str(hf_dir), str(root / "fp32")]) == 0
    assert convert_main(["marian", str(hf_dir), str(root / "int8"), "--quantize", "int8",
                         "--calibrate", str(calib)]) == 0
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(root / "ct2"), quantization="int8")
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(root / "ct2-fp32"))
    sentences = read_lines("test_2016_flickr.en.gz", 6)
    pieces = [tokenizer.convert_ids_to_tokens(tokenizer(s)["input_ids"])[:-1] for s in sentences]  # no </s>
    return model, tokenizer, root / "fp32", root / "int8", root / "ct2", sentences, pieces


def test_unforced_outputs_are_shorter(converted):
    """Without the mechanism the model stops early, so the lengths below are its doing."""
    _, _, fp32, _, _, _, pieces = converted
    translator = Translator(fp32, threads=1, compute_type="float32", shortlist=False)
    outs = translator.translate(pieces, algo="greedy", max_decoding_length=31)
    assert max(len(o) for o in outs) < 9


@pytest.mark.parametrize("length", LENGTHS)
def test_both_engines_emit_exactly_length(converted, length):
    _, _, _, int8, ct2_dir, _, pieces = converted
    ours = ForcedLengthTranslator(int8, threads=1)
    ct2 = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="int8", intra_threads=1)
    for batch in (pieces[:1], pieces):  # batch 1 and a batch of sentences of different lengths
        out, stats = ours.decode(batch, length)
        assert [len(o) for o in out] == [length] * len(batch)
        assert stats.hit_max_len == list(range(len(batch)))
        assert [len(o) for o in ct2_decode(ct2, batch, length)] == [length] * len(batch)
        # inter_threads' sub-batches (bench.marian_base's 2-worker setting) too
        assert [len(o) for o in ct2_decode(ct2, batch, length, max_batch_size=2)] == [length] * len(batch)


def test_forced_float32_equals_transformers(converted):
    """Not just the length: the tokens are greedy's with EOS masked, as HF computes them,
    on both engines (so each sees the source HF sees: CTranslate2 with its "</s>")."""
    model, tokenizer, fp32, _, ct2_dir, sentences, pieces = converted
    length = 12
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        ref = model.generate(**batch, do_sample=False, num_beams=1, min_new_tokens=length, max_new_tokens=length,
                             forced_eos_token_id=None)
    expected = [tokenizer.convert_ids_to_tokens(row[1:]) for row in ref.tolist()]
    out, _ = ForcedLengthTranslator(fp32, threads=1, compute_type="float32").decode(pieces, length)
    assert out == expected
    ct2 = ctranslate2.Translator(str(ct2_dir.parent / "ct2-fp32"), device="cpu", intra_threads=1)
    assert ct2_decode(ct2, pieces, length) == expected


def test_marian_base_measures_and_reports(converted):
    """bench.marian_base's child and report on the tiny checkpoint: every pass times the
    forced lengths, the 2-thread batch run adds CTranslate2's inter_threads setting."""
    from bench import marian_base

    _, _, _, int8, ct2_dir, _, pieces = converted
    batches = [{"pieces": pieces[:4], "length": 5}, {"pieces": pieces[4:], "length": 3}]
    spec = {"threads": 2, "batch_size": 4, "repeats": 2, "pyfastdec": str(int8), "ct2": str(ct2_dir),
            "batches": batches}
    raw = marian_base.measure(spec)
    assert list(raw["passes"]) == ["pyfastdec", "ct2 intra=2 inter=1", "ct2 intra=1 inter=2"]
    for passes in raw["passes"].values():
        assert len(passes) == 2
        assert all(abs(p["tokens_per_s"] * p["seconds"] - (4 * 5 + 2 * 3)) < 1e-6 for p in passes)
    summary = marian_base.summarise(spec, raw)
    assert len(summary["ratios"]) == 2 and summary["target"] == 1.5
    assert "| 2 | 4 | pyfastdec |" in marian_base.markdown([summary], marian_base.environment(raw))
