"""Each CPU algorithm within the bound of docs/accuracy.md, on large-channel layers; exact
mode is the direct sum.

Bounds, for an output element with n products (9 x channels for a 3x3 filter), u = 2**-24
(float accumulation) and u_out the output type's rounding (2**-24 float32, 2**-11 float16,
2**-8 bfloat16), on the inputs as rounded to their type:
  direct sums (exact mode, and every layer Winograd does not take):
      |error| <= (2 n u + u_out) sum|products|            (+ 2**-25 for float16's subnormals)
  Winograd F(4x4, 3x3):
      |error| <= (2 n u + u_out) sum|products| + 2 (n + 16) u P
  where, forward and backprop input, P sums over the reduction channels the absolute source
  values of the 6x6 patch under the element's 4x4 output tile times the absolute filter taps
  joining that channel to the element's channel (Winograd mixes a tile's outputs, so an output
  that reads only padding can still carry rounding error from its neighbours); for the filter
  gradient, P sums over images and 4x4 tiles of the output gradient the absolute input values
  of the tile's 6x6 patch in the element's input channel times the absolute output gradient of
  the tile in its output channel.
The test prints the measured worst error / bound and max error / max |exact| per algorithm
and dtype (docs/accuracy.md's table)."""
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import reference

U = 2.0 ** -24
UNIT = {tf.float32: 2.0 ** -24, tf.float16: 2.0 ** -11, tf.bfloat16: 2.0 ** -8}
FLOOR = {tf.float32: 0.0, tf.float16: 2.0 ** -25, tf.bfloat16: 0.0}

# (name, input NHWC, filter HWIO, padding, data format): 3x3 stride-1 layers with many channels.
LAYERS = [
    ("deep", (2, 14, 14, 256), (3, 3, 256, 256), "SAME", "NHWC"),
    ("resnet", (2, 28, 28, 128), (3, 3, 128, 128), "SAME", "NHWC"),
    ("grouped", (2, 13, 11, 96), (3, 3, 48, 64), "VALID", "NHWC"),
    ("nchw", (2, 10, 15, 64), (3, 3, 64, 80), "SAME", "NCHW"),
]


# (name, input NHWC, filter HWIO, stride, padding, data format): strided layers whose filter
# spans three strides each way, which run Winograd over a space-to-depth copy (every one here
# in both directions).
PHASE_LAYERS = [
    ("5x5 stride 2", (2, 28, 28, 64), (5, 5, 64, 96), 2, "SAME", "NHWC"),
    ("6x6 stride 2", (2, 30, 29, 48), (6, 6, 48, 64), 2, "VALID", "NCHW"),
    ("9x9 stride 3", (1, 48, 48, 16), (9, 9, 16, 40), 3, "SAME", "NHWC"),
]


def _to_format(a, data_format):
    return np.transpose(a, (0, 3, 1, 2)) if data_format == "NCHW" else a


def _from_format(a, data_format):
    return np.transpose(a, (0, 2, 3, 1)) if data_format == "NCHW" else a


def _forward_or_input(direction, xf, w, dyf, dtype, strides, padding, fmt):
    """(ours, exact, exact of the absolute values) of a forward ("forward") or backprop-input
    pass, x or dy in `fmt`, results in `fmt`; ours in `dtype`, the others in float64."""
    if direction == "forward":
        ours = tf_ops.conv2d(tf.constant(xf, dtype), tf.constant(w, dtype), strides, padding, data_format=fmt)
        exact_val = reference.conv2d(xf, w, strides, padding, data_format=fmt)
        abs_val = reference.conv2d(np.abs(xf), np.abs(w), strides, padding, data_format=fmt)
    else:
        sizes = xf.shape
        ours = tf_ops.conv2d_backprop_input(sizes, tf.constant(w, dtype), tf.constant(dyf, dtype), strides,
                                            padding, data_format=fmt)
        exact_val = reference.conv2d_backprop_input(sizes, w, dyf, strides, padding, data_format=fmt)
        abs_val = reference.conv2d_backprop_input(sizes, np.abs(w), np.abs(dyf), strides, padding,
                                                  data_format=fmt)
    return ours, exact_val, abs_val


def patch_sums(src_abs, pad_top, pad_left, out_rows, out_cols):
    """[n, tile row, tile column, channel]: the sum of src_abs over each 4x4 output tile's 6x6
    source patch (NHWC), the source being that of the equivalent forward pass (x; or dy for
    backprop input, read at pads 2 - pad)."""
    n, rows, cols, channels = src_abs.shape
    th, tw = -(-out_rows // 4), -(-out_cols // 4)
    padded = np.zeros((n, th * 4 + 2, tw * 4 + 2, channels))
    r0, c0 = max(0, -pad_top), max(0, -pad_left)  # source rows above the first patch
    rows_in = min(rows - r0, padded.shape[1] - (pad_top + r0))
    cols_in = min(cols - c0, padded.shape[2] - (pad_left + c0))
    if rows_in > 0 and cols_in > 0:
        padded[:, pad_top + r0:pad_top + r0 + rows_in, pad_left + c0:pad_left + c0 + cols_in] = \
            src_abs[:, r0:r0 + rows_in, c0:c0 + cols_in]
    patch = np.zeros((n, th, tw, channels))
    for a in range(6):
        for b in range(6):
            patch += padded[:, a:a + th * 4:4, b:b + tw * 4:4][:, :th, :tw]
    return patch


def phase_scale(direction, src_abs, w_abs, stride, pad_top, pad_left, in_shape, out_shape):
    """P for each element of the output (forward) or input gradient of a strided layer run as
    Winograd over a space-to-depth copy: copy pixel (i, j) holds input pixel (i s + a - pad_top,
    j s + b - pad_left) as channel (a, b, c), for i < out_rows + 2, j < out_cols + 2, and copy
    tap (p, q) holds w's tap (p s + a, q s + b) (zero past w). Forward, the tiles are the
    output's over the copy (no padding); backprop input, the copy of dx's over dy (read at pads
    2), each dx pixel taking its copy pixel's value. NHWC."""
    s = stride
    n, h, w_, c = in_shape
    oh, ow = out_shape
    kh, kw, _, k = w_abs.shape
    rows, cols = oh + 2, ow + 2
    wc = np.zeros((3, 3, s, s, c, k))
    for p in range(3):
        for q in range(3):
            for a in range(s):
                for b in range(s):
                    if p * s + a < kh and q * s + b < kw:
                        wc[p, q, a, b] = w_abs[p * s + a, q * s + b]
    wsum = wc.sum(axis=(0, 1)).reshape(s * s * c, k)
    if direction == "forward":
        xc = np.zeros((n, rows, cols, s, s, c))
        for a in range(s):
            for b in range(s):
                for i in range(rows):
                    r = i * s + a - pad_top
                    if not 0 <= r < h:
                        continue
                    for j in range(cols):
                        col = j * s + b - pad_left
                        if 0 <= col < w_:
                            xc[:, i, j, a, b] = src_abs[:, r, col]
        patch = patch_sums(xc.reshape(n, rows, cols, s * s * c), 0, 0, oh, ow)
        scale = patch @ wsum
        return np.repeat(np.repeat(scale, 4, axis=1), 4, axis=2)[:, :oh, :ow]
    patch = patch_sums(src_abs, 2, 2, rows, cols)
    copy = np.repeat(np.repeat(patch @ wsum.T, 4, axis=1), 4, axis=2)[:, :rows, :cols]
    copy = copy.reshape(n, rows, cols, s, s, c)
    scale = np.zeros(in_shape)
    for r in range(h):
        i, a = divmod(r + pad_top, s)
        for col in range(w_):
            j, b = divmod(col + pad_left, s)
            if i < rows and j < cols:
                scale[:, r, col] = copy[:, i, j, a, b]
    return scale


class AccuracyTest(tf.test.TestCase):

    def tearDown(self):
        tf_ops.set_exact_mode(False)
        super().tearDown()

    def _measure(self, layer, direction, dtype, exact, rng):
        name, xs, ws, padding, fmt = layer
        n, h, w_, c = xs
        kh, kw, fi, k = ws
        groups = c // fi
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        # Values as rounded to the dtype, exactly, in float64.
        x = tf.cast(tf.cast(x, dtype), tf.float64).numpy()
        w = tf.cast(tf.cast(w, dtype), tf.float64).numpy()
        # 3x3 at stride 1: SAME pads one on each side.
        pt = pl = 1 if padding == "SAME" else 0
        oh, ow = (h, w_) if padding == "SAME" else (h - 2, w_ - 2)
        dy = tf.cast(tf.cast(rng.standard_normal((n, oh, ow, k)), dtype), tf.float64).numpy()
        strides = [1, 1, 1, 1]
        tf_ops.set_exact_mode(exact)
        xf, dyf = _to_format(x, fmt), _to_format(dy, fmt)
        if direction == "backprop filter":
            ours = tf_ops.conv2d_backprop_filter(tf.constant(xf, dtype), ws, tf.constant(dyf, dtype), strides,
                                                 padding, data_format=fmt)
            exact_val = reference.conv2d_backprop_filter(xf, ws, dyf, strides, padding, data_format=fmt)
            abs_val = reference.conv2d_backprop_filter(np.abs(xf), ws, np.abs(dyf), strides, padding,
                                                       data_format=fmt)
            products = n * oh * ow
        else:
            ours, exact_val, abs_val = _forward_or_input(direction, xf, w, dyf, dtype, strides, padding, fmt)
            products = 9 * (fi if direction == "forward" else k // groups)
        ours = tf.cast(ours, tf.float64).numpy()
        if direction != "backprop filter":
            ours = _from_format(ours, fmt)
            exact_val, abs_val = _from_format(exact_val, fmt), _from_format(abs_val, fmt)
        err = np.abs(ours - exact_val)
        gamma = 2 * products * U
        bound = (gamma + UNIT[dtype]) * abs_val + FLOOR[dtype]
        if not exact:
            # Winograd's term: P per output element.
            wabs = np.abs(w).sum(axis=(0, 1))  # [fi, k]
            kg = k // groups
            if direction == "backprop filter":
                patch = patch_sums(np.abs(x), pt, pl, oh, ow)  # [n, th, tw, c]
                th, tw = patch.shape[1:3]
                tiles = np.zeros((n, th * 4, tw * 4, k))
                tiles[:, :oh, :ow] = np.abs(dy)
                tiles = tiles.reshape(n, th, 4, tw, 4, k).sum(axis=(2, 4))  # [n, th, tw, k]
                scale = np.concatenate(
                    [np.einsum("nhwc,nhwk->ck", patch[..., g * fi:(g + 1) * fi], tiles[..., g * kg:(g + 1) * kg])
                     for g in range(groups)], -1)
                scale = np.broadcast_to(scale, (3, 3) + scale.shape)
            elif direction == "forward":
                patch = patch_sums(np.abs(x), pt, pl, oh, ow)
                scale = np.concatenate(
                    [patch[..., g * fi:(g + 1) * fi] @ wabs[:, g * kg:(g + 1) * kg] for g in range(groups)], -1)
            else:
                patch = patch_sums(np.abs(dy), 2 - pt, 2 - pl, h, w_)
                scale = np.concatenate(
                    [patch[..., g * kg:(g + 1) * kg] @ wabs[:, g * kg:(g + 1) * kg].T for g in range(groups)], -1)
            if direction != "backprop filter":
                scale = np.repeat(np.repeat(scale, 4, axis=1), 4, axis=2)[:, :err.shape[1], :err.shape[2]]
            bound = bound + 2 * (products + 16) * U * scale
        ratio = float(np.max(err / bound))
        relative = float(np.max(err) / np.max(np.abs(exact_val)))
        return ratio, relative

    def test_every_algorithm_within_its_bound(self):
        rng = np.random.default_rng(18)
        table = []
        for exact, algorithm in ((True, "direct (exact mode)"), (False, "Winograd F(4x4, 3x3)")):
            for dtype in (tf.float32, tf.bfloat16, tf.float16):
                for direction in ("forward", "backprop input", "backprop filter"):
                    worst_ratio, worst_rel = 0.0, 0.0
                    for layer in LAYERS:
                        ratio, rel = self._measure(layer, direction, dtype, exact, rng)
                        self.assertLessEqual(ratio, 1.0, f"{algorithm} {dtype.name} {layer[0]} {direction}")
                        worst_ratio, worst_rel = max(worst_ratio, ratio), max(worst_rel, rel)
                    table.append((algorithm, dtype.name, direction, worst_ratio, worst_rel))
        print("\nalgorithm              dtype     direction        worst error/bound  max error/max |exact|")
        for algorithm, dtype, direction, ratio, rel in table:
            print(f"{algorithm:22s} {dtype:9s} {direction:16s} {ratio:17.3g}  {rel:21.2e}")

    def _measure_strided(self, layer, direction, dtype, exact, rng):
        """(worst error / bound, max error / max |exact|, our result) of a strided layer."""
        name, xs, ws, stride, padding, fmt = layer
        n, h, w_, c = xs
        kh, kw, _, k = ws
        x = tf.cast(tf.cast(rng.standard_normal(xs), dtype), tf.float64).numpy()
        w = tf.cast(tf.cast(rng.standard_normal(ws), dtype), tf.float64).numpy()
        if padding == "SAME":
            oh, ow = -(-h // stride), -(-w_ // stride)
            pt = max((oh - 1) * stride + kh - h, 0) // 2
            pl = max((ow - 1) * stride + kw - w_, 0) // 2
        else:
            oh, ow = (h - kh) // stride + 1, (w_ - kw) // stride + 1
            pt = pl = 0
        dy = tf.cast(tf.cast(rng.standard_normal((n, oh, ow, k)), dtype), tf.float64).numpy()
        strides = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
        tf_ops.set_exact_mode(exact)
        xf, dyf = _to_format(x, fmt), _to_format(dy, fmt)
        ours, exact_val, abs_val = _forward_or_input(direction, xf, w, dyf, dtype, strides, padding, fmt)
        # Backprop input: the most products any input pixel takes, ceil(kh / s) x ceil(kw / s)
        # taps reaching it.
        products = kh * kw * c if direction == "forward" else -(-kh // stride) * -(-kw // stride) * k
        ours = _from_format(tf.cast(ours, tf.float64).numpy(), fmt)
        exact_val, abs_val = _from_format(exact_val, fmt), _from_format(abs_val, fmt)
        err = np.abs(ours - exact_val)
        bound = (2 * products * U + UNIT[dtype]) * abs_val + FLOOR[dtype]
        if not exact:
            src = np.abs(x) if direction == "forward" else np.abs(dy)
            scale = phase_scale(direction, src, np.abs(w), stride, pt, pl, xs, (oh, ow))
            bound = bound + 2 * (products + 16) * U * scale
        # Input pixels no tap reaches (VALID) are exactly 0 with a bound of 0.
        ratio = np.divide(err, bound, out=np.zeros_like(err), where=err > 0)
        return float(np.max(ratio)), float(np.max(err) / np.max(np.abs(exact_val))), ours

    def test_strided_winograd_within_its_bound(self):
        # Strided layers whose filter spans three strides each way run Winograd over a
        # space-to-depth copy: within the Winograd bound with P of that copy, and within the
        # direct bound in exact mode. Outside exact mode the results must differ from exact
        # mode's (Winograd ran), but for bfloat16 where it runs its direct sums on pairs.
        rng = np.random.default_rng(7)
        pairs = "bf16" in tf_ops.cpu_kernel_isa() or "amx" in tf_ops.cpu_kernel_isa()
        table = []
        for dtype in (tf.float32, tf.bfloat16, tf.float16):
            for direction in ("forward", "backprop input"):
                worst = {True: (0.0, 0.0), False: (0.0, 0.0)}
                for layer in PHASE_LAYERS:
                    seed = int(rng.integers(1 << 30))
                    results = {}
                    for exact in (True, False):
                        ratio, rel, results[exact] = self._measure_strided(layer, direction, dtype, exact,
                                                                          np.random.default_rng(seed))
                        self.assertLessEqual(ratio, 1.0, f"{layer[0]} {direction} {dtype.name} exact={exact}")
                        worst[exact] = (max(worst[exact][0], ratio), max(worst[exact][1], rel))
                    if dtype != tf.bfloat16 or not pairs:
                        self.assertGreater(np.count_nonzero(results[True] != results[False]), 0,
                                           f"{layer[0]} {direction} {dtype.name}: Winograd did not run")
                for exact, algorithm in ((True, "direct (exact mode)"), (False, "Winograd, stride phases")):
                    table.append((algorithm, dtype.name, direction) + worst[exact])
        print("\nalgorithm                dtype     direction        worst error/bound  max error/max |exact|")
        for algorithm, dtype, direction, ratio, rel in table:
            print(f"{algorithm:24s} {dtype:9s} {direction:16s} {ratio:17.3g}  {rel:21.2e}")

    def test_exact_mode_is_the_direct_sum(self):
        # Outputs that read only zeros (a dead block, as a ReLU leaves): the direct sum is exactly
        # 0, and so is Winograd's result there (it would otherwise hold its transforms' rounding
        # noise); elsewhere Winograd's sums differ from exact mode's direct sums.
        rng = np.random.default_rng(3)
        x = np.zeros((1, 8, 8, 32), np.float32)
        x[:, :5] = rng.standard_normal((1, 5, 8, 32))
        w = tf.constant(rng.standard_normal((3, 3, 32, 32)).astype(np.float32))
        x = tf.constant(x)
        self.assertFalse(tf_ops.exact_mode())
        self.assertEqual(tf_ops.explain("conv2d", [1, 8, 8, 32], [3, 3, 32, 32], padding="SAME").algorithm, "winograd")
        fast = tf_ops.conv2d(x, w, [1, 1, 1, 1], "SAME").numpy()
        self.assertFalse(tf_ops.set_exact_mode(True))
        self.assertTrue(tf_ops.exact_mode())
        exact = tf_ops.conv2d(x, w, [1, 1, 1, 1], "SAME").numpy()
        np.testing.assert_array_equal(exact[:, 6:], 0.0)
        np.testing.assert_array_equal(fast[:, 6:], 0.0)
        self.assertGreater(np.count_nonzero(fast[:, :5] != exact[:, :5]), 0, "Winograd did not run")
        # Backprop input: dy nonzero only in its first rows.
        dy = np.zeros((1, 8, 8, 32), np.float32)
        dy[:, :5] = rng.standard_normal((1, 5, 8, 32))
        exact_dx = tf_ops.conv2d_backprop_input([1, 8, 8, 32], w, tf.constant(dy), [1, 1, 1, 1], "SAME").numpy()
        np.testing.assert_array_equal(exact_dx[:, 6:], 0.0)
        self.assertTrue(tf_ops.set_exact_mode(False))
        fast_dx = tf_ops.conv2d_backprop_input([1, 8, 8, 32], w, tf.constant(dy), [1, 1, 1, 1], "SAME").numpy()
        np.testing.assert_array_equal(fast_dx[:, 6:], 0.0)
        self.assertGreater(np.count_nonzero(fast_dx[:, :5] != exact_dx[:, :5]), 0, "Winograd did not run")

    def test_winograd_keeps_a_dead_region_exactly_zero(self):
        # A 3x3 layer over a ReLU'd input with a dead block inside the images (and groups, and
        # NCHW): every output exactly 0 in exact mode is exactly 0 with Winograd too.
        rng = np.random.default_rng(5)
        for data_format, groups in (("NHWC", 1), ("NCHW", 1), ("NHWC", 2)):
            with self.subTest(data_format=data_format, groups=groups):
                x = np.maximum(rng.standard_normal((4, 32, 32, 64)), 0).astype(np.float32)
                x[:, 8:20, 10:24, :] = 0
                x[1, :, :, :32] = 0  # the first group's channels dead in one image
                w = rng.standard_normal((3, 3, 64 // groups, 64)).astype(np.float32)
                if data_format == "NCHW":
                    x = x.transpose(0, 3, 1, 2)
                run = lambda: tf_ops.conv2d(x, w, 1, "SAME", data_format=data_format).numpy()  # noqa: E731
                fast = run()
                previous = tf_ops.set_exact_mode(True)
                try:
                    exact = run()
                finally:
                    tf_ops.set_exact_mode(previous)
                zeros = exact == 0
                self.assertGreater(np.count_nonzero(zeros), 1000)
                np.testing.assert_array_equal(fast[zeros], 0.0)
                self.assertGreater(np.count_nonzero(fast != exact), 0, "Winograd did not run")

    def test_set_exact_mode_takes_a_bool(self):
        with self.assertRaisesRegex(TypeError, "True or False"):
            tf_ops.set_exact_mode(1)

    def test_environment_variable_turns_exact_mode_on(self):
        code = "import tf_ops; print(tf_ops.exact_mode())"
        for value, expected in (("1", "True"), ("0", "False")):
            env = dict(os.environ, TF_OPS_EXACT=value, TF_CPP_MIN_LOG_LEVEL="2")
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 timeout=300, cwd=os.path.dirname(os.path.abspath(__file__)))
            self.assertEqual(out.stdout.strip().splitlines()[-1], expected, out.stderr[-2000:])


if __name__ == "__main__":
    tf.test.main()
