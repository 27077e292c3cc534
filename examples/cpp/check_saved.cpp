// Runs a saved model the way Triton's PyTorch backend does and writes what happened, for
// the tests (test/serving/test_cpp.py) to compare with eager:
//
//   check_saved MODEL.pt CALLS.pt OUT.pt [--threads N] [--no-grad] [--no-optimize]
//                                        [--no-jit-profiling] [--no-jit-executor]
//
// CALLS.pt: a list of calls, each a list of input tensors (torch.save). Each call runs
// twice on one thread (the second call of a new size is the first that may be compiled),
// under InferenceMode, or NoGradGuard with --no-grad; --no-optimize turns the graph
// executor's optimization off (Triton's DISABLE_OPTIMIZED_EXECUTION), and
// --no-jit-profiling and --no-jit-executor the profiling executor and the graph executor
// (ENABLE_JIT_PROFILING and ENABLE_JIT_EXECUTOR set to false). With --threads N,
// N threads then share the one module, each making every call, and each of their outputs
// must be bit-identical to the first thread's. OUT.pt (torch.load) holds {"outputs": the
// first thread's outputs, "stats": kernel stats, "thread_mismatches": int,
// "python_mapped": whether any libpython is in this process}.
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include "saved_model.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

using Call = std::vector<torch::jit::IValue>;

std::vector<Call> load_calls(const char* path) {
  std::vector<Call> calls;
  for (const auto& call : saved_model::load_list(path)) {
    auto inputs = call.get().toList();
    calls.emplace_back(inputs.begin(), inputs.end());
  }
  return calls;
}

bool python_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libpython") != std::string::npos ||
        line.find("libtorch_python") != std::string::npos)
      return true;
  return false;
}

bool identical(const torch::jit::IValue& a, const torch::jit::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    const auto& x = a.toTensor();
    const auto& y = b.toTensor();
    return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
           (x.numel() == 0 || std::memcmp(x.contiguous().data_ptr(), y.contiguous().data_ptr(),
                                          x.numel() * x.element_size()) == 0);
  }
  if (a.isTuple() && b.isTuple()) {
    const auto& xs = a.toTupleRef().elements();
    const auto& ys = b.toTupleRef().elements();
    if (xs.size() != ys.size()) return false;
    for (size_t i = 0; i < xs.size(); ++i)
      if (!identical(xs[i], ys[i])) return false;
    return true;
  }
  return false;
}

// Runs every call twice under Triton's guards; the second run's outputs.
std::vector<torch::jit::IValue> serve(torch::jit::Module& model, const std::vector<Call>& calls,
                                      bool no_grad) {
  std::vector<torch::jit::IValue> outputs;
  auto run = [&] {
    for (const auto& call : calls) {
      model.forward(call);
      outputs.push_back(model.forward(call));
    }
  };
  if (no_grad) {
    torch::NoGradGuard guard;
    run();
  } else {
    c10::InferenceMode guard;
    run();
  }
  return outputs;
}

}  // namespace

static int run_program(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: check_saved MODEL.pt CALLS.pt OUT.pt [--threads N] [--no-grad] "
                 "[--no-optimize] [--no-jit-profiling] [--no-jit-executor]\n";
    return 2;
  }
  int threads = 0;
  bool no_grad = false;
  for (int i = 4; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--no-grad") {
      no_grad = true;
    } else if (arg == "--no-optimize") {
      torch::jit::setGraphExecutorOptimize(false);
    } else if (arg == "--no-jit-profiling") {
      torch::jit::getProfilingMode() = false;
    } else if (arg == "--no-jit-executor") {
      torch::jit::getExecutorMode() = false;
    } else {
      std::cerr << "check_saved: unknown argument " << arg << "\n";
      return 2;
    }
  }
  torch::jit::Module model = torch::jit::load(argv[1]);
  model.eval();
  auto calls = load_calls(argv[2]);
  auto first = serve(model, calls, no_grad);
  std::atomic<int64_t> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      auto outputs = serve(model, calls, no_grad);
      for (size_t i = 0; i < outputs.size(); ++i)
        if (!identical(outputs[i], first[i])) ++mismatches;
    });
  for (auto& thread : pool) thread.join();

  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericList outputs(c10::AnyType::get());
  for (auto& value : first) outputs.push_back(value);
  out.insert("outputs", outputs);
  c10::Dict<std::string, int64_t> stats = saved_model::kernel_stats();
  out.insert("stats", stats);
  out.insert("thread_mismatches", mismatches.load());
  out.insert("python_mapped", python_mapped());
  auto bytes = torch::pickle_save(out);
  std::ofstream(argv[3], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return 0;
}

int main(int argc, char** argv) { return saved_model::guarded_main(run_program, argc, argv); }
