"""TensorFlow's own depthwise convolution kernel tests
(tensorflow/python/kernel_tests/nn_ops/depthwise_conv_op_base.py, the one convolution test file
the pip package ships) run on tf_ops' ops through the plugin tests/tf_upstream/route_to_tf_ops.py,
unedited: once on TensorFlow's own ops, once routed to ours, once routed to ours with every call
compiled by XLA (our lowerings, forward and gradient).

TensorFlow's run on this CPU skips the tests it keeps for GPUs (NCHW, the device comparisons);
routed, those run too, against TensorFlow's CPU kernels, so every collected test must pass, in
both routed modes."""
import concurrent.futures
import pathlib
import re
import tempfile

import pytest
import tensorflow as tf
from common import run_upstream_pytest

HERE = pathlib.Path(__file__).resolve().parent
UPSTREAM = (pathlib.Path(tf.__file__).parent / "python" / "kernel_tests" / "nn_ops"
            / "depthwise_conv_op_base.py")
ROUTED_FUNCTIONS = ("depthwise_conv2d_native", "depthwise_conv2d_native_backprop_input",
                    "depthwise_conv2d_native_backprop_filter", "depthwise_conv2d (interface)")


def run_upstream(mode, out_dir):
    """Runs the upstream file in a fresh interpreter; ({test name: outcome}, output)."""
    outcomes, output = run_upstream_pytest([UPSTREAM], HERE / "tf_upstream", ["route_to_tf_ops"],
                                           {"TF_OPS_ROUTE": mode}, out_dir, mode)
    return {t.rsplit("::", 1)[1]: o for t, o in outcomes.items()}, output


@pytest.mark.exhaustive
class TensorFlowUpstreamTest(tf.test.TestCase):

    def test_depthwise_kernel_tests_pass_on_tf_ops(self):
        self.assertTrue(UPSTREAM.exists(), UPSTREAM)
        with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(3) as pool:
            runs = {mode: pool.submit(run_upstream, mode, tmp) for mode in ("tf", "ops", "jit")}
            results = {mode: run.result() for mode, run in runs.items()}
        theirs, _ = results["tf"]
        # TensorFlow's own run: its CPU tests pass; without a GPU, its GPU tests skip.
        self.assertGreaterEqual(sum(o == "passed" for o in theirs.values()), 10, theirs)
        if not tf.config.list_physical_devices("GPU"):
            self.assertGreaterEqual(sum("Test requires GPU" in o for o in theirs.values()), 8, theirs)
        for mode in ("ops", "jit"):
            with self.subTest(mode=mode):
                ours, output = results[mode]
                self.assertEqual(sorted(ours), sorted(theirs), "the same tests were collected")
                # test_session is TensorFlow's helper, which pytest collects and TensorFlow skips.
                not_passed = {t: o for t, o in ours.items() if o != "passed" and t != "test_session"}
                self.assertEqual(not_passed, {}, output[-5000:])
                self.assertGreaterEqual(len(ours) - 1, 20)
                self.assertIn(f"tf_ops route mode: {mode}\n", output)
                for name in ROUTED_FUNCTIONS:
                    self.assertRegex(output, rf"tf_ops calls: {re.escape(name)}: [1-9]", output[-3000:])
                if mode == "jit":  # the gradient tests' backward passes ran compiled
                    self.assertRegex(output, r"tf_ops calls: depthwise_conv2d_native \(gradient, compiled\): [1-9]")
