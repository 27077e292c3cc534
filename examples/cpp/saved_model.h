// What the example programs share: reading a list torch.save wrote, the runtime's kernel
// stats, and a main that reports an exception instead of aborting.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace saved_model {

// The list in a file torch.save wrote (torch::pickle_load reads its format).
inline c10::List<c10::IValue> load_list(const char* path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(std::string("cannot read ") + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toList();
}

// The runtime's kernel stats: how many group runs were fused, fell back, compiled.
inline c10::Dict<std::string, int64_t> kernel_stats() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("graphfuse::kernel_stats", "")
                       .typed<c10::Dict<std::string, int64_t>()>();
  return op.call();
}

// run(argc, argv), with a file that does not load (truncated, made by another torch, the
// runtime library not loaded) a message and exit status 1, not an uncaught exception.
inline int guarded_main(int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace saved_model
