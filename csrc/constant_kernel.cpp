// The kernel of a size-constant group (torch_graphfuse/backends/constant): the
// values of its nodes at the profiled sizes of the tensors whose sizes they
// read, computed when the graph was built, are its last inputs. While the guard
// holds (those tensors' exact types) they are its outputs. At other sizes its nodes
// run once per spec, and their values serve later calls of that spec: they depend on
// those sizes alone.
#include <ATen/record_function.h>

#include <list>
#include <map>
#include <mutex>
#include <string>

#include "group.h"
#include "kernel_stats.h"
#include "memory_budget.h"

namespace graphfuse {
namespace {

using torch::jit::Stack;

class ConstantKernel : public GroupBase {
 public:
  explicit ConstantKernel(const GroupState& state)
      : GroupBase(state, true),
        n_inputs_(state.inputs - finite_flags_),
        sources_(std::stoul(state.desc)),
        outputs_(state.outputs) {
    TORCH_CHECK(sources_ <= n_inputs_ && n_inputs_ - sources_ == state.outputs,
                "graphfuse::FusionGroup: a size-constant group takes one value per output "
                "after its ",
                sources_, " sources");
  }

  void run(Stack& stack) override {
    RECORD_FUNCTION(name_, c10::ArrayRef<const c10::IValue>{});
    if (!admitted(stack, n_inputs_)) return;
    auto inputs = torch::jit::last(stack, n_inputs_);
    std::vector<c10::IValue> values(inputs.begin() + static_cast<std::ptrdiff_t>(sources_),
                                    inputs.end());
    torch::jit::drop(stack, n_inputs_);
    ++counters().fused_runs;
    for (auto& v : values) stack.push_back(std::move(v));
  }

 protected:
  // Not fused again: the nodes' values at a new spec cost one unfused run (positions, masks),
  // kept for the next calls of that spec.
  void run_at_new_spec(Stack& stack, size_t n) override {
    auto key = spec_of(torch::jit::last(stack, n).slice(0, sources_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = specs_.find(key);
      if (found != specs_.end()) {
        order_.splice(order_.begin(), order_, found->second.at);
        torch::jit::drop(stack, n);
        ++counters().fused_runs;
        for (const auto& v : found->second.values) stack.push_back(v);
        return;
      }
    }
    ++counters().fallbacks;
    run_fallback(stack);
    if (saved_) return;  // declined: the saved code computes the values
    auto outputs = torch::jit::last(stack, outputs_).vec();
    size_t bytes = 0;
    for (const auto& v : outputs)
      if (v.isTensor()) bytes += v.toTensor().nbytes();
    std::lock_guard<std::mutex> lock(mu_);
    if (specs_.count(key) || bytes > kBytes) return;
    order_.push_front(key);
    specs_.emplace(std::move(key), Kept{std::move(outputs), bytes, order_.begin()});
    bytes_ += bytes;
    // Least recently used first: a stream of new sizes keeps the sizes it repeats, as many
    // as a oneDNN group keeps compiled. Bytes bound it too: T5's relative position bias is
    // 8 MB a length at 512 tokens. With 32 MB a group, T5's 14 groups let its 120-request
    // stream peak at 1,650 MB, against 1,374 MB with 8 (frozen TorchScript: 731), where
    // computing the values again costs T5 3% of a call at 300-500 tokens.
    while (specs_.size() > memory_budget().specs_per_group || bytes_ > kBytes) {
      auto oldest = specs_.find(order_.back());
      bytes_ -= oldest->second.bytes;
      specs_.erase(oldest);
      order_.pop_back();
    }
  }

 private:
  static constexpr size_t kBytes = size_t{8} << 20;  // per group
  using Key = std::vector<int64_t>;
  struct Kept {
    std::vector<c10::IValue> values;
    size_t bytes;
    std::list<Key>::iterator at;  // in order_
  };
  const size_t n_inputs_;
  const size_t sources_;
  const size_t outputs_;
  std::mutex mu_;
  std::list<Key> order_;  // most recently used first
  std::map<Key, Kept> specs_;
  size_t bytes_ = 0;
};

}  // namespace

std::shared_ptr<GroupBase> constant_group(const GroupState& state) {
  return std::make_shared<ConstantKernel>(state);
}

}  // namespace graphfuse
