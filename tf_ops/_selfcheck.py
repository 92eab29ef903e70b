"""The plumbing shared by the self-check command (python -m tf_ops) and the test suite:
configurations, per-dtype tolerances, and runners for tf_ops, the float64 reference and
TensorFlow's built-in ops."""
import contextlib
import os
import sys

import numpy as np
import tensorflow as tf

from tf_ops import reference
from tf_ops._loader import load_library

# Maximum error, relative to max(1, max |reference|), per dtype. Stated once, used by every
# comparison. 16-bit types accumulate in float32 and round once at the end.
TOLERANCE = {
    tf.float64: 1e-10,
    tf.float32: 3e-5,
    tf.float16: 2e-3,
    tf.bfloat16: 1.6e-2,
    tf.int32: 0,
}
# TensorFlow's built-in kernels sum in other orders (and oneDNN may accumulate 16-bit types
# differently), so agreement with them is checked at a looser bound.
BUILTIN_TOLERANCE = {
    tf.float64: 1e-9,
    tf.float32: 1e-4,
    tf.float16: 1e-2,
    tf.bfloat16: 6e-2,
    tf.int32: 0,
}
FLOAT_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
ALL_DTYPES = FLOAT_DTYPES + [tf.int32]

# Op kinds and the dtypes TensorFlow declares for each.
KINDS = {
    "conv2d": ALL_DTYPES,
    "backprop_input": ALL_DTYPES,
    "backprop_input_v2": ALL_DTYPES,
    "backprop_filter": FLOAT_DTYPES,
    "backprop_filter_v2": FLOAT_DTYPES,
    "depthwise": FLOAT_DTYPES,
    "depthwise_backprop_input": FLOAT_DTYPES,
    "depthwise_backprop_filter": FLOAT_DTYPES,
}


def onednn_enabled():
    """Whether this process's TensorFlow runs oneDNN kernels, as it decided at import: with
    TF_ENABLE_ONEDNN_OPTS unset, only on processors with AVX-512 (VNNI, BF16) or AMX."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"


ONEDNN = onednn_enabled()


def is_depthwise(kind):
    return kind.startswith("depthwise")


def make_config(fmt, n, h, w, c, filter_shape, strides_hw, dilations_hw, padding,
                pads=(0, 0, 0, 0), depthwise=False):
    """A configuration dict, or None when its output size would be negative."""
    def full(hw):
        return [1, 1, hw[0], hw[1]] if fmt == "NCHW" else [1, hw[0], hw[1], 1]

    explicit = []
    if padding == "EXPLICIT":
        explicit = [0, 0, 0, 0, pads[0], pads[1], pads[2], pads[3]] if fmt == "NCHW" else \
                   [0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0]
    x_shape = [n, c, h, w] if fmt == "NCHW" else [n, h, w, c]
    cfg = dict(data_format=fmt, x_shape=x_shape, filter_shape=list(filter_shape),
               strides=full(strides_hw), dilations=full(dilations_hw), padding=padding,
               explicit_paddings=explicit, depthwise=depthwise)
    try:
        g = reference.Geometry(x_shape, filter_shape, cfg["strides"], padding, explicit,
                               cfg["dilations"], fmt, depthwise)
    except ValueError:
        return None
    cfg["y_shape"] = [n, g.k, g.oh, g.ow] if fmt == "NCHW" else [n, g.oh, g.ow, g.k]
    return cfg


def _attrs(cfg):
    return dict(strides=cfg["strides"], padding=cfg["padding"],
                explicit_paddings=cfg["explicit_paddings"], data_format=cfg["data_format"],
                dilations=cfg["dilations"])


def run_ours(kind, cfg, arrays, dtype):
    x, w, dy = (tf.constant(arrays[k], dtype=dtype) for k in ("x", "w", "dy"))
    return run_ours_tensors(kind, cfg, x, w, dy).numpy()


def run_ours_tensors(kind, cfg, x, w, dy):
    """The tf_ops op of `kind` on tensors x, w and dy (each op uses two of them)."""
    lib, a = load_library(), _attrs(cfg)
    x_shape = tf.constant(cfg["x_shape"], tf.int32)
    w_shape = tf.constant(cfg["filter_shape"], tf.int32)
    if kind == "conv2d":
        return lib.tf_ops_conv2d(x, w, **a)
    if kind == "backprop_input":
        return lib.tf_ops_conv2d_backprop_input(x_shape, w, dy, **a)
    if kind == "backprop_input_v2":
        return lib.tf_ops_conv2d_backprop_input_v2(x, w, dy, **a)
    if kind == "backprop_filter":
        return lib.tf_ops_conv2d_backprop_filter(x, w_shape, dy, **a)
    if kind == "backprop_filter_v2":
        return lib.tf_ops_conv2d_backprop_filter_v2(x, w, dy, **a)
    if kind == "depthwise":
        return lib.tf_ops_depthwise_conv2d_native(x, w, **a)
    if kind == "depthwise_backprop_input":
        return lib.tf_ops_depthwise_conv2d_native_backprop_input(x_shape, w, dy, **a)
    if kind == "depthwise_backprop_filter":
        return lib.tf_ops_depthwise_conv2d_native_backprop_filter(x, w_shape, dy, **a)
    raise ValueError(f"unknown op kind {kind!r}")


def run_reference(kind, cfg, arrays):
    a = dict(strides=cfg["strides"], padding=cfg["padding"],
             explicit_paddings=cfg["explicit_paddings"], dilations=cfg["dilations"],
             data_format=cfg["data_format"], depthwise=is_depthwise(kind))
    x, w, dy = (np.asarray(arrays[k], np.float64) for k in ("x", "w", "dy"))
    if kind in ("conv2d", "depthwise"):
        return reference.conv2d(x, w, **a)
    if "input" in kind:
        return reference.conv2d_backprop_input(cfg["x_shape"], w, dy, **a)
    return reference.conv2d_backprop_filter(x, cfg["filter_shape"], dy, **a)


def builtin_supports(kind, cfg, dtype):
    """False where TensorFlow 2.21's built-in op is known to crash or to compute something
    else, so that comparing with it would kill the process or test TensorFlow's bugs:
    - its depthwise kernels ignore dilations;
    - Conv2DBackpropFilter segfaults on an empty out_backprop (test_regressions.py);
    - its half/bfloat16 Conv2DBackpropFilter returns garbage with EXPLICIT padding
      (test_regressions.py), and its bfloat16 one returns values that change from call to
      call (uninitialized memory) on an input one column wide with a column stride above 1."""
    if is_depthwise(kind) and any(d != 1 for d in cfg["dilations"]):
        return False
    if any(0 in cfg[k] for k in ("x_shape", "filter_shape", "y_shape")):
        return False
    if "filter" in kind and cfg["padding"] == "EXPLICIT" and dtype in (tf.float16, tf.bfloat16):
        return False
    cols, col_stride = (3, 3) if cfg["data_format"] == "NCHW" else (2, 2)
    if ("filter" in kind and dtype in (tf.float16, tf.bfloat16) and cfg["x_shape"][cols] == 1
            and cfg["strides"][col_stride] > 1):
        return False
    return True


def run_builtin(kind, cfg, arrays, dtype):
    """TensorFlow's built-in op, or None where it refuses the configuration on this device.
    The V2 ops have no built-in kernel; they are compared with the V1 op they equal."""
    if not builtin_supports(kind, cfg, dtype):
        return None
    a = _attrs(cfg)
    x, w, dy = (tf.constant(arrays[k], dtype=dtype) for k in ("x", "w", "dy"))
    xs = tf.constant(cfg["x_shape"], tf.int32)
    ws = tf.constant(cfg["filter_shape"], tf.int32)
    raw = tf.raw_ops
    ops = {
        "conv2d": lambda: raw.Conv2D(input=x, filter=w, **a),
        "backprop_input": lambda: raw.Conv2DBackpropInput(input_sizes=xs, filter=w, out_backprop=dy, **a),
        "backprop_input_v2": lambda: raw.Conv2DBackpropInput(input_sizes=xs, filter=w, out_backprop=dy, **a),
        "backprop_filter": lambda: raw.Conv2DBackpropFilter(input=x, filter_sizes=ws, out_backprop=dy, **a),
        "backprop_filter_v2": lambda: raw.Conv2DBackpropFilter(input=x, filter_sizes=ws, out_backprop=dy, **a),
        "depthwise": lambda: raw.DepthwiseConv2dNative(input=x, filter=w, **a),
        "depthwise_backprop_input":
            lambda: raw.DepthwiseConv2dNativeBackpropInput(input_sizes=xs, filter=w, out_backprop=dy, **a),
        "depthwise_backprop_filter":
            lambda: raw.DepthwiseConv2dNativeBackpropFilter(input=x, filter_sizes=ws, out_backprop=dy, **a),
    }
    try:
        with _native_log_dropped():
            return ops[kind]().numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError,
            tf.errors.AbortedError):
        return None


@contextlib.contextmanager
def _native_log_dropped():
    """TensorFlow's C++ runtime writes each call it refuses to the process's stderr ("Local
    rendezvous is aborting with status: ...", whatever TF_CPP_MIN_LOG_LEVEL says) before it
    raises the error; here the refusal is the answer, so that line is dropped."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def max_error(actual, expected):
    """max |actual - expected| / max(1, max |expected|), in float64."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    if expected.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(expected))))
    return float(np.max(np.abs(actual - expected))) / scale


def describe(kind, cfg, dtype):
    keys = ("data_format", "x_shape", "filter_shape", "strides", "dilations", "padding", "explicit_paddings")
    return f"{kind} {dtype.name} " + " ".join(f"{k}={cfg[k]}" for k in keys)


def random_array(rng, shape, dtype):
    if dtype == tf.int32:
        return rng.integers(-3, 4, size=shape).astype(np.int32)
    return rng.uniform(-1, 1, size=shape).astype(dtype.as_numpy_dtype)


def make_inputs(rng, cfg, dtype):
    return {
        "x": random_array(rng, cfg["x_shape"], dtype),
        "w": random_array(rng, cfg["filter_shape"], dtype),
        "dy": random_array(rng, cfg["y_shape"], dtype),
    }
