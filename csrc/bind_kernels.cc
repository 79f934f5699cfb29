// Python bindings of the kernels (used directly by tests and benchmarks).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <algorithm>
#include <optional>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/gemm_f32.h"
#include "kernels/gemm_i8.h"
#include "kernels/row_ops.h"
#include "kernels/thread_pool.h"
#include "py_arrays.h"

namespace fastdec {
namespace {

const KernelTable& table(const std::optional<std::string>& isa) {
  return isa ? kernels_named(*isa) : active_kernels();
}

py::dict cpu_info() {
  const CpuFeatures& f = cpu_features();
  const IsaChoice& c = isa_choice();
  const KernelTable& kt = active_kernels();
  py::dict features;
  features["avx2"] = f.avx2;
  features["fma"] = f.fma;
  features["avx512f"] = f.avx512f;
  features["avx512bw"] = f.avx512bw;
  features["avx512dq"] = f.avx512dq;
  features["avx512vl"] = f.avx512vl;
  features["avx512_vnni"] = f.avx512vnni;
  features["amx_tile"] = f.amx_tile;
  features["amx_int8"] = f.amx_int8;
  features["os_avx"] = f.os_ymm;
  features["os_avx512"] = f.os_zmm;
  features["os_amx"] = f.os_amx;
  features["amx_permitted"] = f.amx_permitted;
  py::list available;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kVnni, Isa::kAmx})
    if (isa <= c.detected) available.append(isa_name(isa));
  py::dict kernels;
  // The AMX table is VNNI's but for the int8 GEMM, which keeps VNNI below a row count;
  // the emulated one is the scalar table's but for the int8 GEMM (tiles at every count).
  std::string int8 = kt.name, rest = kt.name;
  if (c.amx_emulated) {
    int8 += " (tiles at every row count)";
    rest = kernels_scalar().name;
  } else if (kt.isa == Isa::kAmx) {
    rest = kernels_vnni().name;
    int8 += " (tiles from " + std::to_string(amx_min_rows()) + " rows; " + rest + " below)";
  }
  kernels["int8_gemm"] = int8;
  kernels["fp32_gemm"] = rest;
  kernels["argmax"] = rest;
  kernels["row_stats"] = rest;
  py::dict info;
  info["brand"] = f.brand;
  info["features"] = features;
  info["detected"] = isa_name(c.detected);
  info["available"] = available;
  info["forced"] = c.forced;
  info["requested"] = c.amx_emulated ? kt.name : isa_name(c.requested);
  info["isa"] = c.amx_emulated ? kt.name : isa_name(c.chosen);
  info["kernels"] = kernels;
  return info;
}

// ---------------------------------------------------------------- int8
std::unique_ptr<I8Matrix> make_i8(const py::handle& weights, const py::handle& scales,
                                  bool columns, const std::optional<std::string>& isa) {
  const char* fn = "Int8Matrix";
  auto w = checked_array<int8_t>(weights, {fn, "weights"}, {2});
  auto s = checked_array<float>(scales, {fn, "scales"}, {1});
  py::ssize_t N = w.shape(0), K = w.shape(1);
  if (N < 1 || K < 1) throw py::value_error("Int8Matrix: argument 'weights' must be non-empty");
  bool per_channel = s.shape(0) == N;
  if (!per_channel && s.shape(0) != 1)
    throw py::value_error("Int8Matrix: argument 'scales' must have N = " + std::to_string(N) +
                          " values (per output channel) or 1 (per tensor), got " +
                          std::to_string(s.shape(0)));
  for (py::ssize_t i = 0; i < s.shape(0); ++i)
    if (!(std::isfinite(s.data()[i]) && s.data()[i] >= 0.f))
      throw py::value_error("Int8Matrix: argument 'scales' must be finite and >= 0 (index " +
                            std::to_string(i) + ")");
  const KernelTable& kt = table(isa);
  py::gil_scoped_release release;
  return std::make_unique<I8Matrix>(kt, w.data(), static_cast<int>(N), static_cast<int>(K),
                                    s.data(), per_channel, columns);
}

std::optional<float> checked_act_scale(const std::optional<float>& act_scale, const char* fn) {
  if (act_scale && !(std::isfinite(*act_scale) && *act_scale > 0.f))
    throw py::value_error(std::string(fn) + ": argument 'act_scale' must be finite and > 0");
  return act_scale;
}

py::array_t<float> output_array(const py::object& out, py::ssize_t M, py::ssize_t N, const char* fn) {
  if (out.is_none()) return py::array_t<float>({M, N});
  auto o = checked_array<float>(out, {fn, "out"}, {2});
  expect_dim(o, 0, M, {fn, "out"}, "rows of a");
  expect_dim(o, 1, N, {fn, "out"}, "columns of the result");
  if (!o.writeable()) throw py::value_error(std::string(fn) + ": argument 'out' is read-only");
  return o;
}

const float* checked_bias(const py::object& bias, py::ssize_t N, const char* fn,
                          py::array_t<float>* keep) {
  if (bias.is_none()) return nullptr;
  *keep = checked_array<float>(bias, {fn, "bias"}, {1});
  expect_dim(*keep, 0, N, {fn, "bias"}, "one value per output column");
  return keep->data();
}

py::array_t<float> gemm_i8_py(const py::handle& a_obj, const I8Matrix& w, const py::object& bias,
                              bool relu, std::optional<float> act_scale, const py::object& out,
                              ThreadPool* pool) {
  const char* fn = "gemm_i8";
  auto a = checked_array<float>(a_obj, {fn, "a"}, {2});
  expect_dim(a, 1, w.cols(), {fn, "a"}, "K, the weights' input size");
  py::array_t<float> bias_keep;
  const float* b = checked_bias(bias, w.rows(), fn, &bias_keep);
  auto scale = checked_act_scale(act_scale, fn);
  py::ssize_t M = a.shape(0);
  auto c = output_array(out, M, w.rows(), fn);
  float* cptr = c.mutable_data();
  {
    py::gil_scoped_release release;
    gemm_i8(w, a.data(), static_cast<int>(M), static_cast<size_t>(w.cols()),
            scale ? &*scale : nullptr, b, relu, cptr, static_cast<size_t>(w.rows()), pool);
  }
  return c;
}

py::array_t<float> gemm_i8_columns_py(const py::handle& a_obj, const I8Matrix& w,
                                      const py::handle& cols_obj, const py::handle& offsets_obj,
                                      const py::object& bias, std::optional<float> act_scale,
                                      ThreadPool* pool) {
  const char* fn = "gemm_i8_columns";
  if (!w.has_rows())
    throw py::value_error(std::string(fn) + ": the Int8Matrix was built without columns=True");
  auto a = checked_array<float>(a_obj, {fn, "a"}, {2});
  expect_dim(a, 1, w.cols(), {fn, "a"}, "K, the weights' input size");
  auto cols = checked_array<int32_t>(cols_obj, {fn, "cols"}, {1});
  auto offsets = checked_array<int64_t>(offsets_obj, {fn, "offsets"}, {1});
  py::ssize_t M = a.shape(0);
  expect_dim(offsets, 0, M + 1, {fn, "offsets"}, "rows of a + 1");
  const int64_t* off = offsets.data();
  if (off[0] != 0 || off[M] != cols.shape(0))
    throw py::value_error(std::string(fn) + ": argument 'offsets' must start at 0 and end at len(cols)");
  for (py::ssize_t m = 0; m < M; ++m)
    if (off[m + 1] < off[m])
      throw py::value_error(std::string(fn) + ": argument 'offsets' must be non-decreasing (row " +
                            std::to_string(m) + ")");
  for (py::ssize_t j = 0; j < cols.shape(0); ++j)
    if (cols.data()[j] < 0 || cols.data()[j] >= w.rows())
      throw py::value_error(std::string(fn) + ": argument 'cols' has id " +
                            std::to_string(cols.data()[j]) + " at index " + std::to_string(j) +
                            ", outside [0, " + std::to_string(w.rows()) + ")");
  py::array_t<float> bias_keep;
  const float* b = checked_bias(bias, w.rows(), fn, &bias_keep);
  auto scale = checked_act_scale(act_scale, fn);
  py::array_t<float> c(cols.shape(0));
  float* cptr = c.mutable_data();
  {
    py::gil_scoped_release release;
    gemm_i8_columns(w, a.data(), static_cast<int>(M), static_cast<size_t>(w.cols()),
                    scale ? &*scale : nullptr, cols.data(), off, b, cptr, pool);
  }
  return c;
}

// ---------------------------------------------------------------- fp32
std::unique_ptr<F32Matrix> make_f32(const py::handle& weights, const std::optional<std::string>& isa) {
  auto w = checked_array<float>(weights, {"Float32Matrix", "weights"}, {2});
  if (w.shape(0) < 1 || w.shape(1) < 1)
    throw py::value_error("Float32Matrix: argument 'weights' must be non-empty");
  const KernelTable& kt = table(isa);
  py::gil_scoped_release release;
  return std::make_unique<F32Matrix>(kt, w.data(), static_cast<int>(w.shape(0)),
                                     static_cast<int>(w.shape(1)));
}

py::array_t<float> gemm_f32_py(const py::handle& a_obj, const F32Matrix& w, const py::object& bias,
                               bool relu, const py::object& out, ThreadPool* pool) {
  const char* fn = "gemm_f32";
  auto a = checked_array<float>(a_obj, {fn, "a"}, {2});
  expect_dim(a, 1, w.cols(), {fn, "a"}, "K, the weights' input size");
  py::array_t<float> bias_keep;
  const float* b = checked_bias(bias, w.rows(), fn, &bias_keep);
  py::ssize_t M = a.shape(0);
  auto c = output_array(out, M, w.rows(), fn);
  float* cptr = c.mutable_data();
  {
    py::gil_scoped_release release;
    gemm_f32(w, a.data(), static_cast<int>(M), static_cast<size_t>(w.cols()), b, relu, cptr,
             static_cast<size_t>(w.rows()), pool);
  }
  return c;
}

py::array_t<float> matmul_f32_py(const py::handle& a_obj, const py::handle& b_obj, bool transpose_b,
                                 float alpha, const std::optional<std::string>& isa) {
  const char* fn = "matmul_f32";
  auto a = checked_array<float>(a_obj, {fn, "a"}, {3});
  auto b = checked_array<float>(b_obj, {fn, "b"}, {3});
  py::ssize_t B = a.shape(0), M = a.shape(1), K = a.shape(2);
  expect_dim(b, 0, B, {fn, "b"}, "batch size of a");
  expect_dim(b, transpose_b ? 2 : 1, K, {fn, "b"}, "K, the last dimension of a");
  py::ssize_t N = transpose_b ? b.shape(1) : b.shape(2);
  py::array_t<float> c({B, M, N});
  float* cptr = c.mutable_data();
  const KernelTable& kt = table(isa);
  {
    py::gil_scoped_release release;
    size_t ldb = static_cast<size_t>(transpose_b ? K : N);
    for (py::ssize_t i = 0; i < B; ++i)
      kt.f32_small_gemm(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                        a.data() + i * M * K, static_cast<size_t>(K), b.data() + i * b.shape(1) * b.shape(2),
                        ldb, transpose_b, cptr + i * M * N, static_cast<size_t>(N), false);
  }
  return c;
}

// ---------------------------------------------------------------- rows
struct Rows {
  py::array_t<float> array;
  int64_t rows, n;
};

Rows score_rows(const py::handle& x_obj, const char* fn) {
  auto x = checked_array<float>(x_obj, {fn, "x"}, {1, 2});
  int64_t n = x.shape(x.ndim() - 1);
  if (n < 1) throw py::value_error(std::string(fn) + ": argument 'x' has empty rows");
  return {x, x.ndim() == 2 ? static_cast<int64_t>(x.shape(0)) : 1, n};
}

py::object argmax_py(const py::handle& x_obj, const std::optional<std::string>& isa, ThreadPool* pool) {
  Rows r = score_rows(x_obj, "argmax");
  const KernelTable& kt = table(isa);
  py::array_t<int64_t> out(r.rows);
  int64_t* optr = out.mutable_data();
  {
    py::gil_scoped_release release;
    argmax_rows(kt, r.array.data(), r.rows, r.n, static_cast<size_t>(r.n), optr, pool);
  }
  if (r.array.ndim() == 1) return py::int_(optr[0]);
  return std::move(out);
}

py::dict row_stats_py(const py::handle& x_obj, int k, const py::object& ids_obj,
                      const std::optional<std::string>& isa, ThreadPool* pool) {
  const char* fn = "row_stats";
  Rows r = score_rows(x_obj, fn);
  if (k < 0 || k > r.n)
    throw py::value_error(std::string(fn) + ": argument 'k' must be in [0, " + std::to_string(r.n) + "]");
  py::array_t<int64_t> ids;
  int64_t n_ids = 0;
  if (!ids_obj.is_none()) {
    ids = checked_array<int64_t>(ids_obj, {fn, "ids"}, {r.array.ndim() == 2 ? 2 : 1});
    if (r.array.ndim() == 2) expect_dim(ids, 0, r.rows, {fn, "ids"}, "one row of ids per row of x");
    n_ids = ids.shape(ids.ndim() - 1);
    for (int64_t i = 0; i < ids.size(); ++i)
      if (ids.data()[i] < 0 || ids.data()[i] >= r.n)
        throw py::value_error(std::string(fn) + ": argument 'ids' has id " + std::to_string(ids.data()[i]) +
                              ", outside [0, " + std::to_string(r.n) + ")");
  }
  py::array_t<float> mx(r.rows), lse(r.rows), top_lp({r.rows, static_cast<int64_t>(k)}),
      id_lp({r.rows, n_ids});
  py::array_t<int64_t> top_ids({r.rows, static_cast<int64_t>(k)});
  RowStatsOut out;
  out.max = mx.mutable_data();
  out.log_sum_exp = lse.mutable_data();
  out.top_ids = top_ids.mutable_data();
  out.top_logprobs = top_lp.mutable_data();
  out.ids = n_ids ? ids.data() : nullptr;
  out.n_ids = n_ids;
  out.id_logprobs = id_lp.mutable_data();
  const KernelTable& kt = table(isa);
  {
    py::gil_scoped_release release;
    row_stats_rows(kt, r.array.data(), r.rows, r.n, static_cast<size_t>(r.n), k, out, pool);
  }
  py::dict d;
  bool single = r.array.ndim() == 1;
  d["max"] = single ? py::object(py::float_(mx.data()[0])) : py::object(mx);
  d["log_sum_exp"] = single ? py::object(py::float_(lse.data()[0])) : py::object(lse);
  d["top_ids"] = single ? top_ids[py::int_(0)] : py::object(top_ids);
  d["top_logprobs"] = single ? top_lp[py::int_(0)] : py::object(top_lp);
  d["id_logprobs"] = single ? id_lp[py::int_(0)] : py::object(id_lp);
  return d;
}

py::array_t<float> layer_norm_py(const py::handle& x_obj, const py::handle& gamma_obj, const py::handle& beta_obj,
                                 const std::optional<std::string>& isa, float eps) {
  const char* fn = "layer_norm";
  auto x = checked_array<float>(x_obj, {fn, "x"}, {2});
  auto gamma = checked_array<float>(gamma_obj, {fn, "gamma"}, {1});
  auto beta = checked_array<float>(beta_obj, {fn, "beta"}, {1});
  py::ssize_t d = x.shape(1);
  if (d < 1) throw py::value_error("layer_norm: argument 'x' has empty rows");
  expect_dim(gamma, 0, d, {fn, "gamma"}, "one value per column of x");
  expect_dim(beta, 0, d, {fn, "beta"}, "one value per column of x");
  py::array_t<float> y({x.shape(0), d});
  float* yptr = y.mutable_data();
  const KernelTable& kt = table(isa);
  py::gil_scoped_release release;
  kt.layer_norm(x.data(), static_cast<int>(x.shape(0)), static_cast<int>(d), gamma.data(), beta.data(), yptr, eps);
  return y;
}

py::tuple add_layer_norm_py(const py::handle& x_obj, const py::handle& y_obj, const py::handle& gamma_obj,
                            const py::handle& beta_obj, const std::optional<std::string>& isa, float eps) {
  const char* fn = "add_layer_norm";
  auto x_in = checked_array<float>(x_obj, {fn, "x"}, {2});
  auto y = checked_array<float>(y_obj, {fn, "y"}, {2});
  auto gamma = checked_array<float>(gamma_obj, {fn, "gamma"}, {1});
  auto beta = checked_array<float>(beta_obj, {fn, "beta"}, {1});
  py::ssize_t rows = x_in.shape(0), d = x_in.shape(1);
  if (d < 1) throw py::value_error("add_layer_norm: argument 'x' has empty rows");
  expect_dim(y, 0, rows, {fn, "y"}, "the rows of x");
  expect_dim(y, 1, d, {fn, "y"}, "the columns of x");
  expect_dim(gamma, 0, d, {fn, "gamma"}, "one value per column of x");
  expect_dim(beta, 0, d, {fn, "beta"}, "one value per column of x");
  py::array_t<float> x({rows, d});
  std::copy(x_in.data(), x_in.data() + x_in.size(), x.mutable_data());
  py::array_t<float> out({rows, d});
  float* xptr = x.mutable_data();
  float* optr = out.mutable_data();
  const KernelTable& kt = table(isa);
  {
    py::gil_scoped_release release;
    kt.add_layer_norm(xptr, y.data(), static_cast<int>(rows), static_cast<int>(d), gamma.data(), beta.data(), optr,
                      eps);
  }
  return py::make_tuple(x, out);
}

py::array_t<float> softmax_rows_py(const py::handle& x_obj, const py::handle& visible_obj,
                                   const std::optional<std::string>& isa) {
  const char* fn = "softmax_rows";
  auto x_in = checked_array<float>(x_obj, {fn, "x"}, {2});
  auto visible_in = checked_array<int64_t>(visible_obj, {fn, "visible"}, {1});
  py::ssize_t rows = x_in.shape(0), n = x_in.shape(1);
  expect_dim(visible_in, 0, rows, {fn, "visible"}, "one count per row of x");
  std::vector<int> visible(static_cast<size_t>(rows));
  for (py::ssize_t r = 0; r < rows; ++r) {
    int64_t v = visible_in.data()[r];
    if (v < 1 || v > n)
      throw py::value_error("softmax_rows: visible[" + std::to_string(r) + "] = " + std::to_string(v) +
                            ", outside [1, " + std::to_string(n) + "] (the row's length)");
    visible[static_cast<size_t>(r)] = static_cast<int>(v);
  }
  py::array_t<float> x({rows, n});
  std::copy(x_in.data(), x_in.data() + x_in.size(), x.mutable_data());
  float* xptr = x.mutable_data();
  const KernelTable& kt = table(isa);
  {
    py::gil_scoped_release release;
    kt.softmax_rows(xptr, static_cast<int>(rows), static_cast<int>(n), static_cast<size_t>(n), visible.data());
  }
  return x;
}

double time_argmax_py(const py::handle& x_obj, int repeats, const std::string& impl,
                      const std::optional<std::string>& isa) {
  auto x = checked_array<float>(x_obj, {"time_argmax_ns", "x"}, {1});
  if (x.shape(0) < 1 || repeats < 1) throw py::value_error("time_argmax_ns: need a non-empty row and repeats >= 1");
  int which;
  if (impl == "fastdec") which = 0;
  else if (impl == "std_max_element") which = 1;
  else throw py::value_error("time_argmax_ns: impl must be 'fastdec' or 'std_max_element'");
  const KernelTable& kt = table(isa);
  py::gil_scoped_release release;
  return time_argmax_ns(kt, x.data(), x.shape(0), repeats, which);
}

}  // namespace

void bind_kernels(py::module_& m) {
  // Surface a bad FASTDEC_ISA at import, with its message.
  isa_choice();
  m.def("cpu_info", &cpu_info, "Detected CPU features, the chosen ISA and each kernel's path.");
  m.def("max_threads", &ThreadPool::max_threads,
        "The most threads a pool may have: 4 per CPU this process may run on.");

  py::class_<ThreadPool>(m, "ThreadPool", "Intra-op threads (the caller counts as one).")
      .def(py::init<int>(), py::arg("threads"))
      .def_property_readonly("threads", &ThreadPool::size);

  py::class_<I8Matrix>(m, "Int8Matrix",
                       "int8 weights [N, K] with scales, packed for an ISA (default: the running one).")
      .def(py::init(&make_i8), py::arg("weights"), py::arg("scales"), py::kw_only(),
           py::arg("columns") = false, py::arg("isa") = py::none())
      .def_property_readonly("shape", [](const I8Matrix& w) { return py::make_tuple(w.rows(), w.cols()); })
      .def_property_readonly("isa", [](const I8Matrix& w) { return table_label(w.kernels()); })
      .def_property_readonly("has_columns", &I8Matrix::has_rows)
      .def(
          "gathered",
          [](const I8Matrix& w, const py::handle& cols_obj, ThreadPool* pool) {
            const char* fn = "Int8Matrix.gathered";
            if (!w.has_rows()) throw py::value_error(std::string(fn) + ": the Int8Matrix was built without columns=True");
            auto cols = checked_array<int32_t>(cols_obj, {fn, "cols"}, {1});
            if (cols.shape(0) < 1) throw py::value_error(std::string(fn) + ": argument 'cols' is empty");
            for (py::ssize_t i = 0; i < cols.shape(0); ++i)
              if (cols.data()[i] < 0 || cols.data()[i] >= w.rows())
                throw py::value_error(std::string(fn) + ": argument 'cols' has id " + std::to_string(cols.data()[i]) +
                                      " at index " + std::to_string(i) + ", outside [0, " + std::to_string(w.rows()) + ")");
            py::gil_scoped_release release;
            return I8Matrix::gathered(w, cols.data(), static_cast<int>(cols.shape(0)), pool);
          },
          py::arg("cols"), py::kw_only(), py::arg("pool") = nullptr,
          "These rows (output columns) as a matrix of their own, packed for the same ISA.");

  py::class_<F32Matrix>(m, "Float32Matrix", "fp32 weights [N, K] packed for an ISA.")
      .def(py::init(&make_f32), py::arg("weights"), py::kw_only(), py::arg("isa") = py::none())
      .def_property_readonly("shape", [](const F32Matrix& w) { return py::make_tuple(w.rows(), w.cols()); })
      .def_property_readonly("isa", [](const F32Matrix& w) { return table_label(w.kernels()); });

  m.def("gemm_i8", &gemm_i8_py, "C = a @ W.T (+bias, relu), int8 weights, activations quantised per call.",
        py::arg("a"), py::arg("w"), py::kw_only(), py::arg("bias") = py::none(), py::arg("relu") = false,
        py::arg("act_scale") = py::none(), py::arg("out") = py::none(), py::arg("pool") = nullptr);
  m.def("gemm_i8_columns", &gemm_i8_columns_py,
        "Per-row column subset of gemm_i8: row m computes cols[offsets[m]:offsets[m+1]].",
        py::arg("a"), py::arg("w"), py::arg("cols"), py::arg("offsets"), py::kw_only(),
        py::arg("bias") = py::none(), py::arg("act_scale") = py::none(), py::arg("pool") = nullptr);
  m.def("gemm_f32", &gemm_f32_py, "C = a @ W.T (+bias, relu) in fp32.", py::arg("a"), py::arg("w"),
        py::kw_only(), py::arg("bias") = py::none(), py::arg("relu") = false,
        py::arg("out") = py::none(), py::arg("pool") = nullptr);
  m.def("matmul_f32", &matmul_f32_py, "Batched small GEMM: alpha * a @ b (or a @ b^T).",
        py::arg("a"), py::arg("b"), py::kw_only(), py::arg("transpose_b") = false,
        py::arg("alpha") = 1.0f, py::arg("isa") = py::none());
  m.def("argmax", &argmax_py, "Row-wise argmax: ties -> lowest index; NaN never wins unless all NaN.",
        py::arg("x"), py::kw_only(), py::arg("isa") = py::none(), py::arg("pool") = nullptr);
  m.def("row_stats", &row_stats_py,
        "Per row in two passes: max, log_sum_exp, top-k ids and log-probs, log-probs of given ids.",
        py::arg("x"), py::kw_only(), py::arg("k") = 0, py::arg("ids") = py::none(),
        py::arg("isa") = py::none(), py::arg("pool") = nullptr);
  m.def("layer_norm", &layer_norm_py, "Row-wise layer norm (default eps 1e-5), as the engine runs it.",
        py::arg("x"), py::arg("gamma"), py::arg("beta"), py::kw_only(), py::arg("isa") = py::none(),
        py::arg("eps") = 1e-5f);
  m.def("add_layer_norm", &add_layer_norm_py,
        "(x + y, layer_norm(x + y)) in the engine's fused residual pass (default eps 1e-5).", py::arg("x"),
        py::arg("y"), py::arg("gamma"), py::arg("beta"), py::kw_only(), py::arg("isa") = py::none(),
        py::arg("eps") = 1e-5f);
  m.def("softmax_rows", &softmax_rows_py,
        "Attention softmax per row over its first visible[r] entries, zeros after, as the engine runs it.",
        py::arg("x"), py::arg("visible"), py::kw_only(), py::arg("isa") = py::none());
  m.def("time_argmax_ns", &time_argmax_py, "Median ns per argmax call, timed inside C++.",
        py::arg("x"), py::kw_only(), py::arg("repeats") = 200, py::arg("impl") = "fastdec",
        py::arg("isa") = py::none());
}

}  // namespace fastdec
