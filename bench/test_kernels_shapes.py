"""bench.kernels --shapes model / --engines / --no-argmax: the rows are the models'
linear layers, every figure is 2*M*K*N / seconds, and bad options stop with one line."""
import pytest

from bench import kernels
from bench.kernel_cases import MODEL_KN_VALUES, MODEL_M_VALUES


def test_model_shapes_subset_of_engines(monkeypatch):
    kn_values = MODEL_KN_VALUES[:2]  # two layers keep the test short; the rest time alike
    monkeypatch.setattr(kernels, "MODEL_KN_VALUES", kn_values)
    results = kernels.run(1, shapes="model", engines=["fastdec_fp32", "numpy_fp32"], argmax=False)
    expected = [(M, K, N) for K, N in kn_values for M in MODEL_M_VALUES]
    assert [(r["M"], r["K"], r["N"]) for r in results["gemm"]] == expected
    assert results["argmax"] == []
    for row in results["gemm"]:
        assert set(row) == {"M", "K", "N", "fastdec_fp32", "numpy_fp32"}
        for name in ("fastdec_fp32", "numpy_fp32"):
            v = row[name]
            assert v["min"] <= v["seconds"] <= v["max"]
            assert v["gops"] == pytest.approx(2 * row["M"] * row["K"] * row["N"] / v["seconds"] / 1e9)
        assert "fastdec_fp32" in kernels.format_gemm_row(row)


def test_model_shapes_cover_both_model_widths():
    # d 256 and 512, ffn 1024 and 2048, both directions of the FFN
    assert {(256, 1024), (1024, 256), (512, 2048), (2048, 512)} <= set(MODEL_KN_VALUES)
    assert MODEL_M_VALUES == [1, 16, 64, 256]


@pytest.mark.parametrize("argv, message", [
    (["--engines", "fastdec_int8,mkl"], "--engines: unknown engine 'mkl'"),
    (["--engines", "numpy_fp32", "--markdown", "x.md"], "--markdown tables every engine"),
])
def test_bad_options_one_line(capsys, argv, message):
    with pytest.raises(SystemExit):
        kernels.main(argv)
    assert message in capsys.readouterr().err
