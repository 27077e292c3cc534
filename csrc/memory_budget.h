// What torch_graphfuse may keep cached, read once from the environment:
//   TORCH_GRAPHFUSE_SPECS_PER_GROUP  compiled input specs kept per fusion group (16)
//   TORCH_GRAPHFUSE_WEIGHT_CACHE_MB  constant weights bound by cached compiled specs,
//                                    all groups together, beyond each group's newest (1024)
//   TORCH_GRAPHFUSE_POOL_MB          idle output buffers kept for reuse (256)
#pragma once

#include <cstddef>

namespace graphfuse {

struct MemoryBudget {
  size_t specs_per_group;
  size_t weight_cache_bytes;
  size_t pool_idle_bytes;
};

const MemoryBudget& memory_budget();

}  // namespace graphfuse
