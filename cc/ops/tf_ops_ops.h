// C++ graph-building API for the tf_ops ops: one class per op of the convolution family,
// shaped like TensorFlow's generated classes in tensorflow/cc/ops/nn_ops.h, that adds a
// TfOps> node to a tensorflow::Scope.
//
//   #include "cc/ops/tf_ops_ops.h"
//   namespace tfo = tf_ops::ops;
//   auto y = tfo::Conv2DBackpropInput(scope, output_sizes, filter, x, {1, 2, 2, 1}, "SAME",
//                                     tfo::Conv2DBackpropInput::DataFormat("NCHW"));
//
// Each class takes its required inputs and attributes (`strides`, `padding`) in the
// constructor and the optional attributes through its `Attrs`, whose setters chain:
// `Conv2D::DataFormat("NCHW").Dilations({1, 1, 2, 2})`. Unlike TensorFlow's generated Attrs,
// which keep views of the lists and strings passed to them, these Attrs own copies, so they
// can be built once, stored and reused. The five Conv2D* ops share one Attrs type
// (ConvAttrs), the three depthwise ops another (DepthwiseConvAttrs, which has no
// use_cudnn_on_gpu, as the depthwise ops have no such attribute).
//
// Errors follow the Scope convention: a bad input or attribute (an unknown data_format, a
// filter of the wrong rank, a dtype the op does not take, ...) never aborts; it sets the
// scope's status, and the ops built after it in that scope do nothing. Check `scope.ok()` /
// `scope.status()` after building. Values that only the kernel can check (the lengths of
// strides and dilations, sizes that do not fit) are reported by Session::Run.
//
// Gradients: cc/ops/tf_ops_gradients.cc registers the gradient of every op with
// TensorFlow's C++ gradient registry, built from these ops (the same graphs as the Python
// gradients in tf_ops/_gradients.py), so tensorflow::AddSymbolicGradients works through them.
//
// ----------------------------------------------------------------------------------------
// Building a program. The installed Python package ships this header (under
// tf_ops.sysconfig.get_include()), this API and its gradients compiled into
// tf_ops/libtf_ops_cc.so, and the op library tf_ops/_tf_ops.so, whose static initializers
// register every TfOps> op and kernel when the program starts, before main(). One line builds
// a program, from any folder:
//
//   g++ -O2 my_program.cc $(python -m tf_ops.sysconfig --cflags --libs) -o my_program
//
// The compile flags are TensorFlow's (its include folder as -isystem: GCC then keeps quiet
// about the thousands of deprecated declarations in TensorFlow's headers) plus this header's
// folder. The link flags name TensorFlow's libtensorflow_cc.so.2 and
// libtensorflow_framework.so.2, then libtf_ops_cc.so and _tf_ops.so inside --no-as-needed,
// with run paths to their folders. --no-as-needed matters: the program calls no function of
// _tf_ops.so directly, so a compiler that passes --as-needed to the linker by default
// (Debian's and Ubuntu's GCC do) would otherwise drop it, and no op would be registered.
// CheckOpsRegistered() below then says so with the flags that fix it, and every constructor
// reports the unregistered op through the scope with the same advice.
//
// Loading the library at run time instead, with TF_LoadLibrary (tensorflow/c/c_api.h)
// before the first graph is built, registers the same ops and kernels. Linking is the
// documented way: it needs no path at run time and leaves no moment in which the ops are
// missing.
// ----------------------------------------------------------------------------------------
#ifndef TF_OPS_CC_OPS_TF_OPS_OPS_H_
#define TF_OPS_CC_OPS_TF_OPS_OPS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"

namespace tf_ops {
namespace ops {

// OK when every TfOps> op is registered in this process (the program is linked against, or
// has loaded, tf_ops/_tf_ops.so); otherwise a NotFound status naming the missing ops and
// how to link the library.
absl::Status CheckOpsRegistered();

// Optional attributes of Conv2D, Conv2DBackpropInput(V2) and Conv2DBackpropFilter(V2), with
// TensorFlow's defaults. Each setter returns a modified copy.
struct ConvAttrs {
  // Not read by tf_ops' kernels; kept so that graphs carry TensorFlow's attribute.
  // Default: true.
  [[nodiscard]] ConvAttrs UseCudnnOnGpu(bool x) const;
  // With padding "EXPLICIT": 8 values, the padding before and after each dimension, in
  // data_format order (batch and channel entries must be 0). Otherwise empty. Default: [].
  [[nodiscard]] ConvAttrs ExplicitPaddings(absl::Span<const int> x) const;
  // "NHWC" (default) or "NCHW": the layout of input, out_backprop and output.
  [[nodiscard]] ConvAttrs DataFormat(absl::string_view x) const;
  // 4 values in data_format order; batch and channel entries must be 1. Default: [1, 1, 1, 1].
  [[nodiscard]] ConvAttrs Dilations(absl::Span<const int> x) const;

  bool use_cudnn_on_gpu_ = true;
  std::vector<int> explicit_paddings_;
  std::string data_format_ = "NHWC";
  std::vector<int> dilations_ = {1, 1, 1, 1};
};

// Optional attributes of the three depthwise ops: as ConvAttrs, without use_cudnn_on_gpu.
struct DepthwiseConvAttrs {
  [[nodiscard]] DepthwiseConvAttrs ExplicitPaddings(absl::Span<const int> x) const;
  [[nodiscard]] DepthwiseConvAttrs DataFormat(absl::string_view x) const;
  [[nodiscard]] DepthwiseConvAttrs Dilations(absl::Span<const int> x) const;

  std::vector<int> explicit_paddings_;
  std::string data_format_ = "NHWC";
  std::vector<int> dilations_ = {1, 1, 1, 1};
};

namespace internal {

// What every op class holds: the node added to the graph and its single output, and the
// conversions TensorFlow's classes offer. Both are empty when the scope already had an error
// or the node could not be added; when only shape inference failed they point at the node,
// as in TensorFlow's classes (the scope's status has the error either way).
class SingleOutputOp {
 public:
  operator ::tensorflow::Output() const { return output; }
  operator ::tensorflow::Input() const { return output; }
  ::tensorflow::Node* node() const { return output.node(); }

  ::tensorflow::Operation operation;
  ::tensorflow::Output output;
};

// The static setters of the Conv2D* classes: `Conv2D::DataFormat("NCHW")` is
// `Conv2D::Attrs().DataFormat("NCHW")`.
class ConvSetters {
 public:
  static ConvAttrs UseCudnnOnGpu(bool x) { return ConvAttrs().UseCudnnOnGpu(x); }
  static ConvAttrs ExplicitPaddings(absl::Span<const int> x) {
    return ConvAttrs().ExplicitPaddings(x);
  }
  static ConvAttrs DataFormat(absl::string_view x) { return ConvAttrs().DataFormat(x); }
  static ConvAttrs Dilations(absl::Span<const int> x) { return ConvAttrs().Dilations(x); }
};

// The static setters of the depthwise classes.
class DepthwiseConvSetters {
 public:
  static DepthwiseConvAttrs ExplicitPaddings(absl::Span<const int> x) {
    return DepthwiseConvAttrs().ExplicitPaddings(x);
  }
  static DepthwiseConvAttrs DataFormat(absl::string_view x) {
    return DepthwiseConvAttrs().DataFormat(x);
  }
  static DepthwiseConvAttrs Dilations(absl::Span<const int> x) {
    return DepthwiseConvAttrs().Dilations(x);
  }
};

}  // namespace internal

// In every class below: `strides` has 4 values in data_format order (batch and channel
// entries 1); `padding` is "SAME", "VALID" or "EXPLICIT" (with Attrs::ExplicitPaddings);
// filters are [filter_height, filter_width, in_channels, out_channels] for the Conv2D* ops
// (in_channels may divide the input's channels: grouped convolution) and
// [filter_height, filter_width, in_channels, channel_multiplier] for the depthwise ones.
// The node is named after the op ("TfOps>Conv2D", made unique) unless the scope names it
// (scope.WithOpName).

// The TfOps>Conv2D op: the 2-D convolution of `input` [batch, in_height, in_width,
// in_channels] (NHWC) with `filter`, as tensorflow::ops::Conv2D computes it.
// T: half, bfloat16, float, double, int32.
class Conv2D : public internal::SingleOutputOp, public internal::ConvSetters {
 public:
  using Attrs = ConvAttrs;
  Conv2D(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
         ::tensorflow::Input filter, absl::Span<const int> strides, absl::string_view padding);
  Conv2D(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
         ::tensorflow::Input filter, absl::Span<const int> strides, absl::string_view padding,
         const Attrs& attrs);
};

// The TfOps>Conv2DBackpropInput op: the gradient of Conv2D with respect to its input, of
// shape `input_sizes` (int32, 4 values, or 2 spatial values); what conv2d_transpose
// computes, with out_backprop as its input. T: half, bfloat16, float, double, int32.
class Conv2DBackpropInput : public internal::SingleOutputOp, public internal::ConvSetters {
 public:
  using Attrs = ConvAttrs;
  Conv2DBackpropInput(const ::tensorflow::Scope& scope, ::tensorflow::Input input_sizes,
                      ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                      absl::Span<const int> strides, absl::string_view padding);
  Conv2DBackpropInput(const ::tensorflow::Scope& scope, ::tensorflow::Input input_sizes,
                      ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                      absl::Span<const int> strides, absl::string_view padding,
                      const Attrs& attrs);
};

// The TfOps>Conv2DBackpropInputV2 op: Conv2DBackpropInput with the input sizes taken from
// the shape of the tensor `input` (whose values are not read). TensorFlow registers this op
// without kernels; tf_ops runs it. T: half, bfloat16, float, double, int32.
class Conv2DBackpropInputV2 : public internal::SingleOutputOp, public internal::ConvSetters {
 public:
  using Attrs = ConvAttrs;
  Conv2DBackpropInputV2(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                        ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                        absl::Span<const int> strides, absl::string_view padding);
  Conv2DBackpropInputV2(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                        ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                        absl::Span<const int> strides, absl::string_view padding,
                        const Attrs& attrs);
};

// The TfOps>Conv2DBackpropFilter op: the gradient of Conv2D with respect to its filter, of
// shape `filter_sizes` (int32, 4 values). T: half, bfloat16, float, double.
class Conv2DBackpropFilter : public internal::SingleOutputOp, public internal::ConvSetters {
 public:
  using Attrs = ConvAttrs;
  Conv2DBackpropFilter(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                       ::tensorflow::Input filter_sizes, ::tensorflow::Input out_backprop,
                       absl::Span<const int> strides, absl::string_view padding);
  Conv2DBackpropFilter(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                       ::tensorflow::Input filter_sizes, ::tensorflow::Input out_backprop,
                       absl::Span<const int> strides, absl::string_view padding,
                       const Attrs& attrs);
};

// The TfOps>Conv2DBackpropFilterV2 op: Conv2DBackpropFilter with the filter sizes taken from
// the shape of the tensor `filter` (whose values are not read). TensorFlow registers this op
// without kernels; tf_ops runs it. T: half, bfloat16, float, double.
class Conv2DBackpropFilterV2 : public internal::SingleOutputOp, public internal::ConvSetters {
 public:
  using Attrs = ConvAttrs;
  Conv2DBackpropFilterV2(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                         ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                         absl::Span<const int> strides, absl::string_view padding);
  Conv2DBackpropFilterV2(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                         ::tensorflow::Input filter, ::tensorflow::Input out_backprop,
                         absl::Span<const int> strides, absl::string_view padding,
                         const Attrs& attrs);
};

// The TfOps>DepthwiseConv2dNative op: each input channel convolved with its own
// channel_multiplier filters, giving in_channels * channel_multiplier output channels, as
// tensorflow::ops::DepthwiseConv2dNative computes it, with dilations applied (TensorFlow's
// CPU kernels ignore them).
// T: half, bfloat16, float, double.
class DepthwiseConv2dNative : public internal::SingleOutputOp,
                              public internal::DepthwiseConvSetters {
 public:
  using Attrs = DepthwiseConvAttrs;
  DepthwiseConv2dNative(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                        ::tensorflow::Input filter, absl::Span<const int> strides,
                        absl::string_view padding);
  DepthwiseConv2dNative(const ::tensorflow::Scope& scope, ::tensorflow::Input input,
                        ::tensorflow::Input filter, absl::Span<const int> strides,
                        absl::string_view padding, const Attrs& attrs);
};

// The TfOps>DepthwiseConv2dNativeBackpropInput op: the gradient of DepthwiseConv2dNative
// with respect to its input, of shape `input_sizes` (int32, 4 values).
// T: half, bfloat16, float, double.
class DepthwiseConv2dNativeBackpropInput : public internal::SingleOutputOp,
                                           public internal::DepthwiseConvSetters {
 public:
  using Attrs = DepthwiseConvAttrs;
  DepthwiseConv2dNativeBackpropInput(const ::tensorflow::Scope& scope,
                                     ::tensorflow::Input input_sizes,
                                     ::tensorflow::Input filter,
                                     ::tensorflow::Input out_backprop,
                                     absl::Span<const int> strides, absl::string_view padding);
  DepthwiseConv2dNativeBackpropInput(const ::tensorflow::Scope& scope,
                                     ::tensorflow::Input input_sizes,
                                     ::tensorflow::Input filter,
                                     ::tensorflow::Input out_backprop,
                                     absl::Span<const int> strides, absl::string_view padding,
                                     const Attrs& attrs);
};

// The TfOps>DepthwiseConv2dNativeBackpropFilter op: the gradient of DepthwiseConv2dNative
// with respect to its filter, of shape `filter_sizes` (int32, 4 values).
// T: half, bfloat16, float, double.
class DepthwiseConv2dNativeBackpropFilter : public internal::SingleOutputOp,
                                            public internal::DepthwiseConvSetters {
 public:
  using Attrs = DepthwiseConvAttrs;
  DepthwiseConv2dNativeBackpropFilter(const ::tensorflow::Scope& scope,
                                      ::tensorflow::Input input,
                                      ::tensorflow::Input filter_sizes,
                                      ::tensorflow::Input out_backprop,
                                      absl::Span<const int> strides,
                                      absl::string_view padding);
  DepthwiseConv2dNativeBackpropFilter(const ::tensorflow::Scope& scope,
                                      ::tensorflow::Input input,
                                      ::tensorflow::Input filter_sizes,
                                      ::tensorflow::Input out_backprop,
                                      absl::Span<const int> strides, absl::string_view padding,
                                      const Attrs& attrs);
};

}  // namespace ops
}  // namespace tf_ops

#endif  // TF_OPS_CC_OPS_TF_OPS_OPS_H_
