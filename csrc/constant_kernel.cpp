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

namespace graphfuse {
namespace {

using torch::jit::Node;
using torch::jit::Stack;

class ConstantKernel : public GroupBase {
 public:
  explicit ConstantKernel(const Node* node)
      : GroupBase(node, true),
        n_inputs_(node->inputs().size() - finite_flags_),
        sources_(std::stoul(node->s(attr::desc))),
        outputs_(node->outputs().size()) {
    TORCH_CHECK(sources_ <= n_inputs_ && n_inputs_ - sources_ == node->outputs().size(),
                "graphfuse::FusionGroup: a size-constant group takes one value per output "
                "after its ",
                sources_, " sources");
  }

  void run(Stack& stack) {
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
        order_.splice(order_.begin(), order_, found->second.second);
        torch::jit::drop(stack, n);
        ++counters().fused_runs;
        for (const auto& v : found->second.first) stack.push_back(v);
        return;
      }
    }
    ++counters().fallbacks;
    run_fallback(stack);
    auto outputs = torch::jit::last(stack, outputs_).vec();
    std::lock_guard<std::mutex> lock(mu_);
    if (specs_.count(key)) return;
    order_.push_front(key);
    specs_.emplace(std::move(key), std::make_pair(std::move(outputs), order_.begin()));
    // Least recently used first: a stream of new sizes keeps the sizes it repeats.
    while (specs_.size() > kSpecs) {
      specs_.erase(order_.back());
      order_.pop_back();
    }
  }

 private:
  static constexpr size_t kSpecs = 256;
  const size_t n_inputs_;
  const size_t sources_;
  const size_t outputs_;
  std::mutex mu_;
  std::list<std::vector<int64_t>> order_;
  std::map<std::vector<int64_t>,
           std::pair<std::vector<c10::IValue>, std::list<std::vector<int64_t>>::iterator>>
      specs_;
};

}  // namespace

torch::jit::Operation constant_group(const Node* node) {
  auto kernel = std::make_shared<ConstantKernel>(node);
  return [kernel](Stack& stack) { kernel->run(stack); };
}

}  // namespace graphfuse
