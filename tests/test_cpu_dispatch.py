"""Runtime ISA detection and FASTDEC_ISA, checked in fresh processes."""
import json
import os
import re
import subprocess
import sys

import pytest

import pyfastdec
from child_python import NEUTRAL_CWD, child_env
from kernel_reference import available_isas

PROBE = r"""
import json, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import pyfastdec
    from pyfastdec import _engine, runtime  # import pyfastdec loads no engine: runtime warns
info = pyfastdec.cpu_info()
rng = np.random.default_rng(0)
a = rng.standard_normal((3, 37)).astype(np.float32)
w = rng.integers(-127, 128, (29, 37)).astype(np.int8)
s = np.full(29, 0.02, np.float32)
c = _engine.gemm_i8(a, _engine.Int8Matrix(w, s), bias=None)
x = rng.standard_normal(1000).astype(np.float32)
print(json.dumps({"info": info, "warnings": [str(w.message) for w in caught],
                  "gemm": c.tolist(), "argmax": int(_engine.argmax(x)),
                  "argmax_ref": int(x.argmax())}))
"""


def run_probe(isa):
    env = child_env()
    env.pop("FASTDEC_ISA", None)
    if isa is not None:
        env["FASTDEC_ISA"] = isa
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, check=False)


def test_cpu_info_reports_detection_and_kernels():
    info = pyfastdec.cpu_info()
    assert info["isa"] in info["available"]
    assert info["available"][0] == "scalar"
    assert set(info["kernels"]) == {"int8_gemm", "fp32_gemm", "argmax", "row_stats"}
    assert info["default_threads"] >= 1
    # The flags come from cpuid; /proc/cpuinfo is an independent witness on Linux.
    if os.path.exists("/proc/cpuinfo"):
        flags = open("/proc/cpuinfo").read()
        assert info["features"]["avx2"] == (" avx2" in flags)
        assert info["features"]["avx512_vnni"] == (" avx512_vnni" in flags)


@pytest.mark.parametrize("isa", available_isas())
def test_fastdec_isa_selects_each_path(isa):
    proc = run_probe(isa)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["info"]["isa"] == isa and out["info"]["forced"]
    assert out["argmax"] == out["argmax_ref"]
    assert not out["warnings"]


def test_all_paths_give_identical_int8_results():
    results = [json.loads(run_probe(isa).stdout)["gemm"] for isa in available_isas()]
    assert all(r == results[0] for r in results)


def test_fastdec_isa_never_goes_above_the_cpu():
    order = ["scalar", "avx2", "avx512", "vnni", "amx"]
    detected = pyfastdec.cpu_info()["detected"]
    above = order[order.index(detected) + 1:] if detected != "amx" else []
    if not above:
        pytest.skip("this CPU has every ISA pyfastdec knows")
    out = json.loads(run_probe(above[0]).stdout)
    assert out["info"]["isa"] == detected
    assert any("above what this CPU supports" in w for w in out["warnings"])


def test_the_command_says_fastdec_isa_above_the_cpu_in_one_line():
    """fastdec prints the warning as its own one line (fastdec: warning: ...), not as
    Python's RuntimeWarning with a file name and a source line, and goes on."""
    order = ["scalar", "avx2", "avx512", "vnni", "amx"]
    detected = pyfastdec.cpu_info()["detected"]
    if detected == "amx":
        pytest.skip("this CPU has every ISA pyfastdec knows")
    above = order[order.index(detected) + 1]
    proc = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "info"], env=child_env(FASTDEC_ISA=above),
                          capture_output=True, text=True, cwd=NEUTRAL_CWD, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"fastdec: warning: FASTDEC_ISA={above} is above what this CPU supports; "
                                        f"using {detected}"]
    assert f"chosen {detected} (forced by FASTDEC_ISA={above})" in proc.stdout


def test_fastdec_isa_amx_emulated_runs_on_any_cpu():
    """The AMX table on emulated tiles (tests only): chosen on any CPU, without the
    above-the-CPU warning, and the int8 product is every other path's."""
    out = json.loads(run_probe("amx-emulated").stdout)
    assert out["info"]["isa"] == out["info"]["requested"] == "amx-emulated" and out["info"]["forced"]
    assert out["info"]["kernels"]["int8_gemm"] == "amx-emulated (tiles at every row count)"
    assert not out["warnings"]
    assert out["gemm"] == json.loads(run_probe("scalar").stdout)["gemm"]


@pytest.mark.parametrize("isa", ["amx-emulated", "amx"])
def test_fastdec_info_names_the_amx_kernels(isa):
    """`fastdec info` says which int8 kernel runs: the AMX table's GEMM keeps VNNI's kernel
    below its row threshold, the emulated one runs tiles at every row count."""
    if isa == "amx" and pyfastdec.cpu_info()["detected"] != "amx":
        pytest.skip(f"this CPU has no AMX-INT8 usable by this process (detected: {pyfastdec.cpu_info()['detected']})")
    env = child_env(FASTDEC_ISA=isa)
    proc = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "info"], env=env, capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"chosen {isa} (forced by FASTDEC_ISA={isa})" in proc.stdout
    if isa == "amx":
        assert re.search(r"kernels: int8_gemm amx \(tiles from \d+ rows; avx512-vnni below\), fp32_gemm avx512-vnni",
                         proc.stdout), proc.stdout
    else:
        assert "kernels: int8_gemm amx-emulated (tiles at every row count), fp32_gemm scalar" in proc.stdout


def test_unknown_fastdec_isa_is_a_clear_error():
    proc = run_probe("avx9000")
    assert proc.returncode != 0
    assert "FASTDEC_ISA" in proc.stderr and "avx9000" in proc.stderr
    assert "scalar, avx2, avx512, vnni, amx" in proc.stderr


def test_unknown_fastdec_isa_is_one_line_from_the_command():
    """The engine refuses the setting while `fastdec` imports it: one error line, no traceback."""
    env = child_env(FASTDEC_ISA="avx9000")
    proc = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "info"], env=env, capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr == ("fastdec: error: FASTDEC_ISA: unknown ISA 'avx9000': expected one of scalar, avx2, "
                           "avx512, vnni, amx\n")  # not "the compiled engine did not load": it did


def test_fastdec_threads_must_be_positive(monkeypatch):
    monkeypatch.setenv("FASTDEC_THREADS", "0")
    with pytest.raises(ValueError, match="FASTDEC_THREADS"):
        pyfastdec.default_threads()
    monkeypatch.setenv("FASTDEC_THREADS", "3")
    assert pyfastdec.default_threads() == 3
