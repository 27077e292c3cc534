// How torch tensors and oneDNN's logical tensors describe the same memory.
#include "layout.h"

#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <vector>

namespace graphfuse {

std::optional<DataType> to_backend_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return DataType::f32;
    case c10::ScalarType::BFloat16: return DataType::bf16;
    case c10::ScalarType::Half: return DataType::f16;
    // Quantized data as plain tensors (PT2E's quantize/dequantize ops).
    case c10::ScalarType::Byte: return DataType::u8;
    case c10::ScalarType::Char: return DataType::s8;
    // An attention mask, which only Select reads (one byte per element, as oneDNN's).
    case c10::ScalarType::Bool: return DataType::boolean;
    default: return std::nullopt;
  }
}

c10::ScalarType to_scalar_type(DataType t) {
  switch (t) {
    case DataType::bf16: return c10::ScalarType::BFloat16;
    case DataType::f16: return c10::ScalarType::Half;
    case DataType::s32: return c10::ScalarType::Int;
    case DataType::s8: return c10::ScalarType::Char;
    case DataType::u8: return c10::ScalarType::Byte;
    case DataType::boolean: return c10::ScalarType::Bool;
    default: return c10::ScalarType::Float;
  }
}

bool dense_in_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, const Dims& order) {
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (sizes[*it] != 1 && strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  return true;
}

bool matmul_misreads_batches(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  auto rank = sizes.size();
  if (rank <= 3) return false;
  auto inner = rank - 3;
  int64_t batches = 1, lo = strides[inner], hi = strides[inner];
  for (size_t d = 0; d <= inner; ++d) {
    batches *= sizes[d];
    lo = std::min(lo, strides[d]);
    hi = std::max(hi, strides[d]);
  }
  // Its test compares with the result's batch count, which a broadcast operand's size-1
  // dims hide: such an operand is taken to pass it.
  bool broadcast = std::any_of(sizes.begin(), sizes.begin() + inner + 1,
                               [](int64_t n) { return n == 1; });
  if (lo <= 0 || (hi / lo != batches && !broadcast)) return false;  // walked dim by dim
  int64_t expected = strides[inner];
  bool right = true;
  for (size_t d = inner + 1; d-- > 0;) {
    right = right && (sizes[d] == 1 || strides[d] == expected);
    expected *= sizes[d];
  }
  if (right) return false;
  bool all_above_one = std::all_of(sizes.begin(), sizes.end(), [](int64_t n) { return n > 1; });
  return !(rank == 4 && all_above_one &&
           (dense_in_order(sizes, strides, {0, 2, 1, 3}) || dense_in_order(sizes, strides, {0, 3, 1, 2})));
}

bool matmul_reads_as_given(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  if (sizes.size() <= 3) return true;
  if (sizes.size() != 4 || matmul_misreads_batches(sizes, strides)) return false;
  // Dims from innermost out: the contiguous matrix dim, the heads, the other matrix dim,
  // the batch; each stride at least the extent of the one inside it.
  auto nested = [&](std::initializer_list<size_t> inner_to_outer) {
    int64_t extent = 1;
    for (auto d : inner_to_outer) {
      if (strides[d] < extent) return false;
      extent = strides[d] * sizes[d];
    }
    return strides[*inner_to_outer.begin()] == 1;
  };
  return nested({3, 1, 2, 0}) || nested({2, 1, 3, 0});
}

Dims row_major_order(size_t rank) {
  Dims order(rank);
  for (size_t i = 0; i < rank; ++i) order[i] = static_cast<int64_t>(i);
  return order;
}

Dims channels_last_order(size_t rank) {
  Dims order{0};
  for (size_t i = 2; i < rank; ++i) order.push_back(static_cast<int64_t>(i));
  order.push_back(1);
  return order;
}

Dims order_of(c10::IntArrayRef strides) {
  Dims order = row_major_order(strides.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}

Layout layout_of(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  auto rank = sizes.size();
  bool cl_rank = rank == 4 || rank == 5;
  if (dense_in_order(sizes, strides, row_major_order(rank))) return Layout::kRowMajor;
  if (cl_rank && dense_in_order(sizes, strides, channels_last_order(rank)))
    return Layout::kChannelsLast;
  auto without_unit_dims = [&](const Dims& order) {
    Dims kept;
    for (auto d : order)
      if (sizes[d] != 1) kept.push_back(d);
    return kept;
  };
  auto order = without_unit_dims(order_of(strides));
  if (order == without_unit_dims(row_major_order(rank))) return Layout::kRowMajor;
  if (cl_rank && order == without_unit_dims(channels_last_order(rank)))
    return Layout::kChannelsLast;
  return Layout::kOther;
}

namespace {

// Dense in `order` with each stride, a size-1 dim's too, the one dense_strides gives
// (but for an empty tensor, whose dims past a size-0 one this never matches: such a
// spec keeps running unfused, as before size-1 dims were let in).
bool strides_of_dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, const Dims& order) {
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  return true;
}

}  // namespace

bool same_dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      c10::IntArrayRef profiled_sizes, c10::IntArrayRef profiled_strides) {
  if (sizes.size() != profiled_sizes.size()) return false;
  auto order = order_of(profiled_strides);
  return order_of(strides) == order && strides_of_dense_order(sizes, strides, order) &&
         strides_of_dense_order(profiled_sizes, profiled_strides, order);
}

bool same_stride_order(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       c10::IntArrayRef profiled_sizes, c10::IntArrayRef profiled_strides) {
  if (sizes.size() != profiled_sizes.size()) return false;
  // The dims of size > 1, outermost first; empty when two share a stride (an order
  // that the strides leave open).
  auto ordered = [](c10::IntArrayRef n, c10::IntArrayRef st) {
    Dims kept;
    for (auto d : order_of(st))
      if (n[d] != 1) kept.push_back(d);
    for (size_t k = 1; k < kept.size(); ++k)
      if (st[kept[k - 1]] == st[kept[k]]) return Dims{};
    return kept;
  };
  for (size_t d = 0; d < sizes.size(); ++d)
    if ((sizes[d] == 1) != (profiled_sizes[d] == 1)) return false;
  auto order = ordered(profiled_sizes, profiled_strides);
  return !order.empty() && ordered(sizes, strides) == order &&
         dense_in_order(sizes, strides, order_of(strides)) ==
             dense_in_order(profiled_sizes, profiled_strides, order_of(profiled_strides));
}

Dims dense_strides(const Dims& sizes, const Dims& order) {
  Dims strides(sizes.size());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= std::max<int64_t>(sizes[*it], 1);
  }
  return strides;
}

bool channels_last(const at::Tensor& t) {
  return (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
         (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

bool channels_last_1d(const at::Tensor& t) {
  return t.dim() == 3 && t.stride(1) == 1 && t.stride(2) == t.size(1) &&
         t.stride(0) == t.size(1) * t.size(2);
}

Layout input_layout(const at::Tensor& t) {
  if (t.is_contiguous()) return Layout::kRowMajor;
  if (channels_last(t)) return Layout::kChannelsLast;
  return layout_of(t.sizes(), t.strides());
}

Dims canonical_strides(const at::Tensor& t) {
  if (t.is_contiguous()) {
    auto s = c10::contiguous_strides(t.sizes());
    return Dims(s.begin(), s.end());
  }
  return t.dim() == 4 ? c10::get_channels_last_strides_2d(t.sizes())
                      : c10::get_channels_last_strides_3d(t.sizes());
}

}  // namespace graphfuse
