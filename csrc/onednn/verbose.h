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
  // Why ATen beats this implementation, or null when it does not: reference
  // implementations run orders of magnitude slower (an eltwise op with a binary
  // post-op: 110 ms against 0.3 ms); the generic layer norm, which oneDNN picks
  // for a post-op operand broadcast along the normalized dim, ran 70 times
  // slower than its JIT kernel and summed less accurately than ATen.
  const char* slow() const {
    // A 1x1 convolution and the depthwise one after it run as one primitive,
    // "ref_fused_convolution:any:<kernel>:<isa>:<kernel>:<isa>": a wrapper that chains
    // the two kernels it names through a small buffer, as fast as they are.
    static const std::string fused = "ref_fused_convolution:any:";
    if (implementation.rfind(fused, 0) == 0)
      return implementation.find(":ref", fused.size() - 1) == std::string::npos
                 ? nullptr
                 : "its reference implementation";
    if (implementation.rfind("ref", 0) == 0) return "its reference implementation";
    if (kind == "layer_normalization" && implementation.rfind("simple", 0) == 0)
      return "its generic implementation";
    return nullptr;
  }
};

// Runs `fn` with oneDNN's creation verbose on and the process's stdout
// captured; returns the primitives created meanwhile. Captured lines that are
// not oneDNN's (another thread's prints) go back to stdout, and oneDNN's too
// when the user asked for them (ONEDNN_VERBOSE). One capture at a time.
std::vector<Created> primitives_created(const std::function<void()>& fn);

}  // namespace graphfuse::onednn
