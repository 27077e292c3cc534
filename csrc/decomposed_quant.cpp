// PT2E's quantize and dequantize ops (quantized_decomposed::*) for processes without
// Python: torch defines them in Python (torch/ao/quantization/fx/_decomposed.py), so a
// saved int8 model's unfused code could not run in a libtorch program. torch_graphfuse.export
// renames them to these, which make the same ATen calls in the same order, so the results
// are the same bits.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

namespace graphfuse {
namespace {

at::Tensor as_float(const at::Tensor& input) {
  auto t = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16
               ? input.to(at::kFloat)
               : input;
  TORCH_CHECK(t.scalar_type() == at::kFloat, "quantize: expected a float32 input, got ",
              t.scalar_type());
  return t;
}

at::Tensor quantize_per_tensor(const at::Tensor& input, double scale, int64_t zero_point,
                               int64_t quant_min, int64_t quant_max, at::ScalarType dtype) {
  double inv_scale = 1.0 / scale;
  return at::clamp(at::round(as_float(input) * inv_scale) + zero_point, quant_min, quant_max)
      .to(dtype);
}

at::Tensor dequantize_per_tensor(const at::Tensor& input, double scale, int64_t zero_point,
                                 int64_t quant_min, int64_t quant_max, at::ScalarType dtype,
                                 std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(input.scalar_type() == dtype, "dequantize: expected an input of ", dtype,
              ", got ", input.scalar_type());
  return (input.to(out_dtype.value_or(at::kFloat)) - zero_point) * scale;
}

// dequantize(quantize(x)) as one op: what torch_graphfuse runs for a quantized activation
// only dequantize nodes read, on a CPU whose int8 products saturate (the same calls, so
// the same bits, a NaN's cast to the integer dtype included).
at::Tensor fake_quantize_per_tensor(const at::Tensor& input, double scale, int64_t zero_point,
                                   int64_t quant_min, int64_t quant_max, at::ScalarType dtype) {
  return dequantize_per_tensor(
      quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype), scale,
      zero_point, quant_min, quant_max, dtype, std::nullopt);
}

// Scale and zero point as one-element tensors (the .tensor overloads).
at::Tensor quantize_per_tensor_tensor(const at::Tensor& input, const at::Tensor& scale,
                                      const at::Tensor& zero_point, int64_t quant_min,
                                      int64_t quant_max, at::ScalarType dtype) {
  TORCH_CHECK(scale.numel() == 1 && zero_point.numel() == 1,
              "quantize: one scale and zero point expected");
  return quantize_per_tensor(input, scale.item<double>(), zero_point.item<int64_t>(), quant_min,
                             quant_max, dtype);
}

at::Tensor dequantize_per_tensor_tensor(const at::Tensor& input, const at::Tensor& scale,
                                        const at::Tensor& zero_point, int64_t quant_min,
                                        int64_t quant_max, at::ScalarType dtype,
                                        std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(scale.numel() == 1 && zero_point.numel() == 1,
              "dequantize: one scale and zero point expected");
  return dequantize_per_tensor(input, scale.item<double>(), zero_point.item<int64_t>(),
                               quant_min, quant_max, dtype, out_dtype);
}

// The input with `axis` swapped to the front, and the per-channel parameters shaped to
// broadcast over it.
std::vector<int64_t> axis_first(int64_t dims, int64_t axis) {
  std::vector<int64_t> order(dims);
  for (int64_t d = 0; d < dims; ++d) order[d] = d;
  std::swap(order[0], order[axis]);
  return order;
}

std::vector<int64_t> channel_shape(int64_t dims, int64_t channels) {
  std::vector<int64_t> shape(dims, 1);
  shape[0] = channels;
  return shape;
}

at::Tensor quantize_per_channel(const at::Tensor& input, const at::Tensor& scales,
                                const at::Tensor& zero_points, int64_t axis, int64_t quant_min,
                                int64_t quant_max, at::ScalarType dtype) {
  auto x = as_float(input);
  TORCH_CHECK(axis < x.dim(), "quantize: expected axis < ", x.dim());
  auto order = axis_first(x.dim(), axis);
  x = x.permute(order);
  auto shape = channel_shape(x.dim(), scales.size(0));
  // Python's `1.0 / scales` is reciprocal(scales) * 1.0 (Tensor.__rtruediv__).
  auto res = at::clamp(at::round(x * (at::reciprocal(scales.view(shape)) * 1.0)) + zero_points.view(shape),
                       quant_min, quant_max);
  return res.permute(order).to(dtype);
}

at::Tensor dequantize_per_channel(const at::Tensor& input, const at::Tensor& scales,
                                  const std::optional<at::Tensor>& zero_points, int64_t axis,
                                  int64_t quant_min, int64_t quant_max, at::ScalarType dtype,
                                  std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(input.scalar_type() == dtype, "dequantize: expected an input of ", dtype,
              ", got ", input.scalar_type());
  TORCH_CHECK(axis < input.dim(), "dequantize: expected axis < ", input.dim());
  auto order = axis_first(input.dim(), axis);
  auto x = input.permute(order);
  auto shape = channel_shape(x.dim(), scales.size(0));
  auto res = zero_points ? (x - zero_points->view(shape)) * scales.view(shape)
                         : x * scales.view(shape);
  return res.to(out_dtype.value_or(at::kFloat)).permute(order);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(graphfuse, m) {
  m.def("quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, "
        "int quant_max, ScalarType dtype) -> Tensor",
        &quantize_per_tensor);
  m.def("fake_quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, "
        "int quant_max, ScalarType dtype) -> Tensor",
        &fake_quantize_per_tensor);
  m.def("quantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, "
        "int quant_min, int quant_max, ScalarType dtype) -> Tensor",
        &quantize_per_tensor_tensor);
  m.def("dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor",
        &dequantize_per_tensor);
  m.def("dequantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, "
        "int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> "
        "Tensor",
        &dequantize_per_tensor_tensor);
  m.def("quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, "
        "int quant_min, int quant_max, ScalarType dtype) -> Tensor",
        &quantize_per_channel);
  m.def("dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, "
        "int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> "
        "Tensor",
        &dequantize_per_channel);
}

}  // namespace graphfuse
