#include "buffer_pool.h"

#include "kernel_stats.h"

#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <malloc.h>
#include <sys/mman.h>

#include <cctype>
#include <cstdlib>
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace graphfuse {

namespace {

// A setting of torch_graphfuse/config.py: `fallback` where unset or empty, an error naming
// the values it takes where it is set to another (a typo must not pass for the default).
size_t env_size(const char* name, size_t fallback, size_t least) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  auto value = std::strtoull(text, &end, 10);
  TORCH_CHECK(*end == '\0' && std::isdigit(static_cast<unsigned char>(*text)) && value >= least,
              name, "='", text, "': expected an integer from ", least, " on");
  return static_cast<size_t>(value);
}

// Each block starts with a header holding its size class, so the deleter (a
// plain function of the block) knows which free list it goes back to. The
// header is one cache line: the payload keeps c10's 64-byte alignment.
constexpr size_t kHeader = 64;
// Blocks from this size on are mapped pages of their own (see block_of_class).
constexpr size_t kMappedBytes = size_t{1} << 20;

// Size classes: multiples of 64 bytes up to 4 KiB, then eight per power of
// two (at most 12.5% rounding), so outputs whose sizes vary a little share
// buffers instead of each size keeping its own.
size_t size_class(size_t n) {
  if (n <= 4096) return (n + 63) / 64 * 64;
  size_t top = size_t{1} << (63 - __builtin_clzll(n));  // highest power of two <= n
  size_t step = top / 8;
  return (n + step - 1) / step * step;
}

// An idle buffer not taken again within this many pool allocations is
// given back to the system: sizes a model stopped producing do not stay.
constexpr size_t kAgeLimit = 4096;

class BufferPool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* block = block_of_class(size_class(n));
    return {static_cast<char*>(block) + kHeader, block, &give_back, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }

  size_t release() {
    size_t released = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [cls, blocks] : free_)
        for (const auto& idle : blocks) free_block(idle.block);
      free_.clear();
      released = idle_;
      set_idle(0);
    }
    // glibc keeps freed heap pages mapped; hand them back so RSS drops.
    malloc_trim(0);
    return released;
  }

 private:
  struct Idle {
    void* block;
    size_t since;  // clock_ when it was freed
  };

  // A pooled block: an idle one of the class, else a new one. Large blocks are
  // mapped from the system and unmapped when freed. From malloc, glibc kept
  // them after free (its mmap threshold rises to 32 MB with each freed large
  // block): ViT fed ten requests at batches 8-32 peaked at 2.24 GB, against
  // 1.77 GB mapped (frozen TorchScript: 1.57 GB).
  void* block_of_class(size_t cls) {
    if (void* block = take(cls)) return block;
    void* block = nullptr;
    if (cls + kHeader >= kMappedBytes) {
      block = mmap(nullptr, cls + kHeader, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
      TORCH_CHECK(block != MAP_FAILED, "torch_graphfuse: out of memory mapping ", cls + kHeader,
                  " bytes");
    } else {
      block = c10::alloc_cpu(cls + kHeader);
    }
    *static_cast<size_t*>(block) = cls;
    return block;
  }

  static void free_block(void* block) {
    auto cls = *static_cast<size_t*>(block);
    if (cls + kHeader >= kMappedBytes)
      munmap(block, cls + kHeader);
    else
      c10::free_cpu(block);
  }

  void* take(size_t cls) {
    std::lock_guard<std::mutex> lock(mu_);
    ++clock_;
    if (clock_ % (kAgeLimit / 4) == 0) age_out();
    auto it = free_.find(cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    // The most recently freed buffer: its pages are the likeliest in cache.
    void* block = it->second.back().block;
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    set_idle(idle_ - cls);
    ++counters().reused_outputs;
    return block;
  }

  // Frees the buffers idle for kAgeLimit allocations or more (under mu_).
  void age_out() {
    bool freed = false;
    for (auto it = free_.begin(); it != free_.end();) {
      auto& blocks = it->second;
      while (!blocks.empty() && clock_ - blocks.front().since >= kAgeLimit) {
        free_block(blocks.front().block);
        blocks.pop_front();
        set_idle(idle_ - it->first);
        ++counters().aged_out_buffers;
        freed = true;
      }
      it = blocks.empty() ? free_.erase(it) : std::next(it);
    }
    if (freed) malloc_trim(0);
  }

  void put(void* block) {
    auto cls = *static_cast<size_t*>(block);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_ + cls <= memory_budget().pool_idle_bytes) {
        free_[cls].push_back({block, clock_});
        set_idle(idle_ + cls);
        return;
      }
    }
    free_block(block);
  }

  static void give_back(void* block);

  // Under mu_: the idle bytes, mirrored in the kernel stats.
  void set_idle(size_t bytes) {
    idle_ = bytes;
    counters().idle_buffer_bytes = bytes;
  }

  std::mutex mu_;
  std::map<size_t, std::deque<Idle>> free_;  // by size class, oldest first
  size_t idle_ = 0;
  size_t clock_ = 0;  // pool allocations so far
};

// Never destroyed: outputs freed during interpreter shutdown still return here.
BufferPool& pool() {
  static auto* p = new BufferPool();
  return *p;
}

void BufferPool::give_back(void* block) { pool().put(block); }

}  // namespace

const MemoryBudget& memory_budget() {
  static const MemoryBudget budget{
      env_size("TORCH_GRAPHFUSE_SPECS_PER_GROUP", 8, 1),
      env_size("TORCH_GRAPHFUSE_WEIGHT_CACHE_MB", 0, 0) << 20,
      env_size("TORCH_GRAPHFUSE_POOL_MB", 256, 0) << 20,
      env_size("TORCH_GRAPHFUSE_COMPILE_AT", 1, 1),
  };
  return budget;
}

size_t weight_budget() {
  if (std::getenv("TORCH_GRAPHFUSE_WEIGHT_CACHE_MB") != nullptr &&
      *std::getenv("TORCH_GRAPHFUSE_WEIGHT_CACHE_MB") != '\0')
    return memory_budget().weight_cache_bytes;
  return std::max(kMinWeightBudget, kWeightFactor * counters().model_weight_bytes.load());
}

c10::Allocator* buffer_pool() { return &pool(); }

size_t release_idle_buffers() { return pool().release(); }

}  // namespace graphfuse
