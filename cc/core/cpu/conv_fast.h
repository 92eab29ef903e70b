// Fast CPU convolution kernels: the same three directions as conv_cpu.h, for float, half
// and bfloat16, built on the register-blocked micro-kernels of microkernels.h. The planner
// (plan.h) picks the algorithm and its blocking; conv_fast.cc runs the plan, one file per pass
// (fast_indirect.h, fast_banded.h, fast_columns_merged.h, fast_depthwise.h, fast_filter.h,
// conv_winograd.h):
//   3x3 stride-1 layers with enough channels, all three directions: Winograd F(4x4, 3x3)
//     (conv_winograd.h), unless exact mode is on. Strided forward and backprop input whose
//     filter spans three strides each way (5x5 at stride 2): the same Winograd, 3x3 at
//     stride 1 over a space-to-depth copy (fast_space_to_depth.h), where it saves enough.
//   forward, backprop input: implicit GEMM over an indirection table. Output pixels are
//     tiled in groups that read the same filter taps; for backprop input each group is one
//     stride-residue class of input pixels, so no multiply touches an inserted zero, and
//     taps that reach no pixel of a tile are skipped. The filter is packed once per call.
//   backprop filter: for each filter tap, a GEMM of input-channel tiles against output
//     gradient rows, reduced over (batch, rows, columns) in order.
//   depthwise (depth multiplier 1), forward and backprop input: one output row per work
//     unit, pixels in groups that run through every channel block while their source is in
//     the L1 cache; backprop filter: per-channel vector products reduced over the batch.
// NCHW tensors are transposed one image at a time into NHWC workspace.
//
// Every output element is produced by one work unit, in an order fixed by the geometry
// alone, so results are bitwise identical whatever the number of threads. Extra memory is
// the plan's workspace (the packed filter, NHWC copies of NCHW tensors in chunks of at most
// 2**21 elements or one image, ...: one block from the caller's allocator, fast_common.h), and
// small per-thread buffers.
#ifndef TF_OPS_CC_CORE_CPU_CONV_FAST_H_
#define TF_OPS_CC_CORE_CPU_CONV_FAST_H_

#include <string>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"

namespace tf_ops {
namespace cpu {

// Each returns false, having written nothing, where it does not apply (element types other
// than float, half and bfloat16, or an empty operand; the caller then runs the direct
// kernel), or where its workspace cannot be had from the heap.
template <typename T>
bool FastConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                     const ParallelFor& parallel_for);

template <typename T>
bool FastConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy,
                           T* dx, const ParallelFor& parallel_for);

template <typename T>
bool FastConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy,
                            T* dw, const ParallelFor& parallel_for);

// Exact mode, process-wide: when on, every output element is the direct sum of its products
// (as the direct loops form it, in float for half and bfloat16), and the fast algorithms
// that sum transformed values instead (Winograd, conv_winograd.h) are not used. Off by
// default; on from the start when the environment variable TF_OPS_EXACT is "1". Calls
// already running keep the mode they started with.
void SetExactMode(bool exact);
bool ExactMode();

// What a call of ConvForward (direction 0), ConvBackpropInput (1) or ConvBackpropFilter (2) on
// elements of type half (element 0), bfloat16 (1), float (2), double (3) or int32 (4) would run
// now, without running it: its plan (plan.h) as one line of key=value fields (DescribePlan).
std::string ExplainCpuCall(int direction, int element, const ConvGeometry& g, Layout layout);

// The instruction set of the micro-kernels in use ("amx_bf16", "avx512_bf16", "avx512",
// "avx2" or "generic").
const char* FastKernelIsa();

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_CONV_FAST_H_
