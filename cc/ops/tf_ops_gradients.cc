// Gradients of the TfOps> ops for TensorFlow's C++ gradient registry
// (tensorflow::AddSymbolicGradients). They build the same graphs as the Python gradients in
// tf_ops/_gradients.py, from the TfOps> ops only, so derivatives of any order stay inside
// kernels that support every data format, dilation, padding and grouping. With `grad` the
// incoming gradient:
//
//   Conv2D(x, w):                  d/x = BackpropInput(shape(x), w, grad)
//                                  d/w = BackpropFilter(x, shape(w), grad)
//   BackpropInput(sizes, w, dy):   d/w = BackpropFilter(grad, shape(w), dy)
//                                  d/dy = Conv2D(grad, w)
//   BackpropInputV2(x, w, dy):     d/w = BackpropFilterV2(grad, w, dy)
//                                  d/dy = Conv2D(grad, w)
//   BackpropFilter(x, sizes, dy):  d/x = BackpropInput(shape(x), grad, dy)
//                                  d/dy = Conv2D(x, grad)
//   BackpropFilterV2(x, w, dy):    d/x = BackpropInputV2(x, grad, dy)
//                                  d/dy = Conv2D(x, grad)
//
// and the same for the depthwise ops. Sizes inputs, and the inputs of the V2 ops that only
// give a shape, get no gradient. Every attribute of the op is passed on unchanged.
//
// The registrations run as static initializers of this file: compile it into the program
// once (two copies of a registration make TensorFlow's registry abort at start-up).
#include <string>
#include <vector>

#include "cc/ops/tf_ops_ops.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/graph.h"

namespace tf_ops {
namespace ops {
namespace {

using ::tensorflow::NoGradient;
using ::tensorflow::Operation;
using ::tensorflow::Output;
using ::tensorflow::Scope;

// The attributes of a forward op, to build its gradient ops with.
template <typename AttrsT>
struct OpAttrs {
  std::vector<int> strides;
  std::string padding;
  AttrsT attrs;
};

// GetNodeAttr appends list values to the vector it is given, so the lists are read into
// empty vectors (the Attrs start with the default dilations).
template <typename AttrsT>
absl::Status ReadCommonAttrs(const Operation& op, OpAttrs<AttrsT>* a) {
  const ::tensorflow::AttrSlice node_attrs = op.node()->attrs();
  std::vector<int> explicit_paddings, dilations;
  std::string data_format;
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(node_attrs, "strides", &a->strides));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(node_attrs, "padding", &a->padding));
  TF_RETURN_IF_ERROR(
      ::tensorflow::GetNodeAttr(node_attrs, "explicit_paddings", &explicit_paddings));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(node_attrs, "data_format", &data_format));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(node_attrs, "dilations", &dilations));
  a->attrs = a->attrs.ExplicitPaddings(explicit_paddings).DataFormat(data_format).Dilations(
      dilations);
  return absl::OkStatus();
}

absl::Status ReadAttrs(const Operation& op, OpAttrs<ConvAttrs>* a) {
  TF_RETURN_IF_ERROR(ReadCommonAttrs(op, a));
  bool use_cudnn_on_gpu = true;
  TF_RETURN_IF_ERROR(
      ::tensorflow::GetNodeAttr(op.node()->attrs(), "use_cudnn_on_gpu", &use_cudnn_on_gpu));
  a->attrs = a->attrs.UseCudnnOnGpu(use_cudnn_on_gpu);
  return absl::OkStatus();
}

absl::Status ReadAttrs(const Operation& op, OpAttrs<DepthwiseConvAttrs>* a) {
  return ReadCommonAttrs(op, a);
}

// The int32 shape of `t`, as the sizes inputs take it.
Output Shape32(const Scope& scope, const Output& t) {
  return ::tensorflow::ops::Shape(scope, t,
                                  ::tensorflow::ops::Shape::OutType(::tensorflow::DT_INT32));
}

absl::Status Conv2DGrad(const Scope& scope, const Operation& op,
                        const std::vector<Output>& grad_inputs,
                        std::vector<Output>* grad_outputs) {
  OpAttrs<ConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output x = op.input(0), w = op.input(1), grad = grad_inputs[0];
  grad_outputs->push_back(
      Conv2DBackpropInput(scope, Shape32(scope, x), w, grad, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(
      Conv2DBackpropFilter(scope, x, Shape32(scope, w), grad, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status Conv2DBackpropInputGrad(const Scope& scope, const Operation& op,
                                     const std::vector<Output>& grad_inputs,
                                     std::vector<Output>* grad_outputs) {
  OpAttrs<ConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output w = op.input(1), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(
      Conv2DBackpropFilter(scope, grad, Shape32(scope, w), dy, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(Conv2D(scope, grad, w, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status Conv2DBackpropInputV2Grad(const Scope& scope, const Operation& op,
                                       const std::vector<Output>& grad_inputs,
                                       std::vector<Output>* grad_outputs) {
  OpAttrs<ConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output w = op.input(1), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(
      Conv2DBackpropFilterV2(scope, grad, w, dy, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(Conv2D(scope, grad, w, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status Conv2DBackpropFilterGrad(const Scope& scope, const Operation& op,
                                      const std::vector<Output>& grad_inputs,
                                      std::vector<Output>* grad_outputs) {
  OpAttrs<ConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output x = op.input(0), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(
      Conv2DBackpropInput(scope, Shape32(scope, x), grad, dy, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(Conv2D(scope, x, grad, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status Conv2DBackpropFilterV2Grad(const Scope& scope, const Operation& op,
                                        const std::vector<Output>& grad_inputs,
                                        std::vector<Output>* grad_outputs) {
  OpAttrs<ConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output x = op.input(0), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(
      Conv2DBackpropInputV2(scope, x, grad, dy, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(Conv2D(scope, x, grad, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status DepthwiseConv2dNativeGrad(const Scope& scope, const Operation& op,
                                       const std::vector<Output>& grad_inputs,
                                       std::vector<Output>* grad_outputs) {
  OpAttrs<DepthwiseConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output x = op.input(0), w = op.input(1), grad = grad_inputs[0];
  grad_outputs->push_back(DepthwiseConv2dNativeBackpropInput(scope, Shape32(scope, x), w, grad,
                                                             a.strides, a.padding, a.attrs));
  grad_outputs->push_back(DepthwiseConv2dNativeBackpropFilter(scope, x, Shape32(scope, w), grad,
                                                              a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status DepthwiseConv2dNativeBackpropInputGrad(const Scope& scope, const Operation& op,
                                                    const std::vector<Output>& grad_inputs,
                                                    std::vector<Output>* grad_outputs) {
  OpAttrs<DepthwiseConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output w = op.input(1), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(DepthwiseConv2dNativeBackpropFilter(
      scope, grad, Shape32(scope, w), dy, a.strides, a.padding, a.attrs));
  grad_outputs->push_back(DepthwiseConv2dNative(scope, grad, w, a.strides, a.padding, a.attrs));
  return scope.status();
}

absl::Status DepthwiseConv2dNativeBackpropFilterGrad(const Scope& scope, const Operation& op,
                                                     const std::vector<Output>& grad_inputs,
                                                     std::vector<Output>* grad_outputs) {
  OpAttrs<DepthwiseConvAttrs> a;
  TF_RETURN_IF_ERROR(ReadAttrs(op, &a));
  const Output x = op.input(0), dy = op.input(2), grad = grad_inputs[0];
  grad_outputs->push_back(DepthwiseConv2dNativeBackpropInput(scope, Shape32(scope, x), grad, dy,
                                                             a.strides, a.padding, a.attrs));
  grad_outputs->push_back(NoGradient());
  grad_outputs->push_back(DepthwiseConv2dNative(scope, x, grad, a.strides, a.padding, a.attrs));
  return scope.status();
}

REGISTER_GRADIENT_OP("TfOps>Conv2D", Conv2DGrad);
REGISTER_GRADIENT_OP("TfOps>Conv2DBackpropInput", Conv2DBackpropInputGrad);
REGISTER_GRADIENT_OP("TfOps>Conv2DBackpropInputV2", Conv2DBackpropInputV2Grad);
REGISTER_GRADIENT_OP("TfOps>Conv2DBackpropFilter", Conv2DBackpropFilterGrad);
REGISTER_GRADIENT_OP("TfOps>Conv2DBackpropFilterV2", Conv2DBackpropFilterV2Grad);
REGISTER_GRADIENT_OP("TfOps>DepthwiseConv2dNative", DepthwiseConv2dNativeGrad);
REGISTER_GRADIENT_OP("TfOps>DepthwiseConv2dNativeBackpropInput",
                     DepthwiseConv2dNativeBackpropInputGrad);
REGISTER_GRADIENT_OP("TfOps>DepthwiseConv2dNativeBackpropFilter",
                     DepthwiseConv2dNativeBackpropFilterGrad);

}  // namespace
}  // namespace ops
}  // namespace tf_ops
