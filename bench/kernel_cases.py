"""The kernel workloads of the Foundation benchmarks and one callable per engine.

Every engine computes the same product, C[M,N] = A[M,K] · W[N,K]^T, on one thread:
  fastdec_int8   pyfastdec.gemm_i8: activations quantised per row at run time, int32
                 accumulation, dequantised fp32 output (the whole job, as the engine runs it)
  ort_int8       onnxruntime, the graph its dynamic quantiser emits for a linear layer:
                 DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (fp32 in, fp32 out)
  ort_matmulint  onnxruntime MatMulInteger alone on pre-quantised uint8 x int8 -> int32
                 (its bare kernel: less work than the others)
  fastdec_fp32   pyfastdec.gemm_f32 (packed weights, AVX-512/AVX2 kernels)
  numpy_fp32     numpy matmul (OpenBLAS sgemm)
  torch_fp32     torch.nn.functional.linear
"""
from __future__ import annotations

import numpy as np

M_VALUES = [1, 4, 16, 64, 256]
KN_VALUES = [(512, 2048), (2048, 512), (256, 8000)]
ARGMAX_LENGTHS = [8000, 32000]
# The shipped models' linear layers (K, N): d = 256 and 512 with ffn 1024 and 2048, the
# fused Q/K/V projection (3d) and the square ones (output projection, cross-attention Q).
MODEL_KN_VALUES = [(256, 256), (256, 768), (256, 1024), (1024, 256),
                   (512, 512), (512, 1536), (512, 2048), (2048, 512)]
MODEL_M_VALUES = [1, 16, 64, 256]


def single_thread_everywhere():
    """One thread for numpy's BLAS and torch; returns a description of numpy's BLAS."""
    from threadpoolctl import threadpool_info, threadpool_limits

    threadpool_limits(1)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    return [{k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]


def make_inputs(M, K, N, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
    return a, w


def quantized(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 weights and float32 scales of a float weight matrix [N, K]."""
    scale = np.abs(w).max(axis=1) / 127
    return np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8), scale.astype(np.float32)


def fastdec_int8(a, w):
    from pyfastdec import kernels

    W = kernels.Int8Matrix(*quantized(w))
    out = np.empty((a.shape[0], w.shape[0]), np.float32)
    return lambda: kernels.gemm_i8(a, W, out=out)


def fastdec_fp32(a, w):
    from pyfastdec import kernels

    W = kernels.Float32Matrix(w)
    out = np.empty((a.shape[0], w.shape[0]), np.float32)
    return lambda: kernels.gemm_f32(a, W, out=out)


def numpy_fp32(a, w):
    w_t = np.ascontiguousarray(w.T)
    out = np.empty((a.shape[0], w.shape[0]), np.float32)
    return lambda: np.matmul(a, w_t, out=out)


def torch_fp32(a, w):
    import torch

    ta, tw = torch.from_numpy(a), torch.from_numpy(w)
    return lambda: torch.nn.functional.linear(ta, tw)


def _ort_session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_int8(a, w):
    from onnx import TensorProto, helper, numpy_helper

    scale = (np.abs(w).max(axis=1) / 127).astype(np.float32)
    q_t = np.ascontiguousarray(np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8).T)
    K, N = q_t.shape
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["a"], ["a_q", "a_scale", "a_zp"]),
        helper.make_node("MatMulInteger", ["a_q", "w_q", "a_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["a_scale", "w_scale"], ["scale"]),
        helper.make_node("Mul", ["acc_f", "scale"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes, "linear_int8",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, K])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, N])],
        [numpy_helper.from_array(q_t, "w_q"), numpy_helper.from_array(scale, "w_scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    session = _ort_session(model)
    feeds = {"a": a}
    return lambda: session.run(None, feeds)


def ort_matmulint(a, w):
    from onnx import TensorProto, helper, numpy_helper

    K, N = w.shape[1], w.shape[0]
    q_t = np.random.default_rng(1).integers(-127, 128, (K, N)).astype(np.int8)
    a_q = np.random.default_rng(2).integers(0, 256, a.shape).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a_q", "w_q"], ["acc"])], "matmulinteger",
        [helper.make_tensor_value_info("a_q", TensorProto.UINT8, [None, K])],
        [helper.make_tensor_value_info("acc", TensorProto.INT32, [None, N])],
        [numpy_helper.from_array(q_t, "w_q")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    session = _ort_session(model)
    feeds = {"a_q": a_q}
    return lambda: session.run(None, feeds)


GEMM_ENGINES = {
    "fastdec_int8": fastdec_int8,
    "ort_int8": ort_int8,
    "ort_matmulint": ort_matmulint,
    "fastdec_fp32": fastdec_fp32,
    "numpy_fp32": numpy_fp32,
    "torch_fp32": torch_fp32,
}
