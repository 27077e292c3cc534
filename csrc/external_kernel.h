// Fusion groups of a backend whose compile and execute live in Python (any
// backend but the built-in oneDNN kernel's; cuDNN: its runtime.py): the kernel
// calls an executor made once per group from its backend and description.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace graphfuse {

// factory(backend, desc) -> executor; executor(inputs) -> outputs. Any
// exception runs the unfused subgraph. The Python side registers the factory
// (module.cpp), which asks the backend of that name for the executor.
using GroupExecutor = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using GroupExecutorFactory =
    std::function<GroupExecutor(const std::string& backend, const std::string& desc)>;
void set_group_executor_factory(GroupExecutorFactory factory);

}  // namespace graphfuse
