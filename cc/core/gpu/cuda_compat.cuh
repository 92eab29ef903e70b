// What tf_ops' CUDA sources use besides plain CUDA C++, in one place, so that the same
// sources also compile with the host compiler and run under the CPU emulator
// (tests/cuda_emu, -DTF_OPS_CUDA_EMU):
//   TF_OPS_SHARED(T, name, count)   a static __shared__ array of `count` T
//   TF_OPS_DYNAMIC_SHARED(T, name)  the block's dynamic (extern __shared__) memory as T
//   Launch(name, kernel, grid, block, dynamic_shared, stream, args...)
//                                   every launch; returns the launch's error
// Shared arrays are indexed with [], never through pointers, so that the emulator can check
// every access.
#ifndef TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_
#define TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_

#include <utility>

#if defined(TF_OPS_CUDA_EMU)

#include "cuda_emu.h"

#define TF_OPS_SHARED(T, name, count)                                                        \
  const ::tf_ops_emu::SharedArray<T> name(                                                   \
      ::tf_ops_emu::SharedRegion(__FILE__, __LINE__, sizeof(T) * (count), false), #name)
#define TF_OPS_DYNAMIC_SHARED(T, name)                                                       \
  const ::tf_ops_emu::SharedArray<T> name(::tf_ops_emu::SharedRegion(__FILE__, __LINE__, 0, true), #name)

namespace tf_ops {
namespace gpu {
template <typename... Params, typename... Args>
cudaError_t Launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t dynamic_shared, cudaStream_t stream, Args&&... args) {
  return ::tf_ops_emu::Launch(name, kernel, grid, block, dynamic_shared, stream, std::forward<Args>(args)...);
}
}  // namespace gpu
}  // namespace tf_ops

#else  // nvcc

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define TF_OPS_SHARED(T, name, count) __shared__ T name[count]
#define TF_OPS_DYNAMIC_SHARED(T, name)                                                       \
  extern __shared__ __align__(16) unsigned char tf_ops_dynamic_shared_[];                   \
  T* const name = reinterpret_cast<T*>(tf_ops_dynamic_shared_)

namespace tf_ops {
namespace gpu {
template <typename... Params, typename... Args>
cudaError_t Launch(const char*, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t dynamic_shared, cudaStream_t stream, Args&&... args) {
  kernel<<<grid, block, dynamic_shared, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}
}  // namespace gpu
}  // namespace tf_ops

#endif

#endif  // TF_OPS_CC_CORE_GPU_CUDA_COMPAT_CUH_
