// What torch_graphfuse may keep cached, from the settings TORCH_GRAPHFUSE_SPECS_PER_GROUP,
// _WEIGHT_CACHE_MB, _POOL_MB and _COMPILE_AT, read once per process. torch_graphfuse/config.py
// says what each means and holds their defaults; a test checks that these are the same.
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
