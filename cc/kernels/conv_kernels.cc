// Kernels of the TfOps> convolution family: attribute parsing, input validation and shape
// bookkeeping, shared by every device (ConvOp::Prepare), then a launch per device: the CPU
// thread pool, or, in a build with CUDA (TF_OPS_WITH_CUDA), the op's CUDA stream. The arithmetic
// lives in cc/core.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/pull_chunks.h"
#include "cc/core/cpu/roofline.h"
#include "cc/core/switches.h"
#include "cc/kernels/c_entry.h"
#include "cc/kernels/conv_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/env.h"

#if TF_OPS_WITH_CUDA
#include <cstdio>
#include <cstdlib>

#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/gpu_run.h"
#include "cc/core/gpu/gpu_support.h"
#include "tensorflow/core/platform/tensor_float_32_utils.h"
#include "xla/stream_executor/stream.h"
#endif

namespace tf_ops {
namespace {

#if TF_OPS_WITH_CUDA
// How float32 runs on tensor cores: as TF32 where TensorFlow's switch allows it
// (tf.config.experimental.enable_tensor_float_32_execution) and exact mode is off, else as
// 3xTF32.
gpu::FloatMath GpuFloatMath() {
  return ::tensorflow::tensor_float_32_execution_enabled() && !ExactMode() ? gpu::FloatMath::kTf32
                                                                                 : gpu::FloatMath::kTf32x3;
}

// The CUTLASS kernels of this build, or none.
const gpu::CutlassKernels* GpuCutlass() {
#if TF_OPS_WITH_CUTLASS
  return &gpu::BuiltCutlassKernels();
#else
  return nullptr;
#endif
}

gpu::GpuCall GpuCallOf(Direction direction, Element dtype, const ConvGeometry& g, Layout layout) {
  gpu::GpuCall call;
  call.direction = direction;
  call.dtype = dtype, call.g = g, call.layout = layout, call.float_math = GpuFloatMath();
  return call;
}
#endif

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// OP_REQUIRES_OK for a function that returns whether it succeeded.
#define TF_OPS_REQUIRES_OK(ctx, expr)          \
  do {                                         \
    const absl::Status tf_ops_status_ = (expr); \
    if (!tf_ops_status_.ok()) {                \
      (ctx)->CtxFailure(tf_ops_status_);       \
      return false;                            \
    }                                          \
  } while (0)

// What Prepare hands a device's launch: the geometry, the operands (those the direction reads)
// and the allocated, non-empty output.
struct Prepared {
  ConvGeometry g;
  Layout layout = Layout::kNHWC;
  const Tensor* x = nullptr;
  const Tensor* w = nullptr;
  const Tensor* dy = nullptr;
  Tensor* out = nullptr;
};

// The CPU kernels' workspace blocks (tensors from TensorFlow's allocator) kept from one call for
// the next, process-wide, at most kKeptBytes in all. Where that allocator is the C library's
// malloc (TensorFlow's oneDNN operations off), a block above malloc's mapping threshold (32 MiB)
// is mapped afresh at each call, and faulting its pages in takes as long as an NCHW pass's
// transposes; oneDNN's allocator keeps freed blocks itself, and a kept block saves nothing there.
// A call takes the smallest kept block that is large enough and at most twice its size (so that
// a small call does not take what a larger one needs); concurrent calls each have their own.
// Kept blocks are dropped before an allocation is given up as out of memory.
class KeptBlocks {
 public:
  static constexpr int64_t kKeptBytes = int64_t{64} << 20;

  static KeptBlocks& Get() {
    static KeptBlocks* const kept = new KeptBlocks;  // never destroyed: calls may outlive static destructors
    return *kept;
  }

  // A block of at least `bytes` bytes into *block: a kept one, else one from ctx's allocator
  // (after dropping every kept block, where the first try fails). False where none can be had.
  bool Take(OpKernelContext* ctx, int64_t bytes, Tensor* block) {
    if (TakeKept(bytes, block)) return true;
    const TensorShape shape({bytes});
    if (ctx->allocate_temp(::tensorflow::DT_INT8, shape, block).ok()) return true;
    if (!DropAll()) return false;
    return ctx->allocate_temp(::tensorflow::DT_INT8, shape, block).ok();
  }

  // Keeps `block` for a later call, dropping the oldest kept past kKeptBytes.
  void GiveBack(Tensor block) {
    const int64_t size = block.NumElements();
    if (size == 0 || size > kKeptBytes) return;
    std::lock_guard<std::mutex> lock(mu_);
    kept_.push_back(std::move(block));
    kept_bytes_ += size;
    while (kept_bytes_ > kKeptBytes) {
      kept_bytes_ -= kept_.front().NumElements();
      kept_.erase(kept_.begin());
    }
  }

 private:
  bool TakeKept(int64_t bytes, Tensor* block) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      const int64_t size = it->NumElements();
      if (size >= bytes && size / 2 <= bytes && (best == kept_.end() || size < best->NumElements())) best = it;
    }
    if (best == kept_.end()) return false;
    *block = std::move(*best);
    kept_bytes_ -= block->NumElements();
    kept_.erase(best);
    return true;
  }

  // Drops every kept block; whether there was one.
  bool DropAll() {
    std::vector<Tensor> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(kept_);
      kept_bytes_ = 0;
    }
    return !dropped.empty();
  }

  std::mutex mu_;
  std::vector<Tensor> kept_;
  int64_t kept_bytes_ = 0;
};

struct CpuDevice {};
struct GpuDevice {};

template <typename Device, typename T>
class ConvOp : public OpKernel {
 public:
  ConvOp(OpKernelConstruction* ctx, const OpSpec& spec) : OpKernel(ctx), spec_(spec) {
    OP_REQUIRES_OK(ctx, ParseAttrs(ctx, spec_, &attrs_));
    if constexpr (std::is_same_v<Device, CpuDevice>) {
      const std::string& isa_error = cpu::KernelIsaError();
      OP_REQUIRES(ctx, isa_error.empty(), absl::InvalidArgumentError(Cat(spec_.label, ": ", isa_error)));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    WithoutExceptions(ctx, spec_.label, [&] {
      Prepared p;
      if (Prepare(ctx, &p)) Launch(ctx, p, Device());
    });
  }

 private:
  // Everything up to the output's allocation, the same on every device (PlanConv): ranks,
  // sizes, the geometry, every check and message. False when the op failed or its output is
  // empty.
  bool Prepare(OpKernelContext* ctx, Prepared* p) {
    const Direction dir = spec_.direction;
    ConvOperands operands;
    for (int i = 0; i < ctx->num_inputs(); ++i) operands.in[i] = ctx->input(i).shape();
    if (spec_.sizes_from == SizesFrom::kTensor) {
      operands.sizes = &ctx->input(SizesInput(spec_));
    }
    CheckedConv checked;
    TF_OPS_REQUIRES_OK(ctx, CheckConv(spec_, attrs_, operands, sizeof(T), &checked));
    TF_OPS_REQUIRES_OK(ctx, ctx->allocate_output(0, checked.out_shape, &p->out));
    p->g = checked.g;
    p->layout = attrs_.layout;
    if (dir != Direction::kBackpropInput) p->x = &ctx->input(0);
    if (dir != Direction::kBackpropFilter) p->w = &ctx->input(1);
    if (dir != Direction::kForward) p->dy = &ctx->input(2);
    return checked.out_shape.num_elements() > 0;
  }

  void Launch(OpKernelContext* ctx, const Prepared& p, CpuDevice) {
    // An exception in a range comes back to this thread, and Compute makes it the op's error.
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    const cpu::ParallelFor parallel_for =
        [pool](int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
          cpu::PullChunksRethrowing(*pool, units, cost, fn);
        };
    // The plan's workspace: a block kept from an earlier call, or one from TensorFlow's
    // allocator (counted and profiled as the op's temporary memory), held until the call returns
    // and then kept for a later one.
    Tensor block;
    const cpu::WorkspaceFn workspace = [ctx, &block](int64_t bytes) -> void* {
      if (!KeptBlocks::Get().Take(ctx, bytes, &block)) return nullptr;
      return block.flat<int8_t>().data();
    };
    T* o = p.out->flat<T>().data();
    std::string err;
    switch (spec_.direction) {
      case Direction::kForward:
        err = cpu::ConvForward<T>(p.g, p.layout, p.x->flat<T>().data(), p.w->flat<T>().data(), o, parallel_for,
                                  workspace, &plans_);
        break;
      case Direction::kBackpropInput:
        err = cpu::ConvBackpropInput<T>(p.g, p.layout, p.w->flat<T>().data(), p.dy->flat<T>().data(), o,
                                        parallel_for, workspace, &plans_);
        break;
      case Direction::kBackpropFilter:
        err = cpu::ConvBackpropFilter<T>(p.g, p.layout, p.x->flat<T>().data(), p.dy->flat<T>().data(), o,
                                         parallel_for, workspace, &plans_);
        break;
    }
    if (block.IsInitialized()) KeptBlocks::Get().GiveBack(std::move(block));
    OP_REQUIRES(ctx, err.empty(), absl::ResourceExhaustedError(Cat(spec_.label, ": ", err)));
  }

#if TF_OPS_WITH_CUDA
  // The GPU plan (cc/core/gpu/gpu_plan.h), its workspace asked of TensorFlow's allocator once
  // and held until the launches are queued (later users of the memory run on the same stream,
  // after them).
  void Launch(OpKernelContext* ctx, const Prepared& p, GpuDevice) {
    auto* stream = static_cast<CUstream_st*>(
        ctx->op_device_context()->stream()->platform_specific_handle().stream);
    const void* a = spec_.direction == Direction::kBackpropInput ? p.w->data() : p.x->data();
    const void* b = spec_.direction == Direction::kForward ? p.w->data() : p.dy->data();
    gpu::GpuCall call = GpuCallOf(spec_.direction, ElementOf<T>(), p.g, p.layout);
    call.aligned = (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                    reinterpret_cast<uintptr_t>(p.out->data())) % 16 == 0;
    const gpu::GpuPlan plan = gpu::PlanGpu(call, GpuCutlass());
    Tensor block;
    void* workspace = nullptr;
    if (plan.workspace_bytes > 0 &&
        ctx->allocate_temp(::tensorflow::DT_INT8, TensorShape({plan.workspace_bytes}), &block).ok()) {
      workspace = block.flat<int8_t>().data();
    }
    OP_REQUIRES(ctx, workspace != nullptr || plan.workspace_bytes == 0 || !gpu::IsCutlass(plan.entry),
                absl::ResourceExhaustedError(Cat(spec_.label, ": out of memory: cannot allocate ",
                                                 plan.workspace_bytes, " bytes of GPU workspace for the ",
                                                 gpu::NameOf(plan.entry), " plan")));
    if (Verbose()) std::fprintf(stderr, "tf_ops_verbose gpu %s\n", gpu::DescribeGpuPlan(plan).c_str());
    const std::string err = gpu::RunGpuPlan(plan, a, b, p.out->data(), workspace, stream);
    OP_REQUIRES(ctx, err.empty(), absl::InternalError(Cat(spec_.label, ": ", err)));
  }

#endif

  const OpSpec spec_;
  ParsedAttrs attrs_;
  cpu::PlanCache plans_;  // the CPU calls' plans by geometry (unused on the GPU)
};

// One kernel class per op, so that REGISTER_KERNEL_BUILDER sees a one-argument constructor.
template <typename Device, typename T, const OpSpec& kSpec>
class Kernel : public ConvOp<Device, T> {
 public:
  explicit Kernel(OpKernelConstruction* ctx) : ConvOp<Device, T>(ctx, kSpec) {}
};

#define TF_OPS_REGISTER_CPU(op, spec, T)                                                 \
  REGISTER_KERNEL_BUILDER(                                                               \
      Name("TfOps>" op).Device(DEVICE_CPU).TypeConstraint<T>("T"), Kernel<CpuDevice, T, spec>);

#if TF_OPS_WITH_CUDA
// Whether to register the GPU kernels: not where a driver is present that cannot run them
// (said once, in one sentence); TensorFlow then places the ops on the CPU.
bool RegisterGpuKernels() {
  static const bool ok = [] {
    const gpu::GpuSupport& s = gpu::CheckGpuSupport();
    if (!s.message.empty()) std::fprintf(stderr, "%s\n", s.message.c_str());
    return s.register_kernels;
  }();
  return ok;
}

// The sizes vectors of the V1 backprop ops are read on the host.
template <const OpSpec& kSpec>
::tensorflow::KernelDefBuilder& HostSizes(::tensorflow::KernelDefBuilder& b) {
  if (kSpec.sizes_from != SizesFrom::kTensor) return b;
  return b.HostMemory(SizesName(kSpec));
}

#define TF_OPS_REGISTER_GPU_UNIQ(ctr, op, spec, T)                                       \
  static ::tensorflow::kernel_factory::OpKernelRegistrar tf_ops_gpu_registrar_##ctr(     \
      RegisterGpuKernels()                                                               \
          ? HostSizes<spec>(::tensorflow::register_kernel::Name("TfOps>" op)             \
                                .Device(DEVICE_GPU)                                      \
                                .TypeConstraint<T>("T"))                                 \
                .Build()                                                                 \
          : nullptr,                                                                     \
      "Kernel<GpuDevice, " #T ", " #spec ">",                                            \
      [](::tensorflow::OpKernelConstruction* c) -> OpKernel* {                           \
        return new Kernel<GpuDevice, T, spec>(c);                                        \
      });
#define TF_OPS_REGISTER_GPU_N(ctr, op, spec, T) TF_OPS_REGISTER_GPU_UNIQ(ctr, op, spec, T)
#define TF_OPS_REGISTER(op, spec, T)                                                     \
  TF_OPS_REGISTER_CPU(op, spec, T)                                                       \
  TF_OPS_REGISTER_GPU_N(__COUNTER__, op, spec, T)
#else
#define TF_OPS_REGISTER(op, spec, T) TF_OPS_REGISTER_CPU(op, spec, T)
#endif

#define TF_OPS_REGISTER_WITH_INT32(T)                                                    \
  TF_OPS_REGISTER("Conv2D", kConv2D, T)                                                  \
  TF_OPS_REGISTER("Conv2DBackpropInput", kConv2DBackpropInput, T)                        \
  TF_OPS_REGISTER("Conv2DBackpropInputV2", kConv2DBackpropInputV2, T)

#define TF_OPS_REGISTER_FLOATING(T)                                                      \
  TF_OPS_REGISTER_WITH_INT32(T)                                                          \
  TF_OPS_REGISTER("Conv2DBackpropFilter", kConv2DBackpropFilter, T)                      \
  TF_OPS_REGISTER("Conv2DBackpropFilterV2", kConv2DBackpropFilterV2, T)                  \
  TF_OPS_REGISTER("DepthwiseConv2dNative", kDepthwise, T)                                \
  TF_OPS_REGISTER("DepthwiseConv2dNativeBackpropInput", kDepthwiseBackpropInput, T)      \
  TF_OPS_REGISTER("DepthwiseConv2dNativeBackpropFilter", kDepthwiseBackpropFilter, T)

TF_OPS_REGISTER_FLOATING(Eigen::half)
TF_OPS_REGISTER_FLOATING(Eigen::bfloat16)
TF_OPS_REGISTER_FLOATING(float)
TF_OPS_REGISTER_FLOATING(double)
TF_OPS_REGISTER_WITH_INT32(int32_t)

#undef TF_OPS_REGISTER_FLOATING
#undef TF_OPS_REGISTER_WITH_INT32
#undef TF_OPS_REGISTER
#undef TF_OPS_REGISTER_CPU

}  // namespace
}  // namespace tf_ops

// The instruction set of the CPU micro-kernels chosen at run time ("amx_bf16", "avx512_bf16",
// "avx512", "avx2" or "generic"), for tf_ops.cpu_kernel_isa() (through ctypes).
extern "C" __attribute__((visibility("default"))) const char* TfOpsCpuKernelIsa() {
  return tf_ops::cpu::FastKernelIsa();
}

// Why TF_OPS_CPU_ISA was refused (cc/core/cpu/microkernels.h), or "": for tf_ops' import.
extern "C" __attribute__((visibility("default"))) const char* TfOpsCpuKernelIsaError() {
  return tf_ops::cpu::KernelIsaError().c_str();
}

// The roofline of CPU kernel table `isa` (cc/core/cpu/roofline.h), for `python -m tf_ops bench
// --kernels`: one line per row, "kernel<TAB>where<TAB>GFLOP/s", or one line "error: ...".
// Writes at most `size` bytes (NUL included) and returns the length of the whole text.
extern "C" __attribute__((visibility("default"))) int64_t TfOpsCpuRoofline(const char* isa, int threads,
                                                                         double seconds, char* out,
                                                                         int64_t size) {
  std::string text;
  try {
    std::vector<tf_ops::cpu::RooflineRow> rows;
    // Threads of TensorFlow's Env (the library itself starts none: pthread_create's symbol is newer
    // than the glibc the wheel may need).
    const tf_ops::cpu::RunTogether run_together = [](int n, const std::function<void(int)>& body) {
      std::vector<std::unique_ptr<::tensorflow::Thread>> started;
      for (int i = 0; i < n; ++i) {
        started.emplace_back(::tensorflow::Env::Default()->StartThread(::tensorflow::ThreadOptions(),
                                                                       "tf_ops_roofline", [&body, i] { body(i); }));
      }
    };  // each Thread's destructor joins it
    const std::string err = tf_ops::cpu::Roofline(isa, threads, seconds, run_together, &rows);
    if (!err.empty()) text = "error: " + err + "\n";
    for (const auto& r : rows) text += tf_ops::Cat(r.kernel, "\t", r.where, "\t", r.gflops, "\n");
  } catch (const std::exception& e) {
    text = tf_ops::Cat("error: ", e.what(), "\n");
  }
  return tf_ops::CopyOut(text.data(), text.size(), out, size);
}

// Exact mode (cc/core/switches.h), for tf_ops.set_exact_mode() and tf_ops.exact_mode() (through
// ctypes).
extern "C" __attribute__((visibility("default"))) void TfOpsSetExactMode(int exact) {
  tf_ops::SetExactMode(exact != 0);
}
extern "C" __attribute__((visibility("default"))) int TfOpsExactMode() {
  return tf_ops::ExactMode() ? 1 : 0;
}

// A switch of cc/core/switches.h by name ("exact", "direct_kernels", "verbose", "plan_cache",
// "rewrite"), for
// the tests and the benchmark
// (through ctypes): set on (1) or off (0), or only read (-1); returns its value before, or -1 for
// a name that is none of them.
extern "C" __attribute__((visibility("default"))) int TfOpsSwitch(const char* name, int value) {
  struct Named {
    const char* name;
    bool (*get)();
    void (*set)(bool);
  };
  static const Named switches[] = {{"exact", tf_ops::ExactMode, tf_ops::SetExactMode},
                                   {"direct_kernels", tf_ops::DirectKernels, tf_ops::SetDirectKernels},
                                   {"verbose", tf_ops::Verbose, tf_ops::SetVerbose},
                                   {"plan_cache", tf_ops::PlanCacheOn, tf_ops::SetPlanCache},
                                   {"rewrite", tf_ops::Rewriting, tf_ops::SetRewriting}};
  for (const Named& s : switches) {
    if (name == nullptr || std::strcmp(name, s.name) != 0) continue;
    const bool before = s.get();
    if (value >= 0) s.set(value != 0);
    return before ? 1 : 0;
  }
  return -1;
}

namespace {

// The line of TfOpsExplain: `describe`'s of the call's geometry and layout, or "error: " and
// what is wrong with the arguments.
std::string ExplainLine(int direction, int dtype, const char* data_format, const char* padding, const int64_t* sizes,
                        const int64_t* strides, const int64_t* dilations, const int64_t* explicit_paddings,
                        int64_t paddings,
                        const std::function<std::string(const tf_ops::ConvGeometry&, tf_ops::Layout)>& describe) {
  const int directions = tf_ops::kDirections, dtypes = tf_ops::kElements;
  if (direction < 0 || direction >= directions) {
    return "error: direction " + std::to_string(direction) + " is not 0 to " + std::to_string(directions - 1);
  }
  if (dtype < 0 || dtype >= dtypes) return "error: dtype " + std::to_string(dtype) + " is not 0 to " + std::to_string(dtypes - 1);
  if (paddings < 0) return "error: " + std::to_string(paddings) + " explicit paddings";
  const auto d = static_cast<tf_ops::Direction>(direction);
  const tf_ops::OpSpec& spec = d == tf_ops::Direction::kForward         ? tf_ops::kConv2D
                               : d == tf_ops::Direction::kBackpropInput ? tf_ops::kConv2DBackpropInput
                                                                        : tf_ops::kConv2DBackpropFilter;
  tf_ops::ParsedAttrs attrs;
  const absl::Status status = tf_ops::CheckAttrs(
      spec, data_format, padding, std::vector<int64_t>(strides, strides + 4),
      std::vector<int64_t>(dilations, dilations + 4),
      std::vector<int64_t>(explicit_paddings, explicit_paddings + paddings), &attrs);
  if (!status.ok()) return "error: " + std::string(status.message());
  tf_ops::ConvGeometry g;
  const std::string error = tf_ops::MakeConvGeometry(sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5],
                                                     sizes[6], sizes[7], attrs.conv, &g);
  return error.empty() ? describe(g, attrs.layout) : "error: " + error;
}

// TfOpsExplain's line: ExplainLine with the device's plan.
std::string ExplainDevice(int device, int direction, int dtype, const char* data_format, const char* padding,
                          const int64_t* sizes, const int64_t* strides, const int64_t* dilations,
                          const int64_t* explicit_paddings, int64_t paddings) {
  if (device < 0 || device > 1) return "error: device " + std::to_string(device) + " is not 0 or 1";
  return ExplainLine(direction, dtype, data_format, padding, sizes, strides, dilations, explicit_paddings, paddings,
                     [&](const tf_ops::ConvGeometry& g, tf_ops::Layout layout) -> std::string {
                       const auto d = static_cast<tf_ops::Direction>(direction);
                       const auto e = static_cast<tf_ops::Element>(dtype);
                       if (device == 0) return tf_ops::cpu::ExplainCpuCall(d, e, g, layout);
#if TF_OPS_WITH_CUDA
                       return tf_ops::gpu::DescribeGpuPlan(
                           tf_ops::gpu::PlanGpu(tf_ops::GpuCallOf(d, e, g, layout), tf_ops::GpuCutlass()));
#else
                       return "error: device='gpu', but this tf_ops build has no GPU kernels (built without CUDA)";
#endif
                     });
}

}  // namespace

// The vocabulary (cc/core/vocabulary.h: VocabularyText) for the Python package, which reads its
// names from here: written into out as CopyOut writes; returns the text's whole length, or -1 where
// it cannot be made.
extern "C" __attribute__((visibility("default"))) int64_t TfOpsVocabulary(char* out, int64_t out_size) {
  try {
    static const std::string text = tf_ops::VocabularyText();
    return tf_ops::CopyOut(text.data(), text.size(), out, out_size);
  } catch (...) {
    return -1;  // out of memory: no exception crosses the C interface
  }
}

// The plan the CPU kernels (device 0) or the GPU kernels (device 1, in a build with CUDA) would
// run for one call, for tf_ops.explain() (through ctypes): direction and dtype as the
// vocabulary numbers them (Direction, Element: cc/core/vocabulary.h); sizes: batch,
// in_rows, in_cols, in_depth, filter_rows, filter_cols, filter_in_depth, out_depth; the
// attributes as the op takes them (strides and dilations 4 values each, explicit_paddings
// `paddings` values), checked as its kernels check them (CheckAttrs). Writes the plan's line
// (tf_ops::cpu::ExplainCpuCall, tf_ops::gpu::DescribeGpuPlan), or "error: " and what is wrong,
// into out (NUL-terminated, cut to out_size - 1 characters); returns the whole line's length.
extern "C" __attribute__((visibility("default"))) int64_t TfOpsExplain(
    int device, int direction, int dtype, const char* data_format, const char* padding, const int64_t* sizes,
    const int64_t* strides, const int64_t* dilations, const int64_t* explicit_paddings, int64_t paddings,
    char* out, int64_t out_size) {
  // No exception crosses the C interface: where the line cannot be made (out of memory), a fixed
  // one, copied without allocating.
  static constexpr char kNoMemory[] = "error: out of memory";
  std::string line;
  const char* text = kNoMemory;
  size_t size = sizeof(kNoMemory) - 1;
  try {
    line = ExplainDevice(device, direction, dtype, data_format, padding, sizes, strides, dilations, explicit_paddings,
                         paddings);
    text = line.data(), size = line.size();
  } catch (...) {
  }
  return tf_ops::CopyOut(text, size, out, out_size);
}

#if TF_OPS_WITH_CUDA
// Why the GPU kernels are not registered in this process, or "", for tf_ops.gpu_support().
extern "C" __attribute__((visibility("default"))) const char* TfOpsGpuSupport() {
  return tf_ops::gpu::CheckGpuSupport().message.c_str();
}
#endif
