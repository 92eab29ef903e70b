// CUDA convolution kernels: the three directions of conv_cpu.h on a GPU, over the same
// ConvGeometry, for half, bfloat16, float, double and int32 (half and bfloat16 accumulate in
// float, int32 wraps modulo 2**32 as on CPU).
//
// TF-free, and free of CUDA headers, so that g++-compiled glue can call it: the stream is
// CUDA's `cudaStream_t` (a CUstream_st*), the tensors are device pointers of the given type
// (activations in `layout`, filters [KH, KW, FI, K]).
//
// Every output element is summed in an order fixed by the geometry, by one thread or by one
// warp's tensor-core steps (a long reduction is split into a number of slices fixed by the
// geometry and the kernel, added in order), so results are bitwise the same on every run.
// Backprop input runs one launch per stride-residue class of input pixels, through the filter
// taps that reach that class only: no multiply touches an inserted zero. Index arithmetic is
// 64-bit.
//
// Two kernels compute the same sums: a tiled GEMM (on tensor cores for half and bfloat16, sm_80
// and newer), and a direct kernel with one thread per output for the problems whose groups have
// so few output columns (a depthwise layer: one) that most of a GEMM tile would sit idle.
#ifndef TF_OPS_CC_CORE_GPU_CONV_GPU_H_
#define TF_OPS_CC_CORE_GPU_CONV_GPU_H_

#include <cstdint>
#include <functional>
#include <string>

#include "cc/core/conv_geometry.h"
#include "cc/core/gpu/conv_gpu_plan.h"  // Kernel
#include "cc/core/gpu/cutlass_conv.h"   // Element

struct CUstream_st;

namespace tf_ops {
namespace gpu {

using Stream = CUstream_st*;

// Device memory for a launch's temporaries (`bytes` of it, valid until the stream has run
// the launch's work), or null where it cannot be had (the kernels then use none).
using WorkspaceFn = std::function<void*(int64_t bytes)>;

// Each returns "" once the work is queued on `stream`, or an error message (a launch that
// failed, a grid larger than CUDA allows).
std::string ConvForward(Element dtype, const ConvGeometry& g, Layout layout, const void* x,
                        const void* w, void* y, Stream stream, const WorkspaceFn& workspace,
                        Kernel kernel = Kernel::kAuto);

std::string ConvBackpropInput(Element dtype, const ConvGeometry& g, Layout layout, const void* w,
                              const void* dy, void* dx, Stream stream,
                              const WorkspaceFn& workspace, Kernel kernel = Kernel::kAuto);

std::string ConvBackpropFilter(Element dtype, const ConvGeometry& g, Layout layout, const void* x,
                               const void* dy, void* dw, Stream stream,
                               const WorkspaceFn& workspace, Kernel kernel = Kernel::kAuto);

// The filter layouts of a plan that runs CUTLASS (cutlass_conv.h), for a geometry of one group:
// FilterToKrsc copies the HWIO filter w into krsc as [K][R][S][C]; KrscSumsToFilter writes dw
// (HWIO, of `dtype`) as the sum, in split order, of `splits` float KRSC tensors at `sums`.
std::string FilterToKrsc(Element dtype, const ConvGeometry& g, const void* w, void* krsc, Stream stream);
std::string KrscSumsToFilter(Element dtype, const ConvGeometry& g, const float* sums, int64_t splits, void* dw,
                             Stream stream);

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_CONV_GPU_H_
