// The executor of the fast CPU convolution kernels: the same three directions as conv_cpu.h, for
// float, half and bfloat16, built on the register-blocked micro-kernels of microkernels.h. The
// planner (plan.h) picks the algorithm and its blocking; RunPlan (conv_fast.cc) runs the plan and
// decides nothing of what it holds, one file per pass
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

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/plan.h"

namespace tf_ops {
namespace cpu {

// What RunPlan did: ran the plan; nothing, the plan being the direct loops' (or the element
// type having no fast kernels); or nothing, its workspace not to be had.
enum class RunResult : int { kRan, kDirect, kNoWorkspace };

// Runs `plan`: forward reads a = x and b = w, backprop input a = dy and b = w, backprop filter
// a = x and b = dy. Its workspace, ArenaBytes(plan.workspace_bytes), is asked of `workspace`
// (empty: the heap) once, before anything runs. Writes nothing where it returns kDirect or
// kNoWorkspace. (An exception from a pass, out of memory for a thread's scratch, leaves the
// output partly written.)
template <typename T>
RunResult RunPlan(const Plan& plan, const ConvGeometry& g, const T* a, const T* b, T* out,
                  const ParallelFor& parallel_for, const WorkspaceFn& workspace);

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_CONV_FAST_H_
