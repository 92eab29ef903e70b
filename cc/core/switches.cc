#include "cc/core/switches.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tf_ops {

namespace {

// A switch whose first value is `initial`, or the other where environment variable `name` is
// `flip`.
class Switch {
 public:
  Switch(const char* name, const char* flip, bool initial) {
    const char* env = std::getenv(name);
    value_.store(env != nullptr && std::strcmp(env, flip) == 0 ? !initial : initial);
  }
  bool Get() const { return value_.load(std::memory_order_relaxed); }
  void Set(bool on) { value_.store(on); }

 private:
  std::atomic<bool> value_{false};
};

enum Which { kExact, kDirect, kVerbose, kPlanCache, kRewrite };

// Every switch, read from the environment on first use.
Switch& Of(Which which) {
  static Switch all[] = {{"TF_OPS_EXACT", "1", false},
                         {"TF_OPS_CPU_KERNELS", "direct", false},
                         {"TF_OPS_VERBOSE", "1", false},
                         {"TF_OPS_PLAN_CACHE", "0", true},
                         {"TF_OPS_ENABLE", "1", false}};
  return all[which];
}

}  // namespace

bool ExactMode() { return Of(kExact).Get(); }
void SetExactMode(bool on) { Of(kExact).Set(on); }
bool DirectKernels() { return Of(kDirect).Get(); }
void SetDirectKernels(bool on) { Of(kDirect).Set(on); }
bool Verbose() { return Of(kVerbose).Get(); }
void SetVerbose(bool on) { Of(kVerbose).Set(on); }
bool PlanCacheOn() { return Of(kPlanCache).Get(); }
void SetPlanCache(bool on) { Of(kPlanCache).Set(on); }
bool Rewriting() { return Of(kRewrite).Get(); }
void SetRewriting(bool on) { Of(kRewrite).Set(on); }

}  // namespace tf_ops
