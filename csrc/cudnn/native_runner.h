// cuDNN groups run from C++: a plan the Python runtime settled, executed per run
// with no GIL and no Python (backends/cudnn/runtime.py decides which plan, when it
// may run unchecked, and replaces a failing one; this file only executes it).
// Built where torch is a CUDA build and the cuDNN frontend's headers are found.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "../external_kernel.h"

namespace graphfuse::cudnn {

// Adds CudnnNativePlan, CudnnNativeRunner and the run counters to the module.
void bind(pybind11::module& m);

// The C++ executor of `executor` where it is a CudnnNativeRunner; nullopt for
// any other Python executor.
std::optional<GroupExecutor> native_executor(const pybind11::object& executor);

}  // namespace graphfuse::cudnn
