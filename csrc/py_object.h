// Python objects that C++ kernels keep: a kernel may be freed with its graph by a
// thread that does not hold the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

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

}  // namespace graphfuse
