// A plugin graph optimizer for the CPU device type that does nothing, loaded as TensorFlow
// loads a library from tensorflow-plugins (load_pluggable_device_library): the other optimizer
// tests/test_enable.py plants to see tf_ops.enable() refuse, with a Python error and no abort,
// to register a second one for the same device type.
#include "tensorflow/c/experimental/grappler/grappler.h"

namespace {

void Optimize(void* optimizer, const TF_Buffer* graph, const TF_GrapplerItem* item, TF_Buffer* optimized,
              TF_Status* status) {
  TF_SetStatus(status, TF_ABORTED, "the planted optimizer changes nothing");
}

}  // namespace

extern "C" void TF_InitGraph(TP_OptimizerRegistrationParams* params, TF_Status* status) {
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->device_type = "CPU";
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer->optimize_func = Optimize;
  TF_SetStatus(status, TF_OK, "");
}
