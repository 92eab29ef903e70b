// tf_ops.enable(): a plugin graph optimizer (TensorFlow's PluginGraphOptimizerRegistry, which
// the meta-optimizer runs after its own optimizers for every graph whose nodes are placed on its
// device type) that runs the rewrite of graph_rewrite.h while the rewrite switch is on.
//
// Registration happens once per process and device type, and only when Python asks
// (TfOpsGraphRegister, from tf_ops.enable()): never at load. TensorFlow aborts the process on a
// second registration for a device type, so the registry is asked first whether another optimizer
// holds it, and the caller gets that optimizer's name instead. The switch (TfOpsSwitch "rewrite")
// is read by the optimizer each time it runs, so tf_ops.disable() needs no second registration.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/switches.h"
#include "cc/kernels/c_entry.h"
#include "cc/kernels/graph_rewrite.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/grappler/grappler_item.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer_registry.h"
#include "tensorflow/core/protobuf/rewriter_config.pb.h"

namespace tf_ops {
namespace {

using ::tensorflow::GraphDef;
using ::tensorflow::grappler::ConfigList;
using ::tensorflow::grappler::CustomGraphOptimizer;
using ::tensorflow::grappler::GrapplerItem;
using ::tensorflow::grappler::PluginGraphOptimizerRegistry;

constexpr char kOptimizerName[] = "tf_ops_rewrite";

class RewriteOptimizer : public CustomGraphOptimizer {
 public:
  std::string name() const override { return kOptimizerName; }
  bool UsesFunctionLibrary() const override { return false; }
  absl::Status Init(const ::tensorflow::RewriterConfig_CustomGraphOptimizer* config) override {
    return absl::OkStatus();
  }
  absl::Status Optimize(::tensorflow::grappler::Cluster* cluster, const GrapplerItem& item,
                        GraphDef* optimized) override {
    // Aborted tells the meta-optimizer that nothing changed (it then keeps the graph it has).
    if (!Rewriting()) return absl::AbortedError("tf_ops.enable() is off");
    *optimized = item.graph;
    const RewriteReport report = RewriteGraph(optimized);
    if (Verbose() && !report.entries.empty()) {
      std::istringstream lines(report.Text());
      std::string text, line;
      while (std::getline(lines, line)) text += "tf_ops_rewrite: " + line + "\n";
      std::fputs(text.c_str(), stderr);
    }
    if (report.rewritten() == 0) return absl::AbortedError("no node of the family to rewrite");
    return absl::OkStatus();
  }
};

// Every optimizer the meta-optimizer would use for these device types is the one registered for
// them: TensorFlow's own gate, also for a plugin loaded from tensorflow-plugins.
std::vector<std::string> HoldersOf(const std::string& device_type) {
  std::vector<std::string> names;
  for (const auto& optimizer : PluginGraphOptimizerRegistry::CreateOptimizers({device_type})) {
    names.push_back(optimizer ? optimizer->name() : "an unnamed optimizer");
  }
  return names;
}

// The configuration a plugin registered through TensorFlow's C API gets by default: every
// built-in optimizer left on, model pruning left on.
ConfigList DefaultConfigs() {
  ConfigList configs;
  configs.disable_model_pruning = false;
  for (const char* name :
       {"implementation_selector", "function_optimization", "common_subgraph_elimination", "arithmetic_optimization",
        "debug_stripper", "constant_folding", "shape_optimization", "auto_mixed_precision",
        "auto_mixed_precision_onednn_bfloat16", "auto_mixed_precision_mkl", "pin_to_host_optimization",
        "layout_optimizer", "remapping", "loop_optimization", "dependency_optimization", "auto_parallel",
        "memory_optimization", "scoped_allocator_optimization"}) {
    configs.toggle_config[name] = ::tensorflow::RewriterConfig::ON;
  }
  return configs;
}

// Registers the optimizer for each device type (once each per process); "" or why not. Where
// another optimizer holds any of them, registers none.
std::string Register(const std::vector<std::string>& device_types) {
  static std::mutex mutex;
  static std::set<std::string> registered;
  std::lock_guard<std::mutex> lock(mutex);
  for (const std::string& type : device_types) {
    if (registered.count(type) != 0) continue;
    for (const std::string& holder : HoldersOf(type)) {
      return "another plugin graph optimizer, '" + holder + "', is registered for device type " + type +
             " in this process (a library in tensorflow-plugins or TF_PLUGGABLE_DEVICE_LIBRARY_PATH, such as "
             "another vendor's extension); TensorFlow takes one per device type, so tf_ops.enable() cannot add "
             "its own. Remove that plugin, or call tf_ops's functions and layers directly";
    }
  }
  for (const std::string& type : device_types) {
    if (!registered.insert(type).second) continue;
    ConfigList configs = DefaultConfigs();
    PluginGraphOptimizerRegistry::RegisterPluginOptimizerOrDie([] { return new RewriteOptimizer; }, type, configs);
  }
  return "";
}

// CopyOut for a string.
int64_t CopyText(const std::string& text, char* out, int64_t out_size) {
  return CopyOut(text.data(), text.size(), out, out_size);
}

}  // namespace
}  // namespace tf_ops

// Registers the rewrite's optimizer for the device types in `device_types` (comma-separated, e.g.
// "CPU,GPU"), for tf_ops.enable() (through ctypes). Returns 0, or the length of the reason it did
// not, written into out as CopyText writes.
extern "C" __attribute__((visibility("default"))) int64_t TfOpsGraphRegister(const char* device_types, char* out,
                                                                         int64_t out_size) {
  try {
    std::vector<std::string> types;
    std::stringstream list(device_types == nullptr ? "" : device_types);
    for (std::string type; std::getline(list, type, ',');) {
      if (!type.empty()) types.push_back(type);
    }
    const std::string error = tf_ops::Register(types);
    return error.empty() ? 0 : tf_ops::CopyText(error, out, out_size);
  } catch (const std::exception& e) {
    return tf_ops::CopyText(std::string("tf_ops: could not register the graph rewrite: ") + e.what(), out, out_size);
  }
}

// The rewrite over one serialized GraphDef (`in`, `in_size` bytes), for the tests and
// tf_ops.explain: nodes without a device are taken as placed on `default_device` where it is not
// empty. Writes into out (where it fits: out_size at least the returned length) the rewritten
// GraphDef's size as 8 little-endian bytes, the GraphDef, then the report's text; returns the
// length of all that, or -1 where `in` is not a GraphDef.
extern "C" __attribute__((visibility("default"))) int64_t TfOpsGraphRewrite(const char* in, int64_t in_size,
                                                                        const char* default_device, char* out,
                                                                        int64_t out_size) {
  try {
    ::tensorflow::GraphDef graph;
    if (in_size < 0 || !graph.ParseFromArray(in, static_cast<int>(in_size))) return -1;
    if (default_device != nullptr && default_device[0] != '\0') {
      for (auto& node : *graph.mutable_node()) {
        if (node.device().empty()) node.set_device(default_device);
      }
    }
    const tf_ops::RewriteReport report = tf_ops::RewriteGraph(&graph);
    const std::string bytes = graph.SerializeAsString();
    std::string all(8, '\0');
    for (int i = 0; i < 8; ++i) all[i] = static_cast<char>((static_cast<uint64_t>(bytes.size()) >> (8 * i)) & 0xff);
    all += bytes + report.Text();
    if (out_size >= static_cast<int64_t>(all.size())) std::memcpy(out, all.data(), all.size());
    return static_cast<int64_t>(all.size());
  } catch (const std::exception&) {
    return -1;
  }
}
