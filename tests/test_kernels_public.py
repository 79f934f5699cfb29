"""pyfastdec.kernels: the engine's primitives under public names, for bench/ and tools.
Each name is the engine's own object (no wrapper to add call cost to what is timed), the
module docstring documents every name it exports, and the kernels compute through it."""
import numpy as np

from pyfastdec import _engine, kernels


def test_every_name_is_the_engines_own_object():
    assert kernels.__all__, "kernels exports nothing"
    for name in kernels.__all__:
        assert getattr(kernels, name) is getattr(_engine, name), name


def test_the_docstring_documents_every_name():
    missing = [name for name in kernels.__all__ if name not in kernels.__doc__]
    assert not missing, f"pyfastdec.kernels docstring does not mention {missing}"


def test_gemms_and_argmax_through_the_public_names():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    w = (rng.standard_normal((16, 64)) * 0.05).astype(np.float32)
    np.testing.assert_allclose(kernels.gemm_f32(a, kernels.Float32Matrix(w)), a @ w.T, rtol=1e-4, atol=1e-5)
    scale = (np.abs(w).max(axis=1) / 127).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    got = kernels.gemm_i8(a, kernels.Int8Matrix(q, scale))
    np.testing.assert_allclose(got, a @ (q * scale[:, None]).T, rtol=0.05, atol=0.05)
    assert list(kernels.argmax(a)) == list(a.argmax(axis=1))


def test_op_profile_switches_and_counts():
    was = kernels.op_profile()
    try:
        assert kernels.op_profile(True) is True
        totals = kernels.op_profile_totals(reset=True)
        assert totals and all(len(v) == 2 for v in totals.values())
        assert kernels.op_profile(False) is False
    finally:
        kernels.op_profile(was)
