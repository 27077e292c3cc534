// Serves a model torch_graphfuse.export saved, as a libtorch program would: load it once,
// then answer requests under InferenceMode. The runtime library (linked, see
// CMakeLists.txt) runs its fusion groups with oneDNN; no Python is involved.
//
//   serve MODEL.pt INPUTS.pt [--requests N] [--warmup W] [--llga] [--json]
//
// INPUTS.pt holds the inputs of one request, a list of tensors as torch.save writes it.
// Prints the time to the first result (load and first call) and the median of N requests
// after W more; --llga turns torch's own oneDNN fuser on (for a frozen TorchScript model,
// as a peer); --json prints one line of JSON instead.
#include <torch/csrc/jit/codegen/onednn/interface.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include "saved_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<torch::jit::IValue> load_inputs(const char* path) {
  auto list = saved_model::load_list(path);
  return std::vector<torch::jit::IValue>(list.begin(), list.end());
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The fusion groups of the graph the executor last optimized: torch_graphfuse's saved
// calls, or LLGA's groups.
int64_t groups_run(const char* kind) {
  auto graph = torch::jit::lastExecutedOptimizedGraph();
  if (!graph) return 0;
  int64_t count = 0;
  const auto symbol = c10::Symbol::fromQualString(kind);
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    auto* block = blocks.back();
    blocks.pop_back();
    for (auto* node : block->nodes()) {
      count += node->kind() == symbol;
      for (auto* inner : node->blocks()) blocks.push_back(inner);
    }
  }
  return count;
}

}  // namespace

static int run_program(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: serve MODEL.pt INPUTS.pt [--requests N] [--warmup W] [--llga] [--json]\n";
    return 2;
  }
  int requests = 20, warmup = 5;
  bool json = false, llga = false;
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--requests" && i + 1 < argc) {
      requests = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--warmup" && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else if (arg == "--llga") {
      llga = true;
    } else if (arg == "--json") {
      json = true;
    } else {
      std::cerr << "serve: unknown argument " << arg << "\n";
      return 2;
    }
  }
  if (llga) torch::jit::RegisterLlgaFuseGraph::setEnabled(true);
  auto inputs = load_inputs(argv[2]);
  auto start = std::chrono::steady_clock::now();
  torch::jit::Module model = torch::jit::load(argv[1]);
  c10::InferenceMode inference;
  model.forward(inputs);
  double first_ms = ms_since(start);
  for (int w = 0; w < warmup; ++w) model.forward(inputs);
  std::vector<double> ms;
  for (int r = 0; r < requests; ++r) {
    auto at = std::chrono::steady_clock::now();
    model.forward(inputs);
    ms.push_back(ms_since(at));
  }
  std::sort(ms.begin(), ms.end());
  double median_ms = ms[ms.size() / 2];
  auto stats = saved_model::kernel_stats();
  int64_t groups = llga ? groups_run("prim::oneDNNFusionGroup") : groups_run("graphfuse::run_saved");
  if (json) {
    std::cout << "{\"first_ms\": " << first_ms << ", \"median_ms\": " << median_ms
              << ", \"groups\": " << groups << ", \"fused_runs\": " << stats.at("fused_runs")
              << ", \"fallbacks\": " << stats.at("fallbacks")
              << ", \"compile_ms\": " << stats.at("compile_us") / 1e3
              << ", \"first_run_ms\": " << stats.at("first_run_us") / 1e3 << "}\n";
    return 0;
  }
  std::cout << "first result: " << first_ms << " ms (load and first call)\n"
            << "median request: " << median_ms << " ms over " << requests << "\n"
            << "fusion groups: " << groups << "\n"
            << "fused runs: " << stats.at("fused_runs") << ", fallbacks: " << stats.at("fallbacks")
            << ", compiles: " << stats.at("compiles") << "\n";
  return 0;
}

int main(int argc, char** argv) { return saved_model::guarded_main(run_program, argc, argv); }
