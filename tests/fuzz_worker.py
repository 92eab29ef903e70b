"""Property-based fuzzing of ONE tf_ops op, in-process. tests/test_fuzz.py runs it in a
subprocess per op, so that a crash or a hang is caught and reported with its input.

    CI run (fixed seed, 150 inputs per op):  pytest -q tests/test_fuzz.py
    A longer run, one command:               TF_OPS_FUZZ_EXAMPLES=5000 pytest -q tests/test_fuzz.py
    Another seed:                            TF_OPS_FUZZ_SEED=7 pytest -q tests/test_fuzz.py
    One op by hand:    python tests/fuzz_worker.py KIND SEED EXAMPLES LOG.jsonl
    Replay one input:  python tests/fuzz_worker.py --replay LOG.jsonl     (its last input)
                       python tests/fuzz_worker.py --replay '{"kind": ...}'  (a JSON input)

KIND is a key of common.KINDS. Hypothesis generates the inputs (seeded, no database, the
generate phase only, so the sequence of inputs depends on SEED alone); each one is

  (a) mostly valid: random data format, strides and dilations 1-3, every padding, grouped
      filters or depthwise multipliers, small shapes including zero dims;
  (b) degenerate: zero dims next to huge ones (tensors with a huge dim are empty) and huge
      strides, dilations and explicit paddings;
  (c) adversarial: (a) or (b) mutated: ranks 0-5, strides/dilations lists of length 0-6 with
      values in {-2**63, -1, 0, 1, 2, 3, 2**31, 2**62, 2**63-1}, explicit_paddings of any
      length and sign, input_sizes/filter_sizes of any rank and length with negative or huge
      int32 values, mismatched filter/out_backprop shapes, swapped or invalid formats and
      paddings, dtypes the op does not take;

and a fraction runs inside a tf.function, so that the shape functions see it too. Inputs
fuzzing has found (CORPUS) run first, on every run.

Before each call the exact input is appended to LOG as one JSON line and flushed to disk
(fsync), so that if the process dies the parent reads the culprit from the last line. A call
that runs longer than CALL_TIMEOUT seconds is a hang: faulthandler dumps the stacks and exits.

The only allowed outcomes: a result equal to a float64 reference (tf_ops.reference, and an
index-based one for sizes the reference cannot pad; within common.TOLERANCE) with the shape
the geometry gives, zeros where the math says so (empty sums); or an InvalidArgumentError /
UnimplementedError with a message (ResourceExhaustedError only for outputs of at least
ABSURD_BYTES). A model of the ops' validation rules (`predict`) also says which inputs must
give a result and which must give an error. Anything else is written to LOG as a failure
line; the worker goes on, prints a summary line and exits 1.
"""
import argparse
import faulthandler
import itertools
import json
import math
import os
import pathlib
import sys
import tempfile
import traceback
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from hypothesis import HealthCheck, Phase, given, reject, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
import tf_ops  # noqa: E402
from tf_ops import reference  # noqa: E402

_IMPORTED = pathlib.Path(tf_ops.__file__).resolve()
assert not _IMPORTED.is_relative_to(HERE.parent) or "site-packages" in _IMPORTED.parts, (
    f"fuzz_worker imported tf_ops from the source tree ({tf_ops.__file__}); install it")

tf.get_logger().setLevel("ERROR")

INT64_MAX = common.INT64_MAX
INT32_MAX = 2**31 - 1

# Attribute values the issue asks for, and dims/sizes that stress the size arithmetic.
ATTR_SPECIALS = [-2**63, -1, 0, 1, 2, 3, 2**31, 2**62, 2**63 - 1]
SIZE_SPECIALS = [-2**31, -7, -1, 0, 1, 2, 3, 4, 6, 2**16, 2**31 - 1]
HUGE_DIMS = [2**16 + 1, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1]
HUGE_ATTRS = [2**31, 2**62, 2**63 - 1]

MAX_TENSOR_ELEMENTS = 2048   # any tensor the worker fills with values
OUTPUT_CAP = 2**16           # a non-empty output that must be computed
WORK_CAP = 2 * 10**6         # multiply-adds of one call (and of the reference)
ABSURD_BYTES = 2**57         # outputs this large may fail with ResourceExhaustedError
CALL_TIMEOUT = float(os.environ.get("TF_OPS_FUZZ_CALL_TIMEOUT", "5"))
MAX_FAILURE_LINES = 25

FORMATS = ["NHWC", "NCHW"]
PADDINGS = ["SAME", "VALID", "EXPLICIT"]
BAD_FORMATS = ["NCDHW", "", "nhwc", "HWNC"]
BAD_PADDINGS = ["FULL", "", "same", "CAUSAL"]
BAD_DTYPES = ["int64", "uint8", "complex64"]
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4,
            "int64": 8, "uint8": 1, "complex64": 8}

OPS = {
    "conv2d": ("tf_ops_conv2d", ("input", "filter"), "forward"),
    "backprop_input": ("tf_ops_conv2d_backprop_input",
                       ("input_sizes", "filter", "out_backprop"), "input"),
    "backprop_input_v2": ("tf_ops_conv2d_backprop_input_v2",
                          ("input", "filter", "out_backprop"), "input"),
    "backprop_filter": ("tf_ops_conv2d_backprop_filter",
                        ("input", "filter_sizes", "out_backprop"), "filter"),
    "backprop_filter_v2": ("tf_ops_conv2d_backprop_filter_v2",
                           ("input", "filter", "out_backprop"), "filter"),
    "depthwise": ("tf_ops_depthwise_conv2d_native", ("input", "filter"), "forward"),
    "depthwise_backprop_input": ("tf_ops_depthwise_conv2d_native_backprop_input",
                                 ("input_sizes", "filter", "out_backprop"), "input"),
    "depthwise_backprop_filter": ("tf_ops_depthwise_conv2d_native_backprop_filter",
                                  ("input", "filter_sizes", "out_backprop"), "filter"),
}
assert set(OPS) == set(common.KINDS)
# The tensors whose values a direction reads.
VALUE_INPUTS = {"forward": ("input", "filter"), "input": ("filter", "out_backprop"),
                "filter": ("input", "out_backprop")}


def _found(kind, attrs, tensors, sizes=None, dtype="float32"):
    case = dict(kind=kind, dtype=dtype, mode="eager", family="corpus", mutations=[],
                values_seed=0, tensors=tensors,
                attrs=dict(dict(strides=[1, 1, 1, 1], padding="VALID", explicit_paddings=[],
                                data_format="NHWC", dilations=[1, 1, 1, 1]), **attrs))
    if sizes is not None:
        case["sizes"] = dict(shape=[len(sizes)], values=sizes)
    return case


_P62 = dict(padding="EXPLICIT", explicit_paddings=[0, 0, 0, 0, 2**62, 0, 0, 0],
            data_format="NCHW")
_SAME = dict(padding="SAME")
# Inputs fuzzing found, run before the generated ones on every run of their op.
CORPUS = [
    # NCHW output [1, 2, 2**62 + 1, 0]: empty, but 2 * (2**62 + 1) overflows in NCHW order.
    # The kernel checked the count in NHWC order only, then TensorShape::AddDim CHECK-failed
    # (SIGABRT).
    _found("conv2d", _P62, {"input": [1, 1, 1, 0], "filter": [1, 1, 1, 2]}),
    _found("depthwise", _P62, {"input": [1, 1, 1, 0], "filter": [1, 1, 1, 2]}),
    # Scratch buffers sized by a dim of an empty operand (in_depth 2**40, out depth 2**40):
    # std::bad_alloc escaped Compute (SIGSEGV in pybind11), or 8 GiB were zeroed (hang).
    _found("conv2d", {}, {"input": [1, 0, 1, 2**40], "filter": [0, 1, 2**40, 1]}),
    _found("backprop_input", dict(strides=[1, 2, 1, 1]),
           {"filter": [4, 0, 1, 2**40], "out_backprop": [1, 0, 2, 2**40]}, [1, 1, 1, 1]),
    _found("depthwise_backprop_input", dict(strides=[1, 2, 1, 1]),
           {"filter": [4, 0, 1, 2**40], "out_backprop": [1, 0, 2, 2**40]}, [1, 1, 1, 1]),
    # The filter gradient looped over the 2**40 images of an empty out_backprop (hang).
    _found("backprop_filter", {}, {"input": [2**40, 1, 0, 1], "out_backprop": [2**40, 1, 0, 1]},
           [1, 1, 1, 1]),
    _found("backprop_filter_v2", {}, {"input": [2**40, 1, 0, 1], "filter": [1, 1, 1, 1],
                                      "out_backprop": [2**40, 1, 0, 1]}),
    _found("depthwise_backprop_filter", {},
           {"input": [2**40, 1, 0, 1], "out_backprop": [2**40, 1, 0, 1]}, [1, 1, 1, 1]),
    # The tap loops walked the 2**40 rows of an empty [2**40, 0, 1, 1] filter (hang).
    _found("conv2d", _SAME, {"input": [1, 1, 1, 1], "filter": [2**40, 0, 1, 1]}),
    _found("depthwise", _SAME, {"input": [1, 1, 1, 1], "filter": [2**40, 0, 1, 1]}),
    _found("backprop_input", _SAME, {"filter": [2**40, 0, 1, 1], "out_backprop": [1, 1, 1, 1]},
           [1, 1, 1, 1]),
    _found("backprop_input_v2", _SAME, {"input": [1, 1, 1, 1], "filter": [2**40, 0, 1, 1],
                                        "out_backprop": [1, 1, 1, 1]}),
]
for _case in CORPUS:
    if not common.is_depthwise(_case["kind"]):
        _case["attrs"]["use_cudnn_on_gpu"] = True


def sizes_arg(kind):
    args = OPS[kind][1]
    return next((a for a in args if a.endswith("_sizes")), None)


def tensor_args(kind):
    return [a for a in OPS[kind][1] if not a.endswith("_sizes")]


def dims_of(fmt):
    """(row, col, depth) tensor dimensions of an activation in `fmt`."""
    return (2, 3, 1) if fmt == "NCHW" else (1, 2, 3)


def activation(fmt, n, h, w, c):
    return [n, c, h, w] if fmt == "NCHW" else [n, h, w, c]


def spatial(fmt, h, w, fill=1):
    return [fill, fill, h, w] if fmt == "NCHW" else [fill, h, w, fill]


def explicit(fmt, top, bottom, left, right):
    return ([0, 0, 0, 0, top, bottom, left, right] if fmt == "NCHW" else
            [0, 0, top, bottom, left, right, 0, 0])


def prod(values):
    return math.prod(int(v) for v in values)


def sequential_overflow(dims):
    """True where multiplying `dims` left to right in int64 overflows (TensorShape's rule)."""
    n = 1
    for d in dims:
        n *= d
        if n > INT64_MAX:
            return True
    return False


# ----------------------------------------------------------------------------------------
# The model: which inputs must give a result, which must give an error.

# One spatial dimension: the model of the geometry's int64 arithmetic shared with
# test_geometry_int64.py.
window = common.window_int64


def predict(case):
    """{'outcome': 'ok' | 'error' | 'either' | 'skip', 'reason', ...}: what the op must do.
    'either' is for inputs whose exact geometry is valid but whose 64-bit arithmetic
    overflows; 'skip' for valid inputs too large to compute here."""
    kind, a = case["kind"], case["attrs"]
    direction = OPS[kind][2]
    depthwise = common.is_depthwise(kind)

    def error(reason, absurd=False):
        return {"outcome": "error", "reason": reason, "absurd": absurd}

    if case["dtype"] not in [d.name for d in common.KINDS[kind]]:
        return error("dtype")
    fmt, padding = a["data_format"], a["padding"]
    if fmt not in FORMATS:
        return error("data_format")
    if padding not in PADDINGS:
        return error("padding")
    hd, wd, cd = dims_of(fmt)
    for name in ("strides", "dilations"):
        v = a[name]
        if len(v) != 4:
            return error(f"{name} length")
        if v[0] != 1 or v[cd] != 1:
            return error(f"batch/depth {name}")
        if v[hd] <= 0 or v[wd] <= 0:
            return error(f"non-positive {name}")
    pads = a["explicit_paddings"]
    if padding == "EXPLICIT":
        if len(pads) != 8:
            return error("explicit_paddings length")
        if any(p < 0 for p in pads):
            return error("negative explicit_paddings")
        if pads[0] or pads[1] or pads[2 * cd] or pads[2 * cd + 1]:
            return error("batch/depth explicit_paddings")
    elif pads:
        return error("explicit_paddings without EXPLICIT")

    t = case["tensors"]
    for name in t:
        if len(t[name]) != 4:
            return error(f"{name} rank")
    x_shape, w_shape = t.get("input"), t.get("filter")
    sizes_name = sizes_arg(kind)
    if sizes_name:
        s = case["sizes"]
        if len(s["shape"]) != 1:
            return error("sizes rank")
        values = list(s["values"])
        two = sizes_name == "input_sizes" and not depthwise
        if len(values) == 2 and two:
            ordered = [0] * 4
            ordered[0], ordered[hd], ordered[wd] = t["out_backprop"][0], values[0], values[1]
            ordered[cd] = w_shape[2]
            values = ordered
        elif len(values) != 4:
            return error("sizes count")
        if any(v < 0 for v in values):
            return error("negative sizes")
        if sequential_overflow(values):
            return error("sizes overflow")
        if sizes_name == "input_sizes":
            x_shape = values
        else:
            w_shape = values

    n, h, w, c = x_shape[0], x_shape[hd], x_shape[wd], x_shape[cd]
    kh, kw = w_shape[0], w_shape[1]
    if depthwise:
        if w_shape[2] != c:
            return error("depthwise depth mismatch")
        fi, k_out = 1, w_shape[2] * w_shape[3]
        if k_out > INT64_MAX:
            return error("depthwise out depth overflow")
    else:
        fi, k_out = w_shape[2], w_shape[3]
    if fi <= 0:
        return error("filter depth 0")
    if c % fi:
        return error("depth not divisible")
    groups = c // fi
    if groups > 0 and k_out % groups:
        return error("out depth not divisible by groups")
    pads_h = (pads[2 * hd], pads[2 * hd + 1]) if padding == "EXPLICIT" else (0, 0)
    pads_w = (pads[2 * wd], pads[2 * wd + 1]) if padding == "EXPLICIT" else (0, 0)
    oh, pt, pb, over_h = window(h, kh, a["dilations"][hd], a["strides"][hd], padding, pads_h)
    ow, pl, pr, over_w = window(w, kw, a["dilations"][wd], a["strides"][wd], padding, pads_w)
    if oh < 0 or ow < 0:
        return error("negative output size")
    overflow = over_h or over_w
    for dims in ([n, h, w, c], [kh, kw, fi, k_out], [n, oh, ow, k_out]):
        if prod(dims) > INT64_MAX:
            return error("tensor of more than 2**63 - 1 elements")
        overflow |= sequential_overflow(dims)
    if "out_backprop" in t:
        dy = t["out_backprop"]
        if dy[0] != n:
            return error("batch mismatch")
        if dy[cd] != k_out:
            return error("out depth mismatch")
        if dy[hd] != oh or dy[wd] != ow:
            return error("out_backprop spatial mismatch")

    if direction == "forward":
        out_shape = activation(fmt, n, oh, ow, k_out)
    elif direction == "input":
        out_shape = list(x_shape)
    else:
        out_shape = list(w_shape)
    if sequential_overflow(out_shape):
        # Empty, but a TensorShape cannot hold it: its products, taken in the output's own
        # dimension order, overflow int64.
        return error("output shape not representable")
    out_elements = prod(out_shape)
    if kind == "conv2d" and out_elements and prod(w_shape) == 0:
        return error("empty filter")  # as TensorFlow's Conv2D
    nbytes = out_elements * ITEMSIZE[case["dtype"]]
    if nbytes > INT64_MAX or nbytes >= ABSURD_BYTES:
        return error("output too large to allocate", absurd=True)
    shapes = {"input": x_shape, "filter": w_shape,
              "out_backprop": activation(fmt, n, oh, ow, k_out)}
    value_empty = any(prod(shapes[v]) == 0 for v in VALUE_INPUTS[direction])
    geo = dict(fmt=fmt, n=n, h=h, w=w, c=c, kh=kh, kw=kw, fi=fi, k=k_out, groups=groups,
               oh=oh, ow=ow, pt=pt, pb=pb, pl=pl, pr=pr, sh=a["strides"][hd],
               sw=a["strides"][wd], dh=a["dilations"][hd], dw=a["dilations"][wd])
    result = {"outcome": "either" if overflow else "ok", "reason": "valid", "absurd": False,
              "out_shape": out_shape, "x_shape": x_shape, "w_shape": w_shape, "geo": geo,
              "zeros": value_empty or groups == 0}
    if out_elements and not result["zeros"]:
        per_output = {"forward": kh * kw * fi,
                      "input": kh * kw * (k_out // groups if groups else 0),
                      "filter": n * oh * ow}[direction]
        if out_elements > OUTPUT_CAP or out_elements * max(per_output, 1) > WORK_CAP:
            result["outcome"] = "skip"
    elif out_elements > OUTPUT_CAP:
        result["outcome"] = "skip"
    return result


# ----------------------------------------------------------------------------------------
# References.

def tap_indices(out_size, k, stride, dilation, before, in_size):
    """Per tap t of one dimension, the (output, input) index arrays with
    input = output * stride - before + t * dilation inside [0, in_size); exact integers."""
    taps = []
    for t in range(k):
        offset = t * dilation - before           # input = o * stride + offset
        lo = max(0, -(-(-offset) // stride))     # ceil(-offset / stride)
        hi = min(out_size, -(-(in_size - offset) // stride))
        if hi <= lo:
            taps.append(None)
            continue
        o = np.arange(lo, hi, dtype=np.int64)
        first = lo * stride + offset
        i = (np.arange(hi - lo, dtype=np.int64) * stride + first if hi - lo > 1
             else np.array([first], np.int64))
        taps.append((o, i))
    return taps


def indexed_reference(kind, pred, arrays):
    """A float64 reference by direct indexing, for any attribute sizes (no padded buffer)."""
    g = pred["geo"]
    direction = OPS[kind][2]
    nchw = g["fmt"] == "NCHW"
    to_nhwc = (lambda t: np.transpose(t, (0, 2, 3, 1))) if nchw else (lambda t: t)
    from_nhwc = (lambda t: np.transpose(t, (0, 3, 1, 2))) if nchw else (lambda t: t)
    n, c, k, groups, fi = g["n"], g["c"], g["k"], g["groups"], g["fi"]
    kg = k // groups
    rows = tap_indices(g["oh"], g["kh"], g["sh"], g["dh"], g["pt"], g["h"])
    cols = tap_indices(g["ow"], g["kw"], g["sw"], g["dw"], g["pl"], g["w"])
    if direction in ("forward", "input"):
        wf = np.asarray(arrays["filter"], np.float64).reshape(g["kh"], g["kw"], fi, groups, kg)
    if direction in ("forward", "filter"):
        x = to_nhwc(np.asarray(arrays["input"], np.float64))
    if direction in ("input", "filter"):
        dy = to_nhwc(np.asarray(arrays["out_backprop"], np.float64)).reshape(
            n, g["oh"], g["ow"], groups, kg)
    if direction == "forward":
        out = np.zeros((n, g["oh"], g["ow"], groups, kg))
    elif direction == "input":
        out = np.zeros((n, g["h"], g["w"], groups, fi))
    else:
        out = np.zeros((g["kh"], g["kw"], fi, groups, kg))
    for th, rt in enumerate(rows):
        if rt is None:
            continue
        ro, ri = rt
        for tw, ct in enumerate(cols):
            if ct is None:
                continue
            co, ci = ct
            if direction == "forward":
                patch = x[:, ri][:, :, ci].reshape(n, len(ri), len(ci), groups, fi)
                out[:, ro[:, None], co[None, :]] += np.einsum("nrcgi,igk->nrcgk", patch,
                                                              wf[th, tw])
            elif direction == "input":
                grad = dy[:, ro][:, :, co]
                out[:, ri[:, None], ci[None, :]] += np.einsum("nrcgk,igk->nrcgi", grad,
                                                              wf[th, tw])
            else:
                patch = x[:, ri][:, :, ci].reshape(n, len(ri), len(ci), groups, fi)
                out[th, tw] = np.einsum("nrcgi,nrcgk->igk", patch, dy[:, ro][:, :, co])
    if direction == "forward":
        return from_nhwc(out.reshape(n, g["oh"], g["ow"], k))
    if direction == "input":
        return from_nhwc(out.reshape(n, g["h"], g["w"], c))
    return out.reshape(pred["w_shape"])


def package_reference(kind, case, pred, arrays):
    """tf_ops.reference, where its zero-padded buffer is small; else None."""
    g = pred["geo"]
    if g["groups"] == 0:
        return None
    hp = max(g["h"] + g["pt"] + g["pb"], (g["oh"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1)
    wp = max(g["w"] + g["pl"] + g["pr"], (g["ow"] - 1) * g["sw"] + (g["kw"] - 1) * g["dw"] + 1)
    if g["n"] * max(hp, 0) * max(wp, 0) * g["c"] > 10**6 or hp > 10**6 or wp > 10**6:
        return None
    a = case["attrs"]
    kw = dict(strides=a["strides"], padding=a["padding"],
              explicit_paddings=a["explicit_paddings"], dilations=a["dilations"],
              data_format=a["data_format"], depthwise=common.is_depthwise(kind))
    direction = OPS[kind][2]
    if direction == "forward":
        return reference.conv2d(np.asarray(arrays["input"], np.float64),
                                np.asarray(arrays["filter"], np.float64), **kw)
    if direction == "input":
        return reference.conv2d_backprop_input(pred["x_shape"],
                                               np.asarray(arrays["filter"], np.float64),
                                               np.asarray(arrays["out_backprop"], np.float64),
                                               **kw)
    return reference.conv2d_backprop_filter(np.asarray(arrays["input"], np.float64),
                                            pred["w_shape"],
                                            np.asarray(arrays["out_backprop"], np.float64), **kw)


# ----------------------------------------------------------------------------------------
# Generation.

def draw_dim(draw, kind_of_dim):
    if kind_of_dim == "zero":
        return 0
    if kind_of_dim == "huge":
        return draw(st.sampled_from(HUGE_DIMS))
    return draw(st.integers(1, 3))


def build_case(kind, p, dtype, two_value_sizes=False):
    """A case from geometry parameters; out_backprop gets the shape the geometry gives (or
    p['dy_fallback'] where the output size is negative)."""
    fmt = p["fmt"]
    depthwise = common.is_depthwise(kind)
    if depthwise:
        c, k_out = p["groups"], p["groups"] * p["kg"]
        w_shape = [p["kh"], p["kw"], c, p["kg"]]
    else:
        c = p["groups"] * p["fi"]
        k_out = p["groups"] * p["kg"] if p["groups"] else p["kg"]
        w_shape = [p["kh"], p["kw"], p["fi"], k_out]
    x_shape = activation(fmt, p["n"], p["h"], p["w"], c)
    pads = p["pads"]
    oh = window(p["h"], p["kh"], p["dh"], p["sh"], p["padding"], pads[:2])[0]
    ow = window(p["w"], p["kw"], p["dw"], p["sw"], p["padding"], pads[2:])[0]
    if oh < 0 or ow < 0:
        oh, ow = p["dy_fallback"]
    shapes = {"input": x_shape, "filter": w_shape,
              "out_backprop": activation(fmt, p["n"], oh, ow, k_out)}
    attrs = dict(strides=spatial(fmt, p["sh"], p["sw"]), padding=p["padding"],
                 explicit_paddings=explicit(fmt, *pads) if p["padding"] == "EXPLICIT" else [],
                 data_format=fmt, dilations=spatial(fmt, p["dh"], p["dw"]))
    if not depthwise:
        attrs["use_cudnn_on_gpu"] = p["cudnn"]
    case = dict(kind=kind, dtype=dtype, attrs=attrs,
                tensors={name: list(shapes[name]) for name in tensor_args(kind)})
    sizes_name = sizes_arg(kind)
    if sizes_name:
        values = list(x_shape if sizes_name == "input_sizes" else w_shape)
        if two_value_sizes and sizes_name == "input_sizes" and not depthwise:
            values = [p["h"], p["w"]]
        case["sizes"] = dict(shape=[len(values)], values=values)
    return case


def draw_common(draw, kind):
    return dict(fmt=draw(st.sampled_from(FORMATS)), padding=draw(st.sampled_from(PADDINGS)),
                cudnn=draw(st.booleans()),
                dy_fallback=[draw(st.integers(0, 3)), draw(st.integers(0, 3))])


def draw_valid_params(draw, kind):
    p = draw_common(draw, kind)
    depthwise = common.is_depthwise(kind)
    p.update(n=draw(st.integers(1, 3)), h=draw(st.integers(1, 9)), w=draw(st.integers(1, 9)),
             kh=draw(st.integers(1, 4)), kw=draw(st.integers(1, 4)),
             sh=draw(st.integers(1, 3)), sw=draw(st.integers(1, 3)),
             dh=draw(st.integers(1, 3)), dw=draw(st.integers(1, 3)),
             pads=[draw(st.integers(0, 3)) for _ in range(4)])
    if depthwise:
        p.update(groups=draw(st.integers(1, 4)), fi=1, kg=draw(st.integers(1, 3)))
    else:
        p.update(groups=draw(st.sampled_from([1, 1, 2, 3])), fi=draw(st.integers(1, 3)),
                 kg=draw(st.integers(1, 3)))
    # One zero dim in a sixth of the cases (the degenerate family has many more).
    if draw(st.integers(0, 5)) == 0:
        p[draw(st.sampled_from(["n", "h", "w", "kh", "kw", "groups", "kg"]))] = 0
    return p


def draw_degenerate_params(draw, kind):
    """Zero dims, huge dims only in tensors that are empty, and huge attributes."""
    p = draw_valid_params(draw, kind)
    depthwise = common.is_depthwise(kind)
    names = ["n", "h", "w", "kh", "kw", "groups", "kg"] + ([] if depthwise else ["fi"])
    zeros = draw(st.lists(st.sampled_from(names[:-1] if not depthwise else names),
                          min_size=1, max_size=2, unique=True))
    for name in names:
        if name in zeros:
            p[name] = 0
        else:
            p[name] = draw_dim(draw, draw(st.sampled_from(["small", "small", "huge"])))
    for name in ("sh", "sw", "dh", "dw"):
        if draw(st.integers(0, 3)) == 0:
            p[name] = draw(st.sampled_from(HUGE_ATTRS))
    if p["padding"] == "EXPLICIT":
        p["pads"] = [draw(st.sampled_from(HUGE_ATTRS[:2])) if draw(st.integers(0, 3)) == 0
                     else v for v in p["pads"]]
    return p


def constructible(shape):
    """Small, or empty and accepted by TensorShape (left-to-right products within int64)."""
    return not sequential_overflow(shape) and (0 in shape or prod(shape) <= MAX_TENSOR_ELEMENTS)


def acceptable(case):
    """Every tensor can exist and be filled cheaply, sizes vectors are int32, and a valid
    case is small enough to compute and check."""
    for shape in case["tensors"].values():
        if any(not 0 <= d <= INT64_MAX for d in shape) or not constructible(shape):
            return False
    s = case.get("sizes")
    if s and (prod(s["shape"]) > 64 or any(not -2**31 <= v <= INT32_MAX for v in s["values"])):
        return False
    return predict(case)["outcome"] != "skip"


def draw_shape(draw, rank=None):
    """A shape of rank 0-5: small and non-empty, or with a zero and possibly huge dims."""
    if rank is None:
        rank = draw(st.integers(0, 5))
    if rank and draw(st.integers(0, 2)) == 0:
        zero_at = draw(st.integers(0, rank - 1))
        return [0 if i == zero_at else
                draw(st.sampled_from([1, 2, 3] + HUGE_DIMS)) for i in range(rank)]
    return [draw(st.integers(1, 4)) for _ in range(rank)]


def mutate(draw, case):
    """One adversarial change; returns its name."""
    kind, a = case["kind"], case["attrs"]
    options = ["strides_list", "dilations_list", "strides_elem", "dilations_elem",
               "pads_list", "pads_elem", "rank", "dim", "format_swap", "filter_depth",
               "bad_string"]
    if sizes_arg(kind):
        options += ["sizes_values", "sizes_elem", "sizes_rank"]
    if "out_backprop" in case["tensors"]:
        options += ["dy_mismatch", "dy_mismatch"]
    if case["mode"] == "eager":
        options += ["dtype"]
    what = draw(st.sampled_from(options))
    specials = st.sampled_from(ATTR_SPECIALS)
    if what in ("strides_list", "dilations_list"):
        a[what[:-5]] = draw(st.lists(specials, min_size=0, max_size=6))
    elif what in ("strides_elem", "dilations_elem"):
        v = a[what[:-5]]
        if v:
            v[draw(st.integers(0, len(v) - 1))] = draw(specials)
    elif what == "pads_list":
        a["padding"] = draw(st.sampled_from(PADDINGS))
        a["explicit_paddings"] = draw(st.lists(specials, min_size=0, max_size=10))
    elif what == "pads_elem":
        if a["padding"] != "EXPLICIT" or not a["explicit_paddings"]:
            a["padding"] = "EXPLICIT"
            a["explicit_paddings"] = [0] * 8
        v = a["explicit_paddings"]
        v[draw(st.integers(0, len(v) - 1))] = draw(specials)
    elif what == "rank":
        name = draw(st.sampled_from(sorted(case["tensors"])))
        case["tensors"][name] = draw_shape(draw)
    elif what == "dim":
        name = draw(st.sampled_from(sorted(case["tensors"])))
        shape = case["tensors"][name]
        if shape:
            i = draw(st.integers(0, len(shape) - 1))
            huge_ok = any(d == 0 for j, d in enumerate(shape) if j != i)
            shape[i] = draw(st.sampled_from([0, 1, 2, 3, 5] + (HUGE_DIMS if huge_ok else [])))
    elif what == "format_swap":
        a["data_format"] = "NCHW" if a["data_format"] == "NHWC" else "NHWC"
    elif what == "filter_depth":
        name = "filter" if "filter" in case["tensors"] else None
        if name and len(case["tensors"][name]) == 4:
            case["tensors"][name][draw(st.integers(2, 3))] = draw(st.integers(0, 5))
        elif case.get("sizes") and sizes_arg(kind) == "filter_sizes" and \
                len(case["sizes"]["values"]) == 4:
            case["sizes"]["values"][draw(st.integers(2, 3))] = draw(st.integers(0, 5))
    elif what == "bad_string":
        if draw(st.booleans()):
            a["padding"] = draw(st.sampled_from(BAD_PADDINGS))
        else:
            a["data_format"] = draw(st.sampled_from(BAD_FORMATS))
    elif what == "sizes_values":
        values = draw(st.lists(st.sampled_from(SIZE_SPECIALS), min_size=0, max_size=5))
        case["sizes"] = dict(shape=[len(values)], values=values)
    elif what == "sizes_elem":
        s = case["sizes"]
        if s["values"]:
            s["values"][draw(st.integers(0, len(s["values"]) - 1))] = \
                draw(st.sampled_from(SIZE_SPECIALS))
    elif what == "sizes_rank":
        shape = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 3)))]
        values = [draw(st.sampled_from(SIZE_SPECIALS)) for _ in range(prod(shape))]
        case["sizes"] = dict(shape=shape, values=values)
    elif what == "dy_mismatch":
        shape = case["tensors"]["out_backprop"]
        if shape:
            i = draw(st.integers(0, len(shape) - 1))
            shape[i] = max(0, shape[i] + draw(st.sampled_from([-1, 1, 2])))
    elif what == "dtype":
        allowed = [d.name for d in common.KINDS[kind]]
        case["dtype"] = draw(st.sampled_from(
            BAD_DTYPES + ([] if "int32" in allowed else ["int32"])))
    return what


def generate(data, kind):
    draw = data.draw
    dtype = draw(st.sampled_from([d.name for d in common.KINDS[kind]]))
    mode = "graph" if draw(st.integers(0, 5)) == 0 else "eager"
    family = draw(st.sampled_from(["valid"] * 11 + ["degenerate"] * 4 + ["adversarial"] * 5))
    values_seed = draw(st.integers(0, 2**32 - 1))
    case = None
    for _ in range(40):
        if family == "valid" or (family == "adversarial" and draw(st.booleans())):
            p = draw_valid_params(draw, kind)
        else:
            p = draw_degenerate_params(draw, kind)
        candidate = build_case(kind, p, dtype, two_value_sizes=draw(st.integers(0, 3)) == 0)
        candidate["mode"] = mode
        mutations = []
        if family == "adversarial":
            for _ in range(draw(st.integers(1, 3))):
                mutations.append(mutate(draw, candidate))
        if acceptable(candidate):
            case = candidate
            case["mutations"] = mutations
            break
    if case is None:  # a small valid case is always acceptable
        family = "fallback"
        case = build_case(kind, draw_valid_params(draw, kind), dtype)
        case["mode"], case["mutations"] = mode, []
        assert acceptable(case), case
    case["family"] = family
    case["values_seed"] = values_seed
    return case


# ----------------------------------------------------------------------------------------
# Running one case.

def random_array(rng, shape, dtype):
    if dtype in ("int32", "int64"):
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if dtype == "uint8":
        return rng.integers(0, 4, size=shape).astype(np.uint8)
    if dtype == "complex64":
        return rng.uniform(-1, 1, size=shape).astype(np.complex64)
    return rng.uniform(-1, 1, size=shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def materialize(case):
    """(tensors by argument name, numpy arrays of the non-empty ones)."""
    rng = np.random.default_rng(case["values_seed"])
    dtype = tf.as_dtype(case["dtype"])
    tensors, arrays = {}, {}
    for name in tensor_args(case["kind"]):
        shape = case["tensors"][name]
        if prod(shape) == 0:
            tensors[name] = tf.zeros(shape, dtype)
        else:
            arrays[name] = random_array(rng, shape, case["dtype"])
            tensors[name] = tf.constant(arrays[name], dtype)
    return tensors, arrays


def sizes_array(case):
    s = case["sizes"]
    return np.array(s["values"], np.int32).reshape(s["shape"])


class Outcome:
    def __init__(self, returned=None, error=None, at_trace=False, static_shape=None):
        self.returned, self.error = returned, error
        self.at_trace, self.static_shape = at_trace, static_shape


def call(case, lib):
    kind = case["kind"]
    fn = getattr(lib, OPS[kind][0])
    attrs = dict(case["attrs"])
    tensors, arrays = materialize(case)
    sizes_name = sizes_arg(kind)
    names = tensor_args(kind)
    if case["mode"] == "eager":
        kwargs = dict(tensors)
        if sizes_name:
            kwargs[sizes_name] = tf.constant(sizes_array(case))
        try:
            return Outcome(returned=fn(**kwargs, **attrs)), arrays
        except Exception as e:  # noqa: BLE001 - classified by the caller
            return Outcome(error=e), arrays
    specs = [tf.TensorSpec(case["tensors"][n], tensors[n].dtype) for n in names]

    def body(*args):
        kwargs = dict(zip(names, args))
        if sizes_name:
            kwargs[sizes_name] = tf.constant(sizes_array(case))
        return fn(**kwargs, **attrs)

    try:
        concrete = tf.function(body, input_signature=specs, autograph=False) \
            .get_concrete_function()
    except Exception as e:  # noqa: BLE001
        return Outcome(error=e, at_trace=True), arrays
    try:
        out = concrete(*[tensors[n] for n in names])
    except Exception as e:  # noqa: BLE001
        return Outcome(error=e), arrays
    return Outcome(returned=out, static_shape=concrete.structured_outputs.shape), arrays


# The forward ops' shape functions are TensorFlow's own: in a graph, ours must reject at
# construction exactly what TensorFlow's built-in op rejects there, whatever the kernels do.
BUILTIN_FORWARD = {"conv2d": "Conv2D", "depthwise": "DepthwiseConv2dNative"}


def builtin_rejects_at_trace(case):
    """Whether TensorFlow's built-in op raises at graph construction with this graph-mode
    case's static shapes, dtype and attributes; None where the case has no such twin."""
    name = BUILTIN_FORWARD.get(case["kind"])
    if name is None or case["mode"] != "graph":
        return None
    attrs = dict(case["attrs"])
    if name == "DepthwiseConv2dNative":
        attrs.pop("use_cudnn_on_gpu", None)
    raw = getattr(tf.raw_ops, name)
    try:
        dtype = tf.as_dtype(case["dtype"])
        specs = [tf.TensorSpec(case["tensors"][n], dtype) for n in tensor_args(case["kind"])]
        tf.function(lambda x, w: raw(input=x, filter=w, **attrs), input_signature=specs,
                    autograph=False).get_concrete_function()
    except Exception:  # noqa: BLE001 - any refusal at construction counts
        return True
    return False


def error_ok(case, pred, e, at_trace):
    """None if `e` is an allowed error for this case, else why not."""
    message = (getattr(e, "message", None) or str(e)).strip()
    if not message:
        return f"{type(e).__name__} with an empty message"
    allowed = (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)
    if at_trace:
        # Graph construction reports shape-function and attribute errors as ValueError,
        # and a dtype outside the op's list as TypeError.
        allowed = allowed + (ValueError,) + ((TypeError,) if pred["reason"] == "dtype" else ())
    if isinstance(e, tf.errors.ResourceExhaustedError) and pred.get("absurd"):
        return None
    if not isinstance(e, allowed):
        return f"unexpected {type(e).__name__}"
    if pred["outcome"] == "ok":
        return "rejected a valid input" + (" (at graph construction)" if at_trace else "")
    return None


def check(case, pred, outcome, arrays):
    """(what happened, failure symptom or None): 'error', or 'result' (where the result was
    wrong before it could be compared), 'result-empty', 'result-zeros' (an empty sum) or
    'result-values' (compared with the references)."""
    builtin_rejects = builtin_rejects_at_trace(case)
    if builtin_rejects is not None and builtin_rejects != outcome.at_trace:
        name = BUILTIN_FORWARD[case["kind"]]
        if builtin_rejects:
            return "result", f"TensorFlow's {name} rejects this at graph construction, ours built the node"
        return "error", (f"rejected at graph construction what TensorFlow's {name} accepts: "
                         f"{type(outcome.error).__name__}: {str(outcome.error)[:2000]}")
    if builtin_rejects and outcome.at_trace:
        why = error_ok(case, dict(pred, outcome="error"), outcome.error, True)
        return "error", (None if why is None else f"{why}: {str(outcome.error)[:2000]}")
    if outcome.error is not None:
        e = outcome.error
        why = error_ok(case, pred, e, outcome.at_trace)
        return "error", (None if why is None else
                         f"{why}: {type(e).__name__}: {str(e)[:2000]}")
    out = outcome.returned
    if pred["outcome"] == "error":
        return "result", (f"returned a tensor of shape {out.shape.as_list()} for an input it "
                          f"must reject ({pred['reason']})")
    if out.dtype.name != case["dtype"]:
        return "result", f"dtype {out.dtype.name} != {case['dtype']}"
    expected_shape = pred["out_shape"]
    if out.shape.as_list() != expected_shape:
        return "result", f"shape {out.shape.as_list()} != expected {expected_shape}"
    if outcome.static_shape is not None and \
            not outcome.static_shape.is_compatible_with(expected_shape):
        return "result", (f"static shape {outcome.static_shape} from the shape function is "
                          f"incompatible with the result shape {expected_shape}")
    if prod(expected_shape) == 0:
        return "result-empty", None
    actual = out.numpy()
    if pred["zeros"]:
        expected = np.zeros(expected_shape)
        checked = "result-zeros"
    else:
        checked = "result-values"
        expected = indexed_reference(case["kind"], pred, arrays)
        ref = package_reference(case["kind"], case, pred, arrays)
        if ref is not None and common.max_error(ref, expected) > 1e-9:
            return "result", ("the two float64 references disagree (tf_ops.reference vs "
                              f"indexed): max error {common.max_error(ref, expected):.3g}")
    err = common.max_error(actual, expected)
    tol = common.TOLERANCE[tf.as_dtype(case["dtype"])]
    if not err <= tol:
        return checked, f"wrong result: max error {err:.3g} > tolerance {tol:g}"
    return checked, None


# ----------------------------------------------------------------------------------------
# The loop.

class Log:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def write(self, record, sync=True):
        self.f.write(json.dumps(record, sort_keys=True) + "\n")
        self.f.flush()
        if sync:
            os.fsync(self.f.fileno())


def run_one(case, lib):
    """(pred, outcome kind, symptom) for one case."""
    pred = predict(case)
    outcome, arrays = call(case, lib)
    kind_of_outcome, symptom = check(case, pred, outcome, arrays)
    return pred, kind_of_outcome, symptom


def fuzz(kind, seed, examples, log_path, resume_after=None):
    lib = tf_ops.load_library()
    log = Log(log_path)
    counts = dict(examples=0, corpus=0, results=0, errors=0, failures=0,
                  skipped_for_resume=0)
    detail = {}
    index = itertools.count()
    seen = set()

    def bump(key):
        detail[key] = detail.get(key, 0) + 1

    def execute(i, case):
        case["index"] = i
        log.write(dict(event="input", **case))
        faulthandler.dump_traceback_later(CALL_TIMEOUT, exit=True)
        try:
            pred, got, symptom = run_one(case, lib)
        except Exception:  # noqa: BLE001
            pred, got, symptom = {"outcome": "?"}, "internal", \
                "worker error: " + traceback.format_exc()[-3000:]
        finally:
            faulthandler.cancel_dump_traceback_later()
        counts["examples"] += 1
        counts["results" if got.startswith("result") else "errors"] += 1
        bump(f"{case['family']}/{case['mode']}/{got.split('-')[0]}")
        bump(got)
        bump(f"expected-{pred['outcome']}")
        # Flushed, not synced: it survives the death of the process, which is what counts.
        log.write(dict(event="outcome", index=i, outcome=got.split("-")[0], detail=got,
                       failed=symptom is not None),
                  sync=False)
        if symptom is not None:
            counts["failures"] += 1
            if counts["failures"] <= MAX_FAILURE_LINES:
                log.write(dict(event="failure", index=i, symptom=symptom,
                               expected=pred.get("outcome"), reason=pred.get("reason"),
                               input=case))
            print(f"FAILURE #{i}: {symptom}\n  input: {json.dumps(case)}", file=sys.stderr,
                  flush=True)

    # The corpus first, with indices -N..-1, so that --resume-after works across both.
    corpus = [json.loads(json.dumps(c)) for c in CORPUS if c["kind"] == kind]
    for j, case in enumerate(corpus):
        i = j - len(corpus)
        if resume_after is None or i > resume_after:
            counts["corpus"] += 1
            execute(i, case)

    # Each op gets its own stream of inputs from the one user-facing seed.
    @hypothesis_seed(zlib.crc32(f"{seed}/{kind}".encode()))
    @settings(database=None, max_examples=examples, deadline=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck),
              print_blob=False, report_multiple_bugs=False)
    @given(st.data())
    def target(data):
        i = next(index)
        try:
            case = generate(data, kind)
        except Exception:  # noqa: BLE001 - a worker bug, reported as a failure
            counts["failures"] += 1
            log.write(dict(event="failure", index=i, symptom="generator error: " +
                           traceback.format_exc()[-3000:]))
            return
        # Different draws can end in the same input (the retries of `generate`, Hypothesis'
        # mutations of earlier inputs); run each input once, counting inputs that differ
        # only in their values as one. This happens in the skipped prefix of a resumed run
        # too, so that the inputs after it are the ones the first run would have generated,
        # and a resumed run never meets the input that killed its predecessor again.
        key = json.dumps(dict(case, values_seed=None), sort_keys=True)
        if key in seen:
            reject()
        seen.add(key)
        if resume_after is not None and i <= resume_after:
            counts["skipped_for_resume"] += 1
            return
        execute(i, case)

    target()
    summary = dict(event="summary", kind=kind, seed=seed, budget=examples,
                   resume_after=resume_after, **counts, detail=dict(sorted(detail.items())))
    log.write(summary)
    print(f"tf_ops fuzz {kind}: seed={seed} examples={counts['examples']} "
          f"(corpus {counts['corpus']}) "
          f"results={counts['results']} (values compared {detail.get('result-values', 0)}) "
          f"errors={counts['errors']} "
          f"failures={counts['failures']}", flush=True)
    return 1 if counts["failures"] else 0


def replay(source):
    """Runs one input (a JSON line, or the last input line of a log) and prints what
    happened."""
    if os.path.exists(source):
        lines = [json.loads(line) for line in open(source, encoding="utf-8") if line.strip()]
        records = [r for r in lines if r.get("event") == "input" or "input" in r]
        record = records[-1]
    else:
        record = json.loads(source)
    case = record.get("input", record) if record.get("event") == "failure" else record
    print("input:", json.dumps(case))
    pred, got, symptom = run_one(case, tf_ops.load_library())
    print("expected:", pred.get("outcome"), pred.get("reason"))
    print("outcome:", got)
    print("symptom:", symptom or "none (allowed outcome)")
    return 1 if symptom else 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", nargs="?", choices=sorted(OPS))
    parser.add_argument("seed", nargs="?", type=int)
    parser.add_argument("examples", nargs="?", type=int)
    parser.add_argument("log", nargs="?")
    parser.add_argument("--resume-after", type=int, default=None,
                        help="generate but do not run the inputs up to this index")
    parser.add_argument("--replay", help="a log file or one JSON input to run once")
    args = parser.parse_args(argv)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # Hypothesis caches (constants it collects from source) even without a database; keep
    # them out of the checkout.
    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        set_hypothesis_home_dir(pathlib.Path(tempfile.gettempdir()) / "tf_ops_fuzz_hypothesis")
    if args.replay:
        return replay(args.replay)
    if None in (args.kind, args.seed, args.examples, args.log):
        parser.error("KIND SEED EXAMPLES LOG are required without --replay")
    return fuzz(args.kind, args.seed, args.examples, args.log, args.resume_after)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
