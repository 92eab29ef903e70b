// What tf_ops' CUDA sources use besides plain CUDA C++, in one place, so that the same
// sources also compile with the host compiler and run under the CPU emulator
// (tests/cuda_emu, -DTF_OPS_CUDA_EMU):
//   TF_OPS_SHARED(T, name, count)   a static __shared__ array of `count` T
//   TF_OPS_DYNAMIC_SHARED(T, name)  the block's dynamic (extern __shared__) memory as T
//   Launch<kernel>(grid, block, dynamic_shared, stream, args...)
//                                   every launch; returns the launch's error
//   Output<T>{pointer}              a kernel's output in global memory, written through
//                                   Store(i, v) once an element a launch
//   Mma16816(d, a, b, T())          the warp's tensor-core D += A B, 16 x 8 x 16, T half or
//                                   bfloat16, float D; operands in PTX's fragment layout
//   Bits16(v)                       a half or bfloat16's 16 bits
//   TF_OPS_UNROLL                   before a loop of constant trip count: unroll it (so that
//                                   the arrays it indexes stay in registers)
// Shared arrays are indexed with [], never through pointers, so that the emulator can check
// every access.
#ifndef TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_
#define TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_

#include <cstdint>
#include <utility>

#if defined(TF_OPS_CUDA_EMU)

#include "cuda_emu.h"

#define TF_OPS_SHARED(T, name, count)                                                        \
  const ::tf_ops_emu::SharedArray<T> name(                                                   \
      ::tf_ops_emu::SharedRegion(__FILE__, __LINE__, sizeof(T) * (count), false), #name)
#define TF_OPS_UNROLL
#define TF_OPS_DYNAMIC_SHARED(T, name)                                                       \
  const ::tf_ops_emu::SharedArray<T> name(::tf_ops_emu::SharedRegion(__FILE__, __LINE__, 0, true), #name)

namespace tf_ops {
namespace gpu {
template <auto kKernel, typename... Args>
cudaError_t Launch(dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream, Args&&... args) {
  return ::tf_ops_emu::Launch(::tf_ops_emu::KernelName<kKernel>(), kKernel, grid, block, dynamic_shared, stream,
                              std::forward<Args>(args)...);
}
inline void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], __half) {
  ::tf_ops_emu::Mma16816(false, d, a, b, __FILE__, __LINE__);
}
inline void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], __nv_bfloat16) {
  ::tf_ops_emu::Mma16816(true, d, a, b, __FILE__, __LINE__);
}
}  // namespace gpu
}  // namespace tf_ops

#else  // nvcc

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define TF_OPS_SHARED(T, name, count) __shared__ T name[count]
#define TF_OPS_UNROLL _Pragma("unroll")
#define TF_OPS_DYNAMIC_SHARED(T, name)                                                       \
  extern __shared__ __align__(16) unsigned char tf_ops_dynamic_shared_[];                   \
  T* const name = reinterpret_cast<T*>(tf_ops_dynamic_shared_)

namespace tf_ops {
namespace gpu {
template <auto kKernel, typename... Args>
cudaError_t Launch(dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream, Args&&... args) {
  kKernel<<<grid, block, dynamic_shared, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "tf_ops' CUDA kernels use the tensor-core instructions of sm_80 and newer: build for 80 or above"
#endif

__device__ __forceinline__ void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
}  // namespace gpu
}  // namespace tf_ops

#endif

namespace tf_ops {
namespace gpu {
__device__ __forceinline__ uint32_t Bits16(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint32_t Bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// A kernel's output in global memory (a result, or a workspace of partial sums): every element
// a launch writes is stored once, by one thread, through Store; under the emulator a second
// store of an element in one launch is reported (an overlap of two threads' outputs, or a
// read-modify-write that two threads race on). `data` is for the launch that reads it back.
template <typename T>
struct Output {
  T* data;
  __device__ __forceinline__ void Store(int64_t i, T v) const {
#if defined(TF_OPS_CUDA_EMU)
    ::tf_ops_emu::NoteStore(data + i, sizeof(T));
#endif
    data[i] = v;
  }
};
}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_
