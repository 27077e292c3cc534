// Memory for fusion-group outputs. A freed output goes back to a free list of
// its size class, and the next output of that class (any group's) takes it:
// no allocation, and no page faults on fresh pages, on the steady path. The
// idle memory is bounded (memory_budget.h), and a size class unused for a
// while is given back to the system. Only c10 headers here, so this
// translation unit builds quickly.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>

#include "memory_budget.h"

namespace graphfuse {

// The allocator of every fusion-group output's storage. Lives for the
// process: tensors handed to the caller may outlive everything else.
c10::Allocator* buffer_pool();

// Returns every free buffer to the system; the bytes released.
size_t release_idle_buffers();

}  // namespace graphfuse
