#include "cc/core/gpu/gpu_support.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#ifndef TF_OPS_CUDA_MIN_ARCH
#define TF_OPS_CUDA_MIN_ARCH 80  // the oldest architecture the kernels are built for, x 10
#endif

namespace tf_ops {
namespace gpu {
namespace {

std::string Version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

GpuSupport Check() {
  int driver = 0, devices = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  std::vector<int> capabilities;
  if (driver >= CUDART_VERSION && cudaGetDeviceCount(&devices) == cudaSuccess) {
    for (int d = 0; d < devices; ++d) {
      int major = 0, minor = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
      capabilities.push_back(major * 10 + minor);
    }
  }
  return AssessGpuSupport(driver, CUDART_VERSION, capabilities, TF_OPS_CUDA_MIN_ARCH);
}

}  // namespace

GpuSupport AssessGpuSupport(int driver_version, int runtime_version, const std::vector<int>& capabilities,
                            int min_arch) {
  GpuSupport s;
  s.driver_version = driver_version, s.runtime_version = runtime_version;
  s.devices = static_cast<int>(capabilities.size());
  if (driver_version == 0) return s;  // no driver: nothing for TensorFlow to place on a GPU
  if (driver_version < runtime_version) {
    s.register_kernels = false;
    s.message = "tf_ops: the NVIDIA driver supports CUDA " + Version(driver_version) + ", older than the CUDA " +
                Version(runtime_version) + " of tf_ops' GPU kernels (driver 580 or newer), so tf_ops' ops run on the CPU.";
    return s;
  }
  for (size_t d = 0; d < capabilities.size(); ++d) {
    if (capabilities[d] < min_arch) {
      s.register_kernels = false;
      s.message = "tf_ops: GPU " + std::to_string(d) + " has compute capability " + std::to_string(capabilities[d] / 10) +
                  "." + std::to_string(capabilities[d] % 10) + ", older than the " + std::to_string(min_arch / 10) + "." +
                  std::to_string(min_arch % 10) + " tf_ops' GPU kernels are built for, so tf_ops' ops run on the CPU.";
      return s;
    }
  }
  return s;
}

const GpuSupport& CheckGpuSupport() {
  static const GpuSupport support = Check();
  return support;
}

}  // namespace gpu
}  // namespace tf_ops
