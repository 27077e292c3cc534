#include "native_runner.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cudnn_frontend.h>

#include "../py_object.h"

// The frontend's dynamic loading resolves cuDNN's functions from this library
// handle (cudnn_library() sets it): no link-time dependency on libcudnn.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace graphfuse::cudnn {
namespace {

namespace fe = cudnn_frontend;
namespace py = pybind11;

std::atomic<int64_t> g_native_runs{0};
std::atomic<int64_t> g_native_failures{0};

// The libcudnn torch has loaded: one cuDNN for torch, the Python frontend and this
// file (the preflight checks the first two agree).
void cudnn_library() {
  static void* handle = [] {
    void* found = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (!found) found = dlopen("libcudnn.so.9", RTLD_NOW);
    fe::cudnn_dlhandle = found;
    return found;
  }();
  TORCH_CHECK(handle, "libcudnn.so.9 cannot be opened");
}

void check(fe::error_t status, const char* what) {
  TORCH_CHECK(status.is_good(), "cuDNN frontend ", what, ": ", status.get_message());
}

// This thread's cuDNN handle on `device`, with the device current. A handle must
// not be shared across threads and cudnnCreate costs far more than a run, so each
// is kept for the thread's life, with the stream it was last given.
cudnnHandle_t thread_handle(int device, cudaStream_t stream) {
  struct Slot {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
  };
  thread_local std::unordered_map<int, Slot> slots;
  Slot& slot = slots[device];
  if (!slot.handle) {
    cudnn_library();
    TORCH_CHECK(fe::detail::create_handle(&slot.handle) == CUDNN_STATUS_SUCCESS,
                "cudnnCreate failed on device ", device);
    TORCH_CHECK(fe::detail::set_stream(slot.handle, stream) == CUDNN_STATUS_SUCCESS,
                "cudnnSetStream failed");
    slot.stream = stream;
  } else if (slot.stream != stream) {
    TORCH_CHECK(fe::detail::set_stream(slot.handle, stream) == CUDNN_STATUS_SUCCESS,
                "cudnnSetStream failed");
    slot.stream = stream;
  }
  return slot.handle;
}

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

cudaStream_t torch_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

// A plan the Python runtime built (or read from disk) and serialized, read back
// once per device; groups that share the Python plan share this one.
class NativePlan {
 public:
  NativePlan(int device, const std::string& payload)
      : device_(device), graph_(std::make_unique<fe::graph::Graph>()) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const std::vector<uint8_t> bytes(payload.begin(), payload.end());
    // No warm-up: it captures a throwaway run, and the plan already ran in Python.
    check(graph_->deserialize(thread_handle(device, torch_stream(device)), bytes,
                              /*enforce_precompiled=*/false, /*run_warmup=*/false),
          "deserialize");
    check(graph_->get_workspace_size(workspace_size_), "workspace size");
  }

  // A plan still held when Python shuts down is left to the process's end, as the
  // Python frontend leaves its own: cuDNN may be torn down before it.
  ~NativePlan() {
    if (python_finalizing()) (void)graph_.release();
  }
  NativePlan(const NativePlan&) = delete;
  NativePlan& operator=(const NativePlan&) = delete;

  int device() const { return device_; }
  int64_t workspace_size() const { return workspace_size_; }

  // Thread-safe: the frontend copies its variant pack template per call.
  void execute(cudnnHandle_t handle, void** sorted_ptrs, int count, void* workspace) const {
    check(graph_->execute(handle, sorted_ptrs, count, workspace), "execute");
  }

 private:
  const int device_;
  int64_t workspace_size_ = 0;
  std::unique_ptr<fe::graph::Graph> graph_;
};

struct PortSpec {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  int64_t extent;  // elements from the first to one past the last the view reaches
};
using PortTuple = std::tuple<std::vector<int64_t>, std::vector<int64_t>, at::ScalarType>;

std::vector<PortSpec> port_specs(const std::vector<PortTuple>& given) {
  std::vector<PortSpec> specs;
  for (const auto& [sizes, strides, dtype] : given) {
    TORCH_CHECK(sizes.size() == strides.size(), "a port's sizes and strides differ in rank");
    int64_t extent = 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 0) extent = 0;
      if (extent) extent += (sizes[d] - 1) * strides[d];
    }
    specs.push_back({sizes, strides, dtype, extent});
  }
  return specs;
}

// Which of torch's TF32 flags the plan was chosen under (0: none, the group is not
// fp32), read per run as the Python runtime reads it.
enum Tf32Source : int { kNoTf32 = 0, kCudnnTf32 = 1, kMatmulTf32 = 2 };

bool tf32_now(int source) {
  if (source == kCudnnTf32) return at::globalContext().allowTF32CuDNN();
  return at::globalContext().allowTF32CuBLAS();
}

// What the runner runs without calling back into Python.
struct Installed {
  std::shared_ptr<const NativePlan> plan;
  int tf32_source;
  bool tf32;
  std::vector<int> order;  // port (inputs, then outputs) of each pointer, by ascending uid
};

// One group's executor. Runs the plan the Python runtime offers, once it offers
// one, in C++; every other run (no offer yet, an input it cannot take, another TF32
// setting, a failed execute) goes to the Python executor, whose errors and
// replacements hold for both.
class NativeRunner {
 public:
  NativeRunner(py::object run, py::object executor, const std::vector<PortTuple>& inputs,
               const std::vector<PortTuple>& outputs)
      : run_(shared_py(std::move(run))),
        executor_(shared_py(std::move(executor))),
        inputs_(port_specs(inputs)),
        outputs_(port_specs(outputs)) {}

  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) {
    if (auto fast = std::atomic_load(&fast_); fast && admits(*fast, inputs)) {
      try {
        auto outputs = execute(*fast, inputs);
        ++g_native_runs;
        return outputs;
      } catch (const std::exception& e) {
        // The Python executor runs it now, replacing the plan if it fails there
        // too; this offer is not taken again.
        GRAPH_DEBUG("cuDNN native run failed, the Python executor takes it: ", e.what());
        ++g_native_failures;
        failed_generation_ = installed_generation_.load();
        std::atomic_store(&fast_, std::shared_ptr<const Installed>());
      }
    }
    auto outputs = call_py_executor(*run_, inputs);
    py::gil_scoped_acquire gil;
    try {
      take_offer();
    } catch (const std::exception& e) {  // this run stands; later ones stay in Python
      GRAPH_DEBUG("cuDNN native plan not installed: ", e.what());
      ++g_native_failures;
      failed_generation_ = pending_generation_.load();
    }
    return outputs;
  }

 private:
  // The checks of the Python executor's InputSpec, and the plan's device and TF32
  // setting; inputs past the ports (assumed finite) need none: the runtime offers
  // only plans that give eager's NaN and infinities.
  bool admits(const Installed& fast, const std::vector<at::Tensor>& inputs) const {
    if (inputs.size() < inputs_.size()) return false;
    if (fast.tf32_source != kNoTf32 && tf32_now(fast.tf32_source) != fast.tf32) return false;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const at::Tensor& x = inputs[i];
      const PortSpec& spec = inputs_[i];
      if (!x.defined() || !x.is_cuda() || x.get_device() != fast.plan->device() ||
          x.scalar_type() != spec.dtype)
        return false;
      if (reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 16) return false;
      const int64_t room = static_cast<int64_t>(x.storage().nbytes()) /
                               static_cast<int64_t>(x.element_size()) -
                           x.storage_offset();
      if (spec.extent > room) return false;
    }
    return true;
  }

  std::vector<at::Tensor> execute(const Installed& fast, const std::vector<at::Tensor>& inputs) {
    const NativePlan& plan = *fast.plan;
    const auto device = static_cast<c10::DeviceIndex>(plan.device());
    c10::cuda::CUDAGuard guard(device);
    // cuDNN launches on the handle's stream: torch's current one, as eager runs.
    cudnnHandle_t handle = thread_handle(plan.device(), torch_stream(plan.device()));
    const auto options = at::TensorOptions().device(at::kCUDA, device);
    std::vector<at::Tensor> outputs;
    outputs.reserve(outputs_.size());
    for (const PortSpec& spec : outputs_)
      outputs.push_back(at::empty_strided(spec.sizes, spec.strides, options.dtype(spec.dtype)));
    at::Tensor workspace;
    if (plan.workspace_size() > 0)
      workspace = at::empty({plan.workspace_size()}, options.dtype(at::kByte));
    std::vector<void*> pointers(fast.order.size());
    const int n_inputs = static_cast<int>(inputs_.size());
    for (size_t k = 0; k < fast.order.size(); ++k) {
      const int port = fast.order[k];
      const at::Tensor& t = port < n_inputs ? inputs[port] : outputs[port - n_inputs];
      pointers[k] = const_cast<void*>(t.const_data_ptr());
    }
    plan.execute(handle, pointers.data(), static_cast<int>(pointers.size()),
                 workspace.defined() ? workspace.data_ptr() : nullptr);
    return outputs;
  }

  // Reads the executor's `native_offer` (GIL held): None, or (generation, plan,
  // tf32 source, tf32, uids of the ports, inputs then outputs). A new generation
  // replaces what is installed; one that failed here is not installed again.
  void take_offer() {
    py::object offer = executor_->attr("native_offer");
    if (offer.is_none()) {
      std::atomic_store(&fast_, std::shared_ptr<const Installed>());
      return;
    }
    const auto [generation, plan, tf32_source, tf32, uids] =
        offer.cast<std::tuple<int64_t, std::shared_ptr<NativePlan>, int, bool,
                              std::vector<int64_t>>>();
    if (generation == installed_generation_ || generation == failed_generation_) return;
    pending_generation_ = generation;
    TORCH_CHECK(uids.size() == inputs_.size() + outputs_.size(),
                "the offered plan has ", uids.size(), " ports, the group ",
                inputs_.size() + outputs_.size());
    auto fast = std::make_shared<Installed>();
    fast->plan = plan;
    fast->tf32_source = tf32_source;
    fast->tf32 = tf32;
    fast->order.resize(uids.size());
    std::iota(fast->order.begin(), fast->order.end(), 0);
    std::sort(fast->order.begin(), fast->order.end(),
              [&](int a, int b) { return uids[a] < uids[b]; });
    installed_generation_ = generation;
    std::atomic_store(&fast_, std::shared_ptr<const Installed>(std::move(fast)));
  }

  const std::shared_ptr<py::object> run_;       // the Python executor's counted run
  const std::shared_ptr<py::object> executor_;  // the Python executor, for its offers
  const std::vector<PortSpec> inputs_, outputs_;
  std::shared_ptr<const Installed> fast_;  // read and swapped atomically
  std::atomic<int64_t> installed_generation_{-1};
  std::atomic<int64_t> pending_generation_{-1};
  std::atomic<int64_t> failed_generation_{-1};
};

}  // namespace

void bind(py::module& m) {
  py::class_<NativePlan, std::shared_ptr<NativePlan>>(
      m, "CudnnNativePlan",
      "A serialized cuDNN frontend plan, read back for C++ runs on a CUDA device.")
      .def(py::init([](int device, const py::bytes& payload) {
             cudnn_library();
             return std::make_shared<NativePlan>(device, std::string(payload));
           }),
           py::arg("device"), py::arg("payload"));
  py::class_<NativeRunner, std::shared_ptr<NativeRunner>>(
      m, "CudnnNativeRunner",
      "A cuDNN group's executor: the plan its Python executor offers runs in C++, "
      "anything else through `run`.")
      .def(py::init<py::object, py::object, const std::vector<PortTuple>&,
                    const std::vector<PortTuple>&>(),
           py::arg("run"), py::arg("executor"), py::arg("inputs"), py::arg("outputs"))
      .def("__call__",
           [](NativeRunner& runner, const std::vector<at::Tensor>& inputs) {
             py::gil_scoped_release no_gil;
             return runner(inputs);
           });
  m.def("_cudnn_native_stats", [] {
    py::dict d;
    d["native_runs"] = g_native_runs.load();
    d["native_failures"] = g_native_failures.load();
    return d;
  }, "runs of cuDNN groups executed in C++, and those whose C++ execute failed");
  m.def("_cudnn_native_reset", [] {
    g_native_runs = 0;
    g_native_failures = 0;
  });
}

std::optional<GroupExecutor> native_executor(const py::object& executor) {
  if (!py::isinstance<NativeRunner>(executor)) return std::nullopt;
  auto runner = executor.cast<std::shared_ptr<NativeRunner>>();
  return GroupExecutor(
      [runner](const std::vector<at::Tensor>& inputs) { return (*runner)(inputs); });
}

}  // namespace graphfuse::cudnn
