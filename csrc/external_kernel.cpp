#include "external_kernel.h"

#include <ATen/record_function.h>
#include <torch/csrc/jit/jit_log.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "group.h"
#include "kernel_stats.h"

namespace graphfuse {
namespace {

using torch::jit::Stack;

GroupExecutorFactory& executor_factory() {
  static GroupExecutorFactory factory;
  return factory;
}

// A fusion group of a backend whose compile/execute live outside C++
// (cuDNN: backends/cudnn/runtime.py). Its executor is made once, from the
// group's backend and description, and given the inputs per run; its outputs
// are laid over the node's profiled sizes, strides and dtypes (the description
// may view a port differently: a linear's batch dims flattened into matmul
// rows). Any failure runs the unfused subgraph, with one warning; a run the
// executor declines runs it without one.
class ExternalKernel : public GroupBase {
 public:
  explicit ExternalKernel(const GroupState& state)
      : GroupBase(state, true), backend_(state.backend), desc_(state.desc),
        // The inputs assumed finite come as tensors where the executor checks them,
        // else as all_finite's flags, which GroupBase takes.
        finite_tensors_(state.finite_by_executor ? std::exchange(finite_flags_, 0) : 0),
        n_inputs_(state.inputs - finite_tensors_ - finite_flags_) {
    const auto& types = state.output_types;
    TORCH_CHECK(types.size() == state.outputs,
                "graphfuse::FusionGroup: one output type per output");
    for (const auto& out : types) {
      const auto type = out->cast<c10::TensorType>();
      auto sizes = type ? type->sizes().concrete_sizes() : std::nullopt;
      auto strides = type ? type->strides().concrete_sizes() : std::nullopt;
      TORCH_CHECK(sizes && strides, "graphfuse::FusionGroup: an external backend's output ",
                  "has no profiled sizes and strides");
      TORCH_CHECK(type->scalarType(), "graphfuse::FusionGroup: an external backend's output ",
                  "has no profiled dtype");
      out_sizes_.push_back(*sizes);
      out_strides_.push_back(*strides);
      out_dtypes_.push_back(*type->scalarType());
    }
  }

  void run(Stack& stack) override {
    RECORD_FUNCTION(name_, c10::ArrayRef<const c10::IValue>{});
    std::vector<at::Tensor> assumed_finite;
    assumed_finite.reserve(finite_tensors_);
    for (auto& iv : torch::jit::last(stack, finite_tensors_))
      assumed_finite.push_back(iv.toTensor());
    torch::jit::drop(stack, finite_tensors_);
    if (!admitted(stack, n_inputs_)) return;
    std::vector<at::Tensor> outputs;
    try {
      std::call_once(made_, [&] {
        TORCH_CHECK(executor_factory(), "no executor is registered for this backend");
        executor_ = executor_factory()(backend_, desc_);
      });
      TORCH_CHECK(executor_, "the group's executor could not be made");
      std::vector<at::Tensor> inputs;
      inputs.reserve(n_inputs_ + finite_tensors_);
      for (auto& iv : torch::jit::last(stack, n_inputs_)) inputs.push_back(iv.toTensor());
      inputs.insert(inputs.end(), assumed_finite.begin(), assumed_finite.end());
      outputs = executor_(inputs);
      // Only a group given inputs to check may be declined.
      TORCH_CHECK((outputs.empty() && finite_tensors_ > 0) || outputs.size() == out_sizes_.size(),
                  "the executor returned ", outputs.size(), " outputs for ", out_sizes_.size());
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (outputs[i].sizes() != c10::IntArrayRef(out_sizes_[i]) ||
            outputs[i].strides() != c10::IntArrayRef(out_strides_[i]))
          outputs[i] = outputs[i].as_strided(out_sizes_[i], out_strides_[i],
                                             outputs[i].storage_offset());
        // A backend may compute an output wider than eager's (cuDNN writes
        // reductions in float): rounded once, as eager rounds its result.
        if (outputs[i].scalar_type() != out_dtypes_[i])
          outputs[i] = outputs[i].to(out_dtypes_[i]);
      }
    } catch (const std::exception& e) {
      GRAPH_DEBUG(name_, ": running unfused: ", e.what());
      if (!warned_.exchange(true))
        TORCH_WARN("torch_graphfuse: a fusion group runs unfused: ", e.what());
      ++counters().fallbacks;
      return run_fallback(stack);
    }
    if (outputs.empty()) {  // declined: an input assumed finite is not
      ++counters().nonfinite_fallbacks;
      ++counters().fallbacks;
      return run_fallback(stack);
    }
    torch::jit::drop(stack, n_inputs_);
    ++counters().fused_runs;
    for (auto& t : outputs) stack.emplace_back(std::move(t));
  }

 private:
  const std::string backend_;
  const std::string desc_;
  const size_t finite_tensors_;  // last inputs: the graph inputs assumed finite
  const size_t n_inputs_;
  std::vector<std::vector<int64_t>> out_sizes_, out_strides_;
  std::vector<c10::ScalarType> out_dtypes_;
  std::once_flag made_;
  GroupExecutor executor_;
  std::atomic<bool> warned_{false};
};

}  // namespace

void set_group_executor_factory(GroupExecutorFactory factory) {
  executor_factory() = std::move(factory);
}

std::shared_ptr<GroupBase> external_group(const GroupState& state) {
  return std::make_shared<ExternalKernel>(state);
}

}  // namespace graphfuse
