// A C entry point over the TF-free CUDA launchers (cc/core/gpu/conv_gpu.h), for the GPU harness
// (harness.py, through ctypes): one call runs one direction on device pointers, on a stream.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/cuda_compat.cuh"
#include "cc/core/gpu/gpu_run.h"

namespace {
// Workspace buffers, reused call after call: the calls run in order on one stream, so the next
// call's kernels start after the last one's have finished with them. Growing one synchronizes
// (cudaFree waits for the device).
struct Workspace {
  std::vector<std::pair<void*, int64_t>> buffers;
  size_t next = 0;
};
Workspace& TheWorkspace() {
  static Workspace w;
  return w;
}
void* Take(int64_t bytes) {
  Workspace& w = TheWorkspace();
  if (w.next == w.buffers.size()) w.buffers.emplace_back(nullptr, 0);
  auto& [p, size] = w.buffers[w.next];
  if (size < bytes) {
    if (p != nullptr) cudaFree(p);
    p = nullptr, size = 0;
    if (cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) return nullptr;
    size = bytes;
  }
  ++w.next;
  return p;
}
}  // namespace

// direction: 0 forward (a = x, b = w, out = y), 1 backprop input (a = w, b = dy, out = dx),
// 2 backprop filter (a = x, b = dy, out = dw). dtype: tf_ops::Element. layout: 0 NHWC,
// 1 NCHW. padding: 0 SAME, 1 VALID, 2 EXPLICIT (pads top, bottom, left, right). kernel:
// tf_ops::gpu::Kernel (0 chosen by the geometry, 1 the GEMM, 2 the direct kernel), or the op's
// GPU plan (gpu_plan.h, CUTLASS's entries first): 3 with float32 as 3xTF32, 4 as TF32.
// Returns 0, or 1 with the message in `error`. The call is queued on `stream`, not waited for.
extern "C" int tf_ops_gpu_conv(int direction, int dtype, int layout, const int64_t* sizes /* N H W C KH KW FI K */,
                               const int64_t* attrs /* sh sw dh dw padding pt pb pl pr */, const void* a,
                               const void* b, void* out, void* stream, int kernel, char* error, int error_len) {
  tf_ops::ConvAttrs at;
  at.stride_rows = attrs[0], at.stride_cols = attrs[1], at.dilation_rows = attrs[2], at.dilation_cols = attrs[3];
  at.padding = attrs[4] == 0 ? tf_ops::Padding::kSame : attrs[4] == 1 ? tf_ops::Padding::kValid : tf_ops::Padding::kExplicit;
  at.pad_top = attrs[5], at.pad_bottom = attrs[6], at.pad_left = attrs[7], at.pad_right = attrs[8];
  tf_ops::ConvGeometry g;
  std::string err = tf_ops::MakeConvGeometry(sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6],
                                             sizes[7], at, &g);
  if (err.empty()) {
    const auto dt = static_cast<tf_ops::Element>(dtype);
    const tf_ops::Layout lay = layout == 0 ? tf_ops::Layout::kNHWC : tf_ops::Layout::kNCHW;
    auto* s = static_cast<CUstream_st*>(stream);
    TheWorkspace().next = 0;
    const tf_ops::gpu::WorkspaceFn workspace = Take;
    const auto k = static_cast<tf_ops::gpu::Kernel>(kernel);
    if (kernel >= 3) {
      tf_ops::gpu::GpuCall call;
      call.direction = static_cast<tf_ops::Direction>(direction);
      call.dtype = dt, call.g = g, call.layout = lay;
      call.float_math = kernel == 4 ? tf_ops::gpu::FloatMath::kTf32 : tf_ops::gpu::FloatMath::kTf32x3;
#if defined(TF_OPS_CUDA_EMU)
      const tf_ops::gpu::CutlassKernels* cutlass = nullptr;  // CUTLASS runs on sm_80 and newer only
#else
      const tf_ops::gpu::CutlassKernels* cutlass = &tf_ops::gpu::BuiltCutlassKernels();
#endif
      const tf_ops::gpu::GpuPlan plan = tf_ops::gpu::PlanGpu(call, cutlass);
      err = tf_ops::gpu::RunGpuPlan(plan, a, b, out, plan.workspace_bytes > 0 ? Take(plan.workspace_bytes) : nullptr, s);
    } else if (direction == 0) err = tf_ops::gpu::ConvForward(dt, g, lay, a, b, out, s, workspace, k);
    if (direction == 1) err = tf_ops::gpu::ConvBackpropInput(dt, g, lay, a, b, out, s, workspace, k);
    if (direction == 2) err = tf_ops::gpu::ConvBackpropFilter(dt, g, lay, a, b, out, s, workspace, k);
  }
  if (err.empty()) return 0;
  std::strncpy(error, err.c_str(), static_cast<size_t>(error_len - 1));
  error[error_len - 1] = '\0';
  return 1;
}

// Frees the workspace buffers, after the device has finished with them.
extern "C" void tf_ops_gpu_free_workspace() {
  for (auto& [p, size] : TheWorkspace().buffers) cudaFree(p);
  TheWorkspace().buffers.clear();
}
