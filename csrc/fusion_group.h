// The runtime of a fused region: the graphfuse::FusionGroup operator, which
// checks its inputs' types (else runs its subgraph unfused), compiles its
// partition per input spec and executes it with oneDNN Graph, or hands a
// group of another backend (cuDNN) to that backend's executor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"

namespace graphfuse {

std::optional<DataType> to_backend_dtype(c10::ScalarType t);

// A fusion group of another backend than oneDNN (its node's `backend`
// attribute) runs through an executor made once per group from its
// description and called with the group's inputs per run; any exception runs
// the unfused subgraph. The Python side registers the factory (module.cpp).
using GroupExecutor = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using GroupExecutorFactory = std::function<GroupExecutor(const std::string& desc)>;
void set_group_executor_factory(GroupExecutorFactory factory);

// Compile-cache statistics over all fusion groups, for tests and reports.
struct KernelStats {
  size_t compiles = 0;        // partitions compiled
  size_t cache_hits = 0;      // executions that reused a compiled partition
  size_t fallbacks = 0;       // executions that ran the unfused subgraph
  size_t fused_runs = 0;      // executions through oneDNN
  size_t reused_outputs = 0;  // outputs written into a freed output's buffer (buffer pool)
  size_t inplace_outputs = 0; // outputs written over an input oneDNN may overwrite
  size_t idle_buffer_bytes = 0;  // freed output buffers the pool keeps for reuse
  size_t compile_us = 0;      // spent compiling partitions
  size_t first_run_us = 0;    // spent in each compiled partition's first execution, where
                              // oneDNN reorders (and caches) the constant weights
  size_t evictions = 0;       // compiled specs dropped to stay within the budget
  size_t cached_weight_bytes = 0;  // constant weights bound by the cached compiled specs
  size_t aged_out_buffers = 0;     // idle pooled buffers freed for not being reused
  size_t nonfinite_fallbacks = 0;  // unfused runs because an input assumed finite was not
};
KernelStats kernel_stats();
void reset_kernel_stats();

}  // namespace graphfuse
