"""Parity sweeps: every op kind, every dtype it declares, random configurations over every
axis (format, strides, dilations, padding, groups, depth multiplier), against the float64
reference and against TensorFlow's built-in op wherever TensorFlow supports the case.

The module runs in whichever oneDNN mode the process has; test_onednn_modes.py reruns it
in the other mode.
"""

import numpy as np
import tensorflow as tf

import common
from tiers import budget

CONFIGS_PER_KIND = budget("TF_OPS_PARITY_CONFIGS", fast=30, exhaustive=120)


class ParityTest(tf.test.TestCase):

    def _sweep(self, kind, seed):
        rng = np.random.default_rng(seed)
        compared_builtin = 0
        for i in range(CONFIGS_PER_KIND):
            cfg = common.random_config(rng, depthwise=common.is_depthwise(kind), plain=i % 3 == 0)
            for dtype in common.KINDS[kind]:
                what = common.describe(kind, cfg, dtype)
                arrays = common.make_inputs(rng, cfg, dtype)
                ours = common.run_ours(kind, cfg, arrays, dtype)
                ref = common.run_reference(kind, cfg, arrays)
                err = common.max_error(ours, ref)
                self.assertLessEqual(err, common.TOLERANCE[dtype], f"vs reference: {what}")
                builtin = common.run_builtin(kind, cfg, arrays, dtype)
                if builtin is not None:
                    compared_builtin += 1
                    err = common.max_error(ours, builtin)
                    self.assertLessEqual(err, common.BUILTIN_TOLERANCE[dtype], f"vs TF built-in: {what}")
        # The sweep must actually have exercised TensorFlow's op, not skipped it throughout.
        self.assertGreaterEqual(compared_builtin, 10, f"{kind}: too few built-in comparisons")
        return compared_builtin

    def test_conv2d_backprop_input(self):
        self._sweep("backprop_input", 1)

    def test_conv2d_backprop_input_v2(self):
        self._sweep("backprop_input_v2", 2)

    def test_depthwise_backprop_input(self):
        self._sweep("depthwise_backprop_input", 3)

    def test_conv2d(self):
        self._sweep("conv2d", 4)

    def test_conv2d_backprop_filter(self):
        self._sweep("backprop_filter", 5)

    def test_conv2d_backprop_filter_v2(self):
        self._sweep("backprop_filter_v2", 6)

    def test_depthwise(self):
        self._sweep("depthwise", 7)

    def test_depthwise_backprop_filter(self):
        self._sweep("depthwise_backprop_filter", 8)


if __name__ == "__main__":
    tf.test.main()
