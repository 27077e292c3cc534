// What torch_graphfuse may keep cached, read once from the environment:
//   TORCH_GRAPHFUSE_SPECS_PER_GROUP  compiled input specs kept per fusion group, and the
//                                    sizes a size-constant group keeps values of (8)
//   TORCH_GRAPHFUSE_WEIGHT_CACHE_MB  constant weights bound by cached compiled
//                                    partitions, all groups together (unset: from the
//                                    models, see weight_budget)
//   TORCH_GRAPHFUSE_POOL_MB          idle output buffers kept for reuse (256)
//   TORCH_GRAPHFUSE_COMPILE_AT       the call of an input spec other than the profiled
//                                    one that compiles it; the calls before run unfused (1)
#pragma once

#include <cstddef>

namespace graphfuse {

struct MemoryBudget {
  size_t specs_per_group;
  size_t weight_cache_bytes;  // 0: unset, sized from the models (weight_budget)
  size_t pool_idle_bytes;
  size_t compile_at;
};

const MemoryBudget& memory_budget();

// The bytes of weights cached partitions may bind: TORCH_GRAPHFUSE_WEIGHT_CACHE_MB where
// set, else kWeightFactor times the weights the live fusion groups take (each partition of
// a group binds one reordered copy: its profiled sizes', the one for any sizes, and those
// fused again), and at least kMinWeightBudget.
size_t weight_budget();
constexpr size_t kWeightFactor = 3;
constexpr size_t kMinWeightBudget = size_t{256} << 20;

}  // namespace graphfuse
