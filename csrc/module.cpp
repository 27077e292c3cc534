// torch_graphfuse._C: the pass hook in torch's JIT pass registry, the thin
// oneDNN Graph bindings the Python partitioner uses, and the hook through
// which a Python backend (cuDNN) executes its fusion groups.
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/pass_manager.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/profiling_record.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <atomic>

#include "backend.h"
#include "buffer_pool.h"
#include "fusion_group.h"

namespace py = pybind11;

namespace graphfuse {
namespace {

std::atomic<bool> g_enabled{false};

py::object& pipeline() {
  // Leaked on purpose: it must outlive the interpreter's teardown order.
  static auto* fn = new py::object();
  return *fn;
}

// The profiling executor has run the graph and recorded tensor types.
bool has_profiled_shapes(const torch::jit::Block* block) {
  for (const auto* node : block->nodes()) {
    if (node->kind() == c10::prim::profile && node->hasAttribute(c10::attr::profiled_type)) {
      auto type = node->ty(c10::attr::profiled_type)->cast<c10::TensorType>();
      if (type && type->sizes().concrete_sizes()) return true;
    }
    for (const auto* b : node->blocks())
      if (has_profiled_shapes(b)) return true;
  }
  return false;
}

// Runs the Python pipeline on a copy and keeps it only if every pass
// succeeded: a failing pass leaves the graph as torch gave it.
void fuse(std::shared_ptr<torch::jit::Graph>& graph) {
  if (!g_enabled.load() || !has_profiled_shapes(graph->block())) return;
  py::gil_scoped_acquire gil;
  if (!pipeline() || pipeline().is_none()) return;
  auto copy = graph->copy();
  torch::jit::RemoveProfileNodesAndSpecializeTypes(copy);
  try {
    pipeline()(copy);
    graph = copy;
  } catch (py::error_already_set& e) {
    TORCH_WARN("torch_graphfuse: fusion skipped for a graph, a pass failed: ", e.what());
  }
}

const auto registered = torch::jit::registerPrePass(fuse);

// The profiling executor records types only for the inputs of ops a fuser
// asks for; the quantize/dequantize ops of PT2E and FX reference models
// (whose results the int8 groups read) are not asked for otherwise.
const bool profiles_quantized_ops = [] {
  torch::jit::RegisterProfilingNode([](const torch::jit::Node* node) {
    return std::string(node->kind().ns().toUnqualString()) == "quantized_decomposed" ||
           node->kind() == c10::aten::quantize_per_tensor ||
           node->kind() == c10::aten::dequantize;
  });
  return true;
}();

// (partitions as (supported, op ids, input ids, output ids), refused ops as (id, why))
py::tuple partition(const std::string& text) {
  std::vector<std::pair<size_t, std::string>> refused;
  py::list result;
  for (const auto& p : partition_graph(GraphDesc::parse(text), refused))
    result.append(py::make_tuple(p.supported, p.ops, p.inputs, p.outputs));
  return py::make_tuple(result, refused);
}

// Per group description, the ticket of its prepared partition (-1: none).
std::vector<int64_t> prepare(const std::vector<std::string>& texts) {
  std::vector<GraphDesc> descs;
  descs.reserve(texts.size());
  for (const auto& text : texts) descs.push_back(GraphDesc::parse(text));
  py::gil_scoped_release no_gil;
  return prepare_partitions(descs);
}

// A Python object that may be dropped by a thread not holding the GIL
// (a kernel freed with its graph); at interpreter exit it is leaked.
std::shared_ptr<py::object> shared_py(py::object obj) {
  return std::shared_ptr<py::object>(new py::object(std::move(obj)), [](py::object* o) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete o;
  });
}

// factory(desc) -> executor; executor(list[Tensor]) -> list[Tensor]. Python
// errors come back as std::runtime_error, made while the GIL is held.
void set_executor_factory(py::object factory) {
  if (factory.is_none()) return set_group_executor_factory(nullptr);
  auto made = shared_py(std::move(factory));
  set_group_executor_factory([made](const std::string& desc) -> GroupExecutor {
    py::gil_scoped_acquire gil;
    std::shared_ptr<py::object> executor;
    try {
      executor = shared_py((*made)(desc));
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
    return [executor](const std::vector<at::Tensor>& inputs) {
      py::gil_scoped_acquire gil;
      try {
        return (*executor)(inputs).cast<std::vector<at::Tensor>>();
      } catch (py::error_already_set& e) {
        throw std::runtime_error(e.what());
      } catch (py::cast_error& e) {
        throw std::runtime_error(std::string("the executor's result: ") + e.what());
      }
    };
  });
}

}  // namespace
}  // namespace graphfuse

PYBIND11_MODULE(_C, m) {
  using namespace graphfuse;
  m.doc() = "torch_graphfuse mechanism: pass hook, oneDNN Graph bindings, kernel stats";
  m.def("_set_pipeline", [](py::object fn) { pipeline() = std::move(fn); });
  m.def("_set_enabled", [](bool on) { g_enabled = on; });
  m.def("_is_enabled", [] { return g_enabled.load(); });
  m.def("_set_group_executor_factory", &set_executor_factory,
        "factory(desc) -> executor(list[Tensor]) -> list[Tensor], for groups of another backend");
  m.def("_partition", &partition, "oneDNN's partitions of a backend description");
  m.def("_prepare_partitions", &prepare,
        "partition fusion groups in one oneDNN call; a ticket per group (-1: none)");
  m.def("_kernel_stats", [] {
    auto s = kernel_stats();
    py::dict d;
    d["compiles"] = s.compiles;
    d["cache_hits"] = s.cache_hits;
    d["fallbacks"] = s.fallbacks;
    d["fused_runs"] = s.fused_runs;
    d["reused_outputs"] = s.reused_outputs;
    d["inplace_outputs"] = s.inplace_outputs;
    d["idle_buffer_bytes"] = s.idle_buffer_bytes;
    d["compile_us"] = s.compile_us;
    d["first_run_us"] = s.first_run_us;
    d["evictions"] = s.evictions;
    d["cached_weight_bytes"] = s.cached_weight_bytes;
    d["aged_out_buffers"] = s.aged_out_buffers;
    d["nonfinite_fallbacks"] = s.nonfinite_fallbacks;
    return d;
  });
  m.def("_memory_budget", [] {
    const auto& b = memory_budget();
    py::dict d;
    d["specs_per_group"] = b.specs_per_group;
    d["weight_cache_bytes"] = b.weight_cache_bytes;
    d["pool_idle_bytes"] = b.pool_idle_bytes;
    return d;
  });
  m.def("_reset_kernel_stats", &reset_kernel_stats);
  m.def("_release_buffers", &release_idle_buffers,
        "free the output buffers kept for reuse; the bytes released");
  m.def("_onednn_version", [] {
    const auto* v = dnnl_version();
    return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  });
}
