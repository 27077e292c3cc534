// The kernel of a size-constant group (torch_graphfuse/backends/constant): the
// values of its nodes at the profiled sizes of the tensors whose sizes they
// read, computed when the graph was built, are its last inputs. While the guard
// holds (those tensors' exact types) they are its outputs; otherwise its nodes run.
#include <ATen/record_function.h>

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
        sources_(std::stoul(node->s(attr::desc))) {
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

 private:
  const size_t n_inputs_;
  const size_t sources_;
};

}  // namespace

torch::jit::Operation constant_group(const Node* node) {
  auto kernel = std::make_shared<ConstantKernel>(node);
  return [kernel](Stack& stack) { kernel->run(stack); };
}

}  // namespace graphfuse
