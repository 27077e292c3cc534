// Access to the oneDNN that torch carries (see api.cpp for why and how).
#pragma once

#include <string>

namespace graphfuse::onednn {

struct Availability {
  bool ok = false;
  std::string version;    // "3.12.0", or empty when unknown
  std::string hash;       // oneDNN's git hash
  std::string library;    // the path of the library the functions came from
  std::string problem;    // why oneDNN cannot be used (ok == false)
  int resolved = 0;       // C API functions found
  int listed = 0;         // C API functions the headers declare
  double resolve_ms = 0;  // time spent finding them
};

// Resolves the C API once, on the first call (the module's import). Every
// oneDNN call of the plugin must wait for ok == true; before that, and where
// a function is missing, a call returns dnnl_unimplemented (or 0).
const Availability& availability();

// The instruction set oneDNN's kernels use on this CPU (dnnl_cpu_isa_t), -1 where
// oneDNN cannot be used.
int effective_cpu_isa();

// Whether oneDNN's kernels here have a feature a partition's results may rely on: "vnni"
// (int8 dot products summed in int32, not in saturating int16 pairs) or "bf16" (bf16
// compute instructions). False for any other name.
bool isa_has(const std::string& feature);

}  // namespace graphfuse::onednn
