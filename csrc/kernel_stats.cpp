#include "kernel_stats.h"

#include <map>
#include <mutex>

namespace graphfuse {

KernelCounters& counters() {
  static KernelCounters c;
  return c;
}

void reset_kernel_stats() {
  auto& c = counters();
#define GRAPHFUSE_RESET(name, kind, doc) \
  if (StatKind::kind == StatKind::count) c.name = 0;
  GRAPHFUSE_KERNEL_STATS(GRAPHFUSE_RESET)
#undef GRAPHFUSE_RESET
}

namespace {

std::mutex g_unfused_mu;
std::map<int64_t, std::vector<UnfusedSpec>> g_unfused;  // by report

}  // namespace

void record_unfused_spec(int64_t report, const std::string& group, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_unfused_mu);
  g_unfused[report].push_back({group, why});
}

std::vector<UnfusedSpec> unfused_specs(int64_t report) {
  std::lock_guard<std::mutex> lock(g_unfused_mu);
  auto it = g_unfused.find(report);
  return it == g_unfused.end() ? std::vector<UnfusedSpec>{} : it->second;
}

}  // namespace graphfuse
