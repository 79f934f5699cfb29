// Python bindings of the GPU model (gpu_model.h), compiled once per ops implementation:
// pyfastdec._engine_cuda (CUDA ops; built with FASTDEC_CUDA=1) and pyfastdec._engine_gpuref
// (the float reference ops, no CUDA: the orchestration's tests on any CPU). The module
// name comes from FASTDEC_GPU_MODULE. pyfastdec/backends/cuda.py validates inputs against
// the protocol first; what is checked here guards the engine's memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/gpu_model.h"
#include "py_config.h"

namespace py = pybind11;

namespace fastdec {
namespace gpu {
namespace {

using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// The GPU model's Config from config.json as the CPU engine reads and checks it
// (py_config.h): the same fields, named as gpu_model.h names them.
Config parse_config(const py::dict& c) {
  const ModelConfig m = parse_model_config(c);
  Config cfg;
  cfg.drafter = m.is_drafter();
  cfg.d_model = m.d_model;
  cfg.head_dim = m.head_dim;
  cfg.vocab = m.vocab_size;
  cfg.pre_norm = m.pre_norm;
  cfg.encoder = m.encoder;  // fastdec::LayerShape, the CPU engine's
  cfg.decoder = m.decoder;
  cfg.shared_encoder = m.shared_encoder;
  cfg.ssru = m.ssru_decoder;
  cfg.pad = m.pad;
  cfg.bos = m.bos;
  cfg.mask = m.mask;
  cfg.activation = m.activation == Activation::kGelu    ? Act::kGelu
                   : m.activation == Activation::kSwish ? Act::kSwish
                                                        : Act::kRelu;
  cfg.eps = m.layer_norm_eps;
  cfg.positions = m.positions;
  cfg.suppress = m.suppress;
  cfg.heads = m.proposal_heads;
  cfg.heads_hidden = m.proposal_hidden;
  return cfg;
}

struct PyModel {
  std::unique_ptr<Model> model;
};

void check_owner(uint64_t owner, const Model& m, const char* what) {
  if (owner != m.id())
    throw py::value_error(std::string(what) + ": made by another model (states and memories belong to the model "
                                              "that made them)");
}

std::vector<int32_t> ids_of(const py::handle& list) {
  std::vector<int32_t> out;
  for (const auto& v : list) out.push_back(v.cast<int32_t>());
  return out;
}

py::dict step(PyModel& self, State& state, const I64& tokens, bool argmax, int topk, py::object ids, bool logprobs,
              bool logits, py::object proposals, int heads, py::object keep_ids, float edit_margin) {
  Model& m = *self.model;
  check_owner(state.owner, m, "step");
  const int64_t R = static_cast<int64_t>(state.lengths.size());
  if (tokens.ndim() != 2 || tokens.shape(0) != R)
    throw py::value_error("step: tokens must be [rows=" + std::to_string(R) + ", n]");
  const int n = static_cast<int>(tokens.shape(1));
  const int64_t T = R * n, V = m.config().vocab;
  std::vector<int32_t> tok(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tok[t] = static_cast<int32_t>(tokens.data()[t]);
  Request req;
  req.argmax = argmax || !proposals.is_none() || !keep_ids.is_none();
  req.topk = topk;
  req.logprobs = logprobs;
  req.logits = logits;
  req.edit_margin = edit_margin;
  I64 ids_a, prop_a, keep_a;
  auto shaped = [&](const py::object& o, int64_t size, const char* what) {
    I64 a = I64::ensure(o);
    if (!a || a.size() != size) throw py::value_error(std::string("step: ") + what + " has the wrong size");
    return a;
  };
  if (!ids.is_none()) req.ids = (ids_a = shaped(ids, T, "ids")).data();
  if (!proposals.is_none()) {
    // A draft length past n - 1 would read past the row's tokens; heads past the model's
    // would size the output beyond what propose() writes.
    const int H = m.config().heads;
    if (H == 0) throw py::value_error("step: proposals asked for, but this model has no proposal heads");
    if (heads < 0 || heads > H)
      throw py::value_error("step: heads = " + std::to_string(heads) + " outside [0, " + std::to_string(H) +
                            "] (0: all the model's heads)");
    req.draft_lengths = (prop_a = shaped(proposals, R, "proposals")).data();
    for (int64_t b = 0; b < R; ++b)
      if (req.draft_lengths[b] < 0 || req.draft_lengths[b] > n - 1)
        throw py::value_error("step: proposals[" + std::to_string(b) + "] = " + std::to_string(req.draft_lengths[b]) +
                              " outside [0, " + std::to_string(n - 1) + "] (n - 1 drafted tokens per row)");
    req.heads = heads > 0 ? heads : H;  // resolved once: propose() runs exactly these
  }
  if (!keep_ids.is_none()) req.keep_ids = (keep_a = shaped(keep_ids, T, "keep_ids")).data();
  const int K = req.draft_lengths ? req.heads : 0;
  py::dict out;
  Outputs o;
  I64 a_argmax({R, static_cast<int64_t>(n)});
  o.argmax = a_argmax.mutable_data();  // always filled (proposals and keep_ids read it)
  py::array_t<int64_t> a_topk_ids, a_props, a_acc;
  py::array_t<float> a_topk_lp, a_id_lp, a_lp, a_logits;
  if (topk > 0) {
    a_topk_ids = py::array_t<int64_t>({R, static_cast<int64_t>(n), static_cast<int64_t>(topk)});
    a_topk_lp = py::array_t<float>({R, static_cast<int64_t>(n), static_cast<int64_t>(topk)});
    o.topk_ids = a_topk_ids.mutable_data();
    o.topk_logprobs = a_topk_lp.mutable_data();
    out["topk_ids"] = a_topk_ids;
    out["topk_logprobs"] = a_topk_lp;
  }
  if (req.ids) {
    a_id_lp = py::array_t<float>({R, static_cast<int64_t>(n)});
    o.id_logprobs = a_id_lp.mutable_data();
    out["id_logprobs"] = a_id_lp;
  }
  if (logprobs) {
    a_lp = py::array_t<float>({R, static_cast<int64_t>(n), V});
    o.logprobs = a_lp.mutable_data();
    out["logprobs"] = a_lp;
  }
  if (logits) {
    a_logits = py::array_t<float>({R, static_cast<int64_t>(n), V});
    o.logits = a_logits.mutable_data();
    out["logits"] = a_logits;
  }
  if (req.draft_lengths) {
    a_props = py::array_t<int64_t>({R, static_cast<int64_t>(K)});
    a_acc = py::array_t<int64_t>({R});
    o.proposals = a_props.mutable_data();
    o.accepted = a_acc.mutable_data();
    out["proposals"] = a_props;
    out["accepted"] = a_acc;
  }
  {
    py::gil_scoped_release release;
    m.step(state, tok.data(), n, req, o);
  }
  if (argmax) out["argmax"] = a_argmax;
  return out;
}

}  // namespace
}  // namespace gpu
}  // namespace fastdec

#ifndef FASTDEC_GPU_MODULE
#error "FASTDEC_GPU_MODULE names the module (_engine_cuda or _engine_gpuref)"
#endif

PYBIND11_MODULE(FASTDEC_GPU_MODULE, m) {
  using namespace fastdec::gpu;
  m.doc() = "pyfastdec GPU model (csrc/cuda/gpu_model.h) over one ops implementation";
  // module_local: both modules bind these C++ types, and both may be loaded at once.
  py::class_<Memory, std::shared_ptr<Memory>>(m, "Memory", py::module_local())
      .def_property_readonly("rows", [](const Memory& x) { return x.R; });
  py::class_<State, std::shared_ptr<State>>(m, "State", py::module_local())
      .def_property_readonly("lengths", [](const State& s) { return s.lengths; });
  // The device the ops would run on, or RuntimeError saying why there is none (checked
  // before a model's weights are read).
  m.def("device_name", []() {
#if defined(FASTDEC_WITH_CUDA)
    return cuda_device_name();
#else
    return make_reference_ops()->name();
#endif
  });
  py::class_<PyModel>(m, "Model", py::module_local())
      .def(py::init([](const py::dict& config, const py::dict& tensors) {
             Config cfg = parse_config(config);
             HostTensors t;
             std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>> keep;
             for (const auto& item : tensors) {
               auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(item.second);
               if (!a) throw py::value_error("tensors: '" + item.first.cast<std::string>() + "' is not a float array");
               keep.push_back(a);
               HostTensor h;
               h.data = a.data();
               for (py::ssize_t i = 0; i < a.ndim(); ++i) h.shape.push_back(a.shape(i));
               t[item.first.cast<std::string>()] = h;
             }
#if defined(FASTDEC_WITH_CUDA)
             auto ops = make_cuda_ops();
#else
             auto ops = make_reference_ops();
#endif
             auto self = std::make_unique<PyModel>();
             self->model = std::make_unique<Model>(std::move(cfg), t, std::move(ops));
             return self;
           }),
           py::arg("config"), py::arg("tensors"))
      .def("encode",
           [](PyModel& s, const py::list& sources, const py::list& shortlists) {
             std::vector<std::vector<int32_t>> src, lists;
             for (const auto& x : sources) src.push_back(ids_of(x));
             for (const auto& x : shortlists) lists.push_back(ids_of(x));
             py::gil_scoped_release release;
             return s.model->encode(src, lists);
           })
      .def("attach",
           [](PyModel& s, const Memory& host) {
             py::gil_scoped_release release;
             return s.model->attach(host);
           })
      .def("start",
           [](PyModel& s, const std::shared_ptr<Memory>& memory) {
             check_owner(memory->owner, *s.model, "start");
             return s.model->start(memory);
           })
      .def("step", &step, py::arg("state"), py::arg("tokens"), py::arg("argmax") = true, py::arg("topk") = 0,
           py::arg("ids") = py::none(), py::arg("logprobs") = false, py::arg("logits") = false,
           py::arg("proposals") = py::none(), py::arg("heads") = 0, py::arg("keep_ids") = py::none(),
           py::arg("edit_margin") = 0.f)
      .def("draft",
           [](PyModel& s, const std::shared_ptr<Memory>& memory, const py::list& prefixes, int k) {
             check_owner(memory->owner, *s.model, "draft");
             if (!s.model->config().drafter) throw py::value_error("draft: this model is not a nat-drafter");
             if (k < 1) throw py::value_error("draft: k must be >= 1, got " + std::to_string(k));
             std::vector<std::vector<int32_t>> p;
             for (const auto& x : prefixes) p.push_back(ids_of(x));
             const int64_t R = static_cast<int64_t>(p.size());
             py::array_t<int64_t> ids({R, static_cast<int64_t>(k)});
             py::array_t<float> logprobs({R, static_cast<int64_t>(k)});
             int64_t* i = ids.mutable_data();
             float* l = logprobs.mutable_data();
             {
               py::gil_scoped_release release;
               s.model->draft(memory, p, k, i, l);
             }
             return py::make_tuple(ids, logprobs);
           })
      .def("truncate",
           [](PyModel& s, State& state, const I64& lengths) {
             check_owner(state.owner, *s.model, "truncate");
             if (lengths.ndim() != 1 || lengths.shape(0) != static_cast<py::ssize_t>(state.lengths.size()))
               throw py::value_error("truncate: lengths must be [rows=" + std::to_string(state.lengths.size()) + "]");
             std::vector<int> v(state.lengths.size());
             for (size_t b = 0; b < v.size(); ++b) {
               const int64_t x = lengths.data()[b];
               if (x < 0 || x > state.lengths[b])
                 throw py::value_error("truncate: lengths[" + std::to_string(b) + "] = " + std::to_string(x) +
                                       " outside [0, " + std::to_string(state.lengths[b]) + "] (positions held)");
               v[b] = static_cast<int>(x);
             }
             s.model->truncate(state, v);
           })
      .def("select_state",
           [](PyModel& s, const State& state, const std::vector<int>& rows) {
             check_owner(state.owner, *s.model, "select");
             for (int r : rows)
               if (r < 0 || r >= static_cast<int>(state.lengths.size()))
                 throw py::value_error("select: row " + std::to_string(r) + " outside the state's " +
                                       std::to_string(state.lengths.size()) + " rows");
             py::gil_scoped_release release;
             return s.model->select(state, rows);
           })
      .def("select_memory", [](PyModel& s, const Memory& memory, const std::vector<int>& rows) {
        check_owner(memory.owner, *s.model, "select");
        for (int r : rows)
          if (r < 0 || r >= memory.R)
            throw py::value_error("select: row " + std::to_string(r) + " outside the memory's " +
                                  std::to_string(memory.R) + " rows");
        py::gil_scoped_release release;
        return s.model->select(memory, rows);
      });
}
