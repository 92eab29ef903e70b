// The rules of tf_ops.enable() (graph_rewrite.h).
#include "cc/kernels/graph_rewrite.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "cc/kernels/conv_checks.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/util/device_name_utils.h"

namespace tf_ops {
namespace {

using ::tensorflow::AttrSlice;
using ::tensorflow::AttrValue;
using ::tensorflow::DataType;
using ::tensorflow::GraphDef;
using ::tensorflow::NodeDef;
using ::tensorflow::OpDef;

constexpr char kPrefix[] = "TfOps>";
constexpr char kFusedConv2D[] = "_FusedConv2D";
constexpr char kFusedDepthwise[] = "_FusedDepthwiseConv2dNative";

// The ops of the family (their kernels' facts), by the stock op's name.
const OpSpec* SpecOf(const std::string& op) {
  static const OpSpec* const kSpecs[] = {&kConv2D, &kConv2DBackpropInput, &kConv2DBackpropInputV2,
                                         &kConv2DBackpropFilter, &kConv2DBackpropFilterV2, &kDepthwise,
                                         &kDepthwiseBackpropInput, &kDepthwiseBackpropFilter};
  for (const OpSpec* spec : kSpecs) {
    if (op == spec->label) return spec;
  }
  return nullptr;
}

// One stock op a fused form stands for, after the convolution: its op and how many of the fused
// node's args it takes.
struct Step {
  std::string op;
  int args;
};

// The activations a fused_ops list may end with, each a stock op of one input.
bool IsActivation(const std::string& op) {
  return op == "Relu" || op == "Relu6" || op == "Elu" || op == "LeakyRelu" || op == "Tanh" || op == "Sigmoid";
}

// The steps of a fused_ops list the rewrite understands: BiasAdd, then optionally Add (a
// residual), then optionally an activation; or FusedBatchNorm (inference: scale, offset, mean,
// variance), then optionally an activation. False for any other list.
bool StepsOf(const std::vector<std::string>& fused_ops, std::vector<Step>* steps) {
  size_t i = 0;
  if (i < fused_ops.size() && fused_ops[i] == "BiasAdd") {
    steps->push_back({"BiasAdd", 1});
    ++i;
    if (i < fused_ops.size() && fused_ops[i] == "Add") {
      steps->push_back({"AddV2", 1});
      ++i;
    }
  } else if (i < fused_ops.size() && fused_ops[i] == "FusedBatchNorm") {
    steps->push_back({"FusedBatchNormV3", 4});
    ++i;
  } else {
    return false;
  }
  if (i < fused_ops.size() && IsActivation(fused_ops[i])) {
    steps->push_back({fused_ops[i], 0});
    ++i;
  }
  return i == fused_ops.size();
}

std::string Joined(const std::vector<std::string>& words, const char* separator) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) text += (i ? separator : "") + words[i];
  return text;
}

// Why a node is left alone.
struct Refusal {
  std::string rule, detail;
};

class Rewriter {
 public:
  explicit Rewriter(GraphDef* graph) : graph_(graph) {
    for (const NodeDef& node : graph->node()) names_.insert(node.name());
  }

  RewriteReport Run() {
    RewriteReport report;
    const int count = graph_->node_size();
    for (int i = 0; i < count; ++i) {
      const NodeDef& node = graph_->node(i);
      const bool fused = node.op() == kFusedConv2D || node.op() == kFusedDepthwise;
      if (!fused && SpecOf(node.op()) == nullptr) continue;
      RewriteEntry entry{node.name(), node.op(), {}, "", ""};
      std::vector<NodeDef> made;
      Refusal refusal = fused ? UnfoldFused(node, &made) : Rename(node, &made);
      if (refusal.rule.empty()) {
        // The last node made takes the original's place (and name); the others are appended.
        for (const NodeDef& n : made) entry.became.push_back(n.op());
        *graph_->mutable_node(i) = made.back();
        for (size_t k = 0; k + 1 < made.size(); ++k) *graph_->add_node() = made[k];
      } else {
        entry.rule = refusal.rule;
        entry.detail = refusal.detail;
      }
      report.entries.push_back(entry);
    }
    return report;
  }

 private:
  // Rule 2: the device type the node is placed on.
  static bool DeviceTypeOf(const NodeDef& node, std::string* type, Refusal* refusal) {
    ::tensorflow::DeviceNameUtils::ParsedName parsed;
    if (!::tensorflow::DeviceNameUtils::ParseFullName(node.device(), &parsed) || !parsed.has_type) {
      *refusal = {"device", node.device().empty() ? "the node is not placed on a device"
                                                  : "its device '" + node.device() + "' names no device type"};
      return false;
    }
    *type = parsed.type;
    return true;
  }

  // A node valid for its op definition, its defaults added (TensorFlow's own checks).
  static absl::Status ValidForOpDef(NodeDef* node) {
    const OpDef* op_def = nullptr;
    TF_RETURN_IF_ERROR(::tensorflow::OpRegistry::Global()->LookUpOpDef(node->op(), &op_def));
    ::tensorflow::AddDefaultsToNodeDef(*op_def, node);
    return ::tensorflow::ValidateNodeDef(*node, *op_def);
  }

  // Rule 4 for one node made: valid for its op definition, a kernel registered for it on
  // `device_type`; for a TfOps op, its attributes pass its kernel's checks (ParseAttrs).
  static Refusal Check(const std::string& device_type, NodeDef* node) {
    absl::Status status = ValidForOpDef(node);
    if (!status.ok()) return {"node_def", node->op() + ": " + std::string(status.message())};
    if (node->op().rfind(kPrefix, 0) == 0) {
      const OpSpec* spec = SpecOf(node->op().substr(sizeof(kPrefix) - 1));
      ParsedAttrs parsed;
      if (spec != nullptr) status = ParseAttrs(AttrSlice(*node), *spec, &parsed);
      if (!status.ok()) return {"attributes", node->op() + ": " + std::string(status.message())};
    }
    status = ::tensorflow::FindKernelDef(::tensorflow::DeviceType(device_type), *node, nullptr, nullptr);
    if (!status.ok()) {
      return {"kernel", "no " + node->op() + " kernel for " + device_type + " and its dtype"};
    }
    return {};
  }

  // An op of the family: the same node, its op the TfOps one.
  Refusal Rename(const NodeDef& node, std::vector<NodeDef>* made) {
    std::string device_type;
    Refusal refusal;
    if (!DeviceTypeOf(node, &device_type, &refusal)) return refusal;
    NodeDef renamed = node;
    renamed.set_op(kPrefix + node.op());
    refusal = Check(device_type, &renamed);
    if (refusal.rule.empty()) made->push_back(renamed);
    return refusal;
  }

  // A name no node of the graph has, from `base`.
  std::string UniqueName(const std::string& base) {
    std::string name = base;
    for (int k = 1; names_.count(name) != 0; ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  // A fused form: the TfOps convolution, then the steps of its fused_ops list.
  Refusal UnfoldFused(const NodeDef& node, std::vector<NodeDef>* made) {
    std::string device_type;
    Refusal refusal;
    if (!DeviceTypeOf(node, &device_type, &refusal)) return refusal;

    // The fused node as its own op defines it (its defaults added), or left alone.
    NodeDef fused = node;
    const absl::Status status = ValidForOpDef(&fused);
    if (!status.ok()) return {"node_def", node.op() + ": " + std::string(status.message())};
    const AttrSlice attrs(fused);
    std::vector<std::string> fused_ops;
    DataType dtype;
    int64_t num_args = 0, num_host_args = 0;
    if (!::tensorflow::GetNodeAttr(attrs, "fused_ops", &fused_ops).ok() ||
        !::tensorflow::GetNodeAttr(attrs, "T", &dtype).ok() ||
        !::tensorflow::GetNodeAttr(attrs, "num_args", &num_args).ok() ||
        (attrs.Find("num_host_args") != nullptr &&
         !::tensorflow::GetNodeAttr(attrs, "num_host_args", &num_host_args).ok())) {
      return {"node_def", "fused_ops, T, num_args or num_host_args missing or of another type"};
    }
    std::vector<Step> steps;
    if (!StepsOf(fused_ops, &steps)) {
      return {"fused_ops", "[" + Joined(fused_ops, ", ") + "] is not a list the rewrite unfolds"};
    }
    int takes = 0;
    for (const Step& s : steps) takes += s.args;
    if (num_args != takes || num_host_args != 0) {
      return {"fused_ops", "[" + Joined(fused_ops, ", ") + "] takes " + std::to_string(takes) +
                               " args and no host args; the node has num_args=" + std::to_string(num_args) +
                               " and num_host_args=" + std::to_string(num_host_args)};
    }
    // The args' types: TArgs where the op has it (_FusedConv2D), else T for each.
    std::vector<DataType> arg_types(num_args, dtype);
    if (attrs.Find("TArgs") != nullptr) {
      arg_types.clear();  // GetNodeAttr appends
      if (!::tensorflow::GetNodeAttr(attrs, "TArgs", &arg_types).ok() ||
          static_cast<int64_t>(arg_types.size()) != num_args) {
        return {"node_def", "TArgs not num_args types"};
      }
    }
    std::string filter_format = "HWIO";
    if (attrs.Find("filter_format") != nullptr &&
        (!::tensorflow::GetNodeAttr(attrs, "filter_format", &filter_format).ok() || filter_format != "HWIO")) {
      return {"attributes", "filter_format '" + filter_format + "': the family's filters are HWIO"};
    }
    std::vector<std::string> data_inputs, control_inputs;
    for (const std::string& input : fused.input()) {
      (!input.empty() && input[0] == '^' ? control_inputs : data_inputs).push_back(input);
    }
    if (static_cast<int64_t>(data_inputs.size()) != 2 + num_args) {
      return {"node_def", std::to_string(data_inputs.size()) + " data inputs where the fused op takes " +
                              std::to_string(2 + num_args)};
    }

    // The convolution: the fused node's convolution attributes, its first two inputs and its
    // control inputs.
    const bool depthwise = node.op() == kFusedDepthwise;
    NodeDef conv;
    conv.set_name(UniqueName(node.name() + "/tf_ops_conv"));
    conv.set_op(std::string(kPrefix) + (depthwise ? kDepthwise.label : kConv2D.label));
    conv.set_device(node.device());
    conv.add_input(data_inputs[0]);
    conv.add_input(data_inputs[1]);
    for (const std::string& input : control_inputs) conv.add_input(input);
    for (const char* name : {"T", "strides", "padding", "explicit_paddings", "data_format", "dilations"}) {
      if (const AttrValue* value = attrs.Find(name)) (*conv.mutable_attr())[name] = *value;
    }
    if (!depthwise) {
      if (const AttrValue* value = attrs.Find("use_cudnn_on_gpu")) (*conv.mutable_attr())["use_cudnn_on_gpu"] = *value;
    }
    *conv.mutable_experimental_debug_info() = node.experimental_debug_info();
    made->push_back(conv);

    const AttrValue* data_format = attrs.Find("data_format");
    size_t arg = 2;
    for (size_t k = 0; k < steps.size(); ++k) {
      const Step& step = steps[k];
      const bool last = k + 1 == steps.size();
      NodeDef n;
      n.set_name(last ? node.name() : UniqueName(node.name() + "/tf_ops_" + step.op));
      n.set_op(step.op);
      n.set_device(node.device());
      n.add_input(made->back().name());
      for (int a = 0; a < step.args; ++a) {
        const DataType want = step.op == "FusedBatchNormV3" ? arg_types[2] : dtype;
        if (arg_types[arg - 2] != want) {
          return {"node_def", "TArgs[" + std::to_string(arg - 2) + "] is " + ::tensorflow::DataTypeString(arg_types[arg - 2]) +
                                  " where " + step.op + " takes " + ::tensorflow::DataTypeString(want)};
        }
        n.add_input(data_inputs[arg++]);
      }
      auto& attr = *n.mutable_attr();
      attr["T"].set_type(dtype);
      if (step.op == "BiasAdd" || step.op == "FusedBatchNormV3") {
        if (data_format != nullptr) attr["data_format"] = *data_format;
      }
      if (step.op == "FusedBatchNormV3") {
        attr["U"].set_type(arg_types[2]);
        attr["is_training"].set_b(false);
        if (const AttrValue* epsilon = attrs.Find("epsilon")) attr["epsilon"] = *epsilon;
      }
      if (step.op == "LeakyRelu") {
        if (const AttrValue* alpha = attrs.Find("leakyrelu_alpha")) attr["alpha"] = *alpha;
      }
      *n.mutable_experimental_debug_info() = node.experimental_debug_info();
      made->push_back(n);
    }
    for (NodeDef& n : *made) {
      refusal = Check(device_type, &n);
      if (!refusal.rule.empty()) return refusal;
    }
    return {};
  }

  GraphDef* graph_;
  std::unordered_set<std::string> names_;
};

}  // namespace

int RewriteReport::rewritten() const {
  int n = 0;
  for (const RewriteEntry& e : entries) n += e.became.empty() ? 0 : 1;
  return n;
}

std::string RewriteReport::Text() const {
  std::string text;
  for (const RewriteEntry& e : entries) {
    if (!e.became.empty()) {
      text += "rewrote " + e.node + " " + e.op + " -> " + Joined(e.became, "+") + "\n";
    } else {
      std::string detail = e.detail;  // one line an entry
      std::replace(detail.begin(), detail.end(), '\n', ' ');
      text += "kept " + e.node + " " + e.op + ": " + e.rule + " (" + detail + ")\n";
    }
  }
  return text;
}

RewriteReport RewriteGraph(GraphDef* graph) { return Rewriter(graph).Run(); }

}  // namespace tf_ops
