"""Malformed inputs: every op of the family must reject them with a TensorFlow error of the
right class and a message that names the offending value, and must never crash.

The cases follow the error lists of TensorFlow's kernels (tf-semantics.md, section 3) as
they apply to our ops, which deliberately accept NCHW, dilations (depthwise too), grouped
filters, unequal strides (depthwise too) and EXPLICIT padding on CPU. Huge strides,
dilations and paddings must give an error or the correct result. The last class covers the
Python-level argument checks of the public functions in tf_ops/ops.py.
"""
import re

import numpy as np
import tensorflow as tf

import common
import tf_ops
from tf_ops import reference

IAE = tf.errors.InvalidArgumentError
UNIMPLEMENTED = tf.errors.UnimplementedError

KINDS = list(common.KINDS)
BACKPROP_KINDS = [k for k in KINDS if k not in ("conv2d", "depthwise")]
NON_DEPTHWISE = [k for k in KINDS if not common.is_depthwise(k)]
DEPTHWISE = [k for k in KINDS if common.is_depthwise(k)]
FORMATS = ["NHWC", "NCHW"]

# The op name each kernel puts in front of its shape messages.
LABELS = {
    "conv2d": "Conv2D",
    "backprop_input": "Conv2DBackpropInput",
    "backprop_input_v2": "Conv2DBackpropInputV2",
    "backprop_filter": "Conv2DBackpropFilter",
    "backprop_filter_v2": "Conv2DBackpropFilterV2",
    "depthwise": "DepthwiseConv2dNative",
    "depthwise_backprop_input": "DepthwiseConv2dNativeBackpropInput",
    "depthwise_backprop_filter": "DepthwiseConv2dNativeBackpropFilter",
}
# Tensors each kind reads (x: input, w: filter, dy: out_backprop) and which one, if any,
# is given as an int32 sizes vector.
USES = {
    "conv2d": ("x", "w"),
    "backprop_input": ("w", "dy"),
    "backprop_input_v2": ("x", "w", "dy"),
    "backprop_filter": ("x", "dy"),
    "backprop_filter_v2": ("x", "w", "dy"),
    "depthwise": ("x", "w"),
    "depthwise_backprop_input": ("w", "dy"),
    "depthwise_backprop_filter": ("x", "dy"),
}
SIZES_OF = {
    "backprop_input": "x",
    "depthwise_backprop_input": "x",
    "backprop_filter": "w",
    "depthwise_backprop_filter": "w",
}


def batch_depth_error(kind):
    """TensorFlow's Conv2D and Conv2DBackpropInput report batch/depth strides and dilations
    as Unimplemented, every other op as InvalidArgument."""
    return UNIMPLEMENTED if kind in ("conv2d", "backprop_input", "backprop_input_v2") else IAE


def base(kind, fmt="NHWC"):
    """A valid configuration: N=2, 6x6, C=4, 3x3 filter, SAME, stride 1."""
    if common.is_depthwise(kind):
        filter_shape, k = [3, 3, 4, 2], 8
    else:
        filter_shape, k = [3, 3, 4, 6], 6
    nchw = fmt == "NCHW"
    return dict(
        x_shape=[2, 4, 6, 6] if nchw else [2, 6, 6, 4],
        filter_shape=filter_shape,
        y_shape=[2, k, 6, 6] if nchw else [2, 6, 6, k],
        strides=[1, 1, 1, 1],
        dilations=[1, 1, 1, 1],
        padding="SAME",
        explicit_paddings=[],
        data_format=fmt,
    )


def spatial(fmt, h, w, fill=1):
    """A 4-value attribute list with (h, w) at the spatial positions of `fmt`."""
    return [fill, fill, h, w] if fmt == "NCHW" else [fill, h, w, fill]


def _array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == tf.int32:
        return rng.integers(-3, 4, size=shape).astype(np.int32)
    return rng.uniform(-1, 1, size=shape).astype(dtype.as_numpy_dtype)


def run(kind, cfg, dtype=tf.float32, sizes=None):
    """Runs our op `kind` on `cfg`; `sizes` replaces the int32 sizes vector (input_sizes or
    filter_sizes), which otherwise comes from cfg's x_shape or filter_shape."""
    lib = tf_ops.load_library()
    attrs = {k: cfg[k] for k in ("strides", "padding", "explicit_paddings", "data_format",
                                 "dilations")}
    shape_keys = {"x": "x_shape", "w": "filter_shape", "dy": "y_shape"}
    t = {}
    for i, name in enumerate(USES[kind]):
        t[name] = tf.constant(_array(cfg[shape_keys[name]], dtype, i), dtype=dtype)
    if kind in SIZES_OF:
        value = sizes if sizes is not None else cfg[shape_keys[SIZES_OF[kind]]]
        t["sizes"] = tf.constant(value, dtype=tf.int32)
    ops = {
        "conv2d": lambda: lib.tf_ops_conv2d(input=t["x"], filter=t["w"], **attrs),
        "backprop_input": lambda: lib.tf_ops_conv2d_backprop_input(
            input_sizes=t["sizes"], filter=t["w"], out_backprop=t["dy"], **attrs),
        "backprop_input_v2": lambda: lib.tf_ops_conv2d_backprop_input_v2(
            input=t["x"], filter=t["w"], out_backprop=t["dy"], **attrs),
        "backprop_filter": lambda: lib.tf_ops_conv2d_backprop_filter(
            input=t["x"], filter_sizes=t["sizes"], out_backprop=t["dy"], **attrs),
        "backprop_filter_v2": lambda: lib.tf_ops_conv2d_backprop_filter_v2(
            input=t["x"], filter=t["w"], out_backprop=t["dy"], **attrs),
        "depthwise": lambda: lib.tf_ops_depthwise_conv2d_native(
            input=t["x"], filter=t["w"], **attrs),
        "depthwise_backprop_input": lambda: lib.tf_ops_depthwise_conv2d_native_backprop_input(
            input_sizes=t["sizes"], filter=t["w"], out_backprop=t["dy"], **attrs),
        "depthwise_backprop_filter": lambda: lib.tf_ops_depthwise_conv2d_native_backprop_filter(
            input=t["x"], filter_sizes=t["sizes"], out_backprop=t["dy"], **attrs),
    }
    return ops[kind]().numpy()


def lst(values):
    """The regex of a list as our messages print it: [1, 2, 3]."""
    return re.escape("[" + ", ".join(str(v) for v in values) + "]")


def shp(values):
    """The regex of a TensorShape as TensorFlow prints it: [1,2,3]."""
    return re.escape("[" + ",".join(str(v) for v in values) + "]")


def reference_result(kind, cfg, dtype=tf.float64, seed=0):
    """(ours, reference) for a valid cfg built with common.make_config."""
    arrays = common.make_inputs(np.random.default_rng(seed), cfg, dtype)
    return common.run_ours(kind, cfg, arrays, dtype), common.run_reference(kind, cfg, arrays)


class ErrorTestCase(tf.test.TestCase):

    def assertOpError(self, kind, cfg, error, regex, dtype=tf.float32, sizes=None):
        what = f"{kind} {dtype.name} {cfg} sizes={sizes}"
        with self.assertRaisesRegex(error, regex, msg=what):
            run(kind, cfg, dtype, sizes)

    def assertErrorOrEqual(self, fn, expected, regex, what):
        """The op must either raise InvalidArgumentError matching `regex` (which names the
        offending value) or return `expected` exactly (shape and values)."""
        try:
            result = fn()
        except IAE as e:
            self.assertRegex(str(e), regex, what)
            return "error"
        self.assertAllEqual(np.asarray(result).shape, np.asarray(expected).shape, what)
        self.assertAllClose(result, expected, rtol=1e-6, atol=1e-6, msg=what)
        return "result"


class AttributeErrorsTest(ErrorTestCase):
    """strides, dilations and explicit_paddings, checked for every op in both layouts."""

    def test_strides_of_wrong_length(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for strides in ([1, 1, 1], [1, 1], [], [1, 1, 1, 1, 1]):
                    cfg = dict(base(kind, fmt), strides=strides)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "Sliding window strides field must specify 4 dimensions, got strides="
                        + lst(strides))

    def test_batch_and_depth_strides(self):
        for kind in KINDS:
            for fmt in FORMATS:
                c = 1 if fmt == "NCHW" else 3
                for index in (0, c):
                    strides = [1, 1, 1, 1]
                    strides[index] = 2
                    cfg = dict(base(kind, fmt), strides=strides)
                    self.assertOpError(
                        kind, cfg, batch_depth_error(kind),
                        "does not yet support strides in the batch and depth dimensions, got "
                        f"strides={lst(strides)} with data_format={fmt}")

    def test_depth_stride_position_follows_data_format(self):
        # [1, 1, 1, 2] is a depth stride in NHWC but a column stride in NCHW: accepted.
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            filter_shape = [3, 3, 4, 2] if depthwise else [3, 3, 2, 6]
            cfg = common.make_config("NCHW", 2, 5, 7, 4, filter_shape, (1, 2), (1, 1), "SAME",
                                     depthwise=depthwise)
            self.assertEqual(cfg["strides"], [1, 1, 1, 2])
            ours, ref = reference_result(kind, cfg)
            self.assertLessEqual(common.max_error(ours, ref), common.TOLERANCE[tf.float64], kind)
            nhwc = dict(base(kind, "NHWC"), strides=[1, 1, 1, 2])
            self.assertOpError(kind, nhwc, batch_depth_error(kind),
                               r"got strides=\[1, 1, 1, 2\] with data_format=NHWC")

    def test_zero_and_negative_strides(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for h, w in ((0, 1), (1, 0), (-1, 1), (1, -3), (0, 0)):
                    strides = spatial(fmt, h, w)
                    cfg = dict(base(kind, fmt), strides=strides)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "Row and column strides should be larger than 0, got strides="
                        + lst(strides))

    def test_batch_depth_check_comes_before_sign_check(self):
        # A negative batch stride is a batch stride first.
        for kind in KINDS:
            cfg = dict(base(kind), strides=[-1, 1, 1, 1])
            self.assertOpError(kind, cfg, batch_depth_error(kind),
                               r"batch and depth dimensions, got strides=\[-1, 1, 1, 1\]")

    def test_dilations_of_wrong_length(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for dilations in ([1, 1, 1], [2, 2], [], [1, 1, 1, 1, 1]):
                    cfg = dict(base(kind, fmt), dilations=dilations)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "Sliding window dilations field must specify 4 dimensions, got "
                        "dilations=" + lst(dilations))

    def test_batch_and_depth_dilations(self):
        for kind in KINDS:
            for fmt in FORMATS:
                c = 1 if fmt == "NCHW" else 3
                for index in (0, c):
                    for value in (2, 0):
                        dilations = [1, 1, 1, 1]
                        dilations[index] = value
                        cfg = dict(base(kind, fmt), dilations=dilations)
                        self.assertOpError(
                            kind, cfg, batch_depth_error(kind),
                            "does not yet support dilations in the batch and depth dimensions, "
                            f"got dilations={lst(dilations)} with data_format={fmt}")

    def test_zero_and_negative_dilations(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for h, w in ((0, 1), (1, 0), (-2, 1), (1, -1)):
                    dilations = spatial(fmt, h, w)
                    cfg = dict(base(kind, fmt), dilations=dilations)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "Dilated rates should be larger than 0, got dilations=" + lst(dilations))

    def test_explicit_paddings_of_wrong_count(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for pads in ([], [0, 0, 1, 1, 1, 1], [0] * 10, [1]):
                    cfg = dict(base(kind, fmt), padding="EXPLICIT", explicit_paddings=pads)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "explicit_paddings attribute must contain 8 values, but got: "
                        f"{len(pads)} \\({lst(pads)}\\)")

    def test_negative_explicit_paddings(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for index in range(8):
                    pads = [0] * 8
                    pads[index] = -1
                    cfg = dict(base(kind, fmt), padding="EXPLICIT", explicit_paddings=pads)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "All elements of explicit_paddings must be nonnegative, got "
                        "explicit_paddings=" + lst(pads))

    def test_nonzero_batch_and_depth_explicit_paddings(self):
        for kind in KINDS:
            for fmt in FORMATS:
                c = 1 if fmt == "NCHW" else 3
                for index in (0, 1, 2 * c, 2 * c + 1):
                    pads = [0] * 8
                    pads[index] = 1
                    cfg = dict(base(kind, fmt), padding="EXPLICIT", explicit_paddings=pads)
                    self.assertOpError(
                        kind, cfg, IAE,
                        "Nonzero explicit padding in the batch or depth dimensions is not "
                        f"supported, got explicit_paddings={lst(pads)} with data_format={fmt}")

    def test_explicit_padding_positions_follow_data_format(self):
        # Pads at positions 6 and 7 are depth pads in NHWC but column pads in NCHW.
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            filter_shape = [3, 2, 4, 2] if depthwise else [3, 2, 4, 3]
            cfg = common.make_config("NCHW", 2, 5, 6, 4, filter_shape, (1, 1), (1, 1), "EXPLICIT",
                                     (0, 1, 2, 1), depthwise)
            self.assertEqual(cfg["explicit_paddings"], [0, 0, 0, 0, 0, 1, 2, 1])
            ours, ref = reference_result(kind, cfg)
            self.assertLessEqual(common.max_error(ours, ref), common.TOLERANCE[tf.float64], kind)
            nhwc = dict(base(kind, "NHWC"), padding="EXPLICIT",
                        explicit_paddings=[0, 0, 0, 0, 0, 1, 2, 1])
            self.assertOpError(kind, nhwc, IAE,
                               r"Nonzero explicit padding in the batch or depth dimensions")

    def test_explicit_paddings_with_same_or_valid(self):
        for kind in KINDS:
            for fmt in FORMATS:
                for padding in ("SAME", "VALID"):
                    for pads in ([0] * 8, [0, 0, 1, 1, 1, 1, 0, 0], [1]):
                        cfg = dict(base(kind, fmt), padding=padding, explicit_paddings=pads)
                        self.assertOpError(
                            kind, cfg, IAE,
                            "explicit_paddings attribute must be empty if the padding attribute "
                            f"is not EXPLICIT, got explicit_paddings={lst(pads)} with "
                            f"padding={padding}")

    def test_attribute_values_outside_the_op_definition(self):
        for kind in KINDS:
            self.assertOpError(kind, dict(base(kind), data_format="NCDHW"), IAE,
                               r"'data_format' of \"NCDHW\" is not in the list of allowed values")
            self.assertOpError(kind, dict(base(kind), padding="FULL"), IAE,
                               r"'padding' of \"FULL\" is not in the list of allowed values")

    def test_every_dtype_kernel_validates(self):
        # Each registered (op, dtype) kernel is its own class instance: check one attribute
        # and one shape error through every one of them.
        for kind in KINDS:
            for dtype in common.KINDS[kind]:
                self.assertOpError(kind, dict(base(kind), strides=[1, 1, 1]), IAE,
                                   r"got strides=\[1, 1, 1\]", dtype=dtype)
                cfg = dict(base(kind), x_shape=[2, 2, 2, 4], padding="VALID",
                           filter_shape=[5, 5] + base(kind)["filter_shape"][2:])
                self.assertOpError(kind, cfg, IAE,
                                   r"Computed output size would be negative: -2 \[input_size: 2, "
                                   r"effective_filter_size: 5, stride: 1\]",
                                   dtype=dtype)


class RankErrorsTest(ErrorTestCase):

    RANKS = ([2, 6, 6], [2, 6, 6, 4, 1], [4], [])

    def test_input_rank(self):
        for kind in ("conv2d", "backprop_input_v2", "backprop_filter", "backprop_filter_v2",
                     "depthwise", "depthwise_backprop_filter"):
            for shape in self.RANKS:
                cfg = dict(base(kind), x_shape=shape)
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: input must be 4-dimensional, got shape "
                                   + shp(shape))

    def test_filter_rank(self):
        for kind in ("conv2d", "backprop_input", "backprop_input_v2", "backprop_filter_v2",
                     "depthwise", "depthwise_backprop_input"):
            for shape in ([3, 3, 4], [3, 3, 4, 6, 1], [1], []):
                cfg = dict(base(kind), filter_shape=shape)
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: filter must be 4-dimensional, got shape "
                                   + shp(shape))

    def test_out_backprop_rank(self):
        for kind in BACKPROP_KINDS:
            for shape in ([2, 6, 6], [2, 6, 6, 6, 1], [1], []):
                cfg = dict(base(kind), y_shape=shape)
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: out_backprop must be 4-dimensional, got "
                                   "shape " + shp(shape))

    def test_rank_errors_in_nchw(self):
        for kind in BACKPROP_KINDS:
            cfg = dict(base(kind, "NCHW"), y_shape=[2, 6, 6])
            self.assertOpError(kind, cfg, IAE,
                               r"out_backprop must be 4-dimensional, got shape \[2,6,6\]")
        for kind in ("conv2d", "depthwise"):
            cfg = dict(base(kind, "NCHW"), filter_shape=[1])
            self.assertOpError(kind, cfg, IAE, r"filter must be 4-dimensional, got shape \[1\]")


class SizesVectorErrorsTest(ErrorTestCase):
    """input_sizes / filter_sizes of the V1 backprop ops."""

    INPUT_KINDS = ("backprop_input", "depthwise_backprop_input")
    FILTER_KINDS = ("backprop_filter", "depthwise_backprop_filter")

    def test_sizes_not_a_vector(self):
        for kind, what in [(k, "input_sizes") for k in self.INPUT_KINDS] + \
                          [(k, "filter_sizes") for k in self.FILTER_KINDS]:
            for sizes, rank, shape in (([[2, 6], [6, 4]], 2, "[2,2]"), (4, 0, "[]"),
                                       ([[[2, 6, 6, 4]]], 3, "[1,1,4]")):
                self.assertOpError(kind, base(kind), IAE,
                                   f"{LABELS[kind]}: {what} input must be 1-dim, not {rank} "
                                   f"\\(shape {re.escape(shape)}\\)", sizes=sizes)

    def test_input_sizes_of_wrong_count(self):
        for sizes in ([2, 6, 6], [], [6], [2, 6, 6, 4, 1]):
            self.assertOpError(
                "backprop_input", base("backprop_input"), IAE,
                "Conv2DBackpropInput requires input_sizes to contain 4 values or 2 values, but "
                f"got: {len(sizes)} \\({lst(sizes)}\\)", sizes=sizes)
            self.assertOpError(
                "depthwise_backprop_input", base("depthwise_backprop_input"), IAE,
                "DepthwiseConv2dNativeBackpropInput requires input_sizes to contain 4 values, "
                f"but got: {len(sizes)} \\({lst(sizes)}\\)", sizes=sizes)

    def test_two_value_input_sizes_rejected_for_depthwise(self):
        for fmt in FORMATS:
            self.assertOpError(
                "depthwise_backprop_input", base("depthwise_backprop_input", fmt), IAE,
                r"DepthwiseConv2dNativeBackpropInput requires input_sizes to contain 4 values, "
                r"but got: 2 \(\[6, 6\]\)", sizes=[6, 6])

    def test_two_value_input_sizes_accepted_for_conv2d_backprop_input(self):
        # [H, W]: the batch comes from out_backprop, the depth from the filter (filter in-depth
        # times the number of groups is not knowable, so it is filter.shape[2]).
        for fmt in FORMATS:
            cfg = common.make_config(fmt, 3, 7, 5, 4, [3, 2, 4, 5], (2, 1), (1, 2), "SAME")
            arrays = common.make_inputs(np.random.default_rng(1), cfg, tf.float64)
            full = run_with_arrays("backprop_input", cfg, arrays, cfg["x_shape"])
            two = run_with_arrays("backprop_input", cfg, arrays, [7, 5])
            self.assertEqual(list(two.shape), cfg["x_shape"], fmt)
            self.assertAllEqual(two, full)
            ref = common.run_reference("backprop_input", cfg, arrays)
            self.assertLessEqual(common.max_error(two, ref), common.TOLERANCE[tf.float64], fmt)
            # Through conv2d_transpose's output_shape as well.
            out = tf_ops.conv2d_transpose(arrays["dy"], arrays["w"], [7, 5], strides=[2, 1],
                                          padding="SAME", data_format=fmt, dilations=[1, 2])
            self.assertAllEqual(out, full)

    def test_two_value_input_sizes_still_validated(self):
        cfg = base("backprop_input")
        self.assertOpError("backprop_input", cfg, IAE,
                           r"invalid input_sizes \[2, -6, 6, 4\]: .*-6", sizes=[-6, 6])
        self.assertOpError("backprop_input", cfg, IAE,
                           r"Size of out_backprop doesn't match computed: actual = 6, computed = 5",
                           sizes=[5, 6])
        # 2 * (2**31 - 1)**2 * 4 elements overflow int64.
        self.assertOpError("backprop_input", cfg, IAE,
                           r"invalid input_sizes \[2, 2147483647, 2147483647, 4\]: .*overflow",
                           sizes=[2**31 - 1, 2**31 - 1])

    def test_negative_input_sizes(self):
        for kind in self.INPUT_KINDS:
            for fmt in FORMATS:
                for index in range(4):
                    sizes = list(base(kind, fmt)["x_shape"])
                    sizes[index] = -sizes[index]
                    self.assertOpError(kind, base(kind, fmt), IAE,
                                       f"{LABELS[kind]}: invalid input_sizes {lst(sizes)}: "
                                       f".*{-abs(sizes[index])}", sizes=sizes)

    def test_huge_input_sizes_overflowing_int64(self):
        big = 2**31 - 1
        for kind in self.INPUT_KINDS:
            for sizes in ([big] * 4, [big, big, big, 2], [2, big, big, big]):
                self.assertOpError(kind, base(kind), IAE,
                                   f"{LABELS[kind]}: invalid input_sizes {lst(sizes)}: .*overflow",
                                   sizes=sizes)

    def test_huge_but_representable_input_sizes(self):
        big = 2**31 - 1
        # 2 * big * 6 * 4 elements fit in int64; the geometry check rejects the shape before
        # anything is allocated.
        for kind in self.INPUT_KINDS:
            self.assertOpError(kind, base(kind), IAE,
                               r"Size of out_backprop doesn't match computed: actual = 6, "
                               f"computed = {big}", sizes=[2, big, 6, 4])
            # A depth that the filter cannot divide (or match), named in the message.
            regex = (f"input and filter must have the same depth: {big} vs 4"
                     if common.is_depthwise(kind) else
                     f"input depth must be evenly divisible by filter depth: {big} vs 4")
            self.assertOpError(kind, base(kind), IAE, regex, sizes=[2, 6, 6, big])

    def test_filter_sizes_of_wrong_count(self):
        for kind in self.FILTER_KINDS:
            for sizes in ([3, 3, 4], [3, 3], [], [3, 3, 4, 6, 1]):
                self.assertOpError(
                    kind, base(kind), IAE,
                    f"{LABELS[kind]} requires filter_sizes to contain 4 values, but got: "
                    f"{len(sizes)} \\({lst(sizes)}\\)", sizes=sizes)

    def test_negative_filter_sizes(self):
        for kind in self.FILTER_KINDS:
            for index in range(4):
                sizes = list(base(kind)["filter_shape"])
                sizes[index] = -1
                self.assertOpError(kind, base(kind), IAE,
                                   f"{LABELS[kind]}: invalid filter_sizes {lst(sizes)}: .*-1",
                                   sizes=sizes)

    def test_huge_filter_sizes(self):
        big = 2**31 - 1
        for kind in self.FILTER_KINDS:
            self.assertOpError(kind, base(kind), IAE,
                               f"invalid filter_sizes {lst([big] * 4)}: .*overflow",
                               sizes=[big] * 4)
            # Representable, but the window does not fit a VALID convolution.
            cfg = dict(base(kind), padding="VALID")
            sizes = [big, 1] + base(kind)["filter_shape"][2:]
            self.assertOpError(kind, cfg, IAE,
                               f"Computed output size would be negative: .*effective_filter_size: "
                               f"{big}", sizes=sizes)


class GeometryErrorsTest(ErrorTestCase):

    def test_batch_mismatch(self):
        for kind in BACKPROP_KINDS:
            for fmt in FORMATS:
                cfg = base(kind, fmt)
                cfg["y_shape"] = [3] + cfg["y_shape"][1:]
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: input and out_backprop must have the same "
                                   "batch size. Input batch: 2, outbackprop batch: 3")

    def test_out_depth_mismatch(self):
        for kind in BACKPROP_KINDS:
            for fmt in FORMATS:
                cfg = base(kind, fmt)
                c = 1 if fmt == "NCHW" else 3
                cfg["y_shape"][c] = 7 if common.is_depthwise(kind) else 5
                regex = (r"depth_multiplier \* in_depth not equal to out_depth: 2 \* 4 != 7"
                         if common.is_depthwise(kind) else
                         "filter and out_backprop must have the same out_depth: filter "
                         "out_depth 6, out_backprop depth 5")
                self.assertOpError(kind, cfg, IAE, f"{LABELS[kind]}: {regex}")

    def test_input_depth_not_divisible_by_filter_depth(self):
        for kind in NON_DEPTHWISE:
            for fmt in FORMATS:
                cfg = base(kind, fmt)
                cfg["x_shape"][1 if fmt == "NCHW" else 3] = 5
                cfg["filter_shape"] = [3, 3, 2, 6]
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: input depth must be evenly divisible by "
                                   "filter depth: 5 vs 2")

    def test_out_depth_not_divisible_by_groups(self):
        for kind in NON_DEPTHWISE:
            cfg = dict(base(kind), filter_shape=[3, 3, 2, 3], y_shape=[2, 6, 6, 3])
            self.assertOpError(kind, cfg, IAE,
                               "output depth must be evenly divisible by number of groups: 3 vs 2")

    def test_filter_in_depth_zero(self):
        for kind in NON_DEPTHWISE:
            for x_depth in (4, 0):
                cfg = base(kind)
                cfg["x_shape"][3] = x_depth
                cfg["filter_shape"] = [3, 3, 0, 6]
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: filter depth must be strictly greater than "
                                   "zero, but got 0")

    def test_depthwise_in_depth_mismatch(self):
        for kind in DEPTHWISE:
            for fmt in FORMATS:
                for filter_depth in (3, 8, 0):
                    cfg = dict(base(kind, fmt), filter_shape=[3, 3, filter_depth, 2])
                    self.assertOpError(kind, cfg, IAE,
                                       f"{LABELS[kind]}: input and filter must have the same "
                                       f"depth: 4 vs {filter_depth}")

    def test_out_backprop_spatial_mismatch(self):
        for kind in BACKPROP_KINDS:
            for fmt in FORMATS:
                h, w = (2, 3) if fmt == "NCHW" else (1, 2)
                for dim, actual in ((h, 5), (w, 7), (h, 0)):
                    cfg = base(kind, fmt)
                    cfg["y_shape"][dim] = actual
                    self.assertOpError(
                        kind, cfg, IAE,
                        f"{LABELS[kind]}: Size of out_backprop doesn't match computed: actual = "
                        f"{actual}, computed = 6 spatial_dim: {dim} input: 6 filter: 3 output: "
                        f"{actual} stride: 1 dilation: 1")

    def test_out_backprop_mismatch_with_strides_and_dilations(self):
        # in=9, k=3, dilation 2 (eff 5), stride 2, VALID: out = 3.
        for kind in BACKPROP_KINDS:
            cfg = base(kind)
            cfg.update(x_shape=[2, 9, 6, 4], strides=[1, 2, 1, 1], dilations=[1, 2, 1, 1],
                       padding="VALID")
            cfg["y_shape"] = [2, 4, 4, cfg["y_shape"][3]]
            self.assertOpError(kind, cfg, IAE,
                               r"actual = 4, computed = 3 spatial_dim: 1 input: 9 filter: 3 "
                               r"output: 4 stride: 2 dilation: 2")

    def test_valid_negative_output_size(self):
        for kind in KINDS:
            for fmt in FORMATS:
                cfg = base(kind, fmt)
                cfg["x_shape"] = [2, 4, 2, 2] if fmt == "NCHW" else [2, 2, 2, 4]
                cfg["filter_shape"] = [5, 5] + cfg["filter_shape"][2:]
                cfg["padding"] = "VALID"
                self.assertOpError(kind, cfg, IAE,
                                   f"{LABELS[kind]}: Computed output size would be negative: -2 "
                                   r"\[input_size: 2, effective_filter_size: 5, stride: 1\]")

    def test_negative_output_size_from_dilation_and_explicit_padding(self):
        for kind in KINDS:
            # eff = (3 - 1) * 4 + 1 = 9 > 6.
            cfg = dict(base(kind), padding="VALID", dilations=[1, 4, 1, 1])
            self.assertOpError(kind, cfg, IAE,
                               r"Computed output size would be negative: -2 \[input_size: 6, "
                               r"effective_filter_size: 9, stride: 1\]")
            # 6 + 1 + 0 - 9 + 1 = -1.
            cfg = dict(base(kind), padding="EXPLICIT", dilations=[1, 4, 1, 1],
                       explicit_paddings=[0, 0, 1, 0, 0, 0, 0, 0])
            self.assertOpError(kind, cfg, IAE,
                               r"Computed output size would be negative: -1 \[input_size: 6, "
                               r"effective_filter_size: 9, stride: 1\]")

    def test_cases_tensorflow_cpu_refuses_are_accepted(self):
        # TensorFlow's CPU kernels refuse NCHW, dilations, grouped filters, unequal depthwise
        # strides and (depthwise) EXPLICIT padding; our validation must let them through, all
        # at once, with the reference result.
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            filter_shape = [3, 2, 3, 2] if depthwise else [3, 2, 1, 6]  # grouped: 3 groups
            for fmt in FORMATS:
                for padding, pads in (("EXPLICIT", (1, 0, 2, 1)), ("SAME", (0, 0, 0, 0)),
                                      ("VALID", (0, 0, 0, 0))):
                    cfg = common.make_config(fmt, 2, 9, 8, 3, filter_shape, (2, 3), (2, 1),
                                             padding, pads, depthwise)
                    ours, ref = reference_result(kind, cfg)
                    self.assertLessEqual(common.max_error(ours, ref),
                                         common.TOLERANCE[tf.float64], f"{kind} {fmt} {padding}")

    def test_valid_output_size_truncates_toward_zero(self):
        # in=1, k=4, stride 2, VALID: (1 - 4 + 2) / 2 = 0 in C++, an empty output, not an
        # error (as in TensorFlow).
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            cfg = common.make_config("NHWC", 1, 1, 3, 2, [4, 1, 2, 1], (2, 2), (1, 1), "VALID",
                                     depthwise=depthwise)
            self.assertEqual(cfg["y_shape"][1], 0)
            ours, ref = reference_result(kind, cfg)
            self.assertAllEqual(ours.shape, ref.shape)
            self.assertAllEqual(ours, np.zeros_like(ref))


class HugeValuesTest(ErrorTestCase):
    """Strides, dilations and explicit paddings near the int64 limit: an error naming the
    value, or the correct result; never a crash, a hang or a wrong result."""

    def test_huge_strides(self):
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            for stride in (2**31, 2**62, 2**63 - 1):
                for padding in ("SAME", "VALID"):
                    for strides_hw in ((stride, stride), (stride, 1), (1, stride)):
                        cfg = common.make_config("NHWC", 2, 5, 5, 2, [3, 3, 2, 2], strides_hw,
                                                 (1, 1), padding, depthwise=depthwise)
                        arrays = common.make_inputs(np.random.default_rng(2), cfg, tf.float64)
                        ref = common.run_reference(kind, cfg, arrays)
                        what = f"{kind} strides={cfg['strides']} {padding}"
                        outcome = self.assertErrorOrEqual(
                            lambda: common.run_ours(kind, cfg, arrays, tf.float64), ref,
                            f"overflow.*stride: {stride}", what)
                        # Every output size here fits in int64, so a result is due.
                        self.assertEqual(outcome, "result", what)

    def test_stride_max_int64_valid_gives_the_single_output_row(self):
        # (6 - 3 + (2**63 - 1)) would overflow int64; the output size, 1, does not.
        cfg = common.make_config("NHWC", 2, 6, 5, 2, [3, 3, 2, 2], (2**63 - 1, 1), (1, 1), "VALID")
        self.assertEqual(cfg["y_shape"][1], 1)
        arrays = common.make_inputs(np.random.default_rng(3), cfg, tf.float64)
        for kind in ("conv2d", "backprop_input", "backprop_filter"):
            self.assertAllClose(common.run_ours(kind, cfg, arrays, tf.float64),
                                common.run_reference(kind, cfg, arrays), atol=1e-12)

    def test_huge_dilations(self):
        # A 2x2 filter with dilation 2**62, SAME: out = in and every tap but the first falls in
        # the padding, which is 2**61 on top (before); the first tap reads row o - 2**61 < 0.
        # So the result is exactly zero for every op.
        for kind in KINDS:
            depthwise = common.is_depthwise(kind)
            cfg = dict(base(kind), x_shape=[1, 5, 5, 2], filter_shape=[2, 2, 2, 2],
                       dilations=[1, 2**62, 2**62, 1])
            cfg["y_shape"] = [1, 5, 5, 4 if depthwise else 2]
            out_shape = (cfg["y_shape"] if kind in ("conv2d", "depthwise") else
                         cfg["x_shape"] if "input" in kind else cfg["filter_shape"])
            self.assertErrorOrEqual(lambda: run(kind, cfg, tf.float64), np.zeros(out_shape),
                                    "4611686018427387904", f"{kind} dilation 2**62 SAME")
            # 3 taps: (3 - 1) * 2**62 + 1 overflows int64.
            cfg3 = dict(cfg, filter_shape=[3, 3, 2, 2])
            self.assertOpError(kind, cfg3, IAE,
                               r"Convolution sizes overflow 64-bit arithmetic \[input_size: 5, "
                               r"filter_size: 3, dilation: 4611686018427387904")
            # VALID: 5 - (2**62 + 1) + 1 < 0.
            self.assertOpError(kind, dict(cfg, padding="VALID"), IAE,
                               r"Computed output size would be negative: .*effective_filter_size: "
                               r"4611686018427387905")
            # The largest dilation.
            cfg_max = dict(cfg, dilations=[1, 2**63 - 1, 1, 1])
            self.assertOpError(kind, cfg_max, IAE, r"dilation: 9223372036854775807")

    def test_huge_explicit_paddings_with_huge_stride(self):
        # 1x1 input and filter, pad_top p, stride p: out rows = (1 + p - 1 + p) / p = 2; row 0
        # reads the padding, row 1 reads input row 0. x = 3, w = 5, dy = [7, 11].
        lib = tf_ops.load_library()
        for p in (2**61, 2**62):
            attrs = dict(strides=[1, p, 1, 1], padding="EXPLICIT",
                         explicit_paddings=[0, 0, p, 0, 0, 0, 0, 0])
            for dtype in (tf.float32, tf.float64):
                x = tf.constant(3, dtype, [1, 1, 1, 1])
                w = tf.constant(5, dtype, [1, 1, 1, 1])
                dy = tf.constant([7, 11], dtype, [1, 2, 1, 1])
                calls = [
                    (lambda: lib.tf_ops_conv2d(x, w, **attrs), [[[[0]], [[15]]]]),
                    (lambda: lib.tf_ops_depthwise_conv2d_native(x, w, **attrs), [[[[0]], [[15]]]]),
                    (lambda: lib.tf_ops_conv2d_backprop_input([1, 1, 1, 1], w, dy, **attrs),
                     [[[[55]]]]),
                    (lambda: lib.tf_ops_conv2d_backprop_input_v2(x, w, dy, **attrs), [[[[55]]]]),
                    (lambda: lib.tf_ops_depthwise_conv2d_native_backprop_input(
                        [1, 1, 1, 1], w, dy, **attrs), [[[[55]]]]),
                    (lambda: lib.tf_ops_conv2d_backprop_filter(x, [1, 1, 1, 1], dy, **attrs),
                     [[[[33]]]]),
                    (lambda: lib.tf_ops_conv2d_backprop_filter_v2(x, w, dy, **attrs), [[[[33]]]]),
                    (lambda: lib.tf_ops_depthwise_conv2d_native_backprop_filter(
                        x, [1, 1, 1, 1], dy, **attrs), [[[[33]]]]),
                ]
                for i, (call, expected) in enumerate(calls):
                    what = f"call {i} pad=stride={p} {dtype.name}"
                    outcome = self.assertErrorOrEqual(
                        call, np.array(expected, dtype.as_numpy_dtype),
                        f"overflow.*stride: {p}, padding: {p}, 0", what)
                    # The output size, 2, fits in int64: the result is due.
                    self.assertEqual(outcome, "result", what)

    def test_huge_explicit_paddings_overflow(self):
        p = 2**62
        for kind in KINDS:
            # 6 + 2**62 + 2**62 overflows int64.
            cfg = dict(base(kind), padding="EXPLICIT", explicit_paddings=[0, 0, p, p, 0, 0, 0, 0])
            self.assertOpError(kind, cfg, IAE,
                               r"Convolution sizes overflow 64-bit arithmetic .*padding: "
                               r"4611686018427387904, 4611686018427387904")
            cfg = dict(base(kind), padding="EXPLICIT",
                       explicit_paddings=[0, 0, 0, 2**63 - 1, 0, 0, 0, 0])
            self.assertOpError(kind, cfg, IAE, r"padding: 0, 9223372036854775807")

    def test_huge_explicit_paddings_too_many_elements(self):
        q = 2**61
        for kind in KINDS:
            # rows = cols = 2**62 + 4: the output would have more than 2**63 - 1 elements.
            cfg = dict(base(kind), padding="EXPLICIT", explicit_paddings=[0, 0, q, q, q, q, 0, 0])
            if kind in ("conv2d", "depthwise"):
                regex = (r"Convolution tensor of shape \[2, 4611686018427387908, "
                         r"4611686018427387908, \d+\] would have more than 2\*\*63 - 1 elements")
            else:
                regex = r"would have more than 2\*\*63 - 1 elements"
            self.assertOpError(kind, cfg, IAE, regex)

    def test_huge_explicit_padding_output_too_large_to_allocate(self):
        # 1x1 input, pad_top 2**62, stride 1: 2**62 + 1 output rows, a count that fits int64
        # but not in bytes.
        p = 2**62
        for kind in ("conv2d", "depthwise"):
            for dtype in common.KINDS[kind]:
                cfg = dict(base(kind), x_shape=[1, 1, 1, 1], filter_shape=[1, 1, 1, 1],
                           padding="EXPLICIT", explicit_paddings=[0, 0, p, 0, 0, 0, 0, 0])
                self.assertOpError(kind, cfg, IAE,
                                   r"output of shape \[1,4611686018427387905,1,1\] is too large "
                                   r"to allocate", dtype=dtype)

    def test_huge_explicit_padding_out_backprop_mismatch(self):
        p = 2**62
        for kind in BACKPROP_KINDS:
            # 2**62 + 1 output rows; every tensor's element count still fits int64.
            cfg = dict(base(kind), x_shape=[1, 1, 1, 1], filter_shape=[1, 1, 1, 1],
                       y_shape=[1, 1, 1, 1], padding="EXPLICIT",
                       explicit_paddings=[0, 0, p, 0, 0, 0, 0, 0])
            self.assertOpError(kind, cfg, IAE,
                               r"Size of out_backprop doesn't match computed: actual = 1, "
                               f"computed = {p + 1}")
            # With 6x6 inputs the out_backprop the attributes imply could not even exist.
            cfg = dict(base(kind), padding="EXPLICIT", explicit_paddings=[0, 0, p, 0, 0, 0, 0, 0])
            self.assertOpError(kind, cfg, IAE,
                               f"Convolution tensor of shape \\[2, {p + 4}, 4, \\d+\\] would have "
                               r"more than 2\*\*63 - 1 elements")


def run_with_arrays(kind, cfg, arrays, sizes):
    """Our op on given arrays, with `sizes` as its input_sizes/filter_sizes vector."""
    lib = tf_ops.load_library()
    attrs = {k: cfg[k] for k in ("strides", "padding", "explicit_paddings", "data_format",
                                 "dilations")}
    w = tf.constant(arrays["w"])
    dy = tf.constant(arrays["dy"])
    assert kind == "backprop_input"
    return lib.tf_ops_conv2d_backprop_input(tf.constant(sizes, tf.int32), w, dy, **attrs).numpy()


class PythonArgumentErrorsTest(tf.test.TestCase):
    """The argument checks of tf_ops/ops.py, before any kernel runs."""

    def _calls(self, padding):
        """Every public function, called with `padding` and otherwise valid arguments."""
        x = tf.ones([1, 4, 4, 2])
        w = tf.ones([3, 3, 2, 2])
        dy = tf.ones([1, 4, 4, 2])
        s = [1, 1, 1, 1]
        return {
            "conv2d": lambda: tf_ops.conv2d(x, w, s, padding),
            "conv2d_backprop_input": lambda: tf_ops.conv2d_backprop_input(
                [1, 4, 4, 2], w, dy, s, padding),
            "conv2d_backprop_input_v2": lambda: tf_ops.conv2d_backprop_input_v2(
                x, w, dy, s, padding),
            "conv2d_transpose": lambda: tf_ops.conv2d_transpose(dy, w, [1, 4, 4, 2], s, padding),
            "conv2d_backprop_filter": lambda: tf_ops.conv2d_backprop_filter(
                x, [3, 3, 2, 2], dy, s, padding),
            "conv2d_backprop_filter_v2": lambda: tf_ops.conv2d_backprop_filter_v2(
                x, w, dy, s, padding),
            "depthwise_conv2d_native": lambda: tf_ops.depthwise_conv2d_native(
                x, tf.ones([3, 3, 2, 1]), s, padding),
            "depthwise_conv2d_backprop_input": lambda: tf_ops.depthwise_conv2d_backprop_input(
                [1, 4, 4, 2], tf.ones([3, 3, 2, 1]), dy, s, padding),
            "depthwise_conv2d_backprop_filter": lambda: tf_ops.depthwise_conv2d_backprop_filter(
                x, [3, 3, 2, 1], dy, s, padding),
        }

    def test_valid_calls_run(self):
        # The argument-error tests below must fail because of the argument alone.
        for name, call in self._calls("SAME").items():
            self.assertEqual(len(call().shape), 4, name)
        for name, call in self._calls([[0, 0], [1, 1], [1, 1], [0, 0]]).items():
            self.assertEqual(len(call().shape), 4, name)

    def test_padding_explicit_string(self):
        for padding in ("EXPLICIT", b"EXPLICIT"):
            for name, call in self._calls(padding).items():
                with self.assertRaisesRegex(
                        ValueError,
                        r"'EXPLICIT' is not a valid value for `padding`. To use explicit "
                        r"padding, `padding` must be a list.", msg=name):
                    call()

    def test_padding_list_of_wrong_size(self):
        for padding in ([[0, 0], [1, 1], [1, 1]], [[0, 0]] * 5, []):
            for name, call in self._calls(padding).items():
                with self.assertRaisesRegex(
                        ValueError,
                        "When padding is a list, it must be of size 4. Received: "
                        f"padding={re.escape(str(padding))} of size {len(padding)}", msg=name):
                    call()

    def test_padding_bad_pair(self):
        for padding, index, pair in (([[0, 0], [1], [1, 1], [0, 0]], 1, "[1]"),
                                     ([[0, 0], [1, 1], [1, 1, 1], [0, 0]], 2, "[1, 1, 1]"),
                                     ([0, 1, 1, 0], 0, "0")):
            for name, call in self._calls(padding).items():
                with self.assertRaisesRegex(
                        ValueError,
                        r"When `padding` is a list, each element of `padding` must be a "
                        f"list/tuple of size 2. Received: padding=.* with element at index "
                        f"{index}: {re.escape(pair)}", msg=name):
                    call()

    def test_padding_unknown_string(self):
        for name, call in self._calls("FULL").items():
            with self.assertRaisesRegex(
                    ValueError, r"`padding` must be 'SAME', 'VALID' or a list of 4 pairs. "
                                r"Received: padding='FULL'", msg=name):
                call()

    def test_padding_list_with_batch_padding_reaches_the_kernel(self):
        for name, call in self._calls([[1, 0], [1, 1], [1, 1], [0, 0]]).items():
            with self.assertRaisesRegex(
                    IAE, r"Nonzero explicit padding in the batch or depth dimensions is not "
                         r"supported, got explicit_paddings=\[1, 0, 1, 1, 1, 1, 0, 0\]", msg=name):
                call()

    def test_conv2d_transpose_strides_of_length_3(self):
        dy = tf.ones([1, 4, 4, 2])
        w = tf.ones([3, 3, 2, 2])
        for strides in ([2, 2, 2], (1, 2, 2)):
            with self.assertRaisesRegex(
                    ValueError, r"strides should be of length 1, 2 or 4. Received: strides="
                                f"{re.escape(str(list(strides)))} of length 3"):
                tf_ops.conv2d_transpose(dy, w, [1, 8, 8, 2], strides=strides)
        with self.assertRaisesRegex(ValueError,
                                    r"dilations should be of length 1, 2 or 4. "
                                    r"Received: dilations=\[1, 1, 1, 1, 1\] of length 5"):
            tf_ops.conv2d_transpose(dy, w, [1, 4, 4, 2], strides=1, dilations=[1, 1, 1, 1, 1])

    def test_conv2d_sequence_lengths(self):
        x = tf.ones([1, 4, 4, 2])
        w = tf.ones([3, 3, 2, 2])
        with self.assertRaisesRegex(ValueError, r"strides should be of length 1, 2 or 4. "
                                                r"Received: strides=\[1, 1, 1\] of length 3"):
            tf_ops.conv2d(x, w, [1, 1, 1], "SAME")
        with self.assertRaisesRegex(ValueError, r"dilations should be of length 1, 2 or 4. "
                                                r"Received: dilations=\[\] of length 0"):
            tf_ops.conv2d(x, w, 1, "SAME", dilations=[])
        # Length 2 goes to the spatial positions of the format; NCHW is [1, 1, h, w].
        y = tf_ops.conv2d(tf.ones([1, 2, 8, 8]), w, [2, 4], "VALID", data_format="NCHW")
        self.assertEqual(y.shape, (1, 2, 3, 2))

    def test_raw_style_functions_take_strides_as_given(self):
        # conv2d_backprop_input & co. do not expand strides: 3 values reach the kernel, which
        # names them; None is refused in Python.
        w = tf.ones([3, 3, 2, 2])
        dy = tf.ones([1, 4, 4, 2])
        with self.assertRaisesRegex(IAE, r"got strides=\[1, 1, 1\]"):
            tf_ops.conv2d_backprop_input([1, 4, 4, 2], w, dy, [1, 1, 1], "SAME")
        with self.assertRaisesRegex(ValueError, "strides must be given as a list of 4 integers"):
            tf_ops.conv2d_backprop_input([1, 4, 4, 2], w, dy, None, "SAME")
        with self.assertRaisesRegex(ValueError, "dilations must be given as a list of 4 integers"):
            tf_ops.conv2d_backprop_filter(tf.ones([1, 4, 4, 2]), [3, 3, 2, 2], dy, [1, 1, 1, 1],
                                          "SAME", dilations=None)

    def test_filter_and_filters_aliases(self):
        w = tf.ones([3, 3, 2, 2])
        dy = tf.ones([1, 4, 4, 2])
        with self.assertRaisesRegex(ValueError, "Cannot specify both 'filters' and 'filter'"):
            tf_ops.conv2d_backprop_input([1, 4, 4, 2], filter=w, out_backprop=dy,
                                         strides=[1, 1, 1, 1], padding="SAME", filters=w)
        a = tf_ops.conv2d_backprop_input([1, 4, 4, 2], filters=w, out_backprop=dy,
                                         strides=[1, 1, 1, 1], padding="SAME")
        b = tf_ops.conv2d_backprop_input([1, 4, 4, 2], filter=w, out_backprop=dy,
                                         strides=[1, 1, 1, 1], padding="SAME")
        self.assertAllEqual(a, b)

    def test_padding_list_matches_reference(self):
        x = np.random.default_rng(3).uniform(-1, 1, [1, 5, 6, 2])
        w = np.random.default_rng(4).uniform(-1, 1, [3, 2, 2, 3])
        y = tf_ops.conv2d(x, w, [1, 2], [[0, 0], [1, 2], [0, 1], [0, 0]])
        ref = reference.conv2d(x, w, [1, 1, 2, 1], "EXPLICIT", [0, 0, 1, 2, 0, 1, 0, 0])
        self.assertAllClose(y, ref, rtol=1e-12, atol=1e-12)


if __name__ == "__main__":
    tf.test.main()
