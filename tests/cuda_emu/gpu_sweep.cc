// The emulated parity sweep of the CUDA kernels (cc/core/gpu/conv_gpu.cu, compiled by the host
// compiler with -DTF_OPS_CUDA_EMU), every direction and element type, over two sets of cases:
//   - the feature matrix of sweep_geometries.inc (layouts, strides, dilations, paddings,
//     groups, depth multipliers, empty operands), each run in both kernels, forced;
//   - geometries generated from the dispatch's own thresholds (conv_gpu_plan.h): a grid of
//     sizes on both sides of every tile, step, slice and column threshold, each planned with
//     PlanLaunch, from which a greedy cover picks the cheapest cases that reach every case of
//     the plan (every path of conv_gpu_plan.h, for every direction and kernel) `--cover` times.
// Every run, under each scheduling seed:
//   - on a stream of its own, which every launch must use; outputs poisoned before the op (NaN,
//     or a pattern in int32) and every workspace poisoned when handed out, so that a read of
//     memory nothing wrote shows in the result; every output element stored exactly once over
//     the op (the emulator's store counts), and no emulator report;
//   - bitwise the same result under every seed;
//   - floating types against the direct loops in float64: |gpu - exact| <= u |exact| +
//     (1 + u) 2 n u_acc sum |products| (+ 2**-25 for float16): one rounding to the stored type
//     after a sum carried in the accumulator's precision (u_acc); and against the CPU kernels (in
//     exact mode) within twice that; int32 (wrapping) equal to the CPU's.
// Then every case of the plan must have been reached (the paths are counted by the dispatch
// itself) or the sweep fails, naming what it missed.
// Usage: gpu_sweep [--seeds N] [--cover N] [--shard I/N] [--launch-bounds FILE] [--plant K]
//                  [--list] [--paths] [--plan-check] [--layouts]
//   --shard I/N      runs the cases of part I of N (parts balanced by their estimated cost) and
//                    prints what it reached ("path INDEX COUNT") without failing on what it
//                    did not: the parts' union is the caller's to check (--paths lists them)
//   --launch-bounds  the kernels' __launch_bounds__ as nvcc compiled them ("NAME MAX" lines)
//   --plant          runs with planted kernel bug K, where the kernels were compiled with the
//                    planted bugs (tests/test_cuda_kernels.py)
//   --paths          prints every case of the plan ("required INDEX NAME") and exits
//   --list           prints the cases and exits
//   --plan-check     checks PlanLaunch's rules over a space of problem sizes, and exits
//   --layouts        checks the CUTLASS plans' filter layout kernels, and exits
// Exit status 0 when every check held.
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/direct_loops.h"
#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/conv_gpu_plan.h"
#include "cc/core/switches.h"
#include "cuda_emu.h"
#include "tests/cuda_emu/sweep_attrs.h"

namespace tf_ops {
namespace {

using gpu::Kernel;
using gpu::Kind;

struct Spec {
  std::string what;
  Layout layout;
  int64_t batch, rows, cols, depth, kh, kw, fi, k;
  ConvAttrs attrs;
};

std::vector<Spec> ListedSpecs() {
  return {
#define SPEC(what, layout, n, h, w, c, kh, kw, fi, ko, sh, sw, dh, dw, padding, pt, pb, pl, pr) \
  {what, Layout::k##layout, n, h, w, c, kh, kw, fi, ko, Attrs(sh, sw, dh, dw, Padding::k##padding, pt, pb, pl, pr)},
#include "sweep_geometries.inc"
#undef SPEC
  };
}

// A case: a geometry, the kernels it runs in (forced, or the dispatch's choice), and whether
// the op is given a workspace.
struct Case {
  Spec spec;
  ConvGeometry g;
  std::vector<Kernel> kernels;
  bool workspace = true;
  double cost = 0;
};

// The element types and the kind of GEMM each runs in; int32 is declared for forward and
// backprop input only.
constexpr Element kDtypes[] = {Element::kHalf, Element::kBFloat16, Element::kFloat, Element::kDouble, Element::kInt32};
bool Runs(Element t, Direction d) { return t != Element::kInt32 || d != Direction::kBackpropFilter; }
Kind GemmKind(Element t) { return t == Element::kHalf || t == Element::kBFloat16 ? Kind::kMma : Kind::kGemm; }

// The problems of direction d over g that launch (none where the op zero-fills or has no output).
std::vector<gpu::ProblemSizes> Launched(Direction d, const ConvGeometry& g) {
  bool launches = true;
  gpu::ForEachOpPath(d, g, [&](gpu::OpPath p) {
    if (p == gpu::OpPath::kZeroFill || p == gpu::OpPath::kNoOutput) launches = false;
  });
  std::vector<gpu::ProblemSizes> out;
  if (!launches) return out;
  if (d == Direction::kForward) out.push_back(gpu::ForwardSizes(g));
  if (d == Direction::kBackpropFilter) out.push_back(gpu::FilterSizes(g));
  if (d == Direction::kBackpropInput) {
    for (const gpu::InputClass& c : gpu::InputClasses(g)) out.push_back(c.sizes);
  }
  for (size_t i = out.size(); i-- > 0;) {
    if (out[i].M <= 0 || out[i].N <= 0 || out[i].groups <= 0) out.erase(out.begin() + static_cast<long>(i));
  }
  return out;
}

// The plan conv_gpu.cu makes for problem p of direction d in element type t under `kernel`.
gpu::LaunchPlan PlanOf(Direction d, const gpu::ProblemSizes& p, Element t, Kernel kernel, bool workspace,
                       bool* no_workspace) {
  const bool direct = gpu::Direct(kernel, p.N);
  const Kind kind = direct ? Kind::kDirect : GemmKind(t);
  // Only the filter gradient's direct kernel sums slices (FilterProblem::kDirectSlices).
  gpu::LaunchPlan plan = gpu::PlanLaunch(p, kind, direct && d != Direction::kBackpropFilter ? 1 : gpu::kTargetThreads);
  *no_workspace = plan.slices > 1 && !workspace;
  if (*no_workspace) plan = gpu::PlanLaunch(p, kind, 1);
  return plan;
}

// The path indices a case reaches, and its estimated cost in emulated thread-steps.
std::set<int> Reaches(const Case& c, double* cost) {
  std::set<int> reached;
  *cost = 0;
  const bool nchw = c.spec.layout == Layout::kNCHW;
  for (Direction d : {Direction::kForward, Direction::kBackpropInput, Direction::kBackpropFilter}) {
    gpu::ForEachOpPath(d, c.g, [&](gpu::OpPath p) { reached.insert(gpu::OpPathIndex(d, p)); });
    for (const gpu::ProblemSizes& p : Launched(d, c.g)) {
      for (Kernel kernel : c.kernels) {
        for (Element t : kDtypes) {
          if (!Runs(t, d)) continue;
          bool no_workspace = false;
          const gpu::LaunchPlan plan = PlanOf(d, p, t, kernel, c.workspace, &no_workspace);
          gpu::ForEachPath(p, plan, nchw, no_workspace,
                           [&](gpu::Path path) { reached.insert(gpu::PathIndex(d, plan.kind, path)); });
          const double steps = plan.kind == Kind::kDirect ? 1.0 + static_cast<double>(plan.slice_len) / 16
                                                          : 1.0 + 2.0 * static_cast<double>(plan.steps());
          *cost += static_cast<double>(plan.threads()) * steps + static_cast<double>(p.M * p.N * p.groups);
        }
      }
    }
  }
  return reached;
}

std::vector<int> Required() {
  std::vector<int> out;
  for (Direction d : {Direction::kForward, Direction::kBackpropInput, Direction::kBackpropFilter}) {
    for (Kind k : {Kind::kGemm, Kind::kMma, Kind::kDirect}) {
      for (int p = 0; p < gpu::kPaths; ++p) {
        if (gpu::PathApplies(d, k, static_cast<gpu::Path>(p))) out.push_back(gpu::PathIndex(d, k, static_cast<gpu::Path>(p)));
      }
    }
    for (int p = 0; p < gpu::kOpPaths; ++p) {
      if (gpu::OpPathApplies(d, static_cast<gpu::OpPath>(p))) out.push_back(gpu::OpPathIndex(d, static_cast<gpu::OpPath>(p)));
    }
  }
  return out;
}

std::string IndexName(int index) {
  const int launch_paths = kDirections * gpu::kKinds * gpu::kPaths;
  if (index >= launch_paths) {
    const int i = index - launch_paths;
    return std::string(NameOf(static_cast<Direction>(i / gpu::kOpPaths))) + "/" +
           gpu::OpPathName(static_cast<gpu::OpPath>(i % gpu::kOpPaths));
  }
  const int p = index % gpu::kPaths, k = index / gpu::kPaths % gpu::kKinds, d = index / (gpu::kPaths * gpu::kKinds);
  return std::string(NameOf(static_cast<Direction>(d))) + "/" + gpu::KindName(static_cast<Kind>(k)) + "/" +
         gpu::PathName(static_cast<gpu::Path>(p));
}

bool MakeCase(const Spec& s, std::vector<Kernel> kernels, bool workspace, Case* c) {
  c->spec = s, c->kernels = std::move(kernels), c->workspace = workspace;
  return MakeConvGeometry(s.batch, s.rows, s.cols, s.depth, s.kh, s.kw, s.fi, s.k, s.attrs, &c->g).empty();
}

// The generated space: sizes on both sides of every threshold of the plan, in every
// combination a seeded sample draws (the same every run).
std::vector<Case> Candidates() {
  constexpr int64_t TM = gpu::Tiling::kTileM, TN = gpu::Tiling::kTileN, TK = gpu::Tiling::kTileK;
  constexpr int64_t MK = gpu::MmaTiling::kTileK, C = gpu::kDirectMaxCols, SL = gpu::kSliceMin;
  // Output columns a group: one, few (direct), just past the direct threshold, a tile, just
  // past one and two tiles.
  const int64_t kgs[] = {1, 2, C, C + 1, TN, TN + 1, 2 * TN + 2};
  // Filter in-depths: with 1x1, 2x3 and 3x3 filters, reductions across TK, the tensor-core
  // step MK, 2 MK, kSliceMin and 2 kSliceMin; and backprop input's columns past one and two
  // tiles.
  const int64_t fis[] = {1, 3, TK / 2, TK, MK - 3, 2 * MK, (SL + 2 * TK) / 9 + 1, TN + 1, 2 * TN + 1};
  // Images whose pixel counts, with a batch of one or two, fall in one, two and three tiles of
  // M, on and off their edges; the last ones long enough for the filter gradient's slices.
  const int64_t images[][2] = {{1, 1}, {3, 3}, {4, 5}, {8, 8}, {9, 9}, {6, 11}, {12, 12}, {16, 16}, {16, 17}};
  const int64_t filters[][2] = {{1, 1}, {3, 3}, {2, 3}};
  const int64_t strides[][2] = {{1, 1}, {2, 2}, {3, 2}, {4, 4}};
  const int64_t dilations[][2] = {{1, 1}, {2, 2}, {1, 3}};
  static_assert(TM == 64 && TN == 64, "the image and channel lists assume 64 x 64 tiles");
  std::mt19937_64 rng(20261202);
  const auto pick = [&](int64_t n) { return static_cast<size_t>(rng() % static_cast<uint64_t>(n)); };
  std::vector<Case> out;
  for (int i = 0; i < 24000; ++i) {
    const auto& image = images[pick(9)];
    const auto& filter = filters[pick(3)];
    const auto& stride = strides[pick(4)];
    const auto& dilation = dilations[pick(3)];
    const int64_t batch = 1 + static_cast<int64_t>(pick(2)), groups = 1 + static_cast<int64_t>(pick(3));
    const int64_t fi = fis[pick(9)], kg = kgs[pick(7)];
    Spec s{"generated", pick(2) ? Layout::kNCHW : Layout::kNHWC, batch, image[0], image[1], fi * groups,
           filter[0], filter[1], fi, kg * groups,
           Attrs(stride[0], stride[1], dilation[0], dilation[1], pick(2) ? Padding::kSame : Padding::kValid)};
    const int mode = static_cast<int>(pick(4));
    const Kernel kernel = mode == 0 ? Kernel::kGemm : mode == 1 ? Kernel::kDirect : Kernel::kAuto;
    Case c;
    if (MakeCase(s, {kernel}, pick(8) != 0, &c) && c.g.output_elements() > 0) out.push_back(std::move(c));
  }
  return out;
}

std::string Describe(const Case& c) {
  const ConvGeometry& g = c.g;
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "%s %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " filter %" PRId64 "x%" PRId64 "x%" PRId64
                "x%" PRId64 " strides (%" PRId64 ",%" PRId64 ") dilations (%" PRId64 ",%" PRId64 ") pads %" PRId64
                ",%" PRId64 ",%" PRId64 ",%" PRId64 "%s",
                c.spec.what.c_str(), c.spec.layout == Layout::kNCHW ? "NCHW" : "NHWC", g.batch, g.in_rows, g.in_cols,
                g.in_depth, g.filter_rows, g.filter_cols, g.filter_in_depth, g.out_depth, g.stride_rows,
                g.stride_cols, g.dilation_rows, g.dilation_cols, g.pad_top, g.pad_bottom, g.pad_left, g.pad_right,
                c.workspace ? "" : ", no workspace");
  return buf;
}

// The listed cases, then the generated ones that a greedy cover picks: each step takes the
// candidate that adds the most paths still short of `cover` reaches per unit of cost.
std::vector<Case> Cases(int cover, std::vector<int>* unreachable) {
  std::vector<Case> cases;
  std::vector<int> count(gpu::kPathIndices, 0);
  for (const Spec& s : ListedSpecs()) {
    Case c;
    if (!MakeCase(s, {Kernel::kGemm, Kernel::kDirect}, true, &c)) {
      std::printf("FAIL [%s]: not a geometry\n", s.what.c_str());
      continue;
    }
    for (int i : Reaches(c, &c.cost)) ++count[i];
    cases.push_back(std::move(c));
  }
  std::vector<Case> candidates = Candidates();
  std::vector<std::vector<int>> reach(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::set<int> r = Reaches(candidates[i], &candidates[i].cost);
    reach[i].assign(r.begin(), r.end());
  }
  const auto gain = [&](size_t i) {
    int n = 0;
    for (int p : reach[i]) n += count[p] < cover;
    return n;
  };
  // Lazy greedy: a candidate's score only falls as paths fill.
  using Entry = std::pair<double, size_t>;
  std::priority_queue<Entry> queue;
  for (size_t i = 0; i < candidates.size(); ++i) queue.push({gain(i) / candidates[i].cost, candidates.size() - i});
  while (!queue.empty()) {
    const auto [score, key] = queue.top();
    queue.pop();
    const size_t i = candidates.size() - key;
    const int g = gain(i);
    if (g == 0) continue;
    const double now = g / candidates[i].cost;
    if (!queue.empty() && now < queue.top().first) {
      queue.push({now, key});
      continue;
    }
    for (int p : reach[i]) ++count[p];
    cases.push_back(candidates[i]);
  }
  for (int p : Required()) {
    if (count[p] == 0) unreachable->push_back(p);
  }
  return cases;
}

template <typename T>
struct Info;
template <>
struct Info<Eigen::half> {
  static constexpr Element dtype = Element::kHalf;
  static constexpr const char* name = "float16";
  static constexpr double unit = 0x1p-11, acc = 0x1p-24, floor = 0x1p-25;
};
template <>
struct Info<Eigen::bfloat16> {
  static constexpr Element dtype = Element::kBFloat16;
  static constexpr const char* name = "bfloat16";
  static constexpr double unit = 0x1p-8, acc = 0x1p-24, floor = 0;
};
template <>
struct Info<float> {
  static constexpr Element dtype = Element::kFloat;
  static constexpr const char* name = "float32";
  static constexpr double unit = 0x1p-24, acc = 0x1p-24, floor = 0;
};
template <>
struct Info<double> {
  static constexpr Element dtype = Element::kDouble;
  static constexpr const char* name = "float64";
  static constexpr double unit = 0x1p-53, acc = 0x1p-53, floor = 0;
};
template <>
struct Info<int32_t> {
  static constexpr Element dtype = Element::kInt32;
  static constexpr const char* name = "int32";
  static constexpr double unit = 0, acc = 0, floor = 0;
};

int64_t failures = 0, runs = 0, reports = 0;
int seeds = 3;
int stream_object;  // the op's stream is this object's address: any other is reported
const auto kStream = reinterpret_cast<gpu::Stream>(&stream_object);

void Fail(const Case& c, Kernel kernel, Direction dir, const char* type, const std::string& what) {
  if (++failures <= 30) {
    std::printf("FAIL %s %s, %s kernel [%s]: %s\n", NameOf(dir), type,
                kernel == Kernel::kGemm ? "GEMM" : kernel == Kernel::kDirect ? "direct" : "chosen",
                Describe(c).c_str(), what.c_str());
  }
}

// Memory nothing wrote: NaN in floating types (all bits set), a pattern in int32.
template <typename T>
void Poison(T* p, int64_t n) {
  if (n > 0) std::memset(static_cast<void*>(p), std::is_same_v<T, int32_t> ? 0x5b : 0xff, static_cast<size_t>(n) * sizeof(T));
}

template <typename T>
void Run(const Case& c, Kernel kernel, Direction dir, uint64_t seed) {
  const ConvGeometry& g = c.g;
  const Layout layout = c.spec.layout;
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
  const int64_t size = dir == Direction::kForward ? g.output_elements()
                       : dir == Direction::kBackpropInput ? g.input_elements()
                                                  : g.filter_elements();
  std::vector<std::vector<char>> kept;  // the workspaces of one run, poisoned
  gpu::WorkspaceFn workspace;
  if (c.workspace) {
    workspace = [&kept](int64_t bytes) -> void* {
      kept.emplace_back(static_cast<size_t>(bytes));
      std::memset(kept.back().data(), 0xff, kept.back().size());
      return kept.back().data();
    };
  }
  // The GPU result under each seed.
  std::vector<T> first;
  for (int sd = 1; sd <= seeds; ++sd) {
    ++runs;
    tf_ops_emu::SetSeed(static_cast<uint64_t>(sd));
    tf_ops_emu::ClearReports();
    std::vector<T> out(size);
    Poison(out.data(), size);
    tf_ops_emu::TrackStores(out.data(), out.size() * sizeof(T), sizeof(T));
    tf_ops_emu::ExpectStream(kStream);
    std::string err;
    if (dir == Direction::kForward) {
      err = gpu::ConvForward(Info<T>::dtype, g, layout, x.data(), w.data(), out.data(), kStream, workspace, kernel);
    }
    if (dir == Direction::kBackpropInput) {
      err = gpu::ConvBackpropInput(Info<T>::dtype, g, layout, w.data(), dy.data(), out.data(), kStream, workspace,
                                   kernel);
    }
    if (dir == Direction::kBackpropFilter) {
      err = gpu::ConvBackpropFilter(Info<T>::dtype, g, layout, x.data(), dy.data(), out.data(), kStream, workspace,
                                    kernel);
    }
    tf_ops_emu::ClearExpectedStream();
    kept.clear();
    for (const std::string& r : tf_ops_emu::Reports()) {
      ++reports;
      Fail(c, kernel, dir, Info<T>::name, "emulator: " + r);
    }
    if (!err.empty()) return Fail(c, kernel, dir, Info<T>::name, err);
    const std::vector<int>& stores = tf_ops_emu::TrackedStores();
    for (size_t i = 0; i < stores.size(); ++i) {
      if (stores[i] != 1) {
        return Fail(c, kernel, dir, Info<T>::name,
                    "output element " + std::to_string(i) + " stored " + std::to_string(stores[i]) +
                        " times over the op, not once");
      }
    }
    if (sd == 1) {
      first = out;
    } else if (size > 0 && std::memcmp(first.data(), out.data(), size * sizeof(T)) != 0) {
      return Fail(c, kernel, dir, Info<T>::name, "results differ between scheduling seeds 1 and " + std::to_string(sd));
    }
  }
  // The CPU kernels' result.
  std::vector<T> cpu_out(size);
  if (dir == Direction::kForward) cpu::ConvForward<T>(g, layout, x.data(), w.data(), cpu_out.data(), cpu::SerialFor);
  if (dir == Direction::kBackpropInput) {
    cpu::ConvBackpropInput<T>(g, layout, w.data(), dy.data(), cpu_out.data(), cpu::SerialFor);
  }
  if (dir == Direction::kBackpropFilter) {
    cpu::ConvBackpropFilter<T>(g, layout, x.data(), dy.data(), cpu_out.data(), cpu::SerialFor);
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (size > 0 && std::memcmp(first.data(), cpu_out.data(), size * sizeof(T)) != 0) {
      Fail(c, kernel, dir, Info<T>::name, "differs from the CPU kernels");
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
      if (dir == Direction::kForward) cpu::DirectConvForward<double>(g, layout, xd.data(), wd.data(), out, cpu::SerialFor);
      if (dir == Direction::kBackpropInput) {
        cpu::DirectConvBackpropInput<double>(g, layout, wd.data(), dyd.data(), out, cpu::SerialFor);
      }
      if (dir == Direction::kBackpropFilter) {
        cpu::DirectConvBackpropFilter<double>(g, layout, xd.data(), dyd.data(), out, cpu::SerialFor);
      }
    }
    const int64_t taps = g.filter_rows * g.filter_cols;
    const int64_t n = dir == Direction::kForward ? taps * g.filter_in_depth
                      : dir == Direction::kBackpropInput ? taps * g.out_depth_per_group()
                                                 : g.batch * g.out_rows * g.out_cols;
    for (int64_t i = 0; i < size; ++i) {
      const double sum_error = 2.0 * static_cast<double>(n) * Info<T>::acc * abs_ref[i];
      const double bound = Info<T>::unit * (std::fabs(ref[i]) + sum_error) + sum_error + Info<T>::floor;
      const double got = static_cast<double>(first[i]), cpu_value = static_cast<double>(cpu_out[i]);
      if (!(std::fabs(got - ref[i]) <= bound) || !(std::fabs(got - cpu_value) <= 2 * bound)) {
        char buf[256];
        std::snprintf(buf, sizeof(buf), "element %" PRId64 ": gpu %.9g, exact %.9g, cpu %.9g, bound %.3g", i, got,
                      ref[i], cpu_value, bound);
        return Fail(c, kernel, dir, Info<T>::name, buf);
      }
    }
  }
}

// The CUTLASS plans' filter layouts (conv_gpu.h FilterToKrsc, KrscSumsToFilter) under every
// seed: the KRSC copy of an HWIO filter exact, the HWIO filter gradient the sum of the float
// splits in split order (bitwise), every output element stored once, no emulator report, on the
// op's stream. Returns the number of failures.
template <typename T>
int64_t CheckLayouts(const ConvGeometry& g, int64_t splits) {
  int64_t bad = 0;
  const int64_t n = g.filter_elements();
  std::vector<T> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<T>(static_cast<float>(i % 97) / 8 - 6);
  std::vector<float> sums(splits * n);
  for (int64_t i = 0; i < splits * n; ++i) sums[i] = static_cast<float>((i * 7919) % 1009) / 64 - 7;
  auto krsc = [&](int64_t kh, int64_t kw, int64_t c, int64_t k) {
    return ((k * g.filter_rows + kh) * g.filter_cols + kw) * g.filter_in_depth + c;
  };
  for (int sd = 1; sd <= seeds; ++sd) {
    tf_ops_emu::SetSeed(static_cast<uint64_t>(sd));
    tf_ops_emu::ClearReports();
    std::vector<T> copy(n), dw(n);
    Poison(copy.data(), n), Poison(dw.data(), n);
    tf_ops_emu::ExpectStream(kStream);
    tf_ops_emu::TrackStores(copy.data(), n * sizeof(T), sizeof(T));
    std::string err = gpu::FilterToKrsc(Info<T>::dtype, g, w.data(), copy.data(), kStream);
    const std::vector<int> copy_stores = tf_ops_emu::TrackedStores();
    tf_ops_emu::TrackStores(dw.data(), n * sizeof(T), sizeof(T));
    if (err.empty()) err = gpu::KrscSumsToFilter(Info<T>::dtype, g, sums.data(), splits, dw.data(), kStream);
    const std::vector<int> dw_stores = tf_ops_emu::TrackedStores();
    tf_ops_emu::ClearExpectedStream();
    std::string what = err;
    for (const std::string& r : tf_ops_emu::Reports()) what += " emulator: " + r;
    for (int64_t i = 0; i < n && what.empty(); ++i) {
      if (copy_stores[i] != 1 || dw_stores[i] != 1) what = "element " + std::to_string(i) + " not stored once";
    }
    for (int64_t kh = 0, i = 0; kh < g.filter_rows && what.empty(); ++kh)
      for (int64_t kw = 0; kw < g.filter_cols; ++kw)
        for (int64_t c = 0; c < g.filter_in_depth; ++c)
          for (int64_t k = 0; k < g.out_depth; ++k, ++i) {
            const int64_t j = krsc(kh, kw, c, k);
            float sum = sums[j];
            for (int64_t split = 1; split < splits; ++split) sum += sums[split * n + j];
            if (std::memcmp(&copy[j], &w[i], sizeof(T)) != 0) what = "KRSC element " + std::to_string(j) + " wrong";
            const T want = static_cast<T>(sum);
            if (std::memcmp(&dw[i], &want, sizeof(T)) != 0) what = "HWIO sum " + std::to_string(i) + " wrong";
          }
    if (!what.empty()) {
      ++bad;
      std::printf("FAIL layouts %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 ", %" PRId64 " splits: %s\n",
                  Info<T>::name, g.filter_rows, g.filter_cols, g.filter_in_depth, g.out_depth, splits, what.c_str());
      break;
    }
  }
  return bad;
}

int64_t CheckAllLayouts() {
  int64_t bad = 0, checked = 0;
  for (const auto& [kh, kw, c, k] : std::vector<std::array<int64_t, 4>>{{1, 1, 8, 8}, {3, 3, 8, 24}, {3, 2, 4, 12},
                                                                      {7, 7, 16, 8}, {1, 1, 0, 8}}) {
    ConvGeometry g;
    g.filter_rows = kh, g.filter_cols = kw, g.filter_in_depth = c, g.in_depth = c, g.out_depth = k, g.groups = 1;
    for (const int64_t splits : {1, 2, 5}) {
      bad += CheckLayouts<Eigen::half>(g, splits) + CheckLayouts<Eigen::bfloat16>(g, splits) +
             CheckLayouts<float>(g, splits);
      checked += 3;
    }
  }
  for (const auto& [name, most] : tf_ops_emu::LaunchedKernels()) {
    std::printf("launched %s %" PRId64 "\n", name.c_str(), most);
  }
  std::printf("layouts checked %" PRId64 " failures %" PRId64 "\n", checked, bad);
  return bad;
}

// PlanLaunch's rules over a space of problem sizes on both sides of its thresholds; the number
// of sizes that broke one.
int64_t CheckPlans() {
  int64_t broken = 0, checked = 0;
  const int64_t sizes[] = {1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 4096, 100000};
  for (Kind kind : {Kind::kGemm, Kind::kMma, Kind::kDirect}) {
    for (int64_t M : sizes) {
      for (int64_t N : sizes) {
        for (int64_t R : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{769},
                          int64_t{100000}, int64_t{10000000}}) {
          for (int64_t groups : {1, 3, 512}) {
            for (int64_t max_slices : {int64_t{1}, gpu::kTargetThreads}) {
              const gpu::ProblemSizes p{M, N, R, groups};
              const gpu::LaunchPlan plan = gpu::PlanLaunch(p, kind, max_slices);
              const int64_t one = gpu::ShapeOf(kind, M, N, groups).threads();
              const int64_t want = std::min(CeilDiv(R, gpu::kSliceMin),
                                            std::max<int64_t>(1, gpu::kTargetThreads / one));
              const int64_t zs = plan.slices * groups;
              const bool ok =
                  plan.slices >= 1 && plan.slices <= std::max<int64_t>(1, std::min(want, max_slices)) &&
                  plan.slices * plan.slice_len >= R && (R == 0 || (plan.slices - 1) * plan.slice_len < R) &&
                  // As many slices as wanted, up to a slice's rounding (none empty).
                  (R == 0 || plan.slices >= CeilDiv(R, CeilDiv(R, std::max<int64_t>(
                                                                           1, std::min(want, max_slices))))) &&
                  plan.blocks == (kind == Kind::kDirect ? CeilDiv(M * zs * N, gpu::kDirectThreads)
                                                        : CeilDiv(M, gpu::Tiling::kTileM) *
                                                              CeilDiv(N, gpu::Tiling::kTileN) * zs) &&
                  (plan.slices == 1) == (plan.partial_elements(p) == 0);
              ++checked;
              if (!ok && ++broken <= 10) {
                std::printf("FAIL: plan of M %" PRId64 " N %" PRId64 " R %" PRId64 " groups %" PRId64
                            " in the %s (at most %" PRId64 " slices): %" PRId64 " slices of %" PRId64
                            ", %" PRId64 " blocks\n",
                            M, N, R, groups, gpu::KindName(kind), max_slices, plan.slices, plan.slice_len,
                            plan.blocks);
              }
            }
          }
        }
      }
    }
  }
  // The dispatch's choice of kernel.
  for (int64_t cols = 1; cols <= 2 * gpu::kDirectMaxCols; ++cols) {
    ++checked;
    if (gpu::Direct(Kernel::kAuto, cols) != (cols <= gpu::kDirectMaxCols) || !gpu::Direct(Kernel::kDirect, cols) ||
        gpu::Direct(Kernel::kGemm, cols)) {
      ++broken;
      std::printf("FAIL: the kernel chosen for %" PRId64 " columns\n", cols);
    }
  }
  std::printf("plans checked %" PRId64 " broken %" PRId64 "\n", checked, broken);
  return broken;
}

int Main(int argc, char** argv) {
  long long shard = 0, shards = 1;
  int cover = 1;
  bool list = false, paths = false, sharded = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cover") == 0 && i + 1 < argc) {
      cover = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--shard") == 0 && i + 1 < argc) {
      sharded = true;
      if (std::sscanf(argv[++i], "%lld/%lld", &shard, &shards) != 2 || shards < 1 || shard < 0 ||
          shard >= shards) {
        std::fprintf(stderr, "--shard takes I/N with 0 <= I < N\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--launch-bounds") == 0 && i + 1 < argc) {
      const std::string err = tf_ops_emu::LoadLaunchBounds(argv[++i]);
      if (!err.empty()) {
        std::fprintf(stderr, "--launch-bounds: %s\n", err.c_str());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--plant") == 0 && i + 1 < argc) {
      tf_ops_emu::planted_bug = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--list") == 0) {
      list = true;
    } else if (std::strcmp(argv[i], "--paths") == 0) {
      paths = true;
    } else if (std::strcmp(argv[i], "--plan-check") == 0) {
      return CheckPlans() == 0 ? 0 : 1;
    } else if (std::strcmp(argv[i], "--layouts") == 0) {
      return CheckAllLayouts() == 0 ? 0 : 1;
    } else {
      std::fprintf(stderr,
                   "usage: gpu_sweep [--seeds N] [--cover N] [--shard I/N] [--launch-bounds FILE] [--plant K] "
                   "[--list] [--paths] [--plan-check] [--layouts]\n");
      return 2;
    }
  }
  if (paths) {
    for (int p : Required()) std::printf("required %d %s\n", p, IndexName(p).c_str());
    return 0;
  }
  std::vector<int> unreachable;
  const std::vector<Case> cases = Cases(cover, &unreachable);
  for (int p : unreachable) {
    std::printf("FAIL: no case of the generated space reaches %s\n", IndexName(p).c_str());
    ++failures;
  }
  // Parts balanced by cost: each case, costliest first, to the part with the least so far.
  std::vector<int> part(cases.size());
  {
    std::vector<size_t> order(cases.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cases[a].cost > cases[b].cost; });
    std::vector<double> load(static_cast<size_t>(shards), 0);
    for (size_t i : order) {
      const size_t least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      part[i] = static_cast<int>(least);
      load[least] += cases[i].cost;
    }
  }
  if (list) {
    for (size_t i = 0; i < cases.size(); ++i) {
      std::printf("case %zu part %d cost %.3g: %s\n", i, part[i], cases[i].cost, Describe(cases[i]).c_str());
    }
    return 0;
  }
  // The CPU kernels in exact mode (direct sums, the bound used here); their fast algorithms
  // have wider bounds of their own (tests/test_accuracy.py).
  SetExactMode(true);
  gpu::coverage.on = true;
  int64_t ran = 0;
  std::vector<size_t> failed;
  for (size_t index = 0; index < cases.size(); ++index) {
    if (part[index] != shard) continue;
    const Case& c = cases[index];
    const int64_t failures_before = failures;
    ++ran;
    const uint64_t seed = 1000 + index + 1;
    for (Kernel kernel : c.kernels) {
      for (Direction dir : {Direction::kForward, Direction::kBackpropInput, Direction::kBackpropFilter}) {
        Run<Eigen::half>(c, kernel, dir, seed);
        Run<Eigen::bfloat16>(c, kernel, dir, seed);
        Run<float>(c, kernel, dir, seed);
        Run<double>(c, kernel, dir, seed);
        if (Runs(Element::kInt32, dir)) Run<int32_t>(c, kernel, dir, seed);
      }
    }
    if (failures > failures_before) failed.push_back(index);
  }
  // The cases that failed, one line each (the planted-bug tests count them).
  for (size_t index : failed) std::printf("failed case %zu: %s\n", index, Describe(cases[index]).c_str());
  for (int p = 0; p < gpu::kPathIndices; ++p) {
    const int64_t n = gpu::coverage.counts[p].load();
    if (n > 0) std::printf("path %d %" PRId64 "\n", p, n);
  }
  if (!sharded) {
    for (int p : Required()) {
      if (gpu::coverage.counts[p].load() == 0) {
        std::printf("FAIL: not reached: %s\n", IndexName(p).c_str());
        ++failures;
      }
    }
  }
  for (const auto& [name, most] : tf_ops_emu::LaunchedKernels()) {
    std::printf("launched %s %" PRId64 "\n", name.c_str(), most);
  }
  std::printf("cases %" PRId64 " of %zu runs %" PRId64 " seeds %d reports %" PRId64 " failures %" PRId64 "\n", ran,
              cases.size(), runs, seeds, reports, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tf_ops

int main(int argc, char** argv) { return tf_ops::Main(argc, argv); }
