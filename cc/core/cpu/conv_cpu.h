// CPU convolution kernels: the three directions of one sum, over one ConvGeometry.
//
//   forward:          y[n,oh,ow,k]   = sum_{kh,kw,ci} x[n, oh*sh-pt+kh*dh, ow*sw-pl+kw*dw, g*FI+ci]
//                                                     * w[kh,kw,ci,k]          (g = k / (K/G))
//   backprop input:   dx[n,ih,iw,c]  = sum over the (oh, ow, kh, kw, k) that reach (ih, iw)
//   backprop filter:  dw[kh,kw,ci,k] = sum_{n,oh,ow} x[...] * dy[n,oh,ow,k]
//
// TF-free. Every output element is computed by one work unit, summing in a fixed order,
// so results are bitwise identical whatever the number of threads. Backprop input visits
// only the (kh, oh) pairs that land on a given input row (no zero-inserted upsampling),
// and no im2col buffer is built. half and bfloat16 accumulate in float; int32 wraps
// modulo 2^32 like TensorFlow's int32 arithmetic.
#ifndef TF_OPS_CC_CORE_CPU_CONV_CPU_H_
#define TF_OPS_CC_CORE_CPU_CONV_CPU_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cc/core/conv_geometry.h"

namespace tf_ops {
namespace cpu {

// Runs fn(begin, end) over disjoint ranges covering [0, units), possibly in parallel.
// cost_per_unit is a rough count of inner-loop operations per unit.
using ParallelFor = std::function<void(int64_t units, int64_t cost_per_unit,
                                       const std::function<void(int64_t, int64_t)>& fn)>;

// Runs everything on the calling thread.
void SerialFor(int64_t units, int64_t cost_per_unit,
               const std::function<void(int64_t, int64_t)>& fn);

// Host memory for a call's workspace: `bytes` bytes, held by the caller until the call
// returns, or null where they cannot be had. An empty WorkspaceFn: the call takes them from
// the heap.
using WorkspaceFn = std::function<void*(int64_t bytes)>;

struct Plan;  // plan.h

// The plans of one op's calls (a TensorFlow kernel keeps one), by geometry, layout, element type
// and the switches they were planned under (switches.h): a call of a geometry seen before runs
// the plan it kept and plans nothing. Keeps the kSize most recently used, a plan in use by a call
// never dropped; thread-safe. Off while the plan-cache switch is (TF_OPS_PLAN_CACHE=0).
class PlanCache {
 public:
  static constexpr size_t kSize = 8;

  // A plan lent to one call: a kept one, given back when the lease ends, or one of its own.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    const Plan& plan() const { return *plan_; }

   private:
    friend class PlanCache;
    Lease(PlanCache* cache, const Plan* plan, std::unique_ptr<const Plan> own);
    PlanCache* cache_;  // null for a plan of its own
    const Plan* plan_;
    std::unique_ptr<const Plan> own_;
  };

  PlanCache();
  ~PlanCache();
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The plan a call runs now, kept or made.
  Lease Get(Direction direction, const ConvGeometry& g, Layout layout, Element element);

 private:
  struct Entry;
  void GiveBack(const Plan* plan);

  std::mutex mu_;
  std::vector<Entry> entries_;  // most recently used first
};

// x, dx, y and dy are in `layout`; w and dw are [KH, KW, FI, K].
//
// ConvForward, ConvBackpropInput and ConvBackpropFilter plan the call (plan.h) and run the
// plan: the fast kernels of conv_fast.h where they apply (float, half, bfloat16), the direct
// loops (direct_loops.h) otherwise, or everywhere while the direct-kernels switch is on (switches.h:
// TF_OPS_CPU_KERNELS=direct). While the verbose switch is on (TF_OPS_VERBOSE=1) each call
// prints its plan and time to stderr. With `plans`, a call takes its plan from there
// (PlanCache). A plan's workspace is asked of `workspace` once, before anything runs. Each
// returns "", or, having written nothing, why the workspace could not be had (its size, what it
// is for, and what needs less).
template <typename T>
std::string ConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                        const ParallelFor& parallel_for, const WorkspaceFn& workspace = {},
                        PlanCache* plans = nullptr);

template <typename T>
std::string ConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                              const ParallelFor& parallel_for, const WorkspaceFn& workspace = {},
                              PlanCache* plans = nullptr);

template <typename T>
std::string ConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                               const ParallelFor& parallel_for, const WorkspaceFn& workspace = {},
                               PlanCache* plans = nullptr);

// What a call of ConvForward, ConvBackpropInput or ConvBackpropFilter (`direction`) on elements
// of type `element` would run now, without running it: its plan (plan.h) as one line of
// key=value fields (DescribePlan).
std::string ExplainCpuCall(Direction direction, Element element, const ConvGeometry& g, Layout layout);

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_CONV_CPU_H_
