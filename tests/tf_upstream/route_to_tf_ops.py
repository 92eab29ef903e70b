"""A pytest plugin that runs TensorFlow's own depthwise convolution kernel tests
(tensorflow/python/kernel_tests/nn_ops/depthwise_conv_op_base.py, as the pip package ships it,
unedited) on tf_ops' ops.

TF_OPS_ROUTE picks the mode:
- "tf": TensorFlow's own ops, the baseline;
- "ops": TensorFlow's Python calls of the depthwise family go to tf_ops' functions;
- "jit": the same, every call of ours compiled by XLA, so that it runs our XLA lowering. The
  tests build TF1 graphs run by a Session, which ignores tf.function(jit_compile=True) (the call
  runs without XLA, as a check with an op that has no XLA kernel shows); TF1's own
  xla.compile builds a cluster the Session must compile, so each call goes through that.

Every mode runs with TF1 behaviour: the file's tests are marked run_v1_only. In the routed modes
two more things change, because our ops run what TensorFlow runs only on a GPU:
- test.is_gpu_available() answers True, so the GPU-only tests and the NCHW variants run;
- those tests compare a computation placed on the GPU (use_gpu=True) against one on the CPU
  (use_gpu=False). The GPU side is ours; the CPU side stays TensorFlow's own op, so they compare
  tf_ops against TensorFlow's CPU kernels.
The interface function nn_impl.depthwise_conv2d, which TensorFlow computes with space-to-batch
around a dilation-free native op on CPU and GPU, goes to our op with the dilations themselves
(what TensorFlow does on a TPU), so the tests' dilated cases run our dilated kernels.

The terminal summary names each routed function and how many calls reached it."""
import collections
import contextlib
import functools
import inspect
import os

import numpy as np
import tensorflow as tf
from tensorflow.python.compiler.xla import xla
from tensorflow.python.framework import test_util
from tensorflow.python.ops import nn_impl, nn_ops
from tensorflow.python.platform import test

import tf_ops

MODE = os.environ.get("TF_OPS_ROUTE", "tf")
if MODE not in ("tf", "ops", "jit"):
    raise ValueError(f"TF_OPS_ROUTE must be tf, ops or jit; got {MODE!r}")

calls = collections.Counter()
_on_gpu = [True]  # whether the innermost test session places ops on the GPU


def _session_tracking(method):
    """Wraps TensorFlowTestCase.session / cached_session to record their use_gpu."""
    signature = inspect.signature(method)

    @contextlib.contextmanager
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        use_gpu = signature.bind(self, *args, **kwargs).arguments.get("use_gpu", True)
        _on_gpu.append(bool(use_gpu))
        try:
            with method(self, *args, **kwargs) as sess:
                yield sess
        finally:
            _on_gpu.pop()

    return wrapper


def _xla_compiled(function):
    """`function`, its tensor arguments the inputs of one XLA cluster, the rest fixed. TF1 refuses
    to differentiate through a cluster; the gradient is a second cluster that differentiates
    `function` inside it, so the backward pass runs our backprop ops' lowerings too."""
    signature = inspect.signature(function)

    def call(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs).arguments
        # A cluster's inputs are not compile-time constants: a sizes vector whose value the
        # graph knows (the tests' shapes are static) goes into the cluster as a constant.
        for k, v in arguments.items():
            value = tf.get_static_value(v) if isinstance(v, tf.Tensor) and v.dtype.is_integer else None
            if value is not None:
                arguments[k] = value.tolist()
        names = [k for k, v in arguments.items() if isinstance(v, (tf.Tensor, np.ndarray))]

        def computation(*tensors):
            return function(**dict(arguments, **dict(zip(names, tensors))))

        @tf.custom_gradient
        def compiled(*tensors):
            (out,) = xla.compile(computation, list(tensors))

            def grad(dy):
                calls[f"{function.__name__} (gradient, compiled)"] += 1
                wanted = [i for i, t in enumerate(tensors) if t.dtype.is_floating]

                def backward(dy, *tensors):
                    xs = [tensors[i] for i in wanted]
                    return tf.gradients(computation(*tensors), xs, grad_ys=dy)

                grads = xla.compile(backward, [dy, *tensors])
                found = dict(zip(wanted, grads))
                return [found.get(i) for i in range(len(tensors))]

            return out, grad

        return compiled(*(tf.convert_to_tensor(arguments[k]) for k in names))

    return call


def _routed(name, ours, theirs, compile_in_jit_mode=True):
    """TensorFlow's function `theirs` replaced by `ours` (compiled by XLA in "jit" mode)
    wherever the test places the computation on the GPU."""
    compiled = _xla_compiled(ours) if MODE == "jit" and compile_in_jit_mode else ours

    @functools.wraps(theirs)
    def call(*args, **kwargs):
        if not _on_gpu[-1]:
            calls[f"{name} (TensorFlow's, on CPU)"] += 1
            return theirs(*args, **kwargs)
        calls[name] += 1
        return compiled(*args, **kwargs)

    return call


def _depthwise_conv2d(input, filter, strides, padding, rate=None, name=None,  # noqa: A002
                      data_format=None, dilations=None):
    """nn_impl.depthwise_conv2d's arguments, our native op with the dilations."""
    rate = dilations if dilations is not None else rate
    rate = [1, 1] if rate is None else list(rate)
    data_format = data_format or "NHWC"
    dilations = [1, 1, *rate] if data_format == "NCHW" else [1, *rate, 1]
    return nn_ops.depthwise_conv2d_native(input, filter, strides, padding, data_format=data_format,
                                          dilations=dilations, name=name)


def _xla_enforced():
    """Whether a cluster here is really compiled: one with an op XLA has no kernel for fails."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        (out,) = xla.compile(tf.strings.as_string, [tf.constant([1.0])])
        try:
            sess.run(out)
        except tf.errors.InvalidArgumentError:
            return True
    return False


def pytest_configure(config):
    tf.compat.v1.disable_v2_behavior()
    if MODE == "tf":
        return
    if MODE == "jit" and not _xla_enforced():
        raise RuntimeError("xla.compile ran a cluster without XLA; jit mode would test nothing")
    for name in ("session", "cached_session"):
        setattr(test_util.TensorFlowTestCase, name,
                _session_tracking(getattr(test_util.TensorFlowTestCase, name)))
    test.is_gpu_available = test_util.is_gpu_available = lambda *args, **kwargs: True
    routes = {
        "depthwise_conv2d_native": tf_ops.depthwise_conv2d_native,
        "depthwise_conv2d_native_backprop_input": tf_ops.depthwise_conv2d_backprop_input,
        "depthwise_conv2d_native_backprop_filter": tf_ops.depthwise_conv2d_backprop_filter,
    }
    for name, ours in routes.items():
        setattr(nn_ops, name, _routed(name, ours, getattr(nn_ops, name)))
    # After the native op: the interface calls the routed nn_ops.depthwise_conv2d_native, which
    # is compiled already (XLA clusters do not nest).
    nn_impl.depthwise_conv2d = _routed("depthwise_conv2d (interface)", _depthwise_conv2d,
                                       nn_impl.depthwise_conv2d, compile_in_jit_mode=False)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"tf_ops route mode: {MODE}")
    for name, count in sorted(calls.items()):
        terminalreporter.write_line(f"tf_ops calls: {name}: {count}")
