#include "cc/core/vocabulary.h"

#include <algorithm>

namespace tf_ops {

std::string PlanLineFields(const char* algorithm, const char* pass, Direction direction, Element element,
                           Layout layout, const char* isa, const char* accuracy, int64_t workspace_bytes,
                           int64_t work_units) {
  std::string out = std::string("algorithm=") + algorithm;
  if (pass != nullptr) out += std::string(" pass=") + pass;
  out += std::string(" direction=") + NameOf(direction) + " dtype=" + NameOf(element) + " layout=" + NameOf(layout) +
         " isa=" + isa + " accuracy=" + accuracy;
  return out + " workspace_bytes=" + std::to_string(workspace_bytes) + " work_units=" + std::to_string(work_units);
}

void AppendRefusal(const char* entry, const char* rule, const std::string& detail, bool first, std::string* line) {
  *line += std::string(first ? " refused=" : ";") + entry + ":" + rule;
  if (detail.empty()) return;
  std::string field = detail;
  std::replace(field.begin(), field.end(), ' ', '_');
  *line += "(" + field + ")";
}

namespace {

// A line "<list> <name>" for each of `names`.
template <size_t N>
void Lines(const char* list, const char* const (&names)[N], std::string* out) {
  for (const char* name : names) *out += std::string(list) + " " + name + "\n";
}

}  // namespace

std::string VocabularyText() {
  std::string out;
  Lines("direction", kDirectionNames, &out);
  Lines("element", kElementNames, &out);
  Lines("layout", kLayoutNames, &out);
#define TF_OPS_OP_LINE(name, direction, depthwise) \
  out += std::string("op " #name " ") + NameOf(Direction::direction) + (depthwise ? " 1\n" : " 0\n");
  TF_OPS_OPS(TF_OPS_OP_LINE)
#undef TF_OPS_OP_LINE
  Lines("cpu_algorithm", cpu::kAlgorithmNames, &out);
  Lines("cpu_rule", cpu::kRuleNames, &out);
  Lines("gpu_entry", gpu::kEntryNames, &out);
  Lines("gpu_rule", gpu::kRuleNames, &out);
  return out;
}

}  // namespace tf_ops
