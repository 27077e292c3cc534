// What every fusion group's kernel shares, whatever its backend: the finite
// flags and type guard checked before running fused, and the unfused subgraph
// run otherwise.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "group_schema.h"

namespace graphfuse {

class GroupBase {
 public:
  // exact_strides: the backend reads inputs with the profiled strides only.
  GroupBase(const torch::jit::Node* node, bool exact_strides);

 protected:
  // Pops the finite flags and checks the guard over the `n` inputs; when
  // either fails, runs the unfused subgraph and returns false.
  bool admitted(torch::jit::Stack& stack, size_t n);
  void run_fallback(torch::jit::Stack& stack);

  const std::shared_ptr<torch::jit::Graph> subgraph_;
  const std::string name_;
  const int64_t report_;  // the pipeline run's report the group belongs to (-1: none)
  size_t finite_flags_ = 0;  // last inputs: whether each input assumed finite is

 private:
  const bool exact_strides_;
  std::vector<int64_t> guarded_;           // the inputs the guard checks (not the constants)
  std::vector<c10::TypePtr> guard_types_;  // what each guarded input must match
  std::once_flag fallback_once_;
  std::unique_ptr<torch::jit::Code> fallback_;
};

// The views a group outputs instead of its backend's results
// (fusion/view_tails.py): a graph from (the backend's outputs..., the shape
// inputs...) to the group's outputs, through view ops only. It runs in the
// interpreter once per input spec, which makes each result's strides over a
// backend output known: later calls of that spec make the same views with
// as_strided. A result that is no view of one (a reshape that had to copy)
// makes the spec run the graph on each call.
class ViewTail {
 public:
  explicit ViewTail(const std::shared_ptr<torch::jit::Graph>& graph);

  // One input spec's results, over that spec's backend outputs.
  struct Plan {
    struct View {
      size_t base;             // the backend output it views
      bool whole;              // that output itself
      std::vector<int64_t> sizes, strides;
      int64_t offset;          // storage offset past the base's
    };
    bool known = false;
    bool per_call = false;
    std::vector<View> views;
  };

  size_t inputs() const { return inputs_; }
  size_t outputs() const { return outputs_; }
  // The group's outputs. `shape`: the group's shape inputs.
  std::vector<at::Tensor> apply(std::vector<at::Tensor> results, const std::vector<at::Tensor>& shape,
                                Plan& plan) const;

 private:
  const size_t inputs_, outputs_;
  torch::jit::Code code_;
};

inline size_t us_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

// The kernel of each backend, as the operation of its fusion group's node.
torch::jit::Operation onednn_group(const torch::jit::Node* node);
torch::jit::Operation external_group(const torch::jit::Node* node);

}  // namespace graphfuse
