// What every fusion group's kernel shares, whatever its backend: the finite
// flags and type guard checked before running fused, and the unfused subgraph
// run otherwise.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "group_schema.h"

namespace graphfuse {

// What a group's kernel is made from: a FusionGroup node's attributes (of), or a saved
// model's group (saved_group.cpp), which has no subgraph: the saved code around it holds
// the unfused ops, and a run the kernel cannot take fused is declined to them.
struct GroupState {
  std::string backend = kOneDnnBackend;
  std::string desc, label;
  int64_t report = -1;
  bool respecialized = false;
  bool saved = false;
  bool flush_denormals = false;
  bool finite_by_executor = false;
  int64_t shape_inputs = 0;
  int64_t prepared = -1;  // a ticket of prepare_partitions, in this process only
  size_t inputs = 0, outputs = 0;  // the node's, finite flags included
  size_t finite_inputs = 0;
  std::vector<int64_t> guarded, any_layout, free_layout;
  std::vector<c10::TypePtr> types, output_types;
  std::shared_ptr<torch::jit::Graph> subgraph, head, tail;
  std::vector<c10::IValue> constant_inputs;  // per input: its value where constant, else None
  // Sizes (sizes_key) of the description's inputs at which a saved group compiles on first
  // sight, as at the profiled sizes: the specs export was given.
  std::vector<std::vector<int64_t>> warm_sizes;

  static GroupState of(const torch::jit::Node* node);
};

class GroupBase {
 public:
  // exact_strides: the backend reads inputs with the profiled strides only.
  GroupBase(const GroupState& state, bool exact_strides);
  virtual ~GroupBase() = default;

  // Takes the node's inputs from the stack and pushes its outputs.
  virtual void run(torch::jit::Stack& stack) = 0;
  // The sizes (sizes_key) of the description's inputs of each compiled spec it still keeps.
  virtual std::vector<std::vector<int64_t>> compiled_sizes() { return {}; }

 protected:
  // Pops the finite flags and checks the guard over the `n` inputs; when
  // either fails, runs the subgraph (fused again for the inputs' spec where the guard
  // failed, unfused otherwise) and returns false.
  bool admitted(torch::jit::Stack& stack, size_t n);
  void run_fallback(torch::jit::Stack& stack);
  // Gives the subgraph's inputs (the stack's last) the layouts eager's ops would see.
  virtual void to_eager_layouts(torch::jit::Stack& /*stack*/) {}
  // Runs the `n` inputs at a spec the guard refused: by default the subgraph fused again
  // for that spec (run_respecialized).
  virtual void run_at_new_spec(torch::jit::Stack& stack, size_t n) { run_respecialized(stack, n); }
  // A guard miss at a new input spec: the subgraph as a function of its own, which
  // torch's profiling executor profiles at that spec and hands to the pass pipeline
  // again (its groups then hold that spec's sizes), one per spec.
  void run_respecialized(torch::jit::Stack& stack, size_t n);

  const std::shared_ptr<torch::jit::Graph> subgraph_;
  const std::string name_;
  const int64_t report_;  // the pipeline run's report the group belongs to (-1: none)
  // Made by fusing another group's subgraph again for a spec that group's guard refused:
  // its own misses run unfused.
  const bool respecialized_;
  // A saved model's group: runs it does not take fused are declined (declined()).
  const bool saved_;
  const size_t fallback_inputs_;  // the inputs the unfused ops take (not the finite flags)
  size_t finite_flags_ = 0;  // last inputs: whether each input assumed finite is (bools)
  std::vector<c10::IValue> constant_inputs_;  // the node's constant inputs (None: not one)

 private:
  const bool exact_strides_;
  std::vector<int64_t> guarded_;           // the inputs the guard checks (not the constants)
  std::vector<c10::TypePtr> guard_types_;  // what each guarded input must match
  std::unique_ptr<const torch::jit::Code> fallback_;  // the subgraph's unfused ops

  std::mutex specs_mu_;
  std::map<std::vector<int64_t>, std::unique_ptr<torch::jit::GraphFunction>> specs_;
  bool logged_limit_ = false;  // a spec refused past the limits was logged
};

// Each tensor's rank, then its sizes.
std::vector<int64_t> sizes_key(const std::vector<at::Tensor>& tensors);

// The spec of `values`: each tensor's dtype, rank, sizes and strides (and whether it
// requires grad under grad mode), -1 for any other value.
std::vector<int64_t> spec_of(c10::ArrayRef<c10::IValue> values);

// Whether the last run of a saved group on this thread was declined, left its inputs on
// the stack (in eager's layouts) for the saved code's unfused ops; clears the flag.
bool take_declined();

// Whether the pass pipeline runs on the subgraph of a group whose guard failed (the
// graph it fuses then holds that spec's sizes): set while such a subgraph runs.
bool respecializing();

// A graph of views at a group's boundary (fusion/boundary_views.py): its head,
// from the group's inputs (and shape inputs) to the backend's, or its tail, from
// the backend's outputs (and shape inputs) to the group's. It runs in the
// interpreter once per input spec, which makes each result's sizes, strides and
// offset over one of its `bases` (the inputs before the shape inputs) known:
// later calls of that spec make the same views with as_strided. A result that
// is no view of a base (a reshape that had to copy) makes the spec run the
// graph on each call.
class ViewGraph {
 public:
  explicit ViewGraph(const std::shared_ptr<torch::jit::Graph>& graph, const char* name);

  // One input spec's results, over that spec's bases.
  struct Plan {
    struct View {
      size_t base;             // the base it views
      bool whole;              // that base itself
      std::vector<int64_t> sizes, strides;
      int64_t offset;          // storage offset past the base's
    };
    bool known = false;
    bool per_call = false;
    std::vector<View> views;
  };

  size_t inputs() const { return inputs_; }
  size_t outputs() const { return outputs_; }
  // The graph's results. `shape`: the group's shape inputs, after the bases.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& bases,
                                const std::vector<at::Tensor>& shape, Plan& plan) const;
  // The same, with the plan this graph keeps for the bases' and shape inputs' spec
  // (a head's: its kernel's cache entries are found after the head runs).
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& bases,
                                const std::vector<at::Tensor>& shape);

 private:
  const size_t inputs_, outputs_;
  torch::jit::Code code_;
  std::mutex mu_;  // guards plans_, and each plan until it is known
  std::map<std::vector<int64_t>, std::shared_ptr<Plan>> plans_;
};

inline size_t us_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

// The kernel of each backend, as the operation of its fusion group's node.
std::shared_ptr<GroupBase> onednn_group(const GroupState& state);
std::shared_ptr<GroupBase> external_group(const GroupState& state);
std::shared_ptr<GroupBase> constant_group(const GroupState& state);
// The kernel of the state's backend.
std::shared_ptr<GroupBase> make_group(const GroupState& state);

// The seconds each of `runs` executions of a oneDNN description's partition takes on these
// inputs (at their strides), after one that also prepares its constants: what a policy that
// keeps a partition only where it beats ATen on this CPU measures. nullopt, with `why`, where
// oneDNN does not compile the description as one partition.
std::optional<std::vector<double>> time_partition(const std::string& text,
                                                  const std::vector<at::Tensor>& inputs,
                                                  int64_t runs, std::string& why);

}  // namespace graphfuse
