// Serves a model torch_graphfuse.export saved, as a libtorch program would: load it once,
// then answer requests under InferenceMode. The runtime library (linked, see
// CMakeLists.txt) runs its fusion groups with oneDNN; no Python is involved.
//
//   serve MODEL.pt INPUTS.pt [REQUESTS]
//
// INPUTS.pt holds the inputs of one request, a list of tensors as torch.save writes it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

namespace {

std::vector<torch::jit::IValue> load_inputs(const char* path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto list = torch::pickle_load(bytes).toList();
  return std::vector<torch::jit::IValue>(list.begin(), list.end());
}

// The runtime's kernel stats: how many group runs were fused, fell back, compiled.
c10::Dict<std::string, int64_t> kernel_stats() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("graphfuse::kernel_stats", "")
                       .typed<c10::Dict<std::string, int64_t>()>();
  return op.call();
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: serve MODEL.pt INPUTS.pt [REQUESTS]\n";
    return 2;
  }
  int requests = argc > 3 ? std::atoi(argv[3]) : 20;
  auto start = std::chrono::steady_clock::now();
  torch::jit::Module model = torch::jit::load(argv[1]);
  auto inputs = load_inputs(argv[2]);
  c10::InferenceMode inference;
  model.forward(inputs);
  std::cout << "first result: " << ms_since(start) << " ms (load and first call)\n";
  std::vector<double> ms;
  for (int r = 0; r < requests; ++r) {
    auto at = std::chrono::steady_clock::now();
    model.forward(inputs);
    ms.push_back(ms_since(at));
  }
  std::sort(ms.begin(), ms.end());
  std::cout << "median request: " << ms[ms.size() / 2] << " ms over " << requests << "\n";
  for (const auto& stat : kernel_stats())
    if (stat.key() == "fused_runs" || stat.key() == "fallbacks" || stat.key() == "compiles")
      std::cout << stat.key() << ": " << stat.value() << "\n";
  return 0;
}
