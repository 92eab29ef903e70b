"""Keras's own convolution layer tests (keras/src/layers/convolutional/conv_test.py,
conv_transpose_test.py, depthwise_conv_test.py, as installed with Keras) run on tf_ops'
Conv2D, Conv2DTranspose and DepthwiseConv2D through the plugin
tests/keras_upstream/route_to_tf_ops.py, without editing them.

The same files also run on Keras's own layers, and every test must end the same way on ours:
each one that passes there passes here, and what Keras skips (its tests for other backends) is
skipped here for the same reason. The one exempt assertion, Keras's refusal of strides
together with dilation (tf_ops runs it), is counted in the plugin's summary."""
import pathlib
import tempfile

import keras
import pytest
import tensorflow as tf
from common import run_upstream_pytest

HERE = pathlib.Path(__file__).resolve().parent
FILES = ["conv_test.py", "conv_transpose_test.py", "depthwise_conv_test.py"]


def run_upstream(routed, out_dir):
    """Runs the upstream files in a fresh interpreter; ({test id: outcome}, output)."""
    folder = pathlib.Path(keras.__file__).parent / "src" / "layers" / "convolutional"
    # Both runs draw the same random values in each test (seed_each_test).
    plugins = ["seed_each_test"] + (["route_to_tf_ops"] if routed else [])
    return run_upstream_pytest([folder / f for f in FILES], HERE / "keras_upstream", plugins,
                               {"KERAS_BACKEND": "tensorflow"}, out_dir,
                               "routed" if routed else "keras")


@pytest.mark.exhaustive
class KerasUpstreamTest(tf.test.TestCase):

    def test_keras_layer_tests_pass_on_tf_ops_layers(self):
        with tempfile.TemporaryDirectory() as tmp:
            keras_outcomes, _ = run_upstream(False, tmp)
            ours, output = run_upstream(True, tmp)
        self.assertIn("tf_ops routing: Conv2D, Conv2DTranspose, DepthwiseConv2D", output)
        self.assertEqual(sorted(ours), sorted(keras_outcomes), "the same tests were collected")
        differ = {t: (keras_outcomes[t], ours[t]) for t in ours if ours[t] != keras_outcomes[t]}
        self.assertEqual(differ, {}, output[-5000:])
        passed = sum(o == "passed" for o in ours.values())
        self.assertGreater(passed, 200)
        # The strides-with-dilation refusal, once in conv_test and once in conv_transpose_test.
        self.assertIn("tf_ops exemptions: 2\n", output)
        print(f"Keras upstream on tf_ops layers: {passed} passed, "
              f"{sum(o.startswith('skipped') for o in ours.values())} skipped as on Keras's own")


if __name__ == "__main__":
    tf.test.main()
