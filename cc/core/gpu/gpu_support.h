// Whether the NVIDIA driver and GPUs of this process can run the kernels of conv_gpu.cu, asked
// once. TF-free; the library links CUDA's runtime statically, which reaches the driver only when
// asked, so a machine without one loads the library as well.
#ifndef TF_OPS_CC_CORE_GPU_GPU_SUPPORT_H_
#define TF_OPS_CC_CORE_GPU_GPU_SUPPORT_H_

#include <string>
#include <vector>

namespace tf_ops {
namespace gpu {

struct GpuSupport {
  int driver_version = 0;   // CUDA version the driver supports (e.g. 13000), 0 without a driver
  int runtime_version = 0;  // CUDA version the kernels were built with
  int devices = 0;          // GPUs the driver shows
  // False where a driver is present but cannot run the kernels (too old, or a GPU older than
  // the architectures built for): then no GPU kernel is registered and TensorFlow places the
  // ops on the CPU. True without a driver (TensorFlow then has no GPU to place them on).
  bool register_kernels = true;
  std::string message;  // why not, in one sentence; empty otherwise
};

const GpuSupport& CheckGpuSupport();

// The decision CheckGpuSupport makes from what it asks the driver: its CUDA version (0 without
// a driver), the CUDA version the kernels were built with, each GPU's compute capability x 10,
// and the oldest architecture built (x 10).
GpuSupport AssessGpuSupport(int driver_version, int runtime_version, const std::vector<int>& capabilities,
                            int min_arch);

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_GPU_SUPPORT_H_
