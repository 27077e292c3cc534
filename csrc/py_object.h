// Python objects that C++ kernels keep and call: a kernel may be freed with its
// graph, or run, by a thread that does not hold the GIL.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace graphfuse {

// `obj`, dropped under the GIL whoever drops it last; at interpreter exit it is leaked.
inline std::shared_ptr<pybind11::object> shared_py(pybind11::object obj) {
  return std::shared_ptr<pybind11::object>(new pybind11::object(std::move(obj)),
                                           [](pybind11::object* o) {
                                             if (!Py_IsInitialized()) return;
                                             pybind11::gil_scoped_acquire gil;
                                             delete o;
                                           });
}

// executor(inputs) -> outputs, a Python executor called under the GIL; its errors
// come back as std::runtime_error, made while the GIL is held.
inline std::vector<at::Tensor> call_py_executor(const pybind11::object& executor,
                                                const std::vector<at::Tensor>& inputs) {
  pybind11::gil_scoped_acquire gil;
  try {
    return executor(inputs).cast<std::vector<at::Tensor>>();
  } catch (pybind11::error_already_set& e) {
    throw std::runtime_error(e.what());
  } catch (pybind11::cast_error& e) {
    throw std::runtime_error(std::string("the executor's result: ") + e.what());
  }
}

}  // namespace graphfuse
