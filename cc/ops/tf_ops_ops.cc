// The C++ op classes of tf_ops_ops.h: each constructor adds one TfOps> node to the scope's
// graph with NodeBuilder, the way TensorFlow's generated op classes do (inputs converted
// with AsNodeOut, a unique name from the scope, the scope's device / control dependencies /
// kernel label applied through UpdateBuilder, then shape inference through the scope).
#include "cc/ops/tf_ops_ops.h"

#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/graph/node_builder.h"

namespace tf_ops {
namespace ops {
namespace {

using ::tensorflow::Input;
using ::tensorflow::Node;
using ::tensorflow::NodeBuilder;
using ::tensorflow::Operation;
using ::tensorflow::Output;
using ::tensorflow::Scope;

constexpr const char* kOpNames[] = {
    "TfOps>Conv2D",
    "TfOps>Conv2DBackpropInput",
    "TfOps>Conv2DBackpropInputV2",
    "TfOps>Conv2DBackpropFilter",
    "TfOps>Conv2DBackpropFilterV2",
    "TfOps>DepthwiseConv2dNative",
    "TfOps>DepthwiseConv2dNativeBackpropInput",
    "TfOps>DepthwiseConv2dNativeBackpropFilter",
};

constexpr char kLinkAdvice[] =
    "tf_ops' op library is not loaded in this process: link the program with the flags of "
    "`python -m tf_ops.sysconfig --libs`, which keep it linked with "
    "-Wl,--push-state,--no-as-needed -l:_tf_ops.so -Wl,--pop-state and give its run path "
    "(see cc/ops/tf_ops_ops.h)";

bool IsRegistered(const char* op_name) {
  const ::tensorflow::OpRegistrationData* data = nullptr;
  return ::tensorflow::OpRegistry::Global()->LookUp(op_name, &data).ok();
}

// The status of NodeBuilder::Finalize, with the way to fix it when the op is not registered.
absl::Status WithLinkAdvice(const absl::Status& status, const char* op_name) {
  if (status.ok() || IsRegistered(op_name)) return status;
  return absl::NotFoundError(absl::StrCat(status.message(), ". ", kLinkAdvice, "."));
}

template <typename AttrsT>
void SetCommonAttrs(NodeBuilder* builder, absl::Span<const int> strides,
                    absl::string_view padding, const AttrsT& attrs) {
  builder->Attr("strides", strides)
      .Attr("padding", padding)
      .Attr("explicit_paddings", absl::Span<const int>(attrs.explicit_paddings_))
      .Attr("data_format", absl::string_view(attrs.data_format_))
      .Attr("dilations", absl::Span<const int>(attrs.dilations_));
}

void SetOpAttrs(NodeBuilder* builder, absl::Span<const int> strides, absl::string_view padding,
                const ConvAttrs& attrs) {
  SetCommonAttrs(builder, strides, padding, attrs);
  builder->Attr("use_cudnn_on_gpu", attrs.use_cudnn_on_gpu_);
}

void SetOpAttrs(NodeBuilder* builder, absl::Span<const int> strides, absl::string_view padding,
                const DepthwiseConvAttrs& attrs) {
  SetCommonAttrs(builder, strides, padding, attrs);
}

// Adds a node of `op_name` with `inputs` and the attributes to the scope's graph, and points
// `op` at it. Does nothing if the scope already has an error; records any error in it.
template <typename AttrsT>
void AddNodeOrThrow(const Scope& scope, const char* op_name, std::initializer_list<Input> inputs,
                    absl::Span<const int> strides, absl::string_view padding, const AttrsT& attrs,
                    internal::SingleOutputOp* op) {
  if (!scope.ok()) return;
  std::vector<NodeBuilder::NodeOut> node_inputs;
  for (const Input& input : inputs) {
    node_inputs.push_back(::tensorflow::ops::AsNodeOut(scope, input));
    if (!scope.ok()) return;
  }
  NodeBuilder builder(scope.GetUniqueNameForOp(op_name), op_name);
  for (const NodeBuilder::NodeOut& input : node_inputs) builder.Input(input);
  SetOpAttrs(&builder, strides, padding, attrs);
  scope.UpdateBuilder(&builder);
  Node* node = nullptr;
  scope.UpdateStatus(WithLinkAdvice(builder.Finalize(scope.graph(), &node), op_name));
  if (!scope.ok()) return;
  scope.UpdateStatus(scope.DoShapeInference(node));
  op->operation = Operation(node);
  op->output = Output(node, 0);
}

// AddNodeOrThrow with no exception leaving it: one thrown (an allocation that fails) is the
// scope's error.
template <typename AttrsT>
void AddNode(const Scope& scope, const char* op_name, std::initializer_list<Input> inputs,
             absl::Span<const int> strides, absl::string_view padding, const AttrsT& attrs,
             internal::SingleOutputOp* op) {
  try {
    AddNodeOrThrow(scope, op_name, inputs, strides, padding, attrs, op);
  } catch (const std::bad_alloc&) {
    scope.UpdateStatus(absl::ResourceExhaustedError(absl::StrCat(op_name, ": out of memory")));
  } catch (const std::exception& e) {
    scope.UpdateStatus(absl::InternalError(absl::StrCat(op_name, ": ", e.what())));
  }
}

}  // namespace

absl::Status CheckOpsRegistered() {
  std::vector<std::string> missing;
  for (const char* name : kOpNames) {
    if (!IsRegistered(name)) missing.push_back(name);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("Ops not registered: ", absl::StrJoin(missing, ", "),
                                          ". ", kLinkAdvice, "."));
}

ConvAttrs ConvAttrs::UseCudnnOnGpu(bool x) const {
  ConvAttrs ret = *this;
  ret.use_cudnn_on_gpu_ = x;
  return ret;
}

ConvAttrs ConvAttrs::ExplicitPaddings(absl::Span<const int> x) const {
  ConvAttrs ret = *this;
  ret.explicit_paddings_.assign(x.begin(), x.end());
  return ret;
}

ConvAttrs ConvAttrs::DataFormat(absl::string_view x) const {
  ConvAttrs ret = *this;
  ret.data_format_ = std::string(x);
  return ret;
}

ConvAttrs ConvAttrs::Dilations(absl::Span<const int> x) const {
  ConvAttrs ret = *this;
  ret.dilations_.assign(x.begin(), x.end());
  return ret;
}

DepthwiseConvAttrs DepthwiseConvAttrs::ExplicitPaddings(absl::Span<const int> x) const {
  DepthwiseConvAttrs ret = *this;
  ret.explicit_paddings_.assign(x.begin(), x.end());
  return ret;
}

DepthwiseConvAttrs DepthwiseConvAttrs::DataFormat(absl::string_view x) const {
  DepthwiseConvAttrs ret = *this;
  ret.data_format_ = std::string(x);
  return ret;
}

DepthwiseConvAttrs DepthwiseConvAttrs::Dilations(absl::Span<const int> x) const {
  DepthwiseConvAttrs ret = *this;
  ret.dilations_.assign(x.begin(), x.end());
  return ret;
}

Conv2D::Conv2D(const Scope& scope, Input input, Input filter, absl::Span<const int> strides,
               absl::string_view padding)
    : Conv2D(scope, input, filter, strides, padding, Attrs()) {}

Conv2D::Conv2D(const Scope& scope, Input input, Input filter, absl::Span<const int> strides,
               absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>Conv2D", {input, filter}, strides, padding, attrs, this);
}

Conv2DBackpropInput::Conv2DBackpropInput(const Scope& scope, Input input_sizes, Input filter,
                                         Input out_backprop, absl::Span<const int> strides,
                                         absl::string_view padding)
    : Conv2DBackpropInput(scope, input_sizes, filter, out_backprop, strides, padding,
                          Attrs()) {}

Conv2DBackpropInput::Conv2DBackpropInput(const Scope& scope, Input input_sizes, Input filter,
                                         Input out_backprop, absl::Span<const int> strides,
                                         absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>Conv2DBackpropInput", {input_sizes, filter, out_backprop}, strides,
          padding, attrs, this);
}

Conv2DBackpropInputV2::Conv2DBackpropInputV2(const Scope& scope, Input input, Input filter,
                                             Input out_backprop,
                                             absl::Span<const int> strides,
                                             absl::string_view padding)
    : Conv2DBackpropInputV2(scope, input, filter, out_backprop, strides, padding, Attrs()) {}

Conv2DBackpropInputV2::Conv2DBackpropInputV2(const Scope& scope, Input input, Input filter,
                                             Input out_backprop,
                                             absl::Span<const int> strides,
                                             absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>Conv2DBackpropInputV2", {input, filter, out_backprop}, strides,
          padding, attrs, this);
}

Conv2DBackpropFilter::Conv2DBackpropFilter(const Scope& scope, Input input, Input filter_sizes,
                                           Input out_backprop, absl::Span<const int> strides,
                                           absl::string_view padding)
    : Conv2DBackpropFilter(scope, input, filter_sizes, out_backprop, strides, padding,
                           Attrs()) {}

Conv2DBackpropFilter::Conv2DBackpropFilter(const Scope& scope, Input input, Input filter_sizes,
                                           Input out_backprop, absl::Span<const int> strides,
                                           absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>Conv2DBackpropFilter", {input, filter_sizes, out_backprop}, strides,
          padding, attrs, this);
}

Conv2DBackpropFilterV2::Conv2DBackpropFilterV2(const Scope& scope, Input input, Input filter,
                                               Input out_backprop,
                                               absl::Span<const int> strides,
                                               absl::string_view padding)
    : Conv2DBackpropFilterV2(scope, input, filter, out_backprop, strides, padding, Attrs()) {}

Conv2DBackpropFilterV2::Conv2DBackpropFilterV2(const Scope& scope, Input input, Input filter,
                                               Input out_backprop,
                                               absl::Span<const int> strides,
                                               absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>Conv2DBackpropFilterV2", {input, filter, out_backprop}, strides,
          padding, attrs, this);
}

DepthwiseConv2dNative::DepthwiseConv2dNative(const Scope& scope, Input input, Input filter,
                                             absl::Span<const int> strides,
                                             absl::string_view padding)
    : DepthwiseConv2dNative(scope, input, filter, strides, padding, Attrs()) {}

DepthwiseConv2dNative::DepthwiseConv2dNative(const Scope& scope, Input input, Input filter,
                                             absl::Span<const int> strides,
                                             absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>DepthwiseConv2dNative", {input, filter}, strides, padding, attrs, this);
}

DepthwiseConv2dNativeBackpropInput::DepthwiseConv2dNativeBackpropInput(
    const Scope& scope, Input input_sizes, Input filter, Input out_backprop,
    absl::Span<const int> strides, absl::string_view padding)
    : DepthwiseConv2dNativeBackpropInput(scope, input_sizes, filter, out_backprop, strides,
                                         padding, Attrs()) {}

DepthwiseConv2dNativeBackpropInput::DepthwiseConv2dNativeBackpropInput(
    const Scope& scope, Input input_sizes, Input filter, Input out_backprop,
    absl::Span<const int> strides, absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>DepthwiseConv2dNativeBackpropInput",
          {input_sizes, filter, out_backprop}, strides, padding, attrs, this);
}

DepthwiseConv2dNativeBackpropFilter::DepthwiseConv2dNativeBackpropFilter(
    const Scope& scope, Input input, Input filter_sizes, Input out_backprop,
    absl::Span<const int> strides, absl::string_view padding)
    : DepthwiseConv2dNativeBackpropFilter(scope, input, filter_sizes, out_backprop, strides,
                                          padding, Attrs()) {}

DepthwiseConv2dNativeBackpropFilter::DepthwiseConv2dNativeBackpropFilter(
    const Scope& scope, Input input, Input filter_sizes, Input out_backprop,
    absl::Span<const int> strides, absl::string_view padding, const Attrs& attrs) {
  AddNode(scope, "TfOps>DepthwiseConv2dNativeBackpropFilter",
          {input, filter_sizes, out_backprop}, strides, padding, attrs, this);
}

}  // namespace ops
}  // namespace tf_ops
