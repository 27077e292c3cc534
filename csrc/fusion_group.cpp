// The graphfuse::FusionGroup operator: each node gets the kernel of its
// backend (onednn/onednn_kernel.cpp, constant_kernel.cpp, external_kernel.cpp)
// over what they share here: the guard, the finite flags and the unfused
// fallback. Also
// graphfuse::all_finite, the check finite_guard inserts.
#include "group.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/softmax.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "denormals.h"
#include "kernel_stats.h"
#include "memory_budget.h"

namespace graphfuse {
namespace {

using torch::jit::Node;
using torch::jit::Stack;

// Empty when each guarded input still has the dtype, device and rank the
// group was built for (each size the type gives, and strides where
// `exact_strides`); else the first difference, and the group runs unfused.
std::string guard_refusal(const std::vector<int64_t>& guarded,
                          const std::vector<c10::TypePtr>& types, const torch::jit::Stack& stack,
                          size_t n, bool exact_strides) {
  auto inputs = torch::jit::last(stack, n);
  for (size_t k = 0; k < guarded.size(); ++k) {
    const auto& expected = types[k]->expectRef<c10::TensorType>();
    const auto& iv = inputs[guarded[k]];
    auto input = [&] { return "input " + std::to_string(guarded[k]) + " "; };
    if (!iv.isTensor() || !iv.toTensor().defined()) return input() + "is not a tensor";
    const auto& t = iv.toTensor();
    // A property the profiled type left unset is not checked.
    if (auto dtype = expected.scalarType(); dtype && t.scalar_type() != *dtype)
      return input() + "has dtype " + std::string(c10::toString(t.scalar_type()));
    if (auto device = expected.device(); device && t.device() != *device)
      return input() + "is on " + t.device().str();
    if (auto dim = expected.dim(); dim && t.dim() != static_cast<int64_t>(*dim))
      return input() + "has " + std::to_string(t.dim()) + " dims";
    const auto& sizes = expected.sizes();
    for (size_t d = 0; d < sizes.size().value_or(0); ++d)
      if (auto size = sizes[d]; size && *size != t.size(static_cast<int64_t>(d)))
        return input() + "has size " + std::to_string(t.size(static_cast<int64_t>(d))) +
               " in dim " + std::to_string(d) + ", profiled " + std::to_string(*size);
    if (auto strides = expected.strides().concrete_sizes();
        exact_strides && strides && *strides != t.strides().vec())
      return input() + "has other strides than profiled";
    if (t.requires_grad() && at::GradMode::is_enabled()) return input() + "requires grad";
  }
  return {};
}

// Whether any of the n values holds NaN or inf (all exponent bits set): a loop
// without branches, which the compiler vectorizes.
template <typename Bits>
bool any_special(const Bits* data, int64_t n, Bits exponent) {
  bool special = false;
  for (int64_t i = 0; i < n; ++i) special |= (data[i] & exponent) == exponent;
  return special;
}

// Whether every element of `t` is finite: a scan of the exponent bits,
// parallel over chunks, that stops at the first chunk holding NaN or inf.
template <typename Bits>
bool finite_bits(const Bits* data, int64_t n, Bits exponent) {
  std::atomic<bool> finite{true};
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t start = begin; start < end && finite.load(std::memory_order_relaxed);
         start += 1 << 14)
      if (any_special(data + start, std::min(end - start, int64_t{1} << 14), exponent))
        finite = false;
  });
  return finite.load();
}

// The same scan over each row of a tensor whose last dim is contiguous, at the
// offsets its outer dims give: a slice of a wider result (GPT-2's query, key and
// value, split from one projection), which ATen's isfinite would check in four
// ops and two allocations (36 checks, about 1 ms of a 19 ms call at 32 tokens).
template <typename Bits>
bool finite_rows(const at::Tensor& t, Bits exponent) {
  const auto* base = static_cast<const Bits*>(t.data_ptr());
  const int64_t row = t.size(-1), rows = t.numel() / row, outer = t.dim() - 1;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  std::atomic<bool> finite{true};
  at::parallel_for(0, rows, std::max<int64_t>(1, (1 << 16) / row), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end && finite.load(std::memory_order_relaxed); ++r) {
      int64_t offset = 0;
      for (int64_t d = outer - 1, rest = r; d >= 0; --d) {
        offset += (rest % sizes[d]) * strides[d];
        rest /= sizes[d];
      }
      if (any_special(base + offset, row, exponent)) finite = false;
    }
  });
  return finite.load();
}

template <typename Bits>
bool finite_scan(const at::Tensor& t, Bits exponent) {
  // Dense in some order: every element is in the storage span once.
  if (t.is_non_overlapping_and_dense())
    return finite_bits(static_cast<const Bits*>(t.data_ptr()), t.numel(), exponent);
  if (t.dim() > 0 && t.stride(-1) == 1 && t.numel() > 0) return finite_rows(t, exponent);
  return at::isfinite(t).all().item<bool>();
}

bool all_finite(const at::Tensor& t) {
  if (!t.is_floating_point()) return true;
  if (t.device().type() != c10::DeviceType::CPU) return at::isfinite(t).all().item<bool>();
  switch (t.scalar_type()) {
    case c10::ScalarType::Float:
      return finite_scan<uint32_t>(t, 0x7f800000u);
    case c10::ScalarType::BFloat16:
      return finite_scan<uint16_t>(t, 0x7f80);
    case c10::ScalarType::Half:
      return finite_scan<uint16_t>(t, 0x7c00);
    case c10::ScalarType::Double:
      return finite_scan<uint64_t>(t, 0x7ff0000000000000ull);
    default:
      return at::isfinite(t).all().item<bool>();
  }
}

torch::jit::RegisterOperators register_ops({
    torch::jit::Operator(
        std::string(kAllFinite) + "(Tensor[] tensors) -> bool",
        [](Stack& stack) {
          auto tensors = torch::jit::pop(stack).toTensorVector();
          bool finite = std::all_of(tensors.begin(), tensors.end(),
                                    [](const at::Tensor& t) { return all_finite(t); });
          torch::jit::push(stack, finite);
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    // Its readers take a denormal operand as zero, so flushing its results changes
    // nothing they compute, and ATen's kernel then takes no assist per denormal.
    torch::jit::Operator(
        std::string(kSoftmaxFlushed) + "(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
        [](Stack& stack) {
          auto dtype = torch::jit::pop(stack).toOptional<c10::ScalarType>();
          auto dim = torch::jit::pop(stack).toInt();
          auto self = torch::jit::pop(stack).toTensor();
          at::Tensor out;
          {
            DenormalsFlushed flushed;
            out = at::softmax(self, dim, dtype);
          }
          if (DenormalsFlushed::supported()) ++counters().flushed_runs;
          torch::jit::push(stack, std::move(out));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        c10::Symbol::fromQualString(kGroupKind),
        [](const Node* node) -> torch::jit::Operation {
          auto group = make_group(GroupState::of(node));
          return [group](Stack& stack) { group->run(stack); };
        },
        c10::AliasAnalysisKind::PURE_FUNCTION),
});

}  // namespace

GroupState GroupState::of(const Node* node) {
  GroupState s;
  s.subgraph = node->g(attr::subgraph);
  if (node->hasAttribute(attr::backend)) s.backend = node->s(attr::backend);
  if (node->hasAttribute(attr::desc)) s.desc = node->s(attr::desc);
  // The profiler's name for the group, e.g. "graphfuse::FusionGroup_3 [linear, gelu]".
  s.label = node->hasAttribute(attr::label)
                ? node->s(attr::label)
                : std::string(kGroupKind) + "_" + std::to_string(reinterpret_cast<uintptr_t>(node));
  if (node->hasAttribute(attr::report)) s.report = node->i(attr::report);
  s.respecialized = node->hasAttribute(attr::respecialized) && node->i(attr::respecialized) != 0;
  s.flush_denormals = node->hasAttribute(attr::flush_denormals) && node->i(attr::flush_denormals) != 0;
  s.finite_by_executor = node->hasAttribute(attr::finite_by_executor);
  if (node->hasAttribute(attr::shape_inputs)) s.shape_inputs = node->i(attr::shape_inputs);
  if (node->hasAttribute(attr::prepared)) s.prepared = node->i(attr::prepared);
  s.inputs = node->inputs().size();
  s.outputs = node->outputs().size();
  if (node->hasAttribute(attr::finite_inputs)) s.finite_inputs = node->is(attr::finite_inputs).size();
  if (node->hasAttribute(attr::guarded)) {
    s.guarded = node->is(attr::guarded);
    s.types = node->tys(attr::types);
  }
  if (node->hasAttribute(attr::any_layout)) s.any_layout = node->is(attr::any_layout);
  if (node->hasAttribute(attr::free_layout)) s.free_layout = node->is(attr::free_layout);
  if (node->hasAttribute(attr::output_types)) s.output_types = node->tys(attr::output_types);
  if (node->hasAttribute(attr::head)) s.head = node->g(attr::head);
  if (node->hasAttribute(attr::tail)) s.tail = node->g(attr::tail);
  for (const auto* input : node->inputs())
    s.constant_inputs.push_back(input->node()->kind() == c10::prim::Constant
                                    ? torch::jit::toIValue(input).value_or(c10::IValue())
                                    : c10::IValue());
  return s;
}

std::shared_ptr<GroupBase> make_group(const GroupState& state) {
  if (state.backend == kOneDnnBackend) return onednn_group(state);
  if (state.backend == kConstantBackend) return constant_group(state);
  return external_group(state);
}

GroupBase::GroupBase(const GroupState& state, bool exact_strides)
    : subgraph_(state.subgraph),
      name_(state.label),
      report_(state.report),
      respecialized_(state.respecialized),
      saved_(state.saved),
      fallback_inputs_(state.subgraph ? state.subgraph->inputs().size()
                                       : state.inputs - state.finite_inputs),
      constant_inputs_(state.constant_inputs),
      exact_strides_(exact_strides) {
  TORCH_CHECK(state.subgraph || state.saved, "graphfuse::FusionGroup: no subgraph");
  constant_inputs_.resize(state.inputs);
  // A group whose mapping assumes graph inputs finite (see
  // fusion/finite_guard.py) takes graphfuse::all_finite's answer for each last
  // (with finite_by_executor, the inputs themselves: external_kernel.cpp).
  finite_flags_ = state.finite_inputs;
  guarded_ = state.guarded;
  guard_types_ = state.types;
  TORCH_CHECK(guarded_.size() == guard_types_.size(),
              "graphfuse::FusionGroup: one guard type per guarded input");
  // Made with the group, not at its first unfused run: made then, in the middle of a
  // request, its many small allocations stayed among ATen's activations and kept glibc
  // from reusing their memory (ViT's first batch size run unfused added 1 GB of RSS).
  if (subgraph_ && !saved_)
    fallback_ = std::make_unique<torch::jit::Code>(subgraph_->copy(), name_ + "_fallback");
}

bool GroupBase::admitted(Stack& stack, size_t n) {
  auto& stats = counters();
  if (finite_flags_ > 0) {
    bool finite = true;
    for (size_t k = 0; k < finite_flags_; ++k) {
      finite = finite && stack.back().toBool();
      stack.pop_back();
    }
    if (!finite) {
      ++stats.nonfinite_fallbacks;
      ++stats.fallbacks;
      run_fallback(stack);
      return false;
    }
  }
  if (!guard_refusal(guarded_, guard_types_, stack, n, exact_strides_).empty()) {
    run_at_new_spec(stack, n);
    return false;
  }
  return true;
}

namespace {

thread_local bool t_respecializing = false;
thread_local bool t_declined = false;

// Set while a respecialized subgraph runs: its first runs profile it, the next hands
// it to the pass pipeline (csrc/module.cpp asks respecializing()).
struct Respecializing {
  const bool outer = t_respecializing;
  Respecializing() { t_respecializing = true; }
  ~Respecializing() { t_respecializing = outer; }
  Respecializing(const Respecializing&) = delete;
  Respecializing& operator=(const Respecializing&) = delete;
};

}  // namespace

std::vector<int64_t> spec_of(c10::ArrayRef<c10::IValue> values) {
  std::vector<int64_t> spec;
  for (const auto& iv : values) {
    if (!iv.isTensor() || !iv.toTensor().defined()) {
      spec.push_back(-1);
      continue;
    }
    const auto& t = iv.toTensor();
    spec.push_back(static_cast<int64_t>(t.scalar_type()));
    spec.push_back(static_cast<int64_t>(t.requires_grad() && at::GradMode::is_enabled()));
    spec.push_back(t.dim());
    spec.insert(spec.end(), t.sizes().begin(), t.sizes().end());
    spec.insert(spec.end(), t.strides().begin(), t.strides().end());
  }
  return spec;
}

std::vector<int64_t> sizes_key(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> key;
  for (const auto& t : tensors) {
    key.push_back(t.dim());
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  }
  return key;
}

bool respecializing() { return t_respecializing; }

bool take_declined() { return std::exchange(t_declined, false); }

// A spec the guard refused is fused again while the weights that such groups bind are
// within the weight budget, and for at most specs_per_group specs per group: each holds
// partitions, and reordered weights, of its own. The model's own weights do not count:
// a model larger than the budget is fused again too.
void GroupBase::run_respecialized(Stack& stack, size_t n) {
  auto& stats = counters();
  auto unfused = [&] {
    ++stats.fallbacks;
    run_fallback(stack);
  };
  if (respecialized_ || saved_ || n != subgraph_->inputs().size()) return unfused();
  torch::jit::GraphFunction* function = nullptr;
  {
    std::lock_guard<std::mutex> lock(specs_mu_);
    auto key = spec_of(torch::jit::last(stack, n));
    auto found = specs_.find(key);
    const auto& budget = memory_budget();
    bool within = specs_.size() < budget.specs_per_group &&
                  stats.respecialized_weight_bytes.load() <= weight_budget();
    if (found == specs_.end() && !within) {
      if (!logged_limit_)
        GRAPH_UPDATE(name_, ": the guard refused a new input spec past the limits; it runs ",
                     "unfused (logged once per group): ", specs_.size(),
                     " specs fused again already (TORCH_GRAPHFUSE_SPECS_PER_GROUP), ",
                     stats.respecialized_weight_bytes.load() >> 20,
                     " MB of their weights (TORCH_GRAPHFUSE_WEIGHT_CACHE_MB)");
      logged_limit_ = true;
    } else if (found == specs_.end()) {
      GRAPH_UPDATE(name_, ": the guard refused an input spec (",
                   guard_refusal(guarded_, guard_types_, stack, n, exact_strides_),
                   "); its subgraph is fused again for it after a profiling run (spec ",
                   specs_.size() + 1, " of at most ", budget.specs_per_group, ")");
      // The constant inputs (frozen weights) become constants again, as the pipeline
      // first saw them: a weight the backend may prepack, a BatchNorm it may fold.
      auto graph = subgraph_->copy();
      {
        torch::jit::WithInsertPoint at_start(graph->block()->nodes().front());
        for (size_t i = 0; i < constant_inputs_.size() && i < n; ++i)
          if (!constant_inputs_[i].isNone())
            graph->inputs()[i]->replaceAllUsesWith(graph->insertConstant(constant_inputs_[i]));
      }
      // A function returns one value: the outputs as a tuple, unpacked after the call.
      auto* tuple = graph->appendNode(graph->createTuple(graph->outputs()));
      while (!graph->outputs().empty()) graph->eraseOutput(0);
      graph->registerOutput(tuple->output());
      found = specs_
                  .emplace(std::move(key), std::make_unique<torch::jit::GraphFunction>(
                                               name_ + "_respecialized", graph, nullptr))
                  .first;
    }
    if (found != specs_.end()) function = found->second.get();
  }
  if (function == nullptr) return unfused();
  ++stats.respecialized_runs;
  RECORD_FUNCTION("graphfuse::respecialized", c10::ArrayRef<const c10::IValue>{});
  to_eager_layouts(stack);
  {
    Respecializing scope;
    function->run(stack);
  }
  auto outputs = torch::jit::pop(stack).toTupleRef().elements().vec();
  for (auto& output : outputs) stack.push_back(std::move(output));
}

ViewGraph::ViewGraph(const std::shared_ptr<torch::jit::Graph>& graph, const char* name)
    : inputs_(graph->inputs().size()), outputs_(graph->outputs().size()), code_(graph->copy(), name) {}

std::vector<at::Tensor> ViewGraph::apply(const std::vector<at::Tensor>& bases,
                                         const std::vector<at::Tensor>& shape, Plan& plan) const {
  std::vector<at::Tensor> outputs;
  outputs.reserve(outputs_);
  if (plan.known && !plan.per_call) {
    for (const auto& view : plan.views) {
      const auto& base = bases[view.base];
      outputs.push_back(view.whole ? base
                                   : base.as_strided(view.sizes, view.strides,
                                                     base.storage_offset() + view.offset));
    }
    return outputs;
  }
  Stack stack(bases.begin(), bases.end());
  stack.insert(stack.end(), shape.begin(), shape.end());
  torch::jit::InterpreterState(code_).run(stack);
  ++counters().view_graph_runs;
  for (auto& value : stack) outputs.push_back(std::move(value).toTensor());
  if (plan.known) return outputs;
  plan.known = true;
  for (const auto& out : outputs) {
    auto base = std::find_if(bases.begin(), bases.end(), [&](const at::Tensor& b) {
      return b.defined() && b.scalar_type() == out.scalar_type() &&
             b.storage().is_alias_of(out.storage());
    });
    if (base == bases.end()) {
      plan.per_call = true;
      plan.views.clear();
      break;
    }
    plan.views.push_back({static_cast<size_t>(base - bases.begin()),
                          out.unsafeGetTensorImpl() == base->unsafeGetTensorImpl(),
                          out.sizes().vec(), out.strides().vec(),
                          out.storage_offset() - base->storage_offset()});
  }
  return outputs;
}

std::vector<at::Tensor> ViewGraph::apply(const std::vector<at::Tensor>& bases,
                                         const std::vector<at::Tensor>& shape) {
  std::vector<int64_t> spec;
  for (const auto& t : bases) {
    spec.push_back(static_cast<int64_t>(t.scalar_type()));
    spec.push_back(t.dim());
    spec.insert(spec.end(), t.sizes().begin(), t.sizes().end());
    spec.insert(spec.end(), t.strides().begin(), t.strides().end());
  }
  for (const auto& t : shape) {
    spec.push_back(t.dim());
    spec.insert(spec.end(), t.sizes().begin(), t.sizes().end());
  }
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A plan is a few ints per view: the bound only stops a stream of new sizes.
    if (plans_.size() >= 1024) plans_.clear();
    auto& slot = plans_[spec];
    if (!slot) slot = std::make_shared<Plan>();
    plan = slot;
    // The spec's first call makes its plan under the lock; later calls only read it.
    if (!plan->known) return apply(bases, shape, *plan);
  }
  return apply(bases, shape, *plan);
}

void GroupBase::run_fallback(Stack& stack) {
  if (saved_) {
    to_eager_layouts(stack);
    t_declined = true;
    return;
  }
  RECORD_FUNCTION("graphfuse::unfused", c10::ArrayRef<const c10::IValue>{});
  to_eager_layouts(stack);
  torch::jit::InterpreterState(*fallback_).run(stack);
}

}  // namespace graphfuse
