// Counters over all fusion groups, for tests, reports and
// torch_graphfuse.kernel_stats(). GRAPHFUSE_KERNEL_STATS is the one list of
// them: the counters below, their reset and the Python view (module.cpp) all
// come from it. A count is zeroed by reset_kernel_stats(); a level (bytes held
// now) is not.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace graphfuse {

#define GRAPHFUSE_KERNEL_STATS(X)                                                          \
  X(compiles, count, "partitions compiled")                                                 \
  X(shared_compiles, count,                                                                 \
    "of those, served by the partition a group of the same description compiled for the "   \
    "same tensors (a model's repeated layers)")                                             \
  X(cache_hits, count, "executions that reused a compiled partition")                       \
  X(fallbacks, count, "executions that ran the unfused subgraph")                           \
  X(unseen_spec_runs, count,                                                                \
    "of those, executions at an input spec seen fewer than TORCH_GRAPHFUSE_COMPILE_AT "      \
    "times: it is compiled when it comes again")                                           \
  X(respecialized_runs, count,                                                              \
    "executions at input sizes the guard refused, by the subgraph fused again for them "     \
    "(its first at each spec profiles it)")                                                 \
  X(fused_runs, count, "executions through the backend")                                    \
  X(flushed_runs, count,                                                                    \
    "executions with denormal floats flushed to zero (attention's products, and the "       \
    "softmaxes only they read)")                                                            \
  X(reused_outputs, count, "outputs written into a freed output's buffer (buffer pool)")    \
  X(inplace_outputs, count, "outputs written over an input oneDNN may overwrite")           \
  X(idle_buffer_bytes, level, "freed output buffers the pool keeps for reuse")              \
  X(compile_us, count, "microseconds spent compiling partitions")                           \
  X(first_run_us, count,                                                                    \
    "microseconds spent in each compiled partition's first execution, where oneDNN "        \
    "reorders (and caches) the constant weights")                                           \
  X(evictions, count, "compiled specs dropped to stay within the memory budget")            \
  X(uncached_constant_compiles, count,                                                      \
    "int8 partitions with no constant input, compiled with oneDNN's constant cache off: "   \
    "it keys their scales and zero points by a hash that collides between partitions")     \
  X(cached_weight_bytes, level,                                                             \
    "constant weights bound by cached compiled partitions, once per partition (the specs "  \
    "that share a partition share oneDNN's reordered copy)")                              \
  X(model_weight_bytes, level,                                                              \
    "constant weights the live oneDNN fusion groups take: the models' own")                \
  X(respecialized_weight_bytes, level,                                                      \
    "of those, the weights bound by groups fused again for a spec a guard refused")          \
  X(aged_out_buffers, count, "idle pooled buffers freed for not being reused")              \
  X(nonfinite_fallbacks, count, "unfused runs because an input assumed finite was not")     \
  X(unfused_specs, count,                                                                   \
    "input specs a group runs unfused: oneDNN cannot compile its partition for them (or "   \
    "for this CPU), or an input is laid out otherwise than in the profiling runs")        \
  X(view_graph_runs, count,                                                                 \
    "a group's head or tail of views run in the interpreter: once per input spec, or each " \
    "call where a view had to copy")

enum class StatKind { count, level };

struct KernelCounters {
#define GRAPHFUSE_COUNTER(name, kind, doc) std::atomic<size_t> name{0};
  GRAPHFUSE_KERNEL_STATS(GRAPHFUSE_COUNTER)
#undef GRAPHFUSE_COUNTER
};

// The process's counters, updated by the kernels and the buffer pool.
KernelCounters& counters();
void reset_kernel_stats();

// The first input spec each fusion group runs unfused, with why, for the
// report of the pipeline run that made the group (its `report` attribute).
struct UnfusedSpec {
  std::string group;  // the group's label
  std::string why;
};
void record_unfused_spec(int64_t report, const std::string& group, const std::string& why);
std::vector<UnfusedSpec> unfused_specs(int64_t report);

}  // namespace graphfuse
