#include "cc/core/vocabulary.h"

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

std::string VocabularyText() {
  std::string out;
  const auto line = [&out](const char* list, const std::string& words) { out += std::string(list) + " " + words + "\n"; };
#define TF_OPS_WORD(list) [&](const char* name) { line(list, name); }
#define TF_OPS_LINE(id, name, ...) words(name);
  {
    const auto words = TF_OPS_WORD("direction");
    TF_OPS_DIRECTIONS(TF_OPS_LINE)
  }
  {
    const auto words = TF_OPS_WORD("element");
    TF_OPS_ELEMENTS(TF_OPS_LINE)
  }
  {
    const auto words = TF_OPS_WORD("layout");
    TF_OPS_LAYOUTS(TF_OPS_LINE)
  }
#define TF_OPS_OP_LINE(name, direction, depthwise) \
  line("op", std::string(#name " ") + NameOf(Direction::direction) + (depthwise ? " 1" : " 0"));
  TF_OPS_OPS(TF_OPS_OP_LINE)
#undef TF_OPS_OP_LINE
  {
    const auto words = TF_OPS_WORD("cpu_algorithm");
    TF_OPS_CPU_ALGORITHMS(TF_OPS_LINE)
  }
  {
    const auto words = TF_OPS_WORD("gpu_entry");
    TF_OPS_GPU_ENTRIES(TF_OPS_LINE)
  }
  {
    const auto words = TF_OPS_WORD("gpu_rule");
    TF_OPS_GPU_RULES(TF_OPS_LINE)
  }
#undef TF_OPS_LINE
#undef TF_OPS_WORD
  return out;
}

}  // namespace tf_ops
