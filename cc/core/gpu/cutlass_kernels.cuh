// The CUTLASS 2.x operators of cutlass_conv.h, for nvcc: one set of tile shapes per element type
// and float math (Set<...>), each operator's problem and tensor references built from a
// CutlassShape, its can_implement verdict, and its launch. Included by the translation units
// that instantiate one set each (cutlass_half.cu, ...; compiled in parallel) and by the mapping
// test, which runs CUTLASS's host reference convolutions over the same problems and references.
//
// Tile shapes (threadblock / warp / instruction, stages) keep every kernel free of register
// spills: 16-bit types 128 x 128 x 32 / 64 x 64 x 32 / 16 x 8 x 16, three stages; float32 (TF32
// and 3xTF32) 128 x 64 x 16 / 64 x 32 x 16 / 16 x 8 x 8, three stages (128 x 128 spills in
// 3xTF32). Every access is 128 bits: channels a multiple of 8 (16-bit types) or 4 (float).
#ifndef TF_OPS_CC_CORE_GPU_CUTLASS_KERNELS_CUH_
#define TF_OPS_CC_CORE_GPU_CUTLASS_KERNELS_CUH_

#include <string>

#include "cc/core/gpu/cutlass_conv.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_dgrad.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_wgrad.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/numeric_types.h"

namespace tf_ops {
namespace gpu {
namespace cutlass_conv {

using cutlass::gemm::GemmShape;
using Layout = cutlass::layout::TensorNHWC;

// The problem CUTLASS's operators and host references take.
inline cutlass::conv::Conv2dProblemSize ProblemOf(const CutlassShape& s) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return cutlass::conv::Conv2dProblemSize(i(s.n), i(s.h), i(s.w), i(s.c), i(s.k), i(s.r), i(s.s), i(s.p), i(s.q),
                                          i(s.pad_h), i(s.pad_w), i(s.stride_h), i(s.stride_w), i(s.dilation_h),
                                          i(s.dilation_w), cutlass::conv::Mode::kCrossCorrelation, i(s.split_k));
}

// The packed NHWC (or KRSC) reference to operand `which` (0 A, 1 B, 2 C) of `op` over `problem`.
template <typename Element>
cutlass::TensorRef<Element, Layout> RefOf(cutlass::conv::Operator op, const cutlass::conv::Conv2dProblemSize& problem,
                                          int which, const void* data) {
  const cutlass::Tensor4DCoord extent = which == 0   ? cutlass::conv::implicit_gemm_tensor_a_extent(op, problem)
                                        : which == 1 ? cutlass::conv::implicit_gemm_tensor_b_extent(op, problem)
                                                     : cutlass::conv::implicit_gemm_tensor_c_extent(op, problem);
  return cutlass::TensorRef<Element, Layout>(static_cast<Element*>(const_cast<void*>(data)), Layout::packed(extent));
}

// One element type's tile shapes and math. Element: what tensors hold; MathTag: CUTLASS's
// multiply (OpMultiplyAdd; for float, OpMultiplyAdd is TF32 and OpMultiplyAddFastF32 3xTF32).
template <typename Element_, typename MathTag_, typename Threadblock_, typename Warp_, typename Instruction_,
          int kStages_>
struct Set {
  using Element = Element_;
  using MathTag = MathTag_;
  using Threadblock = Threadblock_;
  using Warp = Warp_;
  using Instruction = Instruction_;
  static constexpr int kStages = kStages_;

  template <typename ElementC>
  using Epilogue = cutlass::epilogue::thread::LinearCombination<ElementC, 128 / cutlass::sizeof_bits<ElementC>::value,
                                                                float, float>;
  using Identity = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>;

  using Fprop = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
      Element, Layout, Element, Layout, Element, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      Threadblock, Warp, Instruction, Epilogue<Element>, Identity, kStages, MathTag,
      cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel>;
  using DgradUnity = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dDgrad<
      Element, Layout, Element, Layout, Element, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      Threadblock, Warp, Instruction, Epilogue<Element>, Identity, kStages, MathTag,
      cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kUnity>::Kernel>;
  using DgradStrided =
      cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dDgrad<
          Element, Layout, Element, Layout, Element, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
          Threadblock, Warp, Instruction, Epilogue<Element>,
          cutlass::conv::threadblock::StridedDgradIdentityThreadblockSwizzle<1>, kStages, MathTag,
          cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kStrided>::Kernel>;
  // The filter gradient's sums stay float: each split writes its own (SplitKMode::kParallel),
  // and the op adds them in split order.
  using Wgrad = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dWgrad<
      Element, Layout, Element, Layout, float, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      Threadblock, Warp, Instruction, Epilogue<float>, Identity, kStages, MathTag,
      cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel>;
};

using HalfSet = Set<cutlass::half_t, cutlass::arch::OpMultiplyAdd, GemmShape<128, 128, 32>, GemmShape<64, 64, 32>,
                    GemmShape<16, 8, 16>, 3>;
using BFloat16Set = Set<cutlass::bfloat16_t, cutlass::arch::OpMultiplyAdd, GemmShape<128, 128, 32>,
                        GemmShape<64, 64, 32>, GemmShape<16, 8, 16>, 3>;
using Tf32Set =
    Set<float, cutlass::arch::OpMultiplyAdd, GemmShape<128, 64, 16>, GemmShape<64, 32, 16>, GemmShape<16, 8, 8>, 3>;
using Tf32x3Set = Set<float, cutlass::arch::OpMultiplyAddFastF32, GemmShape<64, 64, 16>, GemmShape<32, 32, 16>,
                      GemmShape<16, 8, 8>, 4>;

// The arguments of operator Op over `shape`, its tensors at a, b and d (d also its source C,
// read by no epilogue: beta is 0).
template <typename Op>
typename Op::Arguments ArgumentsOf(const CutlassShape& shape, const void* a, const void* b, void* d) {
  const cutlass::conv::Conv2dProblemSize problem = ProblemOf(shape);
  const cutlass::conv::Operator op = Op::kConvolutionalOperator;
  auto ref_d = RefOf<typename Op::ElementC>(op, problem, 2, d);
  return typename Op::Arguments(problem, RefOf<typename Op::ElementA>(op, problem, 0, a),
                                RefOf<typename Op::ElementB>(op, problem, 1, b), ref_d, ref_d, {1.0f, 0.0f},
                                cutlass::conv::SplitKMode::kParallel);
}

inline std::string StatusText(cutlass::Status status) {
  return std::string("CUTLASS: ") + cutlass::cutlassGetStatusString(status);
}

template <typename Op>
std::string Refusal(const CutlassShape& shape) {
  const cutlass::Status status = Op::can_implement(ArgumentsOf<Op>(shape, nullptr, nullptr, nullptr));
  return status == cutlass::Status::kSuccess ? "" : StatusText(status);
}

// Queues Op over `shape`. With several splits (backprop filter) CUTLASS's own workspace is d,
// which it zeroes before its splits write their sums there.
template <typename Op>
std::string Launch(const CutlassShape& shape, const void* a, const void* b, void* d, cudaStream_t stream) {
  const typename Op::Arguments args = ArgumentsOf<Op>(shape, a, b, d);
  Op op;
  cutlass::Status status = op.can_implement(args);
  if (status == cutlass::Status::kSuccess) status = op.initialize(args, shape.split_k > 1 ? d : nullptr, stream);
  if (status == cutlass::Status::kSuccess) status = op.run(stream);
  return status == cutlass::Status::kSuccess ? "" : StatusText(status);
}

// The entry points of one set, for cutlass_conv.cu's table.
struct SetEntry {
  std::string (*refusal)(CutlassOp op, const CutlassShape& shape);
  std::string (*run)(CutlassOp op, const CutlassShape& shape, const void* a, const void* b, void* d,
                     cudaStream_t stream);
};

template <typename S>
std::string SetRefusal(CutlassOp op, const CutlassShape& shape) {
  switch (op) {
    case CutlassOp::kFprop: return Refusal<typename S::Fprop>(shape);
    case CutlassOp::kDgradUnity: return Refusal<typename S::DgradUnity>(shape);
    case CutlassOp::kDgradStrided: return Refusal<typename S::DgradStrided>(shape);
    case CutlassOp::kWgrad: return Refusal<typename S::Wgrad>(shape);
  }
  return "no such CUTLASS operator";
}

template <typename S>
std::string SetRun(CutlassOp op, const CutlassShape& shape, const void* a, const void* b, void* d,
                   cudaStream_t stream) {
  switch (op) {
    case CutlassOp::kFprop: return Launch<typename S::Fprop>(shape, a, b, d, stream);
    case CutlassOp::kDgradUnity: return Launch<typename S::DgradUnity>(shape, a, b, d, stream);
    case CutlassOp::kDgradStrided: return Launch<typename S::DgradStrided>(shape, a, b, d, stream);
    case CutlassOp::kWgrad: return Launch<typename S::Wgrad>(shape, a, b, d, stream);
  }
  return "no such CUTLASS operator";
}

SetEntry HalfEntry();
SetEntry BFloat16Entry();
SetEntry Tf32Entry();
SetEntry Tf32x3Entry();

}  // namespace cutlass_conv
}  // namespace gpu
}  // namespace tf_ops

// Defines the function NAME returning set S's entry points (one per translation unit).
#define TF_OPS_CUTLASS_SET(NAME, S)                                                               \
  namespace tf_ops {                                                                             \
  namespace gpu {                                                                                \
  namespace cutlass_conv {                                                                       \
  SetEntry NAME() { return {&SetRefusal<S>, &SetRun<S>}; }                                       \
  }                                                                                              \
  }                                                                                              \
  }

#endif  // TF_OPS_CC_CORE_GPU_CUTLASS_KERNELS_CUH_
