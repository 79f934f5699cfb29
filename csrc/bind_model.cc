// Python bindings of the native model: pyfastdec._engine.Model, Memory, State.
// Inputs are validated here so that bad ids, shapes or lengths raise Python
// exceptions with clear messages instead of reaching the engine.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/op_profile.h"
#include "model/model.h"
#include "model/shortlist_index.h"
#include "py_arrays.h"
#include "py_config.h"

namespace fastdec {
namespace {

constexpr int kMaxTopK = 64;

// Memories and states remember the model that made them: another model's layer count
// and widths differ, and passing one across models must be an error, not a bad read.
// (An id, not the model's address: a later model may reuse a freed address.)
struct PyMemory {
  Memory memory;
  uint64_t owner = 0;
};
struct PyState {
  DecoderState state;
  uint64_t owner = 0;
};

uint64_t next_model_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

class PyModel {
 public:
  PyModel(const py::dict& config, const py::dict& tensors, const py::dict& act_scales, int threads) {
    if (threads < 1) throw py::value_error("Model: threads must be >= 1");
    ModelConfig cfg = parse_model_config(config);
    std::map<std::string, float> scales;
    for (const auto& item : act_scales) scales[item.first.cast<std::string>()] = item.second.cast<float>();
    TensorLookup lookup = [&tensors](const std::string& name) {
      if (!tensors.contains(name)) throw std::invalid_argument("missing tensor '" + name + "'");
      py::array a = tensors[py::str(name)];
      if (!(a.flags() & py::array::c_style))
        throw std::invalid_argument("tensor '" + name + "' is not C-contiguous");
      TensorView t;
      t.data = a.data();
      t.dtype = py::str(a.dtype());
      for (py::ssize_t i = 0; i < a.ndim(); ++i) t.shape.push_back(a.shape(i));
      return t;
    };
    model_ = std::make_unique<Model>(std::move(cfg), lookup, scales, threads);
  }

  const ModelConfig& cfg() const { return model_->config(); }

  template <typename T>
  void check_owner(const T& object, const char* what, const char* fn) const {
    if (object.owner != id_)
      throw py::value_error(std::string(fn) + ": this " + what + " was made by another model");
  }

  std::vector<int32_t> checked_ids(const py::handle& seq, const char* what, size_t row) const {
    std::vector<int32_t> ids;
    for (const auto& item : seq) {
      int64_t id = item.cast<int64_t>();
      if (id < 0 || id >= cfg().vocab_size)
        throw py::value_error(std::string(what) + " " + std::to_string(row) + " has token id " + std::to_string(id) +
                              ", outside [0, " + std::to_string(cfg().vocab_size) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }

  PyMemory encode(const py::list& sources, const py::object& shortlists) {
    OpTimer timer(Op::kBinding);
    std::vector<std::vector<int32_t>> src, lists;
    for (size_t b = 0; b < sources.size(); ++b) {
      src.push_back(checked_ids(sources[b], "source", b));
      if (src.back().empty()) throw py::value_error("source " + std::to_string(b) + " is empty (it needs at least EOS)");
    }
    // A native shortlist computes each row's candidates in encode (GIL released).
    std::shared_ptr<const ShortlistIndex> index;
    if (py::isinstance<ShortlistIndex>(shortlists)) {
      index = shortlists.cast<std::shared_ptr<const ShortlistIndex>>();
      if (index->vocab_size() != cfg().vocab_size)
        throw py::value_error("encode: the shortlist's vocab_size " + std::to_string(index->vocab_size()) +
                              " differs from the model's " + std::to_string(cfg().vocab_size));
    } else if (!shortlists.is_none()) {
      py::list sl = shortlists;
      if (sl.size() != sources.size()) throw py::value_error("encode: need one shortlist per source");
      for (size_t b = 0; b < sl.size(); ++b) {
        lists.push_back(checked_ids(sl[b], "shortlist", b));
        if (!std::is_sorted(lists.back().begin(), lists.back().end()) ||
            std::adjacent_find(lists.back().begin(), lists.back().end()) != lists.back().end())
          throw py::value_error("shortlist " + std::to_string(b) + " must be sorted and unique");
      }
    }
    PyMemory m;
    m.owner = id_;
    py::gil_scoped_release release;
    if (index) {
      lists.resize(src.size());
      for (size_t b = 0; b < src.size(); ++b) index->candidates(src[b].data(), src[b].size(), &lists[b]);
    }
    m.memory = model_->encode(src, lists);
    return m;
  }

  // host: another model's memory (its encoder is the one this model reads; which one is
  // checked by the Python loader); the result is this model's.
  PyMemory attach(const PyMemory& host) {
    OpTimer timer(Op::kBinding);
    PyMemory m;
    m.owner = id_;
    py::gil_scoped_release release;
    m.memory = model_->attach(host.memory);
    return m;
  }

  PyState start(const PyMemory& memory) const {
    check_owner(memory, "memory", "start");
    return PyState{model_->start(memory.memory), id_};
  }

  py::dict step(PyState& st, const py::handle& tokens_obj, bool argmax, int topk, const py::object& ids_obj,
                bool logprobs, const py::object& proposals_obj, int heads, const py::object& keep_ids_obj,
                float edit_margin, bool logits) {
    const char* fn = "step";
    OpTimer timer(Op::kBinding);
    check_owner(st, "state", fn);
    auto tokens = checked_array<int64_t>(tokens_obj, {fn, "tokens"}, {2});
    const py::ssize_t R = static_cast<py::ssize_t>(st.state.rows.size());
    expect_dim(tokens, 0, R, {fn, "tokens"}, "one row per live row of the state");
    const int n = static_cast<int>(tokens.shape(1));
    if (n < 1) throw py::value_error("step: tokens must append at least one position per row (n >= 1)");
    if (topk < 0 || topk > kMaxTopK)
      throw py::value_error("step: topk must be in [0, " + std::to_string(kMaxTopK) + "]");
    std::vector<int32_t> tok(static_cast<size_t>(R) * n);
    for (py::ssize_t i = 0; i < tokens.size(); ++i) {
      int64_t id = tokens.data()[i];
      if (id < 0 || id >= cfg().vocab_size)
        throw py::value_error("step: token id " + std::to_string(id) + " at row " + std::to_string(i / n) +
                              ", position " + std::to_string(i % n) + " is outside [0, " +
                              std::to_string(cfg().vocab_size) + ")");
      tok[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    StepRequest req;
    req.argmax = argmax;
    req.topk = topk;
    req.logprobs = logprobs;
    req.logits = logits;
    py::array_t<int64_t> ids;
    if (!ids_obj.is_none()) {
      ids = checked_array<int64_t>(ids_obj, {fn, "ids"}, {2});
      expect_dim(ids, 0, R, {fn, "ids"}, "rows of tokens");
      expect_dim(ids, 1, n, {fn, "ids"}, "positions of tokens");
      for (py::ssize_t i = 0; i < ids.size(); ++i)
        if (ids.data()[i] < 0 || ids.data()[i] >= cfg().vocab_size)
          throw py::value_error("step: ids has id " + std::to_string(ids.data()[i]) + ", outside the vocabulary");
      req.ids = ids.data();
    }
    py::array_t<int64_t> keep_ids;
    if (!keep_ids_obj.is_none()) {
      if (!argmax) throw py::value_error("step: keep_ids need argmax=True (they change the argmax)");
      if (!(edit_margin >= 0.0f) || !std::isfinite(edit_margin))
        throw py::value_error("step: edit_margin must be a finite number >= 0, got " + std::to_string(edit_margin));
      keep_ids = checked_array<int64_t>(keep_ids_obj, {fn, "keep_ids"}, {2});
      expect_dim(keep_ids, 0, R, {fn, "keep_ids"}, "rows of tokens");
      expect_dim(keep_ids, 1, n, {fn, "keep_ids"}, "positions of tokens");
      for (py::ssize_t i = 0; i < keep_ids.size(); ++i)
        if (keep_ids.data()[i] < -1 || keep_ids.data()[i] >= cfg().vocab_size)
          throw py::value_error("step: keep_ids has id " + std::to_string(keep_ids.data()[i]) +
                                ", outside the vocabulary (-1: no kept token)");
      req.keep_ids = keep_ids.data();
      req.edit_margin = edit_margin;
    }
    py::array_t<int64_t> draft_lengths;
    const int K = cfg().proposal_heads;
    if (!proposals_obj.is_none()) {
      if (K == 0) throw py::value_error("step: proposals asked for, but this model has no proposal heads");
      if (!argmax) throw py::value_error("step: proposals need argmax=True (j is found from the argmax)");
      draft_lengths = checked_array<int64_t>(proposals_obj, {fn, "proposals"}, {1});
      expect_dim(draft_lengths, 0, R, {fn, "proposals"}, "one draft length per row");
      for (py::ssize_t b = 0; b < R; ++b)
        if (draft_lengths.data()[b] < 0 || draft_lengths.data()[b] > n - 1)
          throw py::value_error("step: proposals[" + std::to_string(b) + "] = " +
                                std::to_string(draft_lengths.data()[b]) + " draft tokens, outside [0, " +
                                std::to_string(n - 1) + "] (tokens[:, 1:] hold the drafts)");
      req.draft_lengths = draft_lengths.data();
      if (heads < 0 || heads > K)
        throw py::value_error("step: heads = " + std::to_string(heads) + ", outside [0, " + std::to_string(K) +
                              "] (0: all " + std::to_string(K) + " proposal heads)");
      req.heads = heads;
    }
    const py::ssize_t H = req.draft_lengths ? (req.heads ? req.heads : K) : 0;
    const py::ssize_t N = n;
    // Only the arrays asked for are made (a batch-1 greedy step needs one): each costs
    // about as much as a microsecond-scale part of the step. argmax is always computed.
    py::array_t<int64_t> proposals, accepted, am({R, N}), tid;
    py::array_t<float> tlp, ilp, lp, lg;
    py::dict out;
    StepOutputs o;
    o.argmax = am.mutable_data();
    if (topk > 0) {
      tid = py::array_t<int64_t>({R, N, static_cast<py::ssize_t>(topk)});
      tlp = py::array_t<float>({R, N, static_cast<py::ssize_t>(topk)});
      o.topk_ids = tid.mutable_data();
      o.topk_logprobs = tlp.mutable_data();
    }
    if (req.ids) {
      ilp = py::array_t<float>({R, N});
      o.id_logprobs = ilp.mutable_data();
    }
    if (logprobs) {
      lp = py::array_t<float>({R, N, static_cast<py::ssize_t>(cfg().vocab_size)});
      o.logprobs = lp.mutable_data();
    }
    if (logits) {
      lg = py::array_t<float>({R, N, static_cast<py::ssize_t>(cfg().vocab_size)});
      o.logits = lg.mutable_data();
    }
    if (req.draft_lengths) {
      proposals = py::array_t<int64_t>({R, H});
      accepted = py::array_t<int64_t>(R);
      o.proposals = proposals.mutable_data();
      o.accepted = accepted.mutable_data();
    }
    {
      py::gil_scoped_release release;
      model_->step(st.state, tok.data(), n, req, o);
    }
    if (argmax) out["argmax"] = am;
    if (topk > 0) {
      out["topk_ids"] = tid;
      out["topk_logprobs"] = tlp;
    }
    if (req.ids) out["id_logprobs"] = ilp;
    if (logprobs) out["logprobs"] = lp;
    if (logits) out["logits"] = lg;
    if (req.draft_lengths) {
      out["proposals"] = proposals;
      out["accepted"] = accepted;
    }
    return out;
  }

  void truncate(PyState& st, const py::handle& lengths_obj) const {
    check_owner(st, "state", "truncate");
    auto lengths = checked_array<int64_t>(lengths_obj, {"truncate", "lengths"}, {1});
    expect_dim(lengths, 0, static_cast<py::ssize_t>(st.state.rows.size()), {"truncate", "lengths"},
               "one length per live row");
    std::vector<int> keep(st.state.rows.size());
    for (size_t b = 0; b < keep.size(); ++b) {
      int64_t len = lengths.data()[b];
      if (len < 0 || len > st.state.rows[b].length)
        throw py::value_error("truncate: row " + std::to_string(b) + " holds " +
                              std::to_string(st.state.rows[b].length) + " positions; cannot keep " +
                              std::to_string(len));
      keep[b] = static_cast<int>(len);
    }
    model_->truncate(st.state, keep);
  }

  // BiLD's little model: Model::draft_greedy. tokens [rows, w] int64, widths [rows] in 1..w.
  py::tuple draft_greedy(PyState& st, const py::handle& tokens_obj, const py::handle& widths_obj, int max_new,
                         float min_logprob) {
    const char* fn = "draft_greedy";
    OpTimer timer(Op::kBinding);
    check_owner(st, "state", fn);
    auto tokens = checked_array<int64_t>(tokens_obj, {fn, "tokens"}, {2});
    const py::ssize_t R = static_cast<py::ssize_t>(st.state.rows.size());
    expect_dim(tokens, 0, R, {fn, "tokens"}, "one row per live row of the state");
    auto widths = checked_array<int64_t>(widths_obj, {fn, "widths"}, {1});
    expect_dim(widths, 0, R, {fn, "widths"}, "one width per live row");
    const int w = static_cast<int>(tokens.shape(1));
    if (w < 1 || max_new < 1) throw py::value_error("draft_greedy: needs w >= 1 catch-up tokens and max_new >= 1");
    std::vector<int32_t> tok(static_cast<size_t>(R) * w);
    for (py::ssize_t i = 0; i < tokens.size(); ++i) {
      int64_t id = tokens.data()[i];
      if (id < 0 || id >= cfg().vocab_size)
        throw py::value_error("draft_greedy: token id " + std::to_string(id) + " outside the vocabulary");
      tok[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    std::vector<int> width(static_cast<size_t>(R));
    for (py::ssize_t b = 0; b < R; ++b) {
      int64_t v = widths.data()[b];
      if (v < 1 || v > w) throw py::value_error("draft_greedy: widths[" + std::to_string(b) + "] must be in [1, w]");
      width[static_cast<size_t>(b)] = static_cast<int>(v);
    }
    py::array_t<int64_t> drafts({R, static_cast<py::ssize_t>(max_new)});
    std::vector<int> counts(static_cast<size_t>(R)), fed(static_cast<size_t>(R));
    {
      py::gil_scoped_release release;
      model_->draft_greedy(st.state, tok.data(), width.data(), w, max_new, min_logprob, drafts.mutable_data(),
                           counts.data(), fed.data());
    }
    py::array_t<int64_t> counts_out(R), fed_out(R);
    for (py::ssize_t b = 0; b < R; ++b) {
      counts_out.mutable_data()[b] = counts[static_cast<size_t>(b)];
      fed_out.mutable_data()[b] = fed[static_cast<size_t>(b)];
    }
    return py::make_tuple(drafts, counts_out, fed_out);
  }

  static std::vector<size_t> checked_rows(const py::handle& rows_obj, size_t live, const char* what) {
    std::vector<size_t> rows;
    for (const auto& item : rows_obj) {
      int64_t r = item.cast<int64_t>();
      if (r < 0 || static_cast<size_t>(r) >= live)
        throw py::value_error(std::string(what) + ": row " + std::to_string(r) + " does not exist (" +
                              std::to_string(live) + " live rows)");
      rows.push_back(static_cast<size_t>(r));
    }
    return rows;
  }

  PyState select_state(const PyState& st, const py::handle& rows_obj) const {
    check_owner(st, "state", "select");
    PyState out;
    out.owner = st.owner;
    for (size_t r : checked_rows(rows_obj, st.state.rows.size(), "select")) out.state.rows.push_back(st.state.rows[r]);
    return out;
  }

  PyMemory select_memory(const PyMemory& m, const py::handle& rows_obj) const {
    check_owner(m, "memory", "select");
    PyMemory out;
    out.owner = m.owner;
    for (size_t r : checked_rows(rows_obj, m.memory.rows.size(), "select")) out.memory.rows.push_back(m.memory.rows[r]);
    return out;
  }

  py::tuple draft(const PyMemory& m, const py::list& prefixes, int k) {
    if (!cfg().is_drafter()) throw py::value_error("draft: this model is not a drafter (arch = '" + cfg().arch + "')");
    check_owner(m, "memory", "draft");
    if (k < 1) throw py::value_error("draft: k must be >= 1");
    if (prefixes.size() != m.memory.rows.size())
      throw py::value_error("draft: need one prefix per memory row (" + std::to_string(m.memory.rows.size()) + ")");
    std::vector<std::vector<int32_t>> pre;
    for (size_t b = 0; b < prefixes.size(); ++b) pre.push_back(checked_ids(prefixes[b], "prefix", b));
    const py::ssize_t R = static_cast<py::ssize_t>(pre.size());
    py::array_t<int64_t> ids({R, static_cast<py::ssize_t>(k)});
    py::array_t<float> lps({R, static_cast<py::ssize_t>(k)});
    int64_t* ids_ptr = ids.mutable_data();
    float* lps_ptr = lps.mutable_data();
    {
      py::gil_scoped_release release;
      model_->draft(m.memory, pre, k, ids_ptr, lps_ptr);
    }
    return py::make_tuple(ids, lps);
  }

  std::string shortlist_gemm() const { return shortlist_gemm_name(model_->shortlist_gemm()); }
  void set_shortlist_gemm(const std::string& mode) {
    try {
      model_->set_shortlist_gemm(parse_shortlist_gemm(mode));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  }
  py::dict shortlist_gemm_stats() const {
    ShortlistUnionStats s = model_->shortlist_gemm_stats();
    py::dict d;
    d["union_calls"] = s.union_calls;
    d["per_row_calls"] = s.per_row_calls;
    d["blocks_built"] = s.blocks_built;
    return d;
  }

  int threads() const { return model_->threads(); }
  int proposal_heads() const { return cfg().proposal_heads; }
  size_t scratch_bytes() {
    py::gil_scoped_release release;
    return model_->scratch_bytes();
  }
  size_t release_scratch(size_t keep_bytes) {
    py::gil_scoped_release release;
    return model_->release_scratch(keep_bytes);
  }

 private:
  std::unique_ptr<Model> model_;
  const uint64_t id_ = next_model_id();
};

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PyMemory>(m, "Memory", "Encoder output of a batch (per row: cross-attention K/V, shortlist).")
      .def_property_readonly("rows", [](const PyMemory& mem) { return mem.memory.rows.size(); });
  py::class_<PyState>(m, "State", "Decoder state of a batch (per row: caches and length).")
      .def_property_readonly("rows", [](const PyState& s) { return s.state.rows.size(); })
      .def_property_readonly("lengths", [](const PyState& s) {
        py::array_t<int64_t> out(static_cast<py::ssize_t>(s.state.rows.size()));
        for (size_t b = 0; b < s.state.rows.size(); ++b) out.mutable_data()[b] = s.state.rows[b].length;
        return out;
      });
  py::class_<PyModel>(m, "Model", "A loaded model (see pyfastdec.backends.native for the Backend protocol).")
      .def(py::init<const py::dict&, const py::dict&, const py::dict&, int>(), py::arg("config"),
           py::arg("tensors"), py::arg("activation_scales"), py::arg("threads"))
      .def_property_readonly("threads", &PyModel::threads)
      .def_property("shortlist_gemm", &PyModel::shortlist_gemm, &PyModel::set_shortlist_gemm,
                    "Shortlisted output layer at batch > 1: 'auto' (cheaper of union GEMM and per-row "
                    "kernel), 'union' or 'per-row' (model/shortlist_union.h).")
      .def("shortlist_gemm_stats", &PyModel::shortlist_gemm_stats,
           "Counts since load: output-layer calls on the union GEMM / per-row kernel, union blocks built.")
      .def_property_readonly("proposal_heads", &PyModel::proposal_heads)
      .def("encode", &PyModel::encode, py::arg("sources"), py::arg("shortlists") = py::none())
      .def("attach", &PyModel::attach, py::arg("host_memory"))
      .def("start", &PyModel::start, py::arg("memory"))
      .def("step", &PyModel::step, py::arg("state"), py::arg("tokens"), py::kw_only(), py::arg("argmax") = true,
           py::arg("topk") = 0, py::arg("ids") = py::none(), py::arg("logprobs") = false,
           py::arg("proposals") = py::none(), py::arg("heads") = 0, py::arg("keep_ids") = py::none(),
           py::arg("edit_margin") = 0.0f, py::arg("logits") = false)
      .def("truncate", &PyModel::truncate, py::arg("state"), py::arg("lengths"))
      .def("draft_greedy", &PyModel::draft_greedy, py::arg("state"), py::arg("tokens"), py::arg("widths"),
           py::arg("max_new"), py::arg("min_logprob"))
      .def("select_state", &PyModel::select_state, py::arg("state"), py::arg("rows"))
      .def("select_memory", &PyModel::select_memory, py::arg("memory"), py::arg("rows"))
      .def("draft", &PyModel::draft, py::arg("memory"), py::arg("prefixes"), py::arg("k"))
      .def("scratch_bytes", &PyModel::scratch_bytes,
           "Bytes of scratch the model keeps between calls (it grows with a call's rows).")
      .def("release_scratch", &PyModel::release_scratch, py::arg("keep_bytes"),
           "Frees the scratch if it holds more than keep_bytes; returns the bytes freed.");
}

}  // namespace fastdec
