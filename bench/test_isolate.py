"""bench.isolate.run_isolated: the measuring child imports the pyfastdec its parent
imports, with its engine, whether that is the checkout (built in place, editable) or an
installed package that tests/ and bench/'s conftests pinned (`pip install .`, as in CI)."""
from __future__ import annotations

import textwrap

import pyfastdec
from bench.isolate import run_isolated

PROBE = textwrap.dedent("""
    import argparse, json
    import pyfastdec
    from pyfastdec import kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--measure")
    ap.add_argument("--result")
    args = ap.parse_args()
    spec = json.load(open(args.measure))
    json.dump({"pyfastdec": pyfastdec.__file__, "argmax": int(kernels.argmax(__import__("numpy").array(
        spec["row"], dtype="float32"))), "echo": spec}, open(args.result, "w"))
""")


def test_child_imports_the_parents_pyfastdec(tmp_path):
    (tmp_path / "fastdec_probe.py").write_text(PROBE)
    result, _ = run_isolated("fastdec_probe", {"row": [0.0, 3.0, 1.0]}, env={"PYTHONPATH": str(tmp_path)})
    assert result["pyfastdec"] == pyfastdec.__file__
    assert result["argmax"] == 1 and result["echo"] == {"row": [0.0, 3.0, 1.0]}
