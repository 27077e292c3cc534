// Flush-to-zero and denormals-are-zero for the span of one partition's
// execution (or one ATen op's), on the calling thread and on every intra-op
// worker thread.
//
// x86 cores take a microcode assist for each denormal float operand or
// result. Attention probabilities under a mask of -100 (Swin's shifted
// windows) hold exp(-100) = 3.7e-44: their product with the values took
// 3.3-4.0 ms in oneDNN's brgemm and 2.7 ms in ATen's bmm, against 0.03 and
// 0.05 ms with normal operands. MXCSR is per thread, so the mode is set on
// each worker of torch's pool (the threads oneDNN's parallel regions run on)
// and put back before the call returns: eager ops after it keep IEEE
// gradual underflow.
#pragma once

#include <ATen/Parallel.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define GRAPHFUSE_HAS_MXCSR 1
#endif

namespace graphfuse {

class DenormalsFlushed {
 public:
  DenormalsFlushed() { on_every_thread(true); }
  ~DenormalsFlushed() { on_every_thread(false); }
  DenormalsFlushed(const DenormalsFlushed&) = delete;
  DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

  // Whether this CPU has the modes (x86: MXCSR's FTZ and DAZ bits).
  static constexpr bool supported() {
#ifdef GRAPHFUSE_HAS_MXCSR
    return true;
#else
    return false;
#endif
  }

 private:
  // One item per thread of the pool: each thread runs the body once, for its
  // own register (a thread running several items sets it once, as `saved`
  // would otherwise hold the flushed value).
  static void on_every_thread(bool flush) {
#ifdef GRAPHFUSE_HAS_MXCSR
    auto body = [flush](int64_t, int64_t) {
      constexpr unsigned kFtzDaz = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)
      thread_local unsigned saved = 0;
      thread_local bool flushed = false;
      if (flush && !flushed) {
        saved = _mm_getcsr();
        _mm_setcsr(saved | kFtzDaz);
        flushed = true;
      } else if (!flush && flushed) {
        _mm_setcsr(saved);
        flushed = false;
      }
    };
    at::parallel_for(0, at::get_num_threads(), 1, body);
#endif
  }
};

}  // namespace graphfuse
