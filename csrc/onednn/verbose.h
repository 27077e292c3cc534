// What oneDNN creates while compiling a partition, read from its own verbose
// output: the Graph API does not say which implementation it picked, and its
// reference implementations run orders of magnitude slower than ATen.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace graphfuse::onednn {

struct Created {
  std::string kind;            // "eltwise", "convolution", ...
  std::string implementation;  // "ref:any", "brg_conv_fwd:avx512_core", ...
  bool reference() const { return implementation.rfind("ref", 0) == 0; }
};

// Runs `fn` with oneDNN's creation verbose on and the process's stdout
// captured; returns the primitives created meanwhile. Captured lines that are
// not oneDNN's (another thread's prints) go back to stdout, and oneDNN's too
// when the user asked for them (ONEDNN_VERBOSE). One capture at a time.
std::vector<Created> primitives_created(const std::function<void()>& fn);

}  // namespace graphfuse::onednn
