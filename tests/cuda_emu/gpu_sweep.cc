// The emulated parity sweep of the CUDA kernels (cc/core/gpu/conv_gpu.cu, compiled by the host
// compiler with -DTF_OPS_CUDA_EMU): every direction, every element type, over the feature
// matrix (the geometries of sweep_geometries.inc), each run in both kernels (the tiled GEMM and
// the direct kernel, forced, so that each is proven on every geometry whichever the geometry
// would choose) and under three scheduling seeds:
//   - bitwise the same result under every seed, and no emulator report;
//   - floating types against the direct loops in float64 with the bound of the CPU sweep,
//     |gpu - exact| <= (2 n u_acc + u) sum |products| (+ 2**-25 for float16), and against the
//     CPU kernels (in exact mode) within the sum of both bounds; int32 (wrapping) equal to the CPU's.
// Usage: gpu_sweep [--seeds N] [--shard I/N]. --shard runs the geometries whose index is I
// modulo N (each with the seed it has in the whole sweep), so that shards run side by side.
// Exit status 0 when every check held.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/gpu/conv_gpu.h"
#include "cuda_emu.h"

namespace tf_ops {
namespace {

using gpu::Dtype;

struct Spec {
  const char* what;
  Layout layout;
  int64_t batch, rows, cols, depth, kh, kw, fi, k;
  ConvAttrs attrs;
};

std::vector<Spec> Specs() {
  const auto attrs = [](int64_t sh, int64_t sw, int64_t dh, int64_t dw, Padding padding, int64_t pt, int64_t pb,
                        int64_t pl, int64_t pr) {
    ConvAttrs a;
    a.stride_rows = sh, a.stride_cols = sw, a.dilation_rows = dh, a.dilation_cols = dw;
    a.padding = padding, a.pad_top = pt, a.pad_bottom = pb, a.pad_left = pl, a.pad_right = pr;
    return a;
  };
  return {
#define SPEC(what, layout, n, h, w, c, kh, kw, fi, ko, sh, sw, dh, dw, padding, pt, pb, pl, pr) \
  {what, Layout::k##layout, n, h, w, c, kh, kw, fi, ko, attrs(sh, sw, dh, dw, Padding::k##padding, pt, pb, pl, pr)},
#include "sweep_geometries.inc"
#undef SPEC
  };
}

template <typename T>
struct Info;
template <>
struct Info<Eigen::half> {
  static constexpr Dtype dtype = Dtype::kHalf;
  static constexpr const char* name = "float16";
  static constexpr double unit = 0x1p-11, acc = 0x1p-24, floor = 0x1p-25;
};
template <>
struct Info<Eigen::bfloat16> {
  static constexpr Dtype dtype = Dtype::kBFloat16;
  static constexpr const char* name = "bfloat16";
  static constexpr double unit = 0x1p-8, acc = 0x1p-24, floor = 0;
};
template <>
struct Info<float> {
  static constexpr Dtype dtype = Dtype::kFloat;
  static constexpr const char* name = "float32";
  static constexpr double unit = 0x1p-24, acc = 0x1p-24, floor = 0;
};
template <>
struct Info<double> {
  static constexpr Dtype dtype = Dtype::kDouble;
  static constexpr const char* name = "float64";
  static constexpr double unit = 0x1p-53, acc = 0x1p-53, floor = 0;
};
template <>
struct Info<int32_t> {
  static constexpr Dtype dtype = Dtype::kInt32;
  static constexpr const char* name = "int32";
  static constexpr double unit = 0, acc = 0, floor = 0;
};

int64_t failures = 0, runs = 0, reports = 0;
int seeds = 3;

void Fail(const Spec& s, gpu::Kernel kernel, const char* direction, const char* type, const std::string& what) {
  if (++failures <= 30) {
    std::printf("FAIL %s %s, %s kernel [%s]: %s\n", direction, type, kernel == gpu::Kernel::kGemm ? "GEMM" : "direct",
                s.what, what.c_str());
  }
}

enum Direction { kForward, kInput, kFilter };

template <typename T>
void Run(const Spec& s, const ConvGeometry& g, gpu::Kernel kernel, Direction dir, uint64_t seed) {
  const char* names[] = {"forward", "backprop input", "backprop filter"};
  const char* direction = names[dir];
  std::mt19937_64 rng(seed);
  const auto make = [&](int64_t n) {
    std::vector<T> v(n);
    for (T& e : v) {
      if constexpr (std::is_same_v<T, int32_t>) {
        e = static_cast<int32_t>(rng() % (1u << 21)) - (1 << 20);  // products wrap modulo 2**32
      } else {
        e = static_cast<T>(static_cast<float>(std::uniform_real_distribution<double>(-1, 1)(rng)));
      }
    }
    return v;
  };
  const std::vector<T> x = make(g.input_elements()), w = make(g.filter_elements()), dy = make(g.output_elements());
  const int64_t size = dir == kForward ? g.output_elements() : dir == kInput ? g.input_elements() : g.filter_elements();
  const gpu::WorkspaceFn workspace = [](int64_t bytes) -> void* {
    static std::vector<std::vector<char>>* kept = new std::vector<std::vector<char>>;
    kept->emplace_back(static_cast<size_t>(bytes));
    return kept->back().data();
  };
  // The GPU result under each seed.
  std::vector<T> first;
  for (int sd = 1; sd <= seeds; ++sd) {
    ++runs;
    tf_ops_emu::SetSeed(static_cast<uint64_t>(sd));
    tf_ops_emu::ClearReports();
    std::vector<T> out(size, static_cast<T>(77));
    std::string err;
    if (dir == kForward) {
      err = gpu::ConvForward(Info<T>::dtype, g, s.layout, x.data(), w.data(), out.data(), nullptr, workspace, kernel);
    }
    if (dir == kInput) {
      err = gpu::ConvBackpropInput(Info<T>::dtype, g, s.layout, w.data(), dy.data(), out.data(), nullptr, workspace,
                                   kernel);
    }
    if (dir == kFilter) {
      err = gpu::ConvBackpropFilter(Info<T>::dtype, g, s.layout, x.data(), dy.data(), out.data(), nullptr, workspace,
                                    kernel);
    }
    if (!err.empty()) return Fail(s, kernel, direction, Info<T>::name, err);
    for (const std::string& r : tf_ops_emu::Reports()) {
      ++reports;
      Fail(s, kernel, direction, Info<T>::name, "emulator: " + r);
    }
    if (sd == 1) {
      first = out;
    } else if (size > 0 && std::memcmp(first.data(), out.data(), size * sizeof(T)) != 0) {
      return Fail(s, kernel, direction, Info<T>::name,
                  "results differ between scheduling seeds 1 and " + std::to_string(sd));
    }
  }
  // The CPU kernels' result.
  std::vector<T> cpu_out(size);
  if (dir == kForward) cpu::ConvForward<T>(g, s.layout, x.data(), w.data(), cpu_out.data(), cpu::SerialFor);
  if (dir == kInput) cpu::ConvBackpropInput<T>(g, s.layout, w.data(), dy.data(), cpu_out.data(), cpu::SerialFor);
  if (dir == kFilter) cpu::ConvBackpropFilter<T>(g, s.layout, x.data(), dy.data(), cpu_out.data(), cpu::SerialFor);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (size > 0 && std::memcmp(first.data(), cpu_out.data(), size * sizeof(T)) != 0) {
      Fail(s, kernel, direction, Info<T>::name, "differs from the CPU kernels");
    }
  } else {
    const auto exact = [](const std::vector<T>& v, bool absolute) {
      std::vector<double> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        const double e = static_cast<double>(v[i]);
        out[i] = absolute ? std::fabs(e) : e;
      }
      return out;
    };
    std::vector<double> ref(size), abs_ref(size);
    for (bool absolute : {false, true}) {
      const std::vector<double> xd = exact(x, absolute), wd = exact(w, absolute), dyd = exact(dy, absolute);
      double* out = absolute ? abs_ref.data() : ref.data();
      if (dir == kForward) cpu::DirectConvForward<double>(g, s.layout, xd.data(), wd.data(), out, cpu::SerialFor);
      if (dir == kInput) cpu::DirectConvBackpropInput<double>(g, s.layout, wd.data(), dyd.data(), out, cpu::SerialFor);
      if (dir == kFilter) cpu::DirectConvBackpropFilter<double>(g, s.layout, xd.data(), dyd.data(), out, cpu::SerialFor);
    }
    const int64_t taps = g.filter_rows * g.filter_cols;
    const int64_t n = dir == kForward ? taps * g.filter_in_depth
                                      : dir == kInput ? taps * g.out_depth_per_group() : g.batch * g.out_rows * g.out_cols;
    const double gamma = 2.0 * static_cast<double>(n) * Info<T>::acc + Info<T>::unit;
    for (int64_t i = 0; i < size; ++i) {
      const double bound = gamma * abs_ref[i] + Info<T>::floor;
      const double got = static_cast<double>(first[i]), cpu_value = static_cast<double>(cpu_out[i]);
      if (!(std::fabs(got - ref[i]) <= bound) || !(std::fabs(got - cpu_value) <= 2 * bound)) {
        char buf[256];
        std::snprintf(buf, sizeof(buf), "element %" PRId64 ": gpu %.9g, exact %.9g, cpu %.9g, bound %.3g", i, got,
                      ref[i], cpu_value, bound);
        return Fail(s, kernel, direction, Info<T>::name, buf);
      }
    }
  }
}

int Main(int argc, char** argv) {
  long long shard = 0, shards = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--shard") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%lld/%lld", &shard, &shards) != 2 || shards < 1 || shard < 0 ||
          shard >= shards) {
        std::fprintf(stderr, "--shard takes I/N with 0 <= I < N\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: gpu_sweep [--seeds N] [--shard I/N]\n");
      return 2;
    }
  }
  // The CPU kernels in exact mode (direct sums, the bound used here); their fast algorithms
  // have wider bounds of their own (tests/test_accuracy.py).
  cpu::SetExactMode(true);
  int64_t cases = 0, index = -1;
  for (const Spec& s : Specs()) {
    if (++index % shards != shard) continue;
    ConvGeometry g;
    const std::string err = MakeConvGeometry(s.batch, s.rows, s.cols, s.depth, s.kh, s.kw, s.fi, s.k, s.attrs, &g);
    if (!err.empty()) {
      std::printf("FAIL [%s]: not a geometry: %s\n", s.what, err.c_str());
      ++failures;
      continue;
    }
    ++cases;
    const uint64_t seed = 1000 + index + 1;
    for (gpu::Kernel kernel : {gpu::Kernel::kGemm, gpu::Kernel::kDirect}) {
      for (Direction dir : {kForward, kInput, kFilter}) {
        Run<Eigen::half>(s, g, kernel, dir, seed);
        Run<Eigen::bfloat16>(s, g, kernel, dir, seed);
        Run<float>(s, g, kernel, dir, seed);
        Run<double>(s, g, kernel, dir, seed);
        if (dir != kFilter) Run<int32_t>(s, g, kernel, dir, seed);  // int32 is declared for these two only
      }
    }
  }
  std::printf("cases %" PRId64 " runs %" PRId64 " seeds %d reports %" PRId64 " failures %" PRId64 "\n", cases, runs,
              seeds, reports, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tf_ops

int main(int argc, char** argv) { return tf_ops::Main(argc, argv); }
