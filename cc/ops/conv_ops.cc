// Op registrations of the convolution family under the TfOps> namespace. Inputs,
// outputs, attributes, types and defaults are those of TensorFlow's built-in ops, and so are
// the shape functions (TensorFlow's own, which honour dilations and groups), so a graph
// rejects at construction what TensorFlow's rejects, with the same message.
#include <string>

#include "absl/status/status.h"
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

// The V2 ops: output 0 has the shape of input `index` (input for backprop input, filter
// for backprop filter). All three inputs must be rank 4, out_backprop's depth must equal the
// filter's output depth, and its batch the input's, as TensorFlow's V1 shape functions
// check where the dims are known (TensorFlow's own V2 ops check only the rank of `index`).
absl::Status ShapeOfInput(InferenceContext* c, int index) {
  ShapeHandle input, filter, out_backprop;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &input));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &out_backprop));
  std::string format;
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &format));
  const int depth = format == "NCHW" ? 1 : 3;
  DimensionHandle out_depth, batch;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(out_backprop, depth), c->Dim(filter, 3), &out_depth));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(out_backprop, 0), c->Dim(input, 0), &batch));
  ShapeHandle out;
  if (index == 0) {
    TF_RETURN_IF_ERROR(c->ReplaceDim(input, 0, batch, &out));
  } else {
    TF_RETURN_IF_ERROR(c->ReplaceDim(filter, 3, out_depth, &out));
  }
  c->set_output(0, out);
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
    .SetShapeFn(::tensorflow::shape_inference::Conv2DShapeWithExplicitPadding);

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
    .SetShapeFn(::tensorflow::shape_inference::DepthwiseConv2DNativeShapeWithExplicitPadding);

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
