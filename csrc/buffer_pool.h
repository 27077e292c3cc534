// Memory for fusion-group outputs. A freed output goes back to a free list
// keyed by its byte size, and the next output of that size (any group's)
// takes it: no allocation, and no page faults on fresh pages, on the steady
// path. Only c10 headers here, so this translation unit builds quickly.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>

namespace graphfuse {

// The allocator of every fusion-group output's storage. Lives for the
// process: tensors handed to the caller may outlive everything else.
c10::Allocator* buffer_pool();

// Free buffers kept for reuse are capped at this many bytes; a buffer freed
// beyond the cap goes back to the system.
constexpr size_t kPoolIdleCapBytes = size_t{1} << 30;

struct PoolStats {
  size_t reused = 0;      // allocations served from a free list
  size_t idle_bytes = 0;  // held in free lists now
};
PoolStats pool_stats();
void reset_pool_reuse_count();
// Returns every free buffer to the system; the bytes released.
size_t release_idle_buffers();

}  // namespace graphfuse
