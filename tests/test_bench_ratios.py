"""bench/results.add_ratios: a row's 'x CT2' is against CTranslate2 on the same model's
weights where CTranslate2 ran them, else against en-de-attn's, whatever order the rows
come in; report._targets (issue 6) compares the students with en-de-attn's CT2 row only."""
from bench.report import _targets
from bench.results import add_ratios


def row(system, model, strategy, ms, bleu=30.0):
    return {"system": system, "model": model, "precision": "int8", "strategy": strategy, "shortlist": False,
            "workload": "multi30k-b1-t1", "dataset": "multi30k", "batch_size": 1, "ms_p50": ms, "bleu": bleu,
            "setting": "x"}


def test_ct2_ratio_is_on_the_same_weights_else_en_de_attns():
    ct2_big = row("ct2", "bild-big", "greedy", 4.0)  # first: a model-blind search would take it
    ct2_attn = row("ct2", "en-de-attn", "greedy", 2.0)
    bild = row("pyfastdec", "bild-big", "bild", 1.0)
    student = row("pyfastdec", "en-de", "greedy", 1.0)  # CTranslate2 cannot run the SSRU student
    rows = [ct2_big, ct2_attn, bild, student]
    add_ratios(rows)
    assert bild["vs_ct2_int8_greedy"] == 4.0 and bild["vs_ct2_model"] == "bild-big"
    assert student["vs_ct2_int8_greedy"] == 2.0 and student["vs_ct2_model"] == "en-de-attn"
    assert ct2_big["vs_ct2_int8_greedy"] == 1.0 and ct2_attn["vs_ct2_int8_greedy"] == 1.0
    # issue 6's target line: the student against en-de-attn's CT2 (2x), not BiLD's 4x against its own
    line, = [t for t in _targets(rows) if t.startswith("- multi30k-b1-t1")]
    assert "2.00x CTranslate2 int8 greedy" in line and "en-de" in line
