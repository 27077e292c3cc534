// Fusion groups of a backend whose compile and execute live in Python (cuDNN:
// torch_graphfuse/backends/cudnn/runtime.py): the kernel calls an executor
// made once per group from its description.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace graphfuse {

// factory(desc) -> executor; executor(inputs) -> outputs. Any exception runs
// the unfused subgraph. The Python side registers the factory (module.cpp).
using GroupExecutor = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using GroupExecutorFactory = std::function<GroupExecutor(const std::string& desc)>;
void set_group_executor_factory(GroupExecutorFactory factory);

}  // namespace graphfuse
