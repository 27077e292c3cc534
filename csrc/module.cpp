// torch_graphfuse._C: the pass hook in torch's JIT pass registry, the thin
// oneDNN Graph bindings the Python partitioner uses, and the hook through
// which a Python backend (cuDNN) executes its fusion groups.
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/pass_manager.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/profiling_record.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <dlfcn.h>

#include <atomic>
#include <locale>
#include <mutex>
#include <string>
#include <unordered_set>

#include "buffer_pool.h"
#include "external_kernel.h"
#include "group.h"
#include "group_schema.h"
#include "kernel_stats.h"
#include "onednn/api.h"
#include "onednn/graph.h"
#include "py_object.h"

#ifdef GRAPHFUSE_CUDNN_NATIVE
#include "cudnn/native_runner.h"
#endif

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

// A saved model torch_graphfuse.export made: its groups, and the fallback code beside
// them, are not fused again.
bool is_exported(const torch::jit::Block* block) {
  static const auto run_saved = c10::Symbol::fromQualString("graphfuse::run_saved");
  for (const auto* node : block->nodes()) {
    if (node->kind() == run_saved) return true;
    for (const auto* b : node->blocks())
      if (is_exported(b)) return true;
  }
  return false;
}

void mark_respecialized(torch::jit::Block* block) {
  static const auto group = c10::Symbol::fromQualString(kGroupKind);
  for (auto* node : block->nodes()) {
    if (node->kind() == group) node->i_(attr::respecialized, 1);
    for (auto* b : node->blocks()) mark_respecialized(b);
  }
}

// Runs the Python pipeline on a copy and keeps it only if every pass
// succeeded: a failing pass leaves the graph as torch gave it. A group's subgraph
// fused again for a new spec (fusion_group.cpp) makes groups whose own misses
// run unfused, and no report of its own.
void fuse(std::shared_ptr<torch::jit::Graph>& graph) {
  if (!g_enabled.load() || !has_profiled_shapes(graph->block()) || is_exported(graph->block()))
    return;
  py::gil_scoped_acquire gil;
  if (!pipeline() || pipeline().is_none()) return;
  auto copy = graph->copy();
  torch::jit::RemoveProfileNodesAndSpecializeTypes(copy);
  bool nested = respecializing();
  try {
    pipeline()(copy, nested);
    if (nested) mark_respecialized(copy->block());
    graph = copy;
  } catch (py::error_already_set& e) {
    TORCH_WARN("torch_graphfuse: fusion skipped for a graph, a pass failed: ", e.what());
  }
}

const auto registered = torch::jit::registerPrePass(fuse);

// The profiling executor records types only for the inputs of ops a fuser
// asks for (TensorExpr's ops by default). The plugin asks for every op its
// tables map (set from Python at import), which includes the quantize and
// dequantize ops of PT2E and FX reference models.
std::mutex g_profiled_mu;
std::unordered_set<c10::Symbol>& profiled_kinds() {
  static std::unordered_set<c10::Symbol> kinds;
  return kinds;
}

const bool profiles_mapped_ops = [] {
  torch::jit::RegisterProfilingNode([](const torch::jit::Node* node) {
    std::lock_guard<std::mutex> lock(g_profiled_mu);
    return profiled_kinds().count(node->kind()) > 0 ||
           std::string(node->kind().ns().toUnqualString()) == "quantized_decomposed";
  });
  return true;
}();

void set_profiled_kinds(const std::vector<std::string>& kinds) {
  std::lock_guard<std::mutex> lock(g_profiled_mu);
  profiled_kinds().clear();
  for (const auto& kind : kinds) profiled_kinds().insert(c10::Symbol::fromQualString(kind));
}

// (partitions as (supported, op ids, input ids, output ids), refused ops as (id, why))
py::tuple partition(const std::string& text) {
  TORCH_CHECK(onednn::availability().ok, "torch_graphfuse: ", onednn::availability().problem);
  std::vector<std::pair<size_t, std::string>> refused;
  py::list result;
  for (const auto& p : partition_graph(GraphDesc::parse(text), refused))
    result.append(py::make_tuple(p.supported, p.ops, p.inputs, p.outputs));
  return py::make_tuple(result, refused);
}

// Per group description, the ticket of its prepared partition (-1: none).
std::vector<int64_t> prepare(const std::vector<std::string>& texts) {
  TORCH_CHECK(onednn::availability().ok, "torch_graphfuse: ", onednn::availability().problem);
  std::vector<GraphDesc> descs;
  descs.reserve(texts.size());
  for (const auto& text : texts) descs.push_back(GraphDesc::parse(text));
  py::gil_scoped_release no_gil;
  return prepare_partitions(descs);
}

// factory(backend, desc) -> executor; executor(list[Tensor]) -> list[Tensor]. Python
// errors come back as std::runtime_error, made while the GIL is held.
void set_executor_factory(py::object factory) {
  if (factory.is_none()) return set_group_executor_factory(nullptr);
  auto made = shared_py(std::move(factory));
  set_group_executor_factory([made](const std::string& backend,
                                    const std::string& desc) -> GroupExecutor {
    py::gil_scoped_acquire gil;
    std::shared_ptr<py::object> executor;
    try {
      executor = shared_py((*made)(backend, desc));
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
#ifdef GRAPHFUSE_CUDNN_NATIVE
    if (auto native = cudnn::native_executor(*executor)) return *native;
#endif
    return [executor](const std::vector<at::Tensor>& inputs) {
      return call_py_executor(*executor, inputs);
    };
  });
}

// A module whose forward is `graph` (its first input becomes the module): how export makes
// a file of an optimized graph. Python's bindings add no method made from a graph.
torch::jit::Module module_from_graph(const std::string& name,
                                     const std::shared_ptr<torch::jit::Graph>& graph) {
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module module(c10::QualifiedName(name), unit, /*shouldMangle=*/true);
  module.register_attribute("training", c10::BoolType::get(), false);
  graph->inputs().at(0)->setType(module.type());
  auto* forward = unit->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), graph->copy());
  module.type()->addMethod(forward);
  return module;
}

// Every node of a block and of the blocks nested in it, in order. The passes walk whole
// graphs dozens of times per pipeline run; walked in Python, T5's walks took 0.37 s.
py::list all_nodes(torch::jit::Block* block) {
  py::list nodes;
  auto walk = [&nodes](auto& self, torch::jit::Block* b) -> void {
    for (auto* node : b->nodes()) {
      nodes.append(py::cast(node, py::return_value_policy::reference));
      for (auto* inner : node->blocks()) self(self, inner);
    }
  };
  walk(walk, block);
  return nodes;
}

// Whether this extension uses the process's shared libstdc++. A copy linked in
// statically (a toolchain's default; CMakeLists.txt links the shared one by path)
// has locale facets that do not match the shared one torch loaded: writing a number
// to a stream then crashes (the cuDNN frontend's plan reader did, on an H100).
bool shared_libstdcxx() {
  Dl_info info{};
  const auto classic = &std::locale::classic;
  if (!dladdr(reinterpret_cast<void*>(classic), &info) || !info.dli_fname) return false;
  return std::string(info.dli_fname).find("libstdc++") != std::string::npos;
}

}  // namespace
}  // namespace graphfuse

PYBIND11_MODULE(_C, m) {
  using namespace graphfuse;
  // Before anything calls oneDNN: find torch's copy (onednn/api.cpp).
  onednn::availability();
  m.doc() = "torch_graphfuse mechanism: pass hook, oneDNN Graph bindings, kernel stats";
  m.def("_set_pipeline", [](py::object fn) { pipeline() = std::move(fn); });
  m.def("_set_enabled", [](bool on) { g_enabled = on; });
  m.def("_set_profiled_kinds", &set_profiled_kinds,
        "the ops whose inputs the profiling executor records types for");
  m.def("_is_enabled", [] { return g_enabled.load(); });
  m.def("_module_from_graph", &module_from_graph,
        "a ScriptModule whose forward is the graph (its first input is the module)");
  m.def("_all_nodes", &all_nodes, "every node of a block and of its nested blocks, in order");
  m.def("_uses_shared_libstdcxx", &shared_libstdcxx,
        "whether this extension runs on the process's shared libstdc++");
  m.def("_set_group_executor_factory", &set_executor_factory,
        "factory(backend, desc) -> executor(list[Tensor]) -> list[Tensor], for groups of a "
        "backend other than the built-in oneDNN kernel's");
#ifdef GRAPHFUSE_CUDNN_NATIVE
  cudnn::bind(m);
#endif
  m.def("_partition", &partition, "oneDNN's partitions of a backend description");
  m.def("_time_partition", [](const std::string& text, const std::vector<at::Tensor>& inputs,
                              int64_t runs) {
    std::string why;
    std::optional<std::vector<double>> seconds;
    {
      py::gil_scoped_release no_gil;
      seconds = time_partition(text, inputs, runs, why);
    }
    return py::make_tuple(seconds ? py::cast(*seconds) : py::none(), why);
  }, "(seconds of each of `runs` executions, or None; why not) of a description's partition "
     "on these inputs");
  m.def("_prepare_partitions", &prepare,
        "partition fusion groups in one oneDNN call; a ticket per group (-1: none)");
  m.def("_kernel_stats", [] {
    const auto& c = counters();
    py::dict d;
#define GRAPHFUSE_STAT(name, kind, doc) d[#name] = c.name.load();
    GRAPHFUSE_KERNEL_STATS(GRAPHFUSE_STAT)
#undef GRAPHFUSE_STAT
    return d;
  });
  m.def("_group_schema", [] {
    py::dict attributes;
#define GRAPHFUSE_GROUP_ATTR(symbol, name, doc) attributes[#symbol] = name;
    GRAPHFUSE_GROUP_ATTRS(GRAPHFUSE_GROUP_ATTR)
#undef GRAPHFUSE_GROUP_ATTR
    return py::make_tuple(kGroupKind, kAllFinite, kSoftmaxFlushed, kOneDnnBackend,
                          kConstantBackend, attributes);
  }, "the FusionGroup node's kind, the finite check's op, the flushed softmax's op, the "
     "built-in kernels' backends (oneDNN, size constants) and {field: attribute name}");
  m.def("_kernel_stat_docs", [] {
    py::dict d;
#define GRAPHFUSE_STAT(name, kind, doc) d[#name] = doc;
    GRAPHFUSE_KERNEL_STATS(GRAPHFUSE_STAT)
#undef GRAPHFUSE_STAT
    return d;
  });
  m.def("_unfused_specs", [](int64_t report) {
    py::list out;
    for (const auto& u : unfused_specs(report)) out.append(py::make_tuple(u.group, u.why));
    return out;
  }, "(group label, why) of the groups of a report that ran an input spec unfused");
  m.def("_memory_budget", [] {
    const auto& b = memory_budget();
    py::dict d;
    d["specs_per_group"] = b.specs_per_group;
    d["weight_cache_bytes"] = b.weight_cache_bytes;
    d["pool_idle_bytes"] = b.pool_idle_bytes;
    d["compile_at"] = b.compile_at;
    return d;
  });
  m.def("_reset_kernel_stats", &reset_kernel_stats);
  m.def("_release_buffers", &release_idle_buffers,
        "free the output buffers kept for reuse; the bytes released");
  m.def("_onednn", [] {
    const auto& a = onednn::availability();
    py::dict d;
    d["ok"] = a.ok;
    d["version"] = a.version;
    d["hash"] = a.hash;
    d["library"] = a.library;
    d["problem"] = a.problem;
    d["resolved"] = a.resolved;
    d["listed"] = a.listed;
    d["resolve_ms"] = a.resolve_ms;
    d["cpu_isa"] = onednn::effective_cpu_isa();
    return d;
  }, "torch's oneDNN as the plugin found it: version, library, what is missing");
}
