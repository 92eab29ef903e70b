"""tf_ops: TensorFlow's convolution family, re-registered as TfOps> ops.

Every op supports NHWC and NCHW, unequal strides, dilations (depthwise too), SAME, VALID
and EXPLICIT padding and grouped filters on CPU, and gives bitwise reproducible results.
Importing the package loads the compiled library once and registers the gradients.
tf_ops.enable() (or TF_OPS_ENABLE=1 at import) moves TensorFlow's own graphs onto the ops.
"""
from tf_ops._loader import (build_info, cpu_kernel_isa, exact_mode, gpu_support, library_path, load_library,
                            set_exact_mode, set_verbose)

load_library()

from tf_ops import _gradients  # noqa: E402,F401  (registers gradients)
from tf_ops import layers  # noqa: E402  (Keras layers, registered for deserialization)
from tf_ops._enable import Rewrite, disable, enable, enabled, explain_rewrite, is_enabled  # noqa: E402
from tf_ops._explain import Plan, explain  # noqa: E402
from tf_ops.ops import (  # noqa: E402
    OP_NAMES,
    conv2d,
    conv2d_backprop_filter,
    conv2d_backprop_filter_v2,
    conv2d_backprop_input,
    conv2d_backprop_input_v2,
    conv2d_transpose,
    depthwise_conv2d_backprop_filter,
    depthwise_conv2d_backprop_input,
    depthwise_conv2d_native,
)

__version__ = "0.1.0"

from tf_ops import _enable  # noqa: E402

_enable.enable_from_environment()

__all__ = [
    "OP_NAMES",
    "Plan",
    "Rewrite",
    "build_info",
    "conv2d",
    "conv2d_backprop_filter",
    "conv2d_backprop_filter_v2",
    "conv2d_backprop_input",
    "conv2d_backprop_input_v2",
    "conv2d_transpose",
    "cpu_kernel_isa",
    "depthwise_conv2d_backprop_filter",
    "depthwise_conv2d_backprop_input",
    "depthwise_conv2d_native",
    "disable",
    "enable",
    "enabled",
    "exact_mode",
    "explain",
    "explain_rewrite",
    "gpu_support",
    "is_enabled",
    "layers",
    "library_path",
    "set_exact_mode",
    "set_verbose",
]
