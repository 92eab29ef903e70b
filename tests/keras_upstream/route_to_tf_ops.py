"""A pytest plugin that runs Keras's own convolution layer tests on tf_ops' layers: before the
test modules are imported (their parameter lists capture the classes), `Conv2D`,
`Conv2DTranspose` and `DepthwiseConv2D` of `keras.layers` and `keras.src.layers` become
tf_ops.layers'. The upstream files run as installed, unedited.

One assertion is exempt: Keras refuses strides > 1 together with dilation_rate > 1, which
tf_ops runs. Inside the tests that assert that refusal, that one `assertRaisesRegex` instead
asserts the layer is built without an error; every other assertion of those tests runs as
written. The summary line `tf_ops exemptions: N` counts the assertions so exempted."""
import contextlib

import keras
import keras.src.layers
import pytest

import tf_ops.layers

ROUTED = ("Conv2D", "Conv2DTranspose", "DepthwiseConv2D")
# The message of Keras's refusal of strides together with dilation.
EXTENSION = "`strides > 1` not supported in conjunction with"
REASON = "tf_ops runs strides > 1 together with dilation_rate > 1, which Keras refuses"
_exempted = []


def pytest_configure(config):
    for name in ROUTED:
        ours = getattr(tf_ops.layers, name)
        setattr(keras.layers, name, ours)
        setattr(keras.src.layers, name, ours)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    case = getattr(item, "instance", None)
    if case is None or not hasattr(case, "assertRaisesRegex"):
        yield
        return
    original = case.assertRaisesRegex

    def assert_raises_regex(exception, regex, *args, **kwargs):
        if isinstance(regex, str) and regex.startswith(EXTENSION):
            _exempted.append(item.nodeid)
            return contextlib.nullcontext()  # the layer must be built without an error
        return original(exception, regex, *args, **kwargs)

    case.assertRaisesRegex = assert_raises_regex
    try:
        yield
    finally:
        del case.assertRaisesRegex


def pytest_terminal_summary(terminalreporter):
    routed = [name for name in ROUTED if keras.src.layers.__dict__[name] is getattr(tf_ops.layers, name)]
    terminalreporter.write_line(f"tf_ops routing: {', '.join(routed)} -> tf_ops.layers")
    terminalreporter.write_line(f"tf_ops exemptions: {len(_exempted)}")
    for nodeid in _exempted:
        terminalreporter.write_line(f"  exempt in {nodeid}: {REASON}")
