// How torch tensors and oneDNN's logical tensors describe the same memory:
// dtypes, and the dim orders that decide the strides of eager's results.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <optional>

#include "graph.h"

namespace graphfuse {

// The oneDNN data type of a torch dtype; nullopt for one oneDNN does not take.
std::optional<DataType> to_backend_dtype(c10::ScalarType t);
c10::ScalarType to_scalar_type(DataType t);

// How a tensor's memory is laid out, which decides the strides of eager's
// results: row-major, channels-last (4-d/5-d), or another order.
enum class Layout : int64_t { kRowMajor, kChannelsLast, kOther };

// Dense with `order` (outermost dim first); size-1 dims may have any stride.
bool dense_in_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, const Dims& order);
Dims row_major_order(size_t rank);
Dims channels_last_order(size_t rank);
// Dims from outermost to innermost stride (ties: the earlier dim outer).
Dims order_of(c10::IntArrayRef strides);
// Eager lays a result out in its inputs' dim order, dense: a slice of a
// row-major tensor counts as row-major. Size-1 dims are left out of the order.
Layout layout_of(c10::IntArrayRef sizes, c10::IntArrayRef strides);
// Whether a tensor and the profiled one are both dense in the same dim order,
// each stride the one a dense tensor in that order has (a size-1 dim's stride
// could leave the order open otherwise): eager lays out its results alike at
// both sizes.
bool same_dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      c10::IntArrayRef profiled_sizes, c10::IntArrayRef profiled_strides);
// Whether a tensor and the profiled one have their dims of size 1 alike, the others'
// strides in the same order (no two equal), and are both dense or neither: eager lays
// out its results alike at both sizes (TensorIterator orders a result's dims as its
// inputs' strides are; empty_like keeps a dense tensor's strides and lays any other out
// row-major). A slice at another length, such as the half a rotary embedding reads.
bool same_stride_order(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       c10::IntArrayRef profiled_sizes, c10::IntArrayRef profiled_strides);
// Whether oneDNN 3.12's matmul reads an operand right in these strides, other than
// row-major. Measured on random layouts: it misreads size-1 batch dims whose strides
// put them among the matrix dims, batches interleaved with the matrix dims, and
// padded layouts its batch test takes for contiguous batches (below). Taken as they
// come: rank 3 and, for rank 4 (B, H, R, C), the heads of attention: the matrix rows
// outside the heads, each dim's stride at least the extent of the dims inside it
// (H's transpose of a projection, and a slice of a packed qkv projection), with R and C
// either way round.
bool matmul_reads_as_given(c10::IntArrayRef sizes, c10::IntArrayRef strides);
// Its brgemm matmul takes batch b at b times the innermost batch dim's stride wherever the
// largest batch stride over the smallest (rounded down) equals the result's number of
// batches, a test that also passes where that offset is wrong: the query of a packed qkv
// projection at batch = 3 x tokens (2-9 off after the first batch). Dense (B, R, H, C)
// and (B, C, H, R) operands it matches by their tag first, and reads right. (oneDNN 3.13
// checks the batch dims' nesting instead.)
bool matmul_misreads_batches(c10::IntArrayRef sizes, c10::IntArrayRef strides);
// The strides of a dense tensor of `sizes` in dim `order`.
Dims dense_strides(const Dims& sizes, const Dims& order);

// Channels-last as torch's memory formats say it (4-d and 5-d).
bool channels_last(const at::Tensor& t);
// (N, C, W) with W's stride C and C's 1: the layout oneDNN writes a 1-d
// convolution's result in when the next group reads it.
bool channels_last_1d(const at::Tensor& t);
// A tensor's layout; torch keeps the first two answers as flags, so the usual
// path does no work.
Layout input_layout(const at::Tensor& t);
// The canonical strides of a row-major or channels-last tensor's layout,
// whatever torch left in the strides of its size-1 dims.
Dims canonical_strides(const at::Tensor& t);

}  // namespace graphfuse
