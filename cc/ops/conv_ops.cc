// Op registrations of the convolution family under the TfOps> namespace. Inputs,
// outputs, attributes, types and defaults are those of TensorFlow's built-in ops.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_ops {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

constexpr char kPaddingAttr[] = "padding: {'SAME', 'VALID', 'EXPLICIT'}";
constexpr char kExplicitPaddingsAttr[] = "explicit_paddings: list(int) = []";
constexpr char kDataFormatAttr[] = "data_format: {'NHWC', 'NCHW'} = 'NHWC'";
constexpr char kDilationsAttr[] = "dilations: list(int) = [1, 1, 1, 1]";

// Output `index` is the shape given by the int32 vector input `index`, of rank 4.
absl::Status ShapeFromSizesInput(InferenceContext* c, int index) {
  ShapeHandle s;
  TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(index, &s));
  TF_RETURN_IF_ERROR(c->WithRank(s, 4, &s));
  c->set_output(0, s);
  return absl::OkStatus();
}

// Output 0 has the shape of input `index`, which must be rank 4.
absl::Status ShapeOfInput(InferenceContext* c, int index) {
  ShapeHandle s;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(index), 4, &s));
  c->set_output(0, s);
  return absl::OkStatus();
}

// Forward convolution shape, plain or depthwise, from the shared geometry rules: dilations
// are honoured for depthwise too, and grouped filters are accepted.
absl::Status ForwardShape(InferenceContext* c, bool depthwise) {
  ShapeHandle input, filter;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &input));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
  std::string format, padding;
  std::vector<int64_t> strides, dilations, explicit_paddings;
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &format));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &explicit_paddings));
  const bool nchw = format == "NCHW";
  const int h = nchw ? 2 : 1, w = nchw ? 3 : 2, ch = nchw ? 1 : 3;
  // Attribute errors are reported by the kernel, with the offending values; shape
  // inference leaves the spatial sizes unknown when the attributes are malformed.
  const bool attrs_ok = strides.size() == 4 && dilations.size() == 4 &&
                        (padding != "EXPLICIT" || explicit_paddings.size() == 8);

  DimensionHandle batch = c->Dim(input, 0);
  DimensionHandle out_depth = c->Dim(filter, 3);
  if (depthwise) {
    TF_RETURN_IF_ERROR(c->Multiply(c->Dim(filter, 2), c->Dim(filter, 3), &out_depth));
  }
  DimensionHandle rows = c->UnknownDim(), cols = c->UnknownDim();
  if (attrs_ok) {
    ConvAttrs a;
    a.padding = padding == "SAME" ? Padding::kSame
                : padding == "VALID" ? Padding::kValid : Padding::kExplicit;
    int64_t pads[4] = {0, 0, 0, 0};
    if (a.padding == Padding::kExplicit) {
      pads[0] = explicit_paddings[2 * h];
      pads[1] = explicit_paddings[2 * h + 1];
      pads[2] = explicit_paddings[2 * w];
      pads[3] = explicit_paddings[2 * w + 1];
    }
    const int64_t in_dims[2] = {c->Value(c->Dim(input, h)), c->Value(c->Dim(input, w))};
    const int64_t k_dims[2] = {c->Value(c->Dim(filter, 0)), c->Value(c->Dim(filter, 1))};
    const int tensor_dim[2] = {h, w};
    DimensionHandle* out_dims[2] = {&rows, &cols};
    for (int i = 0; i < 2; ++i) {
      if (in_dims[i] < 0 || k_dims[i] < 0) continue;  // unknown
      int64_t out, before = pads[2 * i], after = pads[2 * i + 1];
      const std::string err = WindowedOutputSize(
          in_dims[i], k_dims[i], dilations[tensor_dim[i]], strides[tensor_dim[i]],
          a.padding, &before, &after, &out);
      if (!err.empty()) return absl::InvalidArgumentError(err);
      *out_dims[i] = c->MakeDim(out);
    }
  }
  std::vector<DimensionHandle> dims(4);
  dims[0] = batch;
  dims[ch] = out_depth;
  dims[h] = rows;
  dims[w] = cols;
  c->set_output(0, c->MakeShape(dims));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfOps>Conv2D")
    .Input("input: T")
    .Input("filter: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double, int32}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, false); });

REGISTER_OP("TfOps>Conv2DBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double, int32}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn(::tensorflow::shape_inference::Conv2DBackpropInputShape);

REGISTER_OP("TfOps>Conv2DBackpropInputV2")
    .Input("input: T")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double, int32}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ShapeOfInput(c, 0); });

REGISTER_OP("TfOps>Conv2DBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ShapeFromSizesInput(c, 1); });

REGISTER_OP("TfOps>Conv2DBackpropFilterV2")
    .Input("input: T")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr("use_cudnn_on_gpu: bool = true")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ShapeOfInput(c, 1); });

REGISTER_OP("TfOps>DepthwiseConv2dNative")
    .Input("input: T")
    .Input("filter: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, true); });

REGISTER_OP("TfOps>DepthwiseConv2dNativeBackpropInput")
    .Input("input_sizes: int32")
    .Input("filter: T")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ShapeFromSizesInput(c, 0); });

REGISTER_OP("TfOps>DepthwiseConv2dNativeBackpropFilter")
    .Input("input: T")
    .Input("filter_sizes: int32")
    .Input("out_backprop: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("strides: list(int)")
    .Attr(kPaddingAttr)
    .Attr(kExplicitPaddingsAttr)
    .Attr(kDataFormatAttr)
    .Attr(kDilationsAttr)
    .SetShapeFn([](InferenceContext* c) { return ShapeFromSizesInput(c, 1); });

}  // namespace tf_ops
