// XLA lowerings of the TfOps> convolution family: each op becomes one XLA convolution
// (ConvGeneralDilated), after the same checks and messages as its kernels (PlanConv in
// conv_checks.h), raised when the function is compiled.
//   forward          x (*) w: window strides = strides, rhs dilation = dilations, feature groups.
//   backprop input   dy dilated by the strides (lhs dilation: no zero is stored) (*) the filter
//                    reversed in space, its in/out features swapped within each group.
//   backprop filter  x (*) dy, contracting over the batch: the channels of x act as the batch,
//                    split into groups (batch group count); window strides = dilations, rhs
//                    dilation = strides.
// Depthwise filters [KH, KW, C, M] are grouped filters of C groups, [KH, KW, 1, C*M]: reshapes.
// Half and bfloat16 accumulate in float (preferred element type), as the kernels do. An empty
// operand gives zeros. input_sizes / filter_sizes must be compile-time constants.
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "cc/kernels/conv_checks.h"
#include "tensorflow/compiler/tf2xla/literal_util.h"
#include "tensorflow/compiler/tf2xla/shape_util.h"
#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#if __has_include("xla/hlo/builder/xla_builder.h")
#include "xla/hlo/builder/xla_builder.h"
#else
#include "xla/client/xla_builder.h"
#endif

namespace tf_ops {
namespace {

using ::tensorflow::OpKernelConstruction;
using ::tensorflow::Tensor;
using ::tensorflow::XlaOpKernel;
using ::tensorflow::XlaOpKernelContext;

// Dimension numbers of a convolution over activations in `attrs`' layout: the lhs and the
// output are activations, the rhs [KH, KW, in, out].
xla::ConvolutionDimensionNumbers ActivationNumbers(const ParsedAttrs& attrs) {
  xla::ConvolutionDimensionNumbers dn;
  dn.set_input_batch_dimension(0);
  dn.set_input_feature_dimension(attrs.depth_dim);
  dn.add_input_spatial_dimensions(attrs.row_dim);
  dn.add_input_spatial_dimensions(attrs.col_dim);
  dn.set_kernel_input_feature_dimension(2);
  dn.set_kernel_output_feature_dimension(3);
  dn.add_kernel_spatial_dimensions(0);
  dn.add_kernel_spatial_dimensions(1);
  dn.set_output_batch_dimension(0);
  dn.set_output_feature_dimension(attrs.depth_dim);
  dn.add_output_spatial_dimensions(attrs.row_dim);
  dn.add_output_spatial_dimensions(attrs.col_dim);
  return dn;
}

// Dimension numbers of the filter gradient: x's channels as the batch and its batch as the
// feature, dy as the kernel (its batch the kernel's input feature, its channels the output
// feature), the output [KH, KW, FI, K].
xla::ConvolutionDimensionNumbers FilterGradientNumbers(const ParsedAttrs& attrs) {
  xla::ConvolutionDimensionNumbers dn;
  dn.set_input_batch_dimension(attrs.depth_dim);
  dn.set_input_feature_dimension(0);
  dn.add_input_spatial_dimensions(attrs.row_dim);
  dn.add_input_spatial_dimensions(attrs.col_dim);
  dn.set_kernel_input_feature_dimension(0);
  dn.set_kernel_output_feature_dimension(attrs.depth_dim);
  dn.add_kernel_spatial_dimensions(attrs.row_dim);
  dn.add_kernel_spatial_dimensions(attrs.col_dim);
  dn.set_output_batch_dimension(2);
  dn.set_output_feature_dimension(3);
  dn.add_output_spatial_dimensions(0);
  dn.add_output_spatial_dimensions(1);
  return dn;
}

int64_t Span(int64_t size, int64_t dilation) { return (size - 1) * dilation + 1; }

class ConvXlaOp : public XlaOpKernel {
 public:
  ConvXlaOp(OpKernelConstruction* ctx, const OpSpec& spec) : XlaOpKernel(ctx), spec_(spec) {
    OP_REQUIRES_OK(ctx, ParseAttrs(ctx, spec_, &attrs_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    WithoutExceptions(ctx, spec_.label, [&] { Lower(ctx); });
  }

 private:
  void Lower(XlaOpKernelContext* ctx) {
    const Direction dir = spec_.direction;
    ConvOperands operands;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      absl::StatusOr<xla::Shape> shape = ctx->InputXlaShape(i);
      OP_REQUIRES_OK(ctx, shape.status());
      OP_REQUIRES_OK(ctx, ::tensorflow::XLAShapeToTensorShape(*shape, &operands.in[i]));
    }
    Tensor sizes;
    if (spec_.sizes_from == SizesFrom::kTensor) {
      xla::Literal literal;
      OP_REQUIRES_OK(ctx, ctx->ConstantInput(SizesInput(spec_), &literal));
      OP_REQUIRES_OK(ctx, ::tensorflow::LiteralToHostTensor(literal, ::tensorflow::DT_INT32, &sizes));
      operands.sizes = &sizes;
    }
    const ::tensorflow::DataType dtype = ctx->expected_output_dtype(0);
    CheckedConv checked;
    OP_REQUIRES_OK(ctx, CheckConv(spec_, attrs_, operands, ::tensorflow::DataTypeSize(dtype), &checked));
    xla::PrimitiveType type;
    OP_REQUIRES_OK(ctx, ::tensorflow::DataTypeToPrimitiveType(dtype, &type));

    const ConvGeometry& g = checked.g;
    std::vector<int64_t> out_dims;
    for (int i = 0; i < checked.out_shape.dims(); ++i) out_dims.push_back(checked.out_shape.dim_size(i));
    if (EmptyRule(dir, g) != EmptyCall::kCompute) {
      const xla::XlaOp zero = xla::ConvertElementType(xla::ConstantR0<int32_t>(ctx->builder(), 0), type);
      ctx->SetOutput(0, xla::Broadcast(zero, out_dims));  // the empty sums
      return;
    }
    const bool narrow = type == xla::F16 || type == xla::BF16;
    const std::optional<xla::PrimitiveType> accumulate =
        narrow ? std::optional<xla::PrimitiveType>(xla::F32) : std::nullopt;
    const int64_t kh = g.filter_rows, kw = g.filter_cols, fi = g.filter_in_depth, k = g.out_depth;
    const int64_t groups = g.groups, kg = g.out_depth_per_group();
    xla::XlaOp out;
    switch (dir) {
      case Direction::kForward: {
        const xla::XlaOp w = xla::Reshape(ctx->Input(1), {kh, kw, fi, k});  // depthwise: [KH, KW, 1, C*M]
        out = xla::ConvGeneralDilated(ctx->Input(0), w, {g.stride_rows, g.stride_cols},
                                      {{g.pad_top, g.pad_bottom}, {g.pad_left, g.pad_right}}, {1, 1},
                                      {g.dilation_rows, g.dilation_cols}, ActivationNumbers(attrs_), groups,
                                      /*batch_group_count=*/1, nullptr, accumulate);
        break;
      }
      case Direction::kBackpropInput: {
        // [KH, KW, FI, G*KG] -> [KH, KW, KG, G*FI], reversed in space.
        xla::XlaOp w = xla::Reshape(ctx->Input(1), {kh, kw, fi, groups, kg});
        w = xla::Reshape(xla::Transpose(w, {0, 1, 4, 3, 2}), {kh, kw, kg, groups * fi});
        w = xla::Rev(w, {0, 1});
        const int64_t span_rows = Span(kh, g.dilation_rows), span_cols = Span(kw, g.dilation_cols);
        out = xla::ConvGeneralDilated(
            ctx->Input(2), w, {1, 1},
            {{span_rows - 1 - g.pad_top, g.in_rows + g.pad_top - (g.out_rows - 1) * g.stride_rows - 1},
             {span_cols - 1 - g.pad_left, g.in_cols + g.pad_left - (g.out_cols - 1) * g.stride_cols - 1}},
            {g.stride_rows, g.stride_cols}, {g.dilation_rows, g.dilation_cols}, ActivationNumbers(attrs_), groups,
            /*batch_group_count=*/1, nullptr, accumulate);
        break;
      }
      case Direction::kBackpropFilter: {
        const int64_t rows_end = Span(kh, g.dilation_rows) + (g.out_rows - 1) * g.stride_rows;
        const int64_t cols_end = Span(kw, g.dilation_cols) + (g.out_cols - 1) * g.stride_cols;
        out = xla::ConvGeneralDilated(
            ctx->Input(0), ctx->Input(2), {g.dilation_rows, g.dilation_cols},
            {{g.pad_top, rows_end - g.in_rows - g.pad_top}, {g.pad_left, cols_end - g.in_cols - g.pad_left}},
            {1, 1}, {g.stride_rows, g.stride_cols}, FilterGradientNumbers(attrs_), /*feature_group_count=*/1,
            groups, nullptr, accumulate);
        out = xla::Reshape(out, out_dims);  // depthwise: [KH, KW, 1, C*M] -> [KH, KW, C, M]
        break;
      }
    }
    ctx->SetOutput(0, narrow ? xla::ConvertElementType(out, type) : out);
  }

 private:
  const OpSpec spec_;
  ParsedAttrs attrs_;
};

template <const OpSpec& kSpec>
class XlaKernel : public ConvXlaOp {
 public:
  explicit XlaKernel(OpKernelConstruction* ctx) : ConvXlaOp(ctx, kSpec) {}
};

REGISTER_XLA_OP(Name("TfOps>Conv2D"), XlaKernel<kConv2D>);
REGISTER_XLA_OP(Name("TfOps>Conv2DBackpropInput").CompileTimeConstantInput("input_sizes"),
                XlaKernel<kConv2DBackpropInput>);
REGISTER_XLA_OP(Name("TfOps>Conv2DBackpropInputV2"), XlaKernel<kConv2DBackpropInputV2>);
REGISTER_XLA_OP(Name("TfOps>Conv2DBackpropFilter").CompileTimeConstantInput("filter_sizes"),
                XlaKernel<kConv2DBackpropFilter>);
REGISTER_XLA_OP(Name("TfOps>Conv2DBackpropFilterV2"), XlaKernel<kConv2DBackpropFilterV2>);
REGISTER_XLA_OP(Name("TfOps>DepthwiseConv2dNative"), XlaKernel<kDepthwise>);
REGISTER_XLA_OP(Name("TfOps>DepthwiseConv2dNativeBackpropInput").CompileTimeConstantInput("input_sizes"),
                XlaKernel<kDepthwiseBackpropInput>);
REGISTER_XLA_OP(Name("TfOps>DepthwiseConv2dNativeBackpropFilter").CompileTimeConstantInput("filter_sizes"),
                XlaKernel<kDepthwiseBackpropFilter>);

}  // namespace
}  // namespace tf_ops
