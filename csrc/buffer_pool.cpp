#include "buffer_pool.h"

#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace graphfuse {
namespace {

// Each block starts with a header holding its payload size, so the deleter
// (a plain function of the block) knows which free list it goes back to. The
// header is one cache line: the payload keeps c10's 64-byte alignment.
constexpr size_t kHeader = 64;

class BufferPool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* block = take(n);
    if (!block) {
      block = c10::alloc_cpu(n + kHeader);
      *static_cast<size_t*>(block) = n;
    }
    return {static_cast<char*>(block) + kHeader, block, &give_back, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }

  PoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {reused_, idle_};
  }

  void reset_reuse_count() {
    std::lock_guard<std::mutex> lock(mu_);
    reused_ = 0;
  }

  size_t release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* block : blocks) c10::free_cpu(block);
    free_.clear();
    auto released = idle_;
    idle_ = 0;
    return released;
  }

 private:
  void* take(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(n);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* block = it->second.back();
    it->second.pop_back();
    idle_ -= n;
    ++reused_;
    return block;
  }

  void put(void* block) {
    auto n = *static_cast<size_t*>(block);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_ + n <= kPoolIdleCapBytes) {
        free_[n].push_back(block);
        idle_ += n;
        return;
      }
    }
    c10::free_cpu(block);
  }

  static void give_back(void* block);

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by payload size
  size_t idle_ = 0;
  size_t reused_ = 0;
};

// Never destroyed: outputs freed during interpreter shutdown still return here.
BufferPool& pool() {
  static auto* p = new BufferPool();
  return *p;
}

void BufferPool::give_back(void* block) { pool().put(block); }

}  // namespace

c10::Allocator* buffer_pool() { return &pool(); }

PoolStats pool_stats() { return pool().stats(); }

void reset_pool_reuse_count() { pool().reset_reuse_count(); }

size_t release_idle_buffers() { return pool().release(); }

}  // namespace graphfuse
