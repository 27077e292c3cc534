// A fusion group inside a saved model (torch_graphfuse.export): a TorchBind object that
// holds the group's state as strings, pickled into the file, and the op the saved code
// calls on it. oneDNN cannot serialize a compiled partition, so the state is the
// description, compiled again in the loading process on the first call of each spec.
// Whatever the kernel cannot take fused (a guard miss, a spec oneDNN refuses, a file made
// by another torch or oneDNN) is declined: the saved code then runs its own copy of the
// group's ops, the fallback torch_graphfuse.export writes beside each call.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/custom_class.h>
#include <torch/headeronly/version.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "group.h"
#include "kernel_stats.h"
#include "onednn/api.h"

namespace graphfuse {
namespace {

// The version of the state's format; a file of another one runs its fallback code.
constexpr int64_t kFormat = 1;

using State = c10::Dict<std::string, std::string>;

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

// TORCH_GRAPHFUSE_STRICT_LOAD=1: a saved group that cannot run fused here fails the
// load, instead of one warning and the fallback code.
bool strict_load() {
  const char* value = std::getenv("TORCH_GRAPHFUSE_STRICT_LOAD");
  return value && std::string(value) == "1";
}

const std::string& field(const State& state, const std::string& key) {
  auto found = state.find(key);
  TORCH_CHECK(found != state.end(), "the saved group has no '", key, "'");
  return found->value();
}

std::string field_or(const State& state, const std::string& key, const std::string& otherwise) {
  auto found = state.find(key);
  return found == state.end() ? otherwise : found->value();
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (text.back() == sep) parts.emplace_back();
  return parts;
}

int64_t integer(const std::string& text) {
  size_t used = 0;
  int64_t value = std::stoll(text, &used);
  TORCH_CHECK(used == text.size(), "'", text, "' is not an integer");
  return value;
}

std::vector<int64_t> integers(const std::string& text) {
  std::vector<int64_t> values;
  for (const auto& part : split(text, ' '))
    if (!part.empty()) values.push_back(integer(part));
  return values;
}

c10::ScalarType scalar_type(const std::string& name) {
  static const std::unordered_map<std::string, c10::ScalarType> by_name = [] {
    std::unordered_map<std::string, c10::ScalarType> names;
#define GRAPHFUSE_DTYPE(ctype, name) names[#name] = c10::ScalarType::name;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(GRAPHFUSE_DTYPE)
#undef GRAPHFUSE_DTYPE
    return names;
  }();
  auto found = by_name.find(name);
  TORCH_CHECK(found != by_name.end(), "unknown dtype '", name, "'");
  return found->second;
}

// "dtype|rank|sizes|strides": ? for what the profiled type left unknown, sizes and strides
// comma-separated (strides empty where unknown).
c10::TypePtr tensor_type(const std::string& text) {
  auto parts = split(text, '|');
  TORCH_CHECK(parts.size() == 4, "a guard type is 'dtype|rank|sizes|strides', not '", text, "'");
  std::optional<c10::ScalarType> dtype;
  if (parts[0] != "?") dtype = scalar_type(parts[0]);
  if (parts[1] == "?")
    return c10::TensorType::create(dtype, c10::Device(c10::kCPU), c10::SymbolicShape(),
                                   c10::VaryingShape<c10::Stride>(), std::nullopt);
  auto rank = static_cast<size_t>(integer(parts[1]));
  std::vector<std::optional<int64_t>> sizes;
  for (const auto& s : split(parts[2], ','))
    sizes.push_back(s == "?" ? std::nullopt : std::optional<int64_t>(integer(s)));
  TORCH_CHECK(sizes.size() == rank, "a guard type's sizes do not match its rank");
  c10::VaryingShape<c10::Stride> strides(rank);
  if (!parts[3].empty()) {
    std::vector<std::optional<c10::Stride>> given;
    for (const auto& s : split(parts[3], ','))
      given.emplace_back(c10::Stride(std::nullopt, std::nullopt, integer(s)));
    TORCH_CHECK(given.size() == rank, "a guard type's strides do not match its rank");
    strides = c10::VaryingShape<c10::Stride>(given);
  }
  return c10::TensorType::create(dtype, c10::Device(c10::kCPU), c10::SymbolicShape(sizes),
                                 strides, false);
}

std::shared_ptr<torch::jit::Graph> view_graph(const std::string& text) {
  if (text.empty()) return nullptr;
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(text, graph.get());
  return graph;
}

GroupState state_of(const State& saved) {
  GroupState s;
  s.saved = true;
  s.backend = field(saved, "backend");
  s.desc = field(saved, "desc");
  s.label = field(saved, "label");
  s.inputs = static_cast<size_t>(integer(field(saved, "inputs")));
  s.outputs = static_cast<size_t>(integer(field(saved, "outputs")));
  s.finite_inputs = static_cast<size_t>(integer(field_or(saved, "finite_inputs", "0")));
  s.shape_inputs = integer(field_or(saved, "shape_inputs", "0"));
  s.flush_denormals = field_or(saved, "flush_denormals", "0") == "1";
  s.guarded = integers(field_or(saved, "guarded", ""));
  for (const auto& t : split(field_or(saved, "types", ""), ';')) s.types.push_back(tensor_type(t));
  s.any_layout = integers(field_or(saved, "any_layout", ""));
  s.free_layout = integers(field_or(saved, "free_layout", ""));
  s.head = view_graph(field_or(saved, "head", ""));
  s.tail = view_graph(field_or(saved, "tail", ""));
  for (const auto& sizes : split(field_or(saved, "sizes", ""), ';'))
    s.warm_sizes.push_back(integers(sizes));
  return s;
}

// Why this process cannot run the file's group fused, or empty.
std::string mismatch(const State& saved) {
  if (field_or(saved, "format", "") != std::to_string(kFormat))
    return "it was saved in format " + field_or(saved, "format", "?") + ", this runtime reads " +
           std::to_string(kFormat);
  if (field_or(saved, "torch", "") != torch_version())
    return "it was saved by torch " + field_or(saved, "torch", "?") + ", this is torch " +
           torch_version();
  if (field_or(saved, "backend", "") != kOneDnnBackend &&
      field_or(saved, "backend", "") != kConstantBackend)
    return "its backend '" + field_or(saved, "backend", "?") + "' has no kernel in this runtime";
  if (field_or(saved, "backend", "") == kOneDnnBackend) {
    const auto& onednn = onednn::availability();
    if (!onednn.ok) return onednn.problem;
    if (field_or(saved, "onednn", "") != onednn.version ||
        field_or(saved, "onednn_hash", "") != onednn.hash)
      return "it was saved with oneDNN " + field_or(saved, "onednn", "?") + " (" +
             field_or(saved, "onednn_hash", "?") + "), this process has " + onednn.version +
             " (" + onednn.hash + ")";
    // A CPU with VNNI maps int8 products that one without it would saturate, and only a
    // CPU with bf16 instructions maps bf16 partitions (backends/onednn/rules.py).
    for (const auto& need : split(field_or(saved, "cpu_needs", ""), ' '))
      if (!need.empty() && !onednn::isa_has(need))
        return "its results rely on " + need + " instructions, which oneDNN's kernels lack "
               "on this CPU (dnnl_cpu_isa_t " + std::to_string(onednn::effective_cpu_isa()) +
               ")";
  }
  return "";
}

class SavedGroup : public torch::CustomClassHolder {
 public:
  explicit SavedGroup(State state) : state_(std::move(state)) {
    label_ = field_or(state_, "label", "graphfuse::SavedGroup");
    why_not_ = mismatch(state_);
    TORCH_CHECK(why_not_.empty() || !strict_load(), "torch_graphfuse: ", label_,
                " cannot run fused here: ", why_not_, " (TORCH_GRAPHFUSE_STRICT_LOAD=1)");
    if (!why_not_.empty()) warn();
  }

  const State& state() const { return state_; }

  // (ran fused, its outputs) or (false, the inputs in eager's layouts), which the saved
  // code's unfused ops then take.
  std::tuple<bool, std::vector<at::Tensor>> run(std::vector<at::Tensor> inputs,
                                                const c10::List<bool>& finite) {
    auto* group = kernel();
    if (group == nullptr) {
      ++counters().fallbacks;
      return {false, std::move(inputs)};
    }
    torch::jit::Stack stack;
    stack.reserve(inputs.size() + finite.size());
    for (auto& t : inputs) stack.emplace_back(std::move(t));
    for (bool f : finite) stack.emplace_back(f);
    group->run(stack);
    bool declined = take_declined();
    std::vector<at::Tensor> values;
    values.reserve(stack.size());
    for (auto& v : stack) values.push_back(std::move(v).toTensor());
    return {!declined, std::move(values)};
  }

  // The sizes of every spec compiled so far become the state's: a process that loads the
  // file compiles them on their first call.
  void remember_sizes() {
    auto* group = kernel();
    if (group == nullptr) return;
    std::string text;
    for (const auto& sizes : group->compiled_sizes()) {
      if (!text.empty()) text += ";";
      for (size_t i = 0; i < sizes.size(); ++i) text += (i ? " " : "") + std::to_string(sizes[i]);
    }
    state_.insert_or_assign("sizes", text);
  }

 private:
  // The kernel, made on the first call; none where the file cannot run fused here.
  GroupBase* kernel() {
    std::call_once(made_, [&] {
      if (!why_not_.empty()) return;
      try {
        group_ = make_group(state_of(state_));
      } catch (const std::exception& e) {
        why_not_ = e.what();
        TORCH_CHECK(!strict_load(), "torch_graphfuse: ", label_, " cannot run fused here: ",
                    why_not_, " (TORCH_GRAPHFUSE_STRICT_LOAD=1)");
        warn();
      }
    });
    return group_.get();
  }

  void warn() const {
    // Once per cause: a file's groups share it (another oneDNN), so one warning says it.
    static std::mutex mu;
    static std::set<std::string> warned;
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = warned.insert(why_not_).second;
    }
    if (first)
      TORCH_WARN("torch_graphfuse: a saved model runs its fallback code, unfused, because ",
                 label_, " cannot run fused here: ", why_not_);
    GRAPH_UPDATE(label_, ": runs its fallback code: ", why_not_);
  }

  State state_;
  std::string label_;
  std::string why_not_;
  std::once_flag made_;
  std::shared_ptr<GroupBase> group_;
};

c10::Dict<std::string, int64_t> kernel_stats() {
  c10::Dict<std::string, int64_t> stats;
  const auto& c = counters();
#define GRAPHFUSE_STAT(name, kind, doc) stats.insert(#name, static_cast<int64_t>(c.name.load()));
  GRAPHFUSE_KERNEL_STATS(GRAPHFUSE_STAT)
#undef GRAPHFUSE_STAT
  return stats;
}

// What a saved group records of the process that made it, beside its own state.
State saved_group_header() {
  State header;
  header.insert("format", std::to_string(kFormat));
  header.insert("torch", torch_version());
  const auto& onednn = onednn::availability();
  header.insert("onednn", onednn.version);
  header.insert("onednn_hash", onednn.hash);
  return header;
}

}  // namespace

TORCH_LIBRARY(graphfuse, m) {
  m.class_<SavedGroup>("SavedGroup")
      .def(torch::init<State>())
      .def("state", [](const c10::intrusive_ptr<SavedGroup>& self) { return self->state(); })
      .def("remember_sizes",
           [](const c10::intrusive_ptr<SavedGroup>& self) { self->remember_sizes(); })
      .def_pickle(
          [](const c10::intrusive_ptr<SavedGroup>& self) -> State { return self->state(); },
          [](State state) { return c10::make_intrusive<SavedGroup>(std::move(state)); });
  // Its outputs may be views of its inputs (a group's tail), and a declined run returns
  // the inputs themselves: conservative aliasing keeps the optimizer from reordering it.
  m.def(torch::schema("graphfuse::run_saved(__torch__.torch.classes.graphfuse.SavedGroup group, "
                      "Tensor[] inputs, bool[] finite) -> (bool, Tensor[])",
                      c10::AliasAnalysisKind::CONSERVATIVE),
        [](const c10::intrusive_ptr<SavedGroup>& group, std::vector<at::Tensor> inputs,
           c10::List<bool> finite) { return group->run(std::move(inputs), finite); });
  m.def("graphfuse::kernel_stats() -> Dict(str, int)", &kernel_stats);
  m.def("graphfuse::reset_kernel_stats() -> ()", [] { reset_kernel_stats(); });
  m.def("graphfuse::saved_group_header() -> Dict(str, str)", &saved_group_header);
}

}  // namespace graphfuse
