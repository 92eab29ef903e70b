// CUDA's execution model on the CPU: the runtime that runs tf_ops' kernel sources (the very
// .cu files nvcc builds) compiled by the host compiler with -DTF_OPS_CUDA_EMU.
//
// Every thread of a block is a fiber of its own, so a barrier really waits for the whole
// block and a warp collective for the whole warp. Blocks, and threads within a block, start in
// an order shuffled by a seed (SetSeed): a result that depends on scheduling changes between
// seeds. The emulator reports, with kernel, block and thread:
//   - threads of one block waiting at different barriers, or a thread that has exited while
//     others wait at (or later reach) a barrier;
//   - a shared-memory race: a thread reads or writes a location that another thread of the
//     block wrote since the last barrier (for threads of one warp, since the last
//     __syncwarp or collective of that warp);
//   - a read of shared memory that nothing wrote;
//   - a shared-memory index out of bounds, and a launch configuration CUDA would refuse;
//   - a launch, memset or copy on a stream other than the one the op was given (ExpectStream);
//   - a block larger than the kernel's __launch_bounds__, as nvcc compiled them (the table
//     LoadLaunchBounds reads), which CUDA refuses to launch; and a kernel missing from it;
//   - a global element stored twice in one launch through Output<T>::Store, the store of the
//     kernels' write-once outputs: two threads' tiles overlapping, or a read-modify-write that
//     two threads race on.
// Out-of-bounds global accesses are left to AddressSanitizer (device memory is host memory).
// TrackStores counts the stores (and memsets) into one buffer across the launches of an op,
// so that a test can require every element of an output written exactly once.
//
// Kernels declare shared memory with TF_OPS_SHARED (static) and TF_OPS_DYNAMIC_SHARED
// (extern __shared__) from cc/core/gpu/cuda_compat.cuh, which index through checked proxies
// here, and launch through its Launch<kernel>.
#ifndef TF_OPS_TESTS_CUDA_EMU_CUDA_EMU_H_
#define TF_OPS_TESTS_CUDA_EMU_CUDA_EMU_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---------------------------------------------------------------------------------------
// The runtime API the launchers use.

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchOutOfResources = 701
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, cudaStream_t stream = nullptr);
constexpr int cudaMemcpyDeviceToDevice = 3;
cudaError_t cudaMalloc(void** p, size_t bytes);  // host memory: device memory is host memory here
cudaError_t cudaFree(void* p);

namespace tf_ops_emu {

// The planted kernel bug the sweep runs with (its --plant), -1 for none: the planted-bugs test
// compiles every bug into one copy of the kernels, each behind a test of this number.
extern int planted_bug;

// The running thread's indices.
struct ThreadIndex {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
extern ThreadIndex* current;

// Scheduling order of blocks and threads; the same seed gives the same order.
void SetSeed(uint64_t seed);
// Reports so far ("kernel K block (x,y,z) thread (x,y,z): what"); ClearReports forgets them.
const std::vector<std::string>& Reports();
void ClearReports();
// Launches run, counted since the last ClearReports.
int64_t Launches();

// The stream the op under test was given: from here on a launch, memset or copy on another
// stream is reported (ClearExpectedStream ends that).
void ExpectStream(cudaStream_t stream);
void ClearExpectedStream();

// Reads the kernels' launch bounds, lines "NAME MAX_THREADS" (NAME a kernel's name without its
// namespaces and template arguments; the least bound where one appears on several lines); "" on
// success, else what is wrong. From then on every launch is checked against them.
std::string LoadLaunchBounds(const char* path);
// The largest block each kernel (by that name) was launched with, since the program started.
const std::map<std::string, int64_t>& LaunchedKernels();

// A store of `bytes` at `p` by the running thread, through Output<T>::Store.
void NoteStore(const void* p, size_t bytes);
// Counts the stores and memsets into [base, base + bytes), element by element (`elem` bytes
// each), until the next TrackStores; TrackedStores returns the counts.
void TrackStores(const void* base, size_t bytes, size_t elem);
const std::vector<int>& TrackedStores();

// A kernel's name as reports give it, without namespaces ("GemmKernel<ForwardProblem<float> >"),
// from the __PRETTY_FUNCTION__ of KernelName<kernel>.
std::string KernelNameOf(const char* pretty_function);
template <auto kKernel>
const char* KernelName() {
  static const std::string name = KernelNameOf(__PRETTY_FUNCTION__);
  return name.c_str();
}

void SyncThreads(const char* file, int line);
void SyncWarp(unsigned mask, const char* file, int line);
// Warp collective: every lane of `mask` deposits `value` (up to 8 bytes); returns all 32
// lanes' values once the whole mask has arrived.
void Exchange(unsigned mask, const void* value, size_t size, const char* file, int line, uint64_t out[32]);
// The widest deposit of a warp collective, in 8-byte words.
constexpr int kExchangeWords = 4;
// mma.sync.aligned.m16n8k16.row.col.f32 with f16 (bf16 = false) or bf16 operands: D += A B for
// the warp, each lane holding its PTX fragments (4 words of A, 2 of B, 4 floats of D).
void Mma16816(bool bf16, float d[4], const uint32_t a[4], const uint32_t b[2], const char* file, int line);
unsigned LaneId();

// Shared memory: the block's region for a declaration site (static: `bytes` of it; dynamic:
// the launch's), and its bytes.
struct Region;
Region* SharedRegion(const char* file, int line, size_t bytes, bool dynamic);
void* RegionData(Region* region);
size_t RegionBytes(Region* region);
// Checked access to elements [index * elem, (index + 1) * elem) of a region of `count`
// elements (element-granular shadow state); false where the index is out of bounds.
bool SharedAccess(Region* region, size_t index, size_t count, size_t elem, const char* name, bool write);

template <typename T>
class SharedRef {
 public:
  SharedRef(Region* region, size_t index, size_t count, const char* name)
      : region_(region), index_(index), count_(count), name_(name) {}
  operator T() const {
    T v{};
    if (SharedAccess(region_, index_, count_, sizeof(T), name_, false)) {
      std::memcpy(&v, static_cast<unsigned char*>(RegionData(region_)) + index_ * sizeof(T), sizeof(T));
    }
    return v;
  }
  SharedRef& operator=(const T& v) {
    if (SharedAccess(region_, index_, count_, sizeof(T), name_, true)) {
      std::memcpy(static_cast<unsigned char*>(RegionData(region_)) + index_ * sizeof(T), &v, sizeof(T));
    }
    return *this;
  }
  SharedRef& operator=(const SharedRef& other) { return *this = static_cast<T>(other); }
  SharedRef& operator+=(const T& v) { return *this = static_cast<T>(*this) + v; }

 private:
  Region* region_;
  size_t index_, count_;
  const char* name_;
};

template <typename T>
class SharedArray {
 public:
  SharedArray(Region* region, const char* name)
      : region_(region), count_(RegionBytes(region) / sizeof(T)), name_(name) {}
  SharedRef<T> operator[](size_t i) const { return SharedRef<T>(region_, i, count_, name_); }
  size_t size() const { return count_; }

 private:
  Region* region_;
  size_t count_;
  const char* name_;
};

// Runs `body(block, thread)` for every thread of the grid as a kernel named `name`, after
// checking the configuration as CUDA does.
cudaError_t Run(const char* name, dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream,
                void (*trampoline)(void*), void* closure);

template <typename... Params, typename... Args>
cudaError_t Launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t dynamic_shared, cudaStream_t stream, Args&&... args) {
  struct Closure {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> args;
  } closure{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  return Run(name, grid, block, dynamic_shared, stream,
             [](void* p) {
               auto* c = static_cast<Closure*>(p);
               std::apply(c->kernel, c->args);
             },
             &closure);
}

}  // namespace tf_ops_emu

#define threadIdx (::tf_ops_emu::current->thread_idx)
#define blockIdx (::tf_ops_emu::current->block_idx)
#define blockDim (::tf_ops_emu::current->block_dim)
#define gridDim (::tf_ops_emu::current->grid_dim)
constexpr int warpSize = 32;

#define __syncthreads() ::tf_ops_emu::SyncThreads(__FILE__, __LINE__)
inline void tf_ops_emu_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
  ::tf_ops_emu::SyncWarp(mask, file, line);
}
#define __syncwarp(...) tf_ops_emu_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)

// Warp collectives. `width` partitions the warp into segments as CUDA's does.
#define TF_OPS_EMU_SHFL(name, lane_expr)                                                       \
  template <typename T>                                                                      \
  T tf_ops_emu_##name(const char* file, int line, unsigned mask, T var, int arg, int width = 32) { \
    static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");                            \
    uint64_t all[32];                                                                        \
    ::tf_ops_emu::Exchange(mask, &var, sizeof(T), file, line, all);                          \
    const int lane = static_cast<int>(::tf_ops_emu::LaneId());                               \
    const int base = lane / width * width;                                                   \
    (void)base;                                                                              \
    const int src = (lane_expr);                                                             \
    T out;                                                                                   \
    std::memcpy(&out, &all[src], sizeof(T));                                                 \
    return out;                                                                              \
  }
TF_OPS_EMU_SHFL(shfl_sync, base + (arg % width + width) % width)
TF_OPS_EMU_SHFL(shfl_down_sync, lane - base + arg < width ? lane + arg : lane)
TF_OPS_EMU_SHFL(shfl_up_sync, lane - base - arg >= 0 ? lane - arg : lane)
TF_OPS_EMU_SHFL(shfl_xor_sync, (lane ^ arg) - base < width && (lane ^ arg) >= base ? (lane ^ arg) : lane)
#undef TF_OPS_EMU_SHFL
#define __shfl_sync(...) tf_ops_emu_shfl_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) tf_ops_emu_shfl_down_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) tf_ops_emu_shfl_up_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) tf_ops_emu_shfl_xor_sync(__FILE__, __LINE__, __VA_ARGS__)

inline unsigned tf_ops_emu_ballot(const char* file, int line, unsigned mask, int pred) {
  uint64_t all[32];
  const uint64_t mine = pred != 0;
  ::tf_ops_emu::Exchange(mask, &mine, sizeof(mine), file, line, all);
  unsigned bits = 0;
  for (int i = 0; i < 32; ++i) bits |= (mask >> i & 1u) && all[i] ? 1u << i : 0u;
  return bits;
}
#define __ballot_sync(mask, pred) tf_ops_emu_ballot(__FILE__, __LINE__, mask, pred)
#define __any_sync(mask, pred) (tf_ops_emu_ballot(__FILE__, __LINE__, mask, pred) != 0)
#define __all_sync(mask, pred) (tf_ops_emu_ballot(__FILE__, __LINE__, mask, pred) == (mask))

// Atomics: one fiber runs at a time, so a read-modify-write is atomic.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}

// ---------------------------------------------------------------------------------------
// __half and __nv_bfloat16: storage types with CUDA's round-to-nearest-even conversions.

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};

inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }

inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7fffu)};  // NaN, as CUDA's
  if (abs >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to infinity
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): the value in units of 2**-24, rounded to nearest even.
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    const float scaled = magnitude * 16777216.0f;  // exact: a power of two
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // nearest, ties to even
  return {static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13))};
}
inline __half __float2half(float f) { return __float2half_rn(f); }

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x40u)};  // quiet NaN
  return {static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

#endif  // TF_OPS_TESTS_CUDA_EMU_CUDA_EMU_H_
