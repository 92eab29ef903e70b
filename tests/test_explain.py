"""tf_ops.explain, python -m tf_ops explain and TF_OPS_VERBOSE: the plan explain gives is the
one a call runs (checked against the verbose line of the same call, in one fresh process), names
a documented algorithm, follows the mode and the geometry (Winograd, pointwise, depthwise rows,
direct), and bad arguments raise InvalidArgumentError naming the value. The Python side
(op names, argument forms, messages, the line format) is also checked against a stand-in for
the library's TfOpsExplain."""
import contextlib
import ctypes
import dataclasses
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import _explain, _loader, _vocabulary

LINE = ("algorithm=space_to_depth pass=banded direction=forward dtype=float32 layout=NHWC isa=avx2 "
        "accuracy=direct workspace_bytes=4096 work_units=12 blocking=rows:4,cols:16")
WINOGRAD_ALGORITHMS = {"winograd", "winograd_space_to_depth", "filter_winograd"}
DIRECTIONS = {0: "forward", 1: "backprop_input", 2: "backprop_filter"}


class FakeExplain:
    """Stands in for TfOpsExplain: records each call's arguments and writes `line` as the C
    function does (truncated to the buffer, NUL-terminated), returning its whole length."""

    def __init__(self, line=LINE):
        self.line = line
        self.calls = []

    def __call__(self, device, direction, dtype, data_format, padding, sizes, strides, dilations, explicit_paddings,
                 paddings, out, out_size):
        self.calls.append(dict(device=device, direction=direction, dtype=dtype, data_format=data_format.decode(),
                               padding=padding.decode(), sizes=list(sizes[:8]), strides=list(strides[:4]),
                               dilations=list(dilations[:4]), explicit_paddings=list(explicit_paddings[:paddings]),
                               out_size=out_size))
        data = self.line.encode()
        n = min(len(data), out_size - 1)
        ctypes.memmove(out, data, n)
        out[n] = b"\0"
        return len(data)

    @property
    def last(self):
        return self.calls[-1]


@contextlib.contextmanager
def fake_library(line=LINE):
    fake = FakeExplain(line)
    with mock.patch.object(_explain, "_explain_function", lambda: fake):
        yield fake


def public_functions():
    """The names of the package's functions that run an op of the family."""
    return {name for name in tf_ops.__all__
            if callable(getattr(tf_ops, name)) and getattr(getattr(tf_ops, name), "__module__", "") == "tf_ops.ops"}


class LineTest(tf.test.TestCase):
    """The plan line and the verbose line, and the Plan object."""

    def test_fields_of_an_explain_line(self):
        fields = _explain._parse_fields(LINE)
        self.assertEqual(list(fields), ["algorithm", "pass", "direction", "dtype", "layout", "isa", "accuracy",
                                        "workspace_bytes", "work_units", "blocking"])
        plan = _explain._from_line(LINE)
        self.assertEqual(plan, tf_ops.Plan("space_to_depth", "banded", "forward", "float32", "NHWC", "avx2",
                                           "direct", 4096, 12, {"rows": "4", "cols": "16"}, "cpu"))

    def test_verbose_line_gives_the_same_plan(self):
        verbose = "tf_ops_verbose cpu " + LINE + " time_ms=0.512"
        fields = _explain._parse_fields(verbose)
        self.assertEqual(fields["device"], "cpu")
        self.assertEqual(float(fields["time_ms"]), 0.512)
        self.assertEqual(_explain._from_line(verbose), _explain._from_line(LINE))

    def test_optional_fields(self):
        plan = _explain._from_line("algorithm=direct direction=backprop_filter dtype=float64 layout=NCHW "
                                   "isa=generic accuracy=direct workspace_bytes=0 work_units=1")
        self.assertIsNone(plan.inner_pass)
        self.assertEqual(plan.blocking, {})
        self.assertEqual((plan.direction, plan.layout, plan.workspace_bytes), ("backprop_filter", "NCHW", 0))

    def test_malformed_lines(self):
        for line in ("algorithm=direct nonsense", "=3", "algorithm=direct algorithm=winograd",
                     LINE.replace("work_units=12", ""), "tf_ops_verbose"):
            with self.subTest(line=line):
                with self.assertRaises(ValueError):
                    _explain._from_line(line)

    def test_plan_is_immutable_hashable_and_plain_data(self):
        plan = _explain._from_line(LINE)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            plan.algorithm = "direct"
        with self.assertRaises(TypeError):
            plan.blocking["rows"] = "8"
        self.assertEqual(plan.blocking, {"rows": "4", "cols": "16"})
        self.assertEqual(hash(plan), hash(_explain._from_line(LINE)))
        self.assertEqual(pickle.loads(pickle.dumps(plan)), plan)
        as_dict = dataclasses.asdict(plan)
        self.assertEqual(tf_ops.Plan(**json.loads(json.dumps(as_dict))), plan)

    def test_str_is_one_readable_line(self):
        text = str(_explain._from_line(LINE))
        self.assertNotIn("\n", text)
        for part in ("space_to_depth", "banded", "forward", "float32", "NHWC", "avx2", "4096", "12",
                     "rows:4,cols:16"):
            self.assertIn(part, text)


class ArgumentsTest(tf.test.TestCase):
    """What explain hands TfOpsExplain, and the arguments it refuses (a stand-in library)."""

    def call(self, op="Conv2D", input_shape=(2, 9, 11, 16), filter_shape=(3, 3, 16, 8), **kwargs):
        with fake_library() as fake:
            plan = tf_ops.explain(op, input_shape, filter_shape, **kwargs)
        self.assertEqual(plan, _explain._from_line(LINE))
        return fake.last

    def assert_refused(self, pattern, op="Conv2D", input_shape=(2, 9, 11, 16), filter_shape=(3, 3, 16, 8),
                       **kwargs):
        with fake_library() as fake:
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError, pattern):
                tf_ops.explain(op, input_shape, filter_shape, **kwargs)
        self.assertEqual(fake.calls, [], "a refused call must not reach the library")

    def test_op_names(self):
        self.assertEqual(set(_explain._RAW_OPS), set(tf_ops.OP_NAMES))
        self.assertEqual(set(_explain._FUNCTIONS), public_functions())
        for raw, (direction, depthwise) in _explain._RAW_OPS.items():
            functions = [name for name, op in _explain._FUNCTIONS.items() if op == raw]
            for name in [raw, "TfOps>" + raw, *functions, *(getattr(tf_ops, f) for f in functions)]:
                with self.subTest(op=name if isinstance(name, str) else f"tf_ops.{name.__name__}"):
                    filt = (3, 3, 16, 2) if depthwise else (3, 3, 16, 8)
                    got = self.call(name, filter_shape=filt)
                    self.assertEqual(got["direction"], direction)
                    # A depthwise filter [KH, KW, C, M] goes as FI = 1, K = C * M.
                    self.assertEqual(got["sizes"], [2, 9, 11, 16, 3, 3, 1, 32] if depthwise
                                     else [2, 9, 11, 16, 3, 3, 16, 8])

    def test_strides_and_dilations_forms(self):
        # The op's attributes: 4 values in data_format order.
        cases = [
            (dict(strides=2, dilations=3), [1, 2, 2, 1], [1, 3, 3, 1]),
            (dict(strides=[2, 3], dilations=[1, 2]), [1, 2, 3, 1], [1, 1, 2, 1]),
            (dict(strides=[1, 2, 3, 1], dilations=[1, 3, 2, 1]), [1, 2, 3, 1], [1, 3, 2, 1]),
            (dict(strides=[1, 1, 2, 3], dilations=[1, 1, 3, 2], data_format="NCHW",
                  input_shape=(2, 16, 9, 11)), [1, 1, 2, 3], [1, 1, 3, 2]),
            (dict(strides=(4,), dilations=None), [1, 4, 4, 1], [1, 1, 1, 1]),
        ]
        for kwargs, strides, dilations in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                got = self.call(**kwargs)
                self.assertEqual((got["strides"], got["dilations"]), (strides, dilations))

    def test_nchw_input_goes_in_nhwc_order(self):
        got = self.call(input_shape=(2, 16, 9, 11), data_format="NCHW")
        self.assertEqual(got["data_format"], "NCHW")
        self.assertEqual(got["sizes"][:4], [2, 9, 11, 16])
        self.assertEqual(self.call(data_format=b"NHWC")["data_format"], "NHWC")

    def test_padding_forms(self):
        cases = [
            (dict(), "VALID", []),
            (dict(padding="SAME"), "SAME", []),
            (dict(padding=b"VALID"), "VALID", []),
            (dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 2, 3, 4, 0, 0]), "EXPLICIT",
             [0, 0, 1, 2, 3, 4, 0, 0]),
            (dict(padding="EXPLICIT", explicit_paddings=[0, 0, 0, 0, 1, 2, 3, 4], data_format="NCHW",
                  input_shape=(2, 16, 9, 11)), "EXPLICIT", [0, 0, 0, 0, 1, 2, 3, 4]),
            (dict(padding=[[0, 0], [1, 2], [3, 4], [0, 0]]), "EXPLICIT", [0, 0, 1, 2, 3, 4, 0, 0]),
            (dict(padding=((0, 0), (0, 0), (1, 2), (3, 4)), data_format="NCHW",
                  input_shape=(2, 16, 9, 11)), "EXPLICIT", [0, 0, 0, 0, 1, 2, 3, 4]),
        ]
        for kwargs, padding, explicit in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                got = self.call(**kwargs)
                self.assertEqual((got["padding"], got["explicit_paddings"]), (padding, explicit))

    def test_dtypes(self):
        for dtype, code in [(tf.float16, 0), ("bfloat16", 1), (np.float32, 2), (tf.float64, 3),
                            (tf.int32, 4), (tf.dtypes.half, 0)]:
            with self.subTest(dtype=str(dtype)):
                self.assertEqual(self.call(dtype=dtype)["dtype"], code)
        self.assertEqual(self.call("Conv2DBackpropInput", dtype="int32")["dtype"], 4)

    def test_conv2d_folds_leading_batch_dimensions(self):
        self.assertEqual(self.call("conv2d", input_shape=(2, 3, 9, 11, 16))["sizes"][:4], [6, 9, 11, 16])
        self.assertEqual(self.call("conv2d", input_shape=tf.TensorShape([2, 9, 11, 16]))["sizes"][:4],
                         [2, 9, 11, 16])
        self.assert_refused(r"input_shape=\[2, 3, 9, 11, 16\] \(rank 5\)", "Conv2D", input_shape=(2, 3, 9, 11, 16))

    def test_bad_arguments_name_the_value(self):
        cases = [
            (r"unknown op 'Conv3D'", dict(op="Conv3D")),
            (r"unknown op 'TfOps>conv2d'", dict(op="TfOps>conv2d")),
            (r"unknown op 'depthwise_conv2d'", dict(op="depthwise_conv2d", filter_shape=(3, 3, 16, 1))),
            (r"input_shape=\[\] \(rank 0\)", dict(input_shape=[])),
            (r"input_shape=\[2, 9, 16\] \(rank 3\)", dict(input_shape=[2, 9, 16])),
            (r"input_shape=\[2, None, 11, 16\]", dict(input_shape=[2, None, 11, 16])),
            (r"filter_shape=\[3, 16, 8\]", dict(filter_shape=[3, 16, 8])),
            (r"padding='FOO'", dict(padding="FOO")),
            (r"strides should be of length 1, 2 or 4.*\[1, 1, 1\]", dict(strides=[1, 1, 1])),
            (r"TfOps>Conv2DBackpropFilter has no kernel for dtype int32",
             dict(op="conv2d_backprop_filter", dtype=tf.int32)),
            (r"TfOps>DepthwiseConv2dNative has no kernel for dtype int32",
             dict(op="DepthwiseConv2dNative", dtype="int32", filter_shape=(3, 3, 16, 1))),
            (r"has no kernel for dtype complex64", dict(dtype=tf.complex64)),
            (r"dtype='float33' is not a TensorFlow dtype", dict(dtype="float33")),
            (r"data_format='NCDHW'", dict(data_format="NCDHW")),
            (r"input and filter must have the same depth: 16 vs 15",
             dict(op="depthwise_conv2d_native", filter_shape=(3, 3, 15, 1))),
            (r"explicit_paddings=\[0, 'x'\]", dict(padding="EXPLICIT", explicit_paddings=[0, "x"])),
            (r"each element of `padding` must be a list/tuple of size 2",
             dict(padding=[[0, 0], [1, 1, 1], [1, 1], [0, 0]])),
            (r"it must be of size 4", dict(padding=[[1, 1], [1, 1]])),
        ]
        for pattern, kwargs in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                self.assert_refused(pattern, **kwargs)

    def test_error_line_of_the_library(self):
        message = "Conv2D: input depth must be evenly divisible by filter depth: 30 vs 7"
        with fake_library("error: " + message):
            with self.assertRaises(tf.errors.InvalidArgumentError) as caught:
                tf_ops.explain("conv2d", [1, 8, 8, 30], [3, 3, 7, 14])
        self.assertEqual(caught.exception.message, message)

    def test_line_longer_than_the_buffer(self):
        blocking = ",".join(f"key{i}:{i}" for i in range(600))
        with fake_library(LINE.replace("blocking=rows:4,cols:16", "blocking=" + blocking)) as fake:
            plan = tf_ops.explain("conv2d", [1, 8, 8, 16], [3, 3, 16, 16])
        self.assertGreater(len(fake.line), 4096)
        self.assertEqual([c["out_size"] for c in fake.calls], [4096, len(fake.line) + 1])
        self.assertEqual(len(plan.blocking), 600)
        self.assertEqual(plan.blocking["key599"], "599")


class CliTest(tf.test.TestCase):
    """python -m tf_ops explain."""

    README_COMMAND = ["explain", "conv2d", "--input", "8,56,56,64", "--filter", "3,3,64,64", "--padding", "SAME"]

    def main(self, *argv):
        """(exit status, stdout, stderr) of python -m tf_ops's main, run here."""
        from tf_ops import __main__ as cli
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(list(argv))
            except SystemExit as e:
                status = e.code
        return status, out.getvalue(), err.getvalue()

    def test_fields_one_a_line(self):
        with fake_library() as fake:
            status, out, err = self.main("explain", "conv2d", "--input", "2,16,9,11", "--filter", "3,3,8,4",
                                         "--strides", "1,1,2,1", "--padding", "EXPLICIT", "--explicit-paddings",
                                         "0,0,0,0,1,1,0,2", "--data-format", "NCHW", "--dilations", "2",
                                         "--dtype", "bfloat16")
        self.assertEqual(status, 0, err)
        self.assertEqual(fake.last["sizes"], [2, 9, 11, 16, 3, 3, 8, 4])
        self.assertEqual((fake.last["strides"], fake.last["dilations"]), ([1, 1, 2, 1], [1, 1, 2, 2]))
        self.assertEqual((fake.last["padding"], fake.last["explicit_paddings"]), ("EXPLICIT", [0, 0, 0, 0, 1, 1, 0, 2]))
        self.assertEqual((fake.last["dtype"], fake.last["data_format"]), (1, "NCHW"))
        rows = dict(line.split(None, 1) for line in out.splitlines())
        self.assertEqual(rows, {"algorithm": "space_to_depth", "pass": "banded", "direction": "forward",
                                "dtype": "float32", "layout": "NHWC", "device": "cpu", "isa": "avx2",
                                "accuracy": "direct", "workspace_bytes": "4096", "work_units": "12",
                                "blocking": "rows=4, cols=16"})

    def test_bad_arguments_exit_2_with_the_message(self):
        cases = [
            (["--padding", "FOO"], "padding='FOO'"),
            (["--dtype", "int64"], "no kernel for dtype int64"),
            (["--input", "1,8,x,4"], "1,8,x,4"),
            (["--filter"], "--filter"),
        ]
        for extra, message in cases:
            with self.subTest(args=extra):
                argv = ["explain", "conv2d", "--input", "1,8,8,4", "--filter", "3,3,4,4", *extra]
                with fake_library() as fake:
                    status, out, err = self.main(*argv)
                self.assertEqual(status, 2)
                self.assertIn(message, err)
                self.assertEqual(out, "")
                self.assertEqual(fake.calls, [])
        with fake_library():
            status, _, err = self.main("explain", "Conv3D", "--input", "1,8,8,4", "--filter", "3,3,4,4")
        self.assertEqual(status, 2)
        self.assertIn("unknown op 'Conv3D'", err)
        # An attribute the library refuses (the op's kernels' check and message).
        status, out, err = self.main("explain", "conv2d", "--input", "1,8,8,4", "--filter", "3,3,4,4", "--strides", "0")
        self.assertEqual((status, out), (2, ""))
        self.assertIn("strides=[1, 0, 0, 1]", err)

    def test_cli_prints_the_plan(self):
        # The README's command, as a fresh process runs it; its plan is explain's here.
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run([sys.executable, "-m", "tf_ops", *self.README_COMMAND], cwd=cwd,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                                  timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        rows = dict(line.split(None, 1) for line in proc.stdout.splitlines())
        plan = tf_ops.explain("conv2d", [8, 56, 56, 64], [3, 3, 64, 64], padding="SAME")
        self.assertEqual(rows["algorithm"], plan.algorithm)
        self.assertEqual(int(rows["workspace_bytes"]), plan.workspace_bytes)
        self.assertEqual(int(rows["work_units"]), plan.work_units)
        self.assertEqual(rows["isa"], tf_ops.cpu_kernel_isa())


@contextlib.contextmanager
def exact_mode(enabled):
    previous = tf_ops.set_exact_mode(enabled)
    try:
        yield
    finally:
        tf_ops.set_exact_mode(previous)


class ExplainTest(tf.test.TestCase):
    """The library's plans."""

    def check_plan(self, plan, direction, dtype, layout, where=""):
        where = f"{where}: {plan}"
        self.assertIn(plan.algorithm, _explain.ALGORITHMS, where)
        if plan.inner_pass is not None:
            self.assertIn(plan.inner_pass, _explain.ALGORITHMS, where)
        self.assertEqual((plan.direction, plan.dtype, plan.layout, plan.device), (direction, dtype, layout, "cpu"),
                         where)
        self.assertEqual(plan.isa, tf_ops.cpu_kernel_isa(), where)
        self.assertIn(plan.accuracy, ("direct", "winograd"), where)
        self.assertGreaterEqual(plan.workspace_bytes, 0, where)
        if plan.algorithm != "direct":
            self.assertGreaterEqual(plan.work_units, 1, where)
        if tf_ops.exact_mode():
            self.assertEqual(plan.accuracy, "direct", where)
            self.assertNotIn(plan.algorithm, WINOGRAD_ALGORITHMS, where)
            self.assertNotIn(plan.inner_pass, WINOGRAD_ALGORITHMS, where)
        # The algorithms the planner tried first, each once, and the rule that refused it.
        tried = [algorithm for algorithm, _ in plan.refused]
        self.assertEqual(len(set(tried)), len(tried), where)
        self.assertNotIn(plan.algorithm, tried, where)
        for algorithm, rule in plan.refused:
            self.assertIn(algorithm, _explain.ALGORITHMS, where)
            self.assertIn(rule, _vocabulary.names("cpu_rule"), where)
        if tf_ops.exact_mode() and plan.algorithm != "direct" and plan.direction != "backprop_filter":
            self.assertEqual(plan.refused[0], ("winograd", "exact_mode"), where)

    def test_every_op_and_dtype_gives_a_documented_plan(self):
        geometries = [
            dict(input_shape=[2, 16, 16, 32], filter_shape=[3, 3, 32, 32], padding="SAME"),
            dict(input_shape=[1, 20, 20, 24], filter_shape=[5, 5, 24, 32], strides=2, padding="SAME"),
            dict(input_shape=[2, 9, 11, 8], filter_shape=[1, 1, 8, 16]),
            dict(input_shape=[2, 8, 13, 12], filter_shape=[3, 2, 4, 6], strides=[2, 1], dilations=[1, 2],
                 padding=[[0, 0], [1, 0], [2, 1], [0, 0]]),
            dict(input_shape=[2, 12, 8, 13], filter_shape=[3, 3, 4, 6], strides=[1, 1, 2, 2], padding="SAME",
                 data_format="NCHW"),
        ]
        for op in sorted(tf_ops.OP_NAMES):
            direction, depthwise = _explain._RAW_OPS[op]
            for dtype in _explain._allowed_dtypes(op):
                for geometry in geometries:
                    geometry = dict(geometry)
                    fmt = geometry.get("data_format", "NHWC")
                    if depthwise:  # the filter [KH, KW, C, 2]
                        depth = geometry["input_shape"][1 if fmt == "NCHW" else 3]
                        geometry["filter_shape"] = geometry["filter_shape"][:2] + [depth, 2]
                    for exact in (False, True):
                        with exact_mode(exact):
                            plan = tf_ops.explain(op, dtype=dtype, **geometry)
                            self.check_plan(plan, DIRECTIONS[direction], dtype.name, fmt,
                                            f"{op} {dtype.name} exact={exact} {geometry}")

    def test_algorithms_follow_the_geometry_and_mode(self):
        winograd_layer = dict(input_shape=[2, 16, 16, 32], filter_shape=[3, 3, 32, 32], padding="SAME")
        with exact_mode(False):
            plan = tf_ops.explain("conv2d", **winograd_layer)
            self.assertEqual((plan.algorithm, plan.accuracy), ("winograd", "winograd"), plan)
            self.assertEqual(tf_ops.explain("conv2d", [2, 9, 11, 16], [1, 1, 16, 32]).algorithm, "pointwise")
            self.assertEqual(tf_ops.explain("depthwise_conv2d_native", [2, 12, 12, 16], [3, 3, 16, 1], [1, 1, 1, 1],
                                            "SAME").algorithm, "depthwise_rows")
            self.assertEqual(tf_ops.explain("conv2d", dtype=tf.float64, **winograd_layer).algorithm, "direct")
            backprop_filter = tf_ops.explain("Conv2DBackpropFilter", [2, 10, 10, 8], [3, 3, 8, 16], 2, "SAME")
            self.assertEqual(backprop_filter.direction, "backprop_filter")
            self.assertTrue(backprop_filter.algorithm.startswith("filter_") or backprop_filter.algorithm == "direct",
                            backprop_filter)
        with exact_mode(True):
            plan = tf_ops.explain("conv2d", **winograd_layer)
            self.assertNotIn(plan.algorithm, WINOGRAD_ALGORITHMS, plan)
            self.assertNotIn(plan.inner_pass, WINOGRAD_ALGORITHMS, plan)
            self.assertEqual(plan.accuracy, "direct")

    def test_geometry_errors_name_the_value(self):
        cases = [
            (r"\b7\b", dict(input_shape=[1, 8, 8, 30], filter_shape=[3, 3, 7, 14])),   # 7 does not divide 30
            (r"\b9\b", dict(input_shape=[1, 8, 8, 30], filter_shape=[3, 3, 15, 9])),   # 2 groups, 9 outputs
            (r"\b9\b", dict(input_shape=[1, 5, 5, 4], filter_shape=[9, 3, 4, 4])),     # taller than the input
            (r"-3\b", dict(input_shape=[1, -3, 5, 4], filter_shape=[3, 3, 4, 4])),
        ]
        for pattern, kwargs in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, pattern):
                    tf_ops.explain("conv2d", **kwargs)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"strides=\[1, 0, 0, 1\]"):
            tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4], strides=0)

    def test_attribute_errors_are_the_kernels(self):
        # The library checks the attributes as the op's kernels do (CheckAttrs), with their
        # messages.
        cases = [
            (r"strides=\[1, 0, 0, 1\]", dict(strides=0)),
            (r"strides=\[1, 2, -1, 1\]", dict(strides=[2, -1])),
            (r"dilations=\[1, 0, 1, 1\]", dict(dilations=[0, 1])),
            (r"strides in the batch and depth dimensions, got strides=\[2, 1, 1, 1\] with data_format=NHWC",
             dict(strides=[2, 1, 1, 1])),
            (r"dilations in the batch and depth dimensions, got dilations=\[1, 2, 1, 1\] with data_format=NCHW",
             dict(dilations=[1, 2, 1, 1], data_format="NCHW", input_shape=(2, 16, 9, 11))),
            (r"explicit_paddings attribute must contain 8 values, but got: 0", dict(padding="EXPLICIT")),
            (r"but got: 7 \(\[0, 0, 1, 1, 1, 1, 0\]\)",
             dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 0])),
            (r"nonnegative, got explicit_paddings=\[0, 0, -1, 1, 1, 1, 0, 0\]",
             dict(padding="EXPLICIT", explicit_paddings=[0, 0, -1, 1, 1, 1, 0, 0])),
            (r"batch or depth dimensions is not supported, got explicit_paddings=\[0, 0, 1, 1, 1, 1, 1, 0\]",
             dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 1, 0])),
            (r"must be empty if the padding attribute is not EXPLICIT, got explicit_paddings=\[0, 0, 1, 1, 1, "
             r"1, 0, 0\] with padding=SAME", dict(padding="SAME", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0])),
        ]
        for pattern, kwargs in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                shape = kwargs.pop("input_shape", (2, 9, 11, 16))
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, pattern):
                    tf_ops.explain("Conv2D", shape, (3, 3, 16, 8), **kwargs)
        # The same attributes where they are valid give a plan.
        plan = tf_ops.explain("Conv2D", (2, 16, 9, 11), (3, 3, 16, 8), padding="EXPLICIT",
                              explicit_paddings=[0, 0, 0, 0, 1, 2, 3, 4], data_format="NCHW", strides=[1, 1, 2, 1])
        self.assertEqual(plan.layout, "NCHW")


# Run in a fresh process with TF_OPS_VERBOSE=1: for each case, explain's plan, then the op's call
# with the verbose lines of that call (fd 2 goes to a file around it); last, one call with the
# verbose switch off. Prints JSON.
VERBOSE_SCRIPT = textwrap.dedent("""
    import contextlib, ctypes, dataclasses, json, os, sys, tempfile
    import tensorflow as tf
    import tf_ops
    from tf_ops import _loader

    libc = ctypes.CDLL(None)

    def stderr_of(fn):
        sys.stderr.flush()
        with tempfile.TemporaryFile() as f:
            saved = os.dup(2)
            os.dup2(f.fileno(), 2)
            try:
                fn()
            finally:
                sys.stderr.flush()
                libc.fflush(None)
                os.dup2(saved, 2)
                os.close(saved)
            f.seek(0)
            return f.read().decode(errors="replace").splitlines()

    def call(case):
        dtype = tf.as_dtype(case["dtype"])
        shape, filt = case["input_shape"], case["filter_shape"]
        a = dict(strides=case["strides"], padding=case["padding"], data_format=case["data_format"],
                 dilations=case["dilations"])
        x, w = tf.ones(shape, dtype), tf.ones(filt, dtype)
        depthwise = case["op"].startswith("depthwise")
        forward = tf_ops.depthwise_conv2d_native if depthwise else tf_ops.conv2d
        dy = tf.ones_like(forward(x, w, **a))   # before the call watched
        calls = {
            "conv2d": lambda: tf_ops.conv2d(x, w, **a),
            "conv2d_backprop_input": lambda: tf_ops.conv2d_backprop_input(shape, w, dy, **a),
            "conv2d_backprop_input_v2": lambda: tf_ops.conv2d_backprop_input_v2(x, w, dy, **a),
            "conv2d_transpose": lambda: tf_ops.conv2d_transpose(dy, w, shape, **a),
            "conv2d_backprop_filter": lambda: tf_ops.conv2d_backprop_filter(x, filt, dy, **a),
            "conv2d_backprop_filter_v2": lambda: tf_ops.conv2d_backprop_filter_v2(x, w, dy, **a),
            "depthwise_conv2d_native": lambda: tf_ops.depthwise_conv2d_native(x, w, **a),
            "depthwise_conv2d_backprop_input": lambda: tf_ops.depthwise_conv2d_backprop_input(shape, w, dy, **a),
            "depthwise_conv2d_backprop_filter": lambda: tf_ops.depthwise_conv2d_backprop_filter(x, filt, dy, **a),
        }
        return lambda: calls[case["op"]]().numpy()

    results = {}
    for case in json.loads(sys.argv[1]):
        previous = tf_ops.set_exact_mode(case["exact"])
        try:
            plan = tf_ops.explain(case["op"], case["input_shape"], case["filter_shape"], case["strides"],
                                  case["padding"], case["data_format"], case["dilations"], case["dtype"])
            lines = stderr_of(call(case))
        finally:
            tf_ops.set_exact_mode(previous)
        results[case["name"]] = {"plan": dataclasses.asdict(plan), "stderr": lines}
    _loader._switch("verbose", False)
    results["unset"] = {"stderr": stderr_of(call(json.loads(sys.argv[1])[0]))}
    print(json.dumps(results))
""")


def verbose_case(name, op, input_shape, filter_shape, strides=(1, 1, 1, 1), padding="VALID", data_format="NHWC",
                 dilations=(1, 1, 1, 1), dtype="float32", exact=False):
    return dict(name=name, op=op, input_shape=list(input_shape), filter_shape=list(filter_shape),
                strides=list(strides), padding=padding, data_format=data_format, dilations=list(dilations),
                dtype=dtype, exact=exact)


VERBOSE_CASES = [
    verbose_case("winograd", "conv2d", [2, 16, 16, 32], [3, 3, 32, 32], padding="SAME"),
    verbose_case("winograd in exact mode", "conv2d", [2, 16, 16, 32], [3, 3, 32, 32], padding="SAME", exact=True),
    verbose_case("pointwise", "conv2d", [2, 9, 11, 16], [1, 1, 16, 32]),
    verbose_case("depthwise multiplier 1", "depthwise_conv2d_native", [2, 12, 12, 16], [3, 3, 16, 1],
                 padding="SAME"),
    verbose_case("float64", "conv2d", [2, 16, 16, 32], [3, 3, 32, 32], padding="SAME", dtype="float64"),
    verbose_case("backprop filter", "conv2d_backprop_filter", [2, 10, 10, 8], [3, 3, 8, 16], (1, 2, 2, 1),
                 "SAME"),
    verbose_case("NCHW strided", "conv2d", [1, 16, 9, 9], [3, 3, 16, 24], (1, 1, 2, 2), "SAME", "NCHW"),
    verbose_case("backprop input grouped dilated", "conv2d_backprop_input", [2, 11, 11, 8], [3, 3, 4, 8],
                 padding=[[0, 0], [1, 2], [0, 1], [0, 0]], dilations=(1, 2, 2, 1)),
    verbose_case("transpose strided 5x5", "conv2d_transpose", [1, 20, 20, 24], [5, 5, 24, 32], (1, 2, 2, 1),
                 "SAME"),
    verbose_case("depthwise backprop filter float16", "depthwise_conv2d_backprop_filter", [1, 9, 10, 4],
                 [3, 3, 4, 2], (1, 2, 1, 1), "SAME", dtype="float16"),
    verbose_case("depthwise backprop input NCHW", "depthwise_conv2d_backprop_input", [1, 6, 9, 9], [3, 3, 6, 3],
                 padding="SAME", data_format="NCHW", dilations=(1, 1, 2, 2)),
    verbose_case("backprop filter v2 bfloat16 winograd", "conv2d_backprop_filter_v2", [2, 16, 16, 32],
                 [3, 3, 32, 32], padding="SAME", dtype="bfloat16"),
    verbose_case("backprop input v2 int32", "conv2d_backprop_input_v2", [1, 7, 7, 3], [2, 2, 3, 4], dtype="int32"),
]


class GpuExplainTest(tf.test.TestCase):
    """explain(device="gpu"): the launches of the CUDA kernels (conv_gpu_plan.h), checked against
    sizes worked out here; a build without CUDA refuses it."""

    def setUp(self):
        super().setUp()
        self.cuda = bool(_loader.build_info().get("cuda"))

    def test_device_code(self):
        with fake_library() as fake:
            tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4])
            tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4], device="gpu")
        self.assertEqual([c["device"] for c in fake.calls], [0, 1])

    def test_build_without_cuda_refuses(self):
        if self.cuda:
            self.assertEqual(tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4], device="gpu").device, "gpu")
            return
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "built without CUDA"):
            tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4], device="gpu")

    def test_device_is_cpu_or_gpu(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "device='tpu'"):
            tf_ops.explain("conv2d", [1, 8, 8, 4], [3, 3, 4, 4], device="tpu")

    def test_launches(self):
        if not self.cuda:
            self.skipTest("a build without CUDA (test_build_without_cuda_refuses checks its refusal)")

        def ceil(a, b):
            return -(-a // b)

        # NCHW, which CUTLASS's entries refuse: our kernels' launches (test_cutlass.py covers
        # CUTLASS's entries).
        vgg = dict(input_shape=[8, 64, 56, 56], filter_shape=[3, 3, 64, 64], padding="SAME", data_format="NCHW")
        m = 8 * 56 * 56  # output pixels: one GEMM row each, 64 x 64 tiles
        cases = [
            # (op, kwargs, algorithm, work units, launches, slices, workspace bytes)
            ("conv2d", dict(vgg), "gpu_gemm", ceil(m, 64), 1, 1, 0),
            # Tensor cores: 128 threads a tile, so the 576-long reduction takes 2 slices to near
            # 512 x 256 threads.
            ("conv2d", dict(vgg, dtype=tf.float16), "gpu_mma", 2 * ceil(m, 64), 1, 2, 2 * m * 64 * 4),
            # Depthwise, one output column a group: the direct kernel, a thread an output.
            ("depthwise_conv2d_native", dict(vgg, filter_shape=[3, 3, 64, 1]), "gpu_direct", ceil(m * 64, 256),
             1, 1, 0),
            # Stride 2: a launch per residue class of input rows and columns.
            ("conv2d_backprop_input", dict(vgg, strides=2), "gpu_gemm", 4 * ceil(8 * 28 * 28, 64), 4, 1, 0),
            # A long reduction (32 x 56 x 56 output pixels) over 9 tiles of 576 x 64: in 56 slices
            # (up to 512 x 256 threads), their float sums in the workspace.
            ("conv2d_backprop_filter", dict(vgg, input_shape=[32, 64, 56, 56]), "gpu_gemm", 9 * 56, 1, 56,
             56 * 576 * 64 * 4),
        ]
        for op, kwargs, algorithm, units, launches, slices, workspace in cases:
            with self.subTest(op=op, **{k: str(v) for k, v in kwargs.items()}):
                plan = tf_ops.explain(op, device="gpu", **kwargs)
                self.assertEqual((plan.device, plan.isa, plan.accuracy), ("gpu", "cuda", "direct"))
                self.assertEqual(plan.algorithm, algorithm)
                self.assertIn(plan.algorithm, _explain.GPU_ALGORITHMS)
                self.assertEqual(plan.work_units, units)
                self.assertEqual(plan.blocking["launches"], str(launches))
                self.assertEqual(plan.blocking["slices"], str(slices))
                self.assertEqual(plan.workspace_bytes, workspace)
        # An empty batch: no launch.
        plan = tf_ops.explain("conv2d", [0, 8, 8, 4], [3, 3, 4, 4], device="gpu")
        self.assertEqual((plan.algorithm, plan.work_units), ("gpu_zero", 0))
        # The command line takes --device.
        from tf_ops import __main__ as cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = cli.main(["explain", "conv2d", "--input", "8,56,56,64", "--filter", "3,3,64,64", "--padding",
                               "SAME", "--device", "gpu"])
        self.assertEqual(status, 0)
        self.assertRegex(out.getvalue(), r"algorithm +cutlass_fprop")
        self.assertRegex(out.getvalue(), r"refused +gpu_zero: not_empty")


class VerboseTest(tf.test.TestCase):
    """TF_OPS_VERBOSE=1: each CPU op call prints the plan it ran, which is explain's."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with tempfile.TemporaryDirectory() as cwd:  # not the checkout: the installed package
            script = os.path.join(cwd, "verbose.py")
            with open(script, "w") as f:
                f.write(VERBOSE_SCRIPT)
            env = dict(os.environ, TF_OPS_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="2")
            cls.proc = subprocess.run([sys.executable, script, json.dumps(VERBOSE_CASES)], cwd=cwd, env=env,
                                      capture_output=True, text=True, timeout=300)

    def results(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-4000:])
        return json.loads(self.proc.stdout.splitlines()[-1])

    def test_verbose_line_is_the_plan_explain_gives(self):
        results = self.results()
        for case in VERBOSE_CASES:
            with self.subTest(case=case["name"]):
                result = results[case["name"]]
                lines = [line for line in result["stderr"] if line.startswith("tf_ops_verbose")]
                self.assertLen(lines, 1, "\n".join(result["stderr"]))
                fields = _explain._parse_fields(lines[0])
                self.assertGreaterEqual(float(fields["time_ms"]), 0)
                self.assertEqual(list(fields)[-1], "time_ms", lines[0])
                plan = tf_ops.Plan(**result["plan"])
                self.assertEqual(_explain._from_line(lines[0]), plan, lines[0])
                self.assertEqual(plan.device, "cpu")
                self.assertIn(plan.algorithm, _explain.ALGORITHMS)

    def test_verbose_plans_follow_the_geometry_and_mode(self):
        plans = {name: tf_ops.Plan(**r["plan"]) for name, r in self.results().items() if "plan" in r}
        self.assertEqual(plans["winograd"].algorithm, "winograd")
        self.assertNotIn(plans["winograd in exact mode"].algorithm, WINOGRAD_ALGORITHMS)
        self.assertEqual(plans["winograd in exact mode"].refused[:2],
                         (("winograd", "exact_mode"), ("winograd_space_to_depth", "exact_mode")))
        self.assertEqual(plans["pointwise"].refused[-2:], (("depthwise_rows", "shape"), ("banded", "shape")))
        self.assertEqual(plans["winograd in exact mode"].accuracy, "direct")
        self.assertEqual(plans["pointwise"].algorithm, "pointwise")
        self.assertEqual(plans["depthwise multiplier 1"].algorithm, "depthwise_rows")
        self.assertEqual(plans["float64"].algorithm, "direct")
        self.assertEqual(plans["backprop filter"].direction, "backprop_filter")
        self.assertEqual(plans["NCHW strided"].layout, "NCHW")
        self.assertEqual(plans["backprop input v2 int32"].dtype, "int32")

    def test_no_verbose_line_without_the_variable(self):
        lines = self.results()["unset"]["stderr"]
        self.assertEqual([line for line in lines if "tf_ops_verbose" in line], [])
