// Fusion groups of a backend whose compile and execute live in Python (any
// backend but the built-in oneDNN kernel's; cuDNN: its runtime.py): the kernel
// calls an executor made once per group from its backend and description.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace graphfuse {

// factory(backend, desc) -> executor; executor(inputs) -> outputs. The inputs
// are the description's ports, then, for a group marked `finite_by_executor`,
// the graph inputs its mapping assumes finite (`finite_inputs`): the executor
// checks them itself where its plan needs it, instead of the host read of
// graphfuse::all_finite before every run. An executor returns no outputs to
// decline one run (an input it was told to check is not finite): that run goes
// unfused. Any exception runs the unfused subgraph, with one warning. The Python side registers the
// factory (module.cpp), which asks the backend of that name for the executor.
using GroupExecutor = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using GroupExecutorFactory =
    std::function<GroupExecutor(const std::string& backend, const std::string& desc)>;
void set_group_executor_factory(GroupExecutorFactory factory);

}  // namespace graphfuse
