#include "cc/core/switches.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tf_ops {

namespace {

// A switch whose first value is whether environment variable `name` is `on`.
class Switch {
 public:
  Switch(const char* name, const char* on) {
    const char* env = std::getenv(name);
    value_.store(env != nullptr && std::strcmp(env, on) == 0);
  }
  bool Get() const { return value_.load(std::memory_order_relaxed); }
  void Set(bool on) { value_.store(on); }

 private:
  std::atomic<bool> value_{false};
};

Switch& Exact() {
  static Switch s("TF_OPS_EXACT", "1");
  return s;
}
Switch& Direct() {
  static Switch s("TF_OPS_CPU_KERNELS", "direct");
  return s;
}
Switch& Talk() {
  static Switch s("TF_OPS_VERBOSE", "1");
  return s;
}

}  // namespace

bool ExactMode() { return Exact().Get(); }
void SetExactMode(bool on) { Exact().Set(on); }
bool DirectKernels() { return Direct().Get(); }
void SetDirectKernels(bool on) { Direct().Set(on); }
bool Verbose() { return Talk().Get(); }
void SetVerbose(bool on) { Talk().Set(on); }

}  // namespace tf_ops
