"""Random geometries (hypothesis) through the TensorFlow ops: the fast CPU kernels and the
direct loops (TF_OPS_CPU_KERNELS=direct) each against the float64 reference, with an error
bound relative to the sum of absolute products, in float32, float16 and bfloat16.

The geometries reach past the dense sweep's (tests/test_kernel_sweep.py) small ranges: up to
80 channels per group, filters up to 9 wide, strides and dilations up to 4, every padding,
groups, depth multipliers, both layouts. CI runs TF_OPS_HYPOTHESIS_EXAMPLES examples per test
(150 by default); before a release, run a long search:

    TF_OPS_HYPOTHESIS_EXAMPLES=5000 pytest -q tests/test_random_geometries.py
"""

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import common
from tf_ops import _loader
from tiers import budget

EXAMPLES = budget("TF_OPS_HYPOTHESIS_EXAMPLES", fast=30, exhaustive=150)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Unit roundoff of each result type; float16 results below 2**-14 are subnormal and round
# with an absolute error of up to 2**-25.
UNIT = {tf.float32: 2.0**-24, tf.float16: 2.0**-11, tf.bfloat16: 2.0**-8}
FLOOR = {tf.float32: 0.0, tf.float16: 2.0**-25, tf.bfloat16: 0.0}
DTYPES = [tf.float32, tf.float16, tf.bfloat16]


@st.composite
def geometries(draw, depthwise):
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    kh, kw = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    h, w = draw(st.integers(1, 14)), draw(st.integers(1, 14))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    pads = draw(st.lists(st.integers(0, 4), min_size=4, max_size=4)) if padding == "EXPLICIT" else [0] * 4
    n = draw(st.integers(1, 3))
    if depthwise:
        c, m = draw(st.integers(1, 80)), draw(st.integers(1, 3))
        filter_shape = [kh, kw, c, m]
    else:
        groups = draw(st.sampled_from([1, 1, 1, 2, 3]))
        fi, kg = draw(st.integers(1, 80)), draw(st.integers(1, 80))
        c, filter_shape = fi * groups, [kh, kw, fi, kg * groups]
    cfg = common.make_config(fmt, n, h, w, c, filter_shape, (sh, sw), (dh, dw), padding, pads,
                             depthwise)
    assume(cfg is not None and 0 not in cfg["y_shape"])
    return cfg, draw(st.integers(0, 2**32 - 1))


def products(kind, cfg):
    """Products summed into one result element, at most: the filter taps times the channels
    of a group (forward: input channels; backprop input: output channels), or, for the filter
    gradient, the output pixels of the batch."""
    kh, kw, fi, k = cfg["filter_shape"]
    y = cfg["y_shape"]
    channels = y[1] if cfg["data_format"] == "NCHW" else y[3]
    if "filter" in kind:
        return y[0] * y[1] * y[2] * y[3] // channels
    if common.is_depthwise(kind):
        return kh * kw * (k if "input" in kind else 1)
    c = cfg["x_shape"][1 if cfg["data_format"] == "NCHW" else 3]
    return kh * kw * (k // (c // fi) if "input" in kind else fi)


class RandomGeometriesTest(tf.test.TestCase):

    def _check(self, kinds, cfg, seed):
        rng = np.random.default_rng(seed)
        for kind in kinds:
            dtype = DTYPES[int(rng.integers(len(DTYPES)))]
            arrays = common.make_inputs(rng, cfg, dtype)
            # The values as the op sees them, in float64, and their absolute values.
            exact_in = {k: np.asarray(tf.cast(tf.constant(v), tf.float64)) for k, v in arrays.items()}
            exact = common.run_reference(kind, cfg, exact_in)
            abs_sum = common.run_reference(kind, cfg, {k: np.abs(v) for k, v in exact_in.items()})
            bound = (2 * products(kind, cfg) * 2.0**-24 + UNIT[dtype]) * abs_sum + FLOOR[dtype]
            for mode in ("fast", "direct"):
                before = _loader._switch("direct_kernels", mode == "direct")
                try:
                    got = np.asarray(common.run_ours(kind, cfg, arrays, dtype), np.float64)
                finally:
                    _loader._switch("direct_kernels", before)
                err = np.abs(got - exact)
                worst = np.unravel_index(np.argmax(err - bound), err.shape)
                self.assertTrue(
                    np.all(err <= bound),
                    f"{mode} {common.describe(kind, cfg, dtype)}: at {worst} got {got[worst]}, "
                    f"exact {exact[worst]}, bound {bound[worst]}")

    @SETTINGS
    @given(geometries(depthwise=False))
    def test_gemm_kernels(self, case):
        cfg, seed = case
        self._check(["conv2d", "backprop_input", "backprop_filter"], cfg, seed)

    @SETTINGS
    @given(geometries(depthwise=True))
    def test_depthwise_kernels(self, case):
        cfg, seed = case
        self._check(["depthwise", "depthwise_backprop_input", "depthwise_backprop_filter"], cfg, seed)


if __name__ == "__main__":
    tf.test.main()
