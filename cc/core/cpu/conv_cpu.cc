#include "cc/core/cpu/conv_cpu.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <cstdio>
#include <string>
#include <type_traits>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/direct_loops.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/plan.h"
#include "cc/core/switches.h"

namespace tf_ops {
namespace cpu {

void SerialFor(int64_t units, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (units > 0) fn(0, units);
}

namespace {

// Why a call's workspace of `bytes` could not be had: its size, what it holds, and which
// setting needs less. (No other plan is taken instead: what a call computes, to the bit, does
// not depend on the memory free at the time.)
std::string WorkspaceShortage(const Plan& plan, int64_t bytes) {
  std::string what = plan.direction == Direction::kBackpropFilter ? "the filter gradient's float sums"
                     : plan.winograd                                  ? "the transformed filter and tiles"
                                                                      : "the packed filter";
  if (plan.layout == Layout::kNCHW) what += ", NHWC copies of the NCHW operands";
  if (plan.widen) what += ", float copies of the 16-bit operands";
  std::string out = "out of memory: cannot allocate " + std::to_string(bytes) + " bytes of workspace for the " +
                    NameOf(plan.algorithm) + " plan (" + what + "). ";
  if (plan.layout == Layout::kNCHW) out += "Tensors in NHWC need no copies; ";
  return out + "TF_OPS_CPU_KERNELS=direct runs the direct loops, which need no workspace";
}

// The plan a call runs now: PlanConv on this process's kernel table in its exact mode, or the
// direct loops where TF_OPS_CPU_KERNELS says so.
Plan PlanCall(Direction direction, const ConvGeometry& g, Layout layout, Element element) {
  if (DirectKernels()) return DirectPlan(direction, layout, element, Kernels());
  return PlanConv(direction, g, layout, element, Kernels(), ExactMode());
}

// Runs one call: the plan's executor, or the direct loops `direct` where the plan is theirs.
// Under TF_OPS_VERBOSE=1, prints the plan and the call's time to stderr.
template <typename T, typename Direct>
std::string RunCall(Direction direction, const ConvGeometry& g, Layout layout, const T* a, const T* b, T* out,
                    const ParallelFor& parallel_for, const WorkspaceFn& workspace, PlanCache* plans,
                    const Direct& direct) {
  const bool verbose = Verbose();
  const auto start = std::chrono::steady_clock::now();
  std::optional<PlanCache::Lease> kept;
  std::optional<Plan> made;
  if (plans != nullptr) {
    kept.emplace(plans->Get(direction, g, layout, ElementOf<T>()));
  } else {
    made.emplace(PlanCall(direction, g, layout, ElementOf<T>()));
  }
  const Plan& plan = kept ? kept->plan() : *made;
  switch (RunPlan(plan, g, a, b, out, parallel_for, workspace)) {
    case RunResult::kNoWorkspace:
      return WorkspaceShortage(plan, fast::ArenaBytes(plan.workspace_bytes));
    case RunResult::kDirect:
      direct();
      break;
    case RunResult::kRan:
      break;
  }
  if (verbose) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "tf_ops_verbose cpu %s time_ms=%.3f\n", DescribePlan(plan).c_str(), ms);
  }
  return "";
}
}  // namespace

struct PlanCache::Entry {
  Direction direction;
  ConvGeometry g;
  Layout layout;
  Element element;
  bool exact, direct;
  std::unique_ptr<const Plan> plan;
  int users = 0;  // calls running it
};

PlanCache::PlanCache() = default;
PlanCache::~PlanCache() = default;

PlanCache::Lease::Lease(PlanCache* cache, const Plan* plan, std::unique_ptr<const Plan> own)
    : cache_(cache), plan_(plan), own_(std::move(own)) {}

PlanCache::Lease::Lease(Lease&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)), plan_(other.plan_), own_(std::move(other.own_)) {}

PlanCache::Lease::~Lease() {
  if (cache_ != nullptr) cache_->GiveBack(plan_);
}

void PlanCache::GiveBack(const Plan* plan) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (e.plan.get() == plan) --e.users;
  }
}

PlanCache::Lease PlanCache::Get(Direction direction, const ConvGeometry& g, Layout layout, Element element) {
  const auto own = [&] {
    auto plan = std::make_unique<const Plan>(PlanCall(direction, g, layout, element));
    const Plan* p = plan.get();
    return Lease(nullptr, p, std::move(plan));
  };
  if (!PlanCacheOn()) return own();
  const bool exact = ExactMode(), direct = DirectKernels();
  const auto same = [&](const Entry& e) {
    return e.direction == direction && e.g == g && e.layout == layout && e.element == element && e.exact == exact &&
           e.direct == direct;
  };
  // A kept plan, moved to the front.
  const auto lend_kept = [&]() -> std::optional<Lease> {
    const auto hit = std::find_if(entries_.begin(), entries_.end(), same);
    if (hit == entries_.end()) return std::nullopt;
    std::rotate(entries_.begin(), hit, hit + 1);
    ++entries_.front().users;
    return Lease(this, entries_.front().plan.get(), nullptr);
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::optional<Lease> kept = lend_kept()) return std::move(*kept);
  }
  // Planned outside the lock; another thread may have kept the same geometry's plan meanwhile.
  auto plan = std::make_unique<const Plan>(PlanCall(direction, g, layout, element));
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<Lease> kept = lend_kept()) return std::move(*kept);
  if (entries_.size() == kSize) {
    // The least recently used plan no call is running makes room; with every one in use, this
    // call's plan is its own.
    const auto idle = std::find_if(entries_.rbegin(), entries_.rend(), [](const Entry& e) { return e.users == 0; });
    if (idle == entries_.rend()) {
      const Plan* p = plan.get();
      return Lease(nullptr, p, std::move(plan));
    }
    entries_.erase(std::next(idle).base());
  }
  entries_.insert(entries_.begin(), Entry{direction, g, layout, element, exact, direct, std::move(plan), 1});
  return Lease(this, entries_.front().plan.get(), nullptr);
}

std::string ExplainCpuCall(Direction direction, Element element, const ConvGeometry& g, Layout layout) {
  return DescribePlan(PlanCall(direction, g, layout, element));
}

template <typename T>
std::string ConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                        const ParallelFor& parallel_for, const WorkspaceFn& workspace, PlanCache* plans) {
  return RunCall(Direction::kForward, g, layout, x, w, y, parallel_for, workspace, plans,
          [&] { DirectConvForward(g, layout, x, w, y, parallel_for); });
}

template <typename T>
std::string ConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                              const ParallelFor& parallel_for, const WorkspaceFn& workspace, PlanCache* plans) {
  return RunCall(Direction::kBackpropInput, g, layout, dy, w, dx, parallel_for, workspace, plans,
          [&] { DirectConvBackpropInput(g, layout, w, dy, dx, parallel_for); });
}

template <typename T>
std::string ConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                               const ParallelFor& parallel_for, const WorkspaceFn& workspace, PlanCache* plans) {
  return RunCall(Direction::kBackpropFilter, g, layout, x, dy, dw, parallel_for, workspace, plans,
          [&] { DirectConvBackpropFilter(g, layout, x, dy, dw, parallel_for); });
}

#define TF_OPS_INSTANTIATE(T)                                                                     \
  template std::string ConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,        \
                                      const ParallelFor&, const WorkspaceFn&, PlanCache*);        \
  template std::string ConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, T*,  \
                                            const ParallelFor&, const WorkspaceFn&, PlanCache*);  \
  template std::string ConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                             const ParallelFor&, const WorkspaceFn&, PlanCache*);
TF_OPS_ELEMENT_TYPES(TF_OPS_INSTANTIATE)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
