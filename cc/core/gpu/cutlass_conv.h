// The CUTLASS 2.x convolution kernels tf_ops runs (implicit GEMMs with multistage cp.async
// pipelines, ldmatrix and tensor-core MMA, for sm_80 and newer), seen from host code: the
// problem as CUTLASS describes it, mapped from a ConvGeometry, and the table of what a build
// holds. The kernels themselves are instantiated in cutlass_*.cu (nvcc, CUTLASS's headers);
// this header is free of CUDA and of CUTLASS, so that the planner (gpu_plan.h), the op glue and
// the tests read it with any compiler.
//
// CUTLASS's tensors are NHWC and its filters KRSC ([out channel][row][col][in channel]);
// TensorFlow's filters are HWIO, so a plan that runs CUTLASS transposes the filter into its
// workspace (forward, backprop input) or writes the filter gradient there as float sums and
// transposes those back (backprop filter: each split of its reduction into its own slot, added
// in split order, so results are bitwise the same on every run).
#ifndef TF_OPS_CC_CORE_GPU_CUTLASS_CONV_H_
#define TF_OPS_CC_CORE_GPU_CUTLASS_CONV_H_

#include <cstdint>
#include <string>

#include "cc/core/conv_geometry.h"

struct CUstream_st;

namespace tf_ops {
namespace gpu {

// How float32 runs on tensor cores: TF32 products (10-bit mantissas, TensorFlow's default for
// its own GPU convolutions), or three TF32 products a multiply (big * big + big * small +
// small * big, CUTLASS's OpMultiplyAddFastF32), as accurate as float32 FMAs.
enum class FloatMath { kTf32, kTf32x3 };

// The CUTLASS operators, by what they compute.
enum class CutlassOp {
  kFprop,          // forward
  kDgradUnity,     // backprop input at stride 1 (any dilation)
  kDgradStrided,   // backprop input at stride > 1 (dilation 1)
  kWgrad,          // backprop filter, its reduction in `split_k` splits
};

// A convolution as CUTLASS's Conv2dProblemSize takes it (cross-correlation, one padding a
// side: the padding before, and the output size given, rows past the input reading zeros).
struct CutlassShape {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0, p = 0, q = 0;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t split_k = 1;
};

// TensorFlow's geometry as CUTLASS's problem. TF_OPS_PLANT_CUTLASS_MAPPING, defined only by the
// mapping test's planted builds, breaks it on purpose: 1 gives the padding after instead of
// before, 2 takes the output size from CUTLASS's own formula (NVIDIA/cutlass#3502: it subtracts
// R * dilation where the window spans (R - 1) * dilation + 1).
inline CutlassShape CutlassShapeOf(const ConvGeometry& g, int64_t split_k = 1) {
  CutlassShape s;
  s.n = g.batch, s.h = g.in_rows, s.w = g.in_cols, s.c = g.in_depth, s.k = g.out_depth;
  s.r = g.filter_rows, s.s = g.filter_cols, s.p = g.out_rows, s.q = g.out_cols;
  s.pad_h = g.pad_top, s.pad_w = g.pad_left;
  s.stride_h = g.stride_rows, s.stride_w = g.stride_cols;
  s.dilation_h = g.dilation_rows, s.dilation_w = g.dilation_cols;
  s.split_k = split_k;
#if defined(TF_OPS_PLANT_CUTLASS_MAPPING) && TF_OPS_PLANT_CUTLASS_MAPPING == 1
  s.pad_h = g.pad_bottom, s.pad_w = g.pad_right;
#elif defined(TF_OPS_PLANT_CUTLASS_MAPPING) && TF_OPS_PLANT_CUTLASS_MAPPING == 2
  s.p = (g.in_rows + g.pad_top + g.pad_bottom - g.filter_rows * g.dilation_rows) / g.stride_rows + 1;
  s.q = (g.in_cols + g.pad_left + g.pad_right - g.filter_cols * g.dilation_cols) / g.stride_cols + 1;
#endif
  return s;
}

// The CUTLASS kernels of a build: one set per element type and float math.
struct CutlassKernels {
  // "" where CUTLASS's can_implement accepts the problem for `op`, else why not (its status).
  std::string (*refusal)(CutlassOp op, Element dtype, FloatMath math, const CutlassShape& shape);
  // Queues `op` on `stream`: a and b are its operands as CUTLASS names them (forward: x and the
  // KRSC filter; backprop input: dy and the KRSC filter; backprop filter: dy and x), d its
  // output (backprop filter: shape.split_k float KRSC tensors, one a split). "" or an error.
  std::string (*run)(CutlassOp op, Element dtype, FloatMath math, const CutlassShape& shape, const void* a,
                     const void* b, void* d, CUstream_st* stream);
};

// The kernels this build holds: defined in cutlass_conv.cu, linked only into builds with CUDA
// (where the glue is compiled with TF_OPS_WITH_CUTLASS).
const CutlassKernels& BuiltCutlassKernels();

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_CUTLASS_CONV_H_
