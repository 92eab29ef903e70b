// What every kernel of the TfOps> convolution family does before any arithmetic, whatever runs
// it (the CPU and GPU kernels in conv_kernels.cc, the XLA lowerings in conv_xla.cc): parse and
// check the attributes, then from the operands' shapes (and the sizes vector of the V1 backprop
// ops) check ranks and sizes, make the geometry and the output's shape, with TensorFlow's error
// classes and messages. One function per step, so that every device says the same thing.
#ifndef TF_OPS_CC_KERNELS_CONV_CHECKS_H_
#define TF_OPS_CC_KERNELS_CONV_CHECKS_H_

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "cc/core/vocabulary.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_ops {

// Where the shape of the tensor a backprop op computes comes from.
enum class SizesFrom {
  kNone,     // forward ops
  kTensor,   // an int32 vector input (input_sizes / filter_sizes)
  kShapeOf,  // the shape of an input (the V2 ops)
};

// What distinguishes the ops of the family from one another.
struct OpSpec {
  const char* label;
  Direction direction;
  bool depthwise;
  SizesFrom sizes_from;
  // Batch or depth strides and dilations are Unimplemented in TensorFlow's Conv2D and
  // Conv2DBackpropInput and InvalidArgument in its other ops; we keep the same classes.
  bool batch_depth_unimplemented;
};

inline constexpr OpSpec kConv2D{"Conv2D", Direction::kForward, false, SizesFrom::kNone, true};
inline constexpr OpSpec kConv2DBackpropInput{"Conv2DBackpropInput", Direction::kBackpropInput, false,
                                             SizesFrom::kTensor, true};
inline constexpr OpSpec kConv2DBackpropInputV2{"Conv2DBackpropInputV2", Direction::kBackpropInput, false,
                                               SizesFrom::kShapeOf, true};
inline constexpr OpSpec kConv2DBackpropFilter{"Conv2DBackpropFilter", Direction::kBackpropFilter, false,
                                              SizesFrom::kTensor, false};
inline constexpr OpSpec kConv2DBackpropFilterV2{"Conv2DBackpropFilterV2", Direction::kBackpropFilter, false,
                                                SizesFrom::kShapeOf, false};
inline constexpr OpSpec kDepthwise{"DepthwiseConv2dNative", Direction::kForward, true, SizesFrom::kNone, false};
inline constexpr OpSpec kDepthwiseBackpropInput{"DepthwiseConv2dNativeBackpropInput", Direction::kBackpropInput,
                                                true, SizesFrom::kTensor, false};
inline constexpr OpSpec kDepthwiseBackpropFilter{"DepthwiseConv2dNativeBackpropFilter",
                                                 Direction::kBackpropFilter, true, SizesFrom::kTensor, false};

// The sizes vector of a V1 backprop op (SizesFrom::kTensor): its input index and name.
inline int SizesInput(const OpSpec& spec) { return spec.direction == Direction::kBackpropInput ? 0 : 1; }
inline const char* SizesName(const OpSpec& spec) {
  return spec.direction == Direction::kBackpropInput ? "input_sizes" : "filter_sizes";
}

// Attributes common to every op, parsed and checked once, when the kernel is constructed.
struct ParsedAttrs {
  Layout layout = Layout::kNHWC;
  int row_dim = 1, col_dim = 2, depth_dim = 3;
  ConvAttrs conv;
};

absl::Status ParseAttrs(::tensorflow::OpKernelConstruction* ctx, const OpSpec& spec, ParsedAttrs* out);
// The same from a node's attributes (for the graph rewrite, which checks a node before any kernel
// of it is built).
absl::Status ParseAttrs(const ::tensorflow::AttrSlice& attrs, const OpSpec& spec, ParsedAttrs* out);

// ParseAttrs's checks of the attributes' values (data_format, padding, strides, dilations,
// explicit_paddings), also for tf_ops.explain.
absl::Status CheckAttrs(const OpSpec& spec, const std::string& format, const std::string& padding,
                        const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                        const std::vector<int64_t>& explicit_paddings, ParsedAttrs* out);

// The op's inputs as a kernel sees them: their shapes, in input order, and the value of the
// sizes vector (input 0 of the V1 backprop-input ops, input 1 of the V1 backprop-filter ops).
struct ConvOperands {
  ::tensorflow::TensorShape in[3];
  const ::tensorflow::Tensor* sizes = nullptr;
};

// The outcome of CheckConv: the geometry and the shape of the output.
struct CheckedConv {
  ConvGeometry g;
  ::tensorflow::TensorShape out_shape;
};

// Every check of the operands, the geometry and the output's shape; `element_bytes` bounds the
// output's size.
absl::Status CheckConv(const OpSpec& spec, const ParsedAttrs& attrs, const ConvOperands& operands,
                       int64_t element_bytes, CheckedConv* checked);

// Runs `work` (a kernel's Compute, an XLA lowering) so that no exception leaves it: one that it
// throws is ctx's error, ResourceExhausted for std::bad_alloc (memory that cannot be had), else
// Internal, with `label` and what the exception says; where even that message cannot be made,
// the error without one.
template <typename Ctx, typename Work>
void WithoutExceptions(Ctx* ctx, const char* label, const Work& work) {
  const auto fail = [ctx, label](absl::StatusCode code, const char* what) noexcept {
    try {
      ctx->CtxFailure(absl::Status(code, Cat(label, ": ", what)));
    } catch (...) {
      ctx->CtxFailure(absl::Status(code, ""));
    }
  };
  try {
    work();
  } catch (const std::bad_alloc&) {
    fail(absl::StatusCode::kResourceExhausted, "out of memory");
  } catch (const std::exception& e) {
    fail(absl::StatusCode::kInternal, e.what());
  } catch (...) {
    fail(absl::StatusCode::kInternal, "an exception of unknown type");
  }
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_KERNELS_CONV_CHECKS_H_
