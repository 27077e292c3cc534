// The graphfuse::FusionGroup node's schema: its kind, its attributes and the
// order of its inputs. torch_graphfuse's rewrite and guard passes write the
// node; the kernels read it. GRAPHFUSE_GROUP_ATTRS is the one list of the
// attributes: the C++ symbols below and the Python view
// (torch_graphfuse/group_schema.py, through _C._group_schema) come from it.
//
// Inputs, in order: the backend description's ports; then `shape_inputs`
// tensors that only the group's shape arithmetic reads (the backend never sees
// them; their sizes are guarded where a mapping baked them in, and part of the
// kernel's spec otherwise); then one bool per `finite_inputs`
// entry, kAllFinite's answer for an input the mapping assumes finite (with
// `finite_by_executor`, the input itself, which the external backend's executor
// checks where its plan needs it). With a
// `head`, the inputs before the shape inputs are that graph's, from which it
// makes the description's ports through views only.
// Outputs: the description's outputs, each a new tensor; or, with a `tail`, that
// graph's outputs, from (the description's outputs..., the shape inputs...) through
// views only, each aliasing what it aliases in eager.
#pragma once

#include <ATen/core/symbol.h>

namespace graphfuse {

inline constexpr const char* kGroupKind = "graphfuse::FusionGroup";
// The `backend` of the groups the built-in oneDNN kernel runs; a group of any
// other backend runs through the executor that backend's Python side made.
inline constexpr const char* kOneDnnBackend = "onednn";
// The `backend` of the groups whose outputs are constants computed from the
// profiled sizes of their inputs (constant_kernel.cpp): `desc` holds how many
// inputs those are, and the outputs are the inputs after them.
inline constexpr const char* kConstantBackend = "constant";
// The op that tells, before a group runs, whether tensors are all finite.
inline constexpr const char* kAllFinite = "graphfuse::all_finite";
// ATen's softmax with denormals flushed to zero, for probabilities that only groups
// running flushed read (backends/onednn/flush_denormals.py).
inline constexpr const char* kSoftmaxFlushed = "graphfuse::softmax_flushed";

// X(symbol, attribute name, what it holds)
#define GRAPHFUSE_GROUP_ATTRS(X)                                                             \
  X(subgraph, "Subgraph", "the group's nodes, which the unfused fallback runs")             \
  X(desc, "desc", "the backend's description of the group, which the kernel compiles")     \
  X(backend, "backend", "the backend whose kernel runs the group")                          \
  X(label, "label", "the group's name in the profiler, the log and the report")             \
  X(report, "report", "the id of the pipeline run's report the group belongs to")           \
  X(static_shapes, "static_shapes", "1 when a mapping baked in the profiled sizes")         \
  X(last_dims, "last_dims", "inputs whose last size a mapping baked in (guarded)")         \
  X(shape_inputs, "shape_inputs", "how many last inputs only the shape arithmetic reads")   \
  X(finite_inputs, "finite_inputs", "the inputs the mapping assumes finite")                \
  X(finite_by_executor, "finite_by_executor",                                                \
    "1 when those inputs come as tensors, which the external executor checks")                \
  X(guarded, "guarded", "the inputs the type guard checks")                                 \
  X(types, "types", "the type each guarded input must match")                               \
  X(output_types, "output_types", "the outputs' profiled types (external executors)")       \
  X(any_layout, "any_layout", "outputs the backend may give in its own layout")             \
  X(free_layout, "free_layout", "inputs the backend may read in any layout")                \
  X(prepared, "prepared", "the ticket of the partition found with the graph's other groups") \
  X(flush_denormals, "flush_denormals",                                                      \
    "1 when the partition runs with denormals flushed to zero")                               \
  X(cpu_needs, "cpu_needs",                                                                  \
    "the CPU features its results rely on (vnni, bf16; space-separated)")                     \
  X(head, "head", "views of the group's inputs that the description reads instead")      \
  X(tail, "tail", "views of the description's outputs that the group outputs instead")  \
  X(respecialized, "respecialized",                                                         \
    "1 in a group made by fusing another's subgraph again for new input sizes")

namespace attr {
#define GRAPHFUSE_GROUP_ATTR(symbol, name, doc) inline const auto symbol = c10::Symbol::attr(name);
GRAPHFUSE_GROUP_ATTRS(GRAPHFUSE_GROUP_ATTR)
#undef GRAPHFUSE_GROUP_ATTR
}  // namespace attr

}  // namespace graphfuse
