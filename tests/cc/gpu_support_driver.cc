// Prints what cc/core/gpu/gpu_support.cc decides: for this machine (CheckGpuSupport, through
// the statically linked CUDA runtime), then for given facts (AssessGpuSupport), one line each:
//   register=0|1 driver=V devices=N message=...
#include <cstdio>
#include <vector>

#include "cc/core/gpu/gpu_support.h"

namespace {
void Print(const char* what, const tf_ops::gpu::GpuSupport& s) {
  std::printf("%s register=%d driver=%d runtime=%d devices=%d message=%s\n", what, s.register_kernels ? 1 : 0,
              s.driver_version, s.runtime_version, s.devices, s.message.c_str());
}
}  // namespace

int main() {
  using tf_ops::gpu::AssessGpuSupport;
  Print("here", tf_ops::gpu::CheckGpuSupport());
  Print("no_driver", AssessGpuSupport(0, 13000, {}, 80));
  Print("old_driver", AssessGpuSupport(12040, 13000, {90}, 80));
  Print("old_gpu", AssessGpuSupport(13000, 13000, {90, 75}, 80));
  Print("good", AssessGpuSupport(13010, 13000, {80, 90}, 80));
  return 0;
}
