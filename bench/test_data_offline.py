"""bench.data reads an extracted UA-GEC folder ($FASTDEC_UAGEC) without export.uagec, whose
sacrebleu import fails on a machine without it (the device of tools/device/amx_check.sh)."""
import gzip
import json
import sys

from bench.data import uagec_test


def test_extracted_corpus_needs_no_export_uagec(tmp_path, monkeypatch):
    for name, lines in (("test.src.gz", ["Я хочу піти до магазин.", "Добре."]),
                        ("test.tgt.gz", ["Я хочу піти до магазину.", "Добре."])):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    (tmp_path / "stats.json").write_text(json.dumps({"layer": "gec-only"}))
    monkeypatch.setenv("FASTDEC_UAGEC", str(tmp_path))
    monkeypatch.setitem(sys.modules, "export.uagec", None)  # importing it now raises ImportError
    test = uagec_test()
    assert test.sources == ["Я хочу піти до магазин.", "Добре."]
    assert test.references == ["Я хочу піти до магазину.", "Добре."]
