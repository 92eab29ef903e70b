"""tf_ops.explain: the plan the CPU kernels (or, in a build with CUDA, the GPU kernels) would run
for one call of an op, without running it.

The plan comes from the op library (TfOpsExplain), which decides it as a
call of the op would now: for this processor's instruction set and the current exact mode; on
the GPU, the launches the CUDA kernels make. The same fields make up the line that every CPU op
call prints to stderr when TF_OPS_VERBOSE=1, so a plan can be checked against what ran
(_from_line reads either line).
"""
import argparse
import ctypes
import dataclasses
import sys
from typing import Mapping, Optional, Tuple

import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from tf_ops import _loader
from tf_ops import _vocabulary
from tf_ops import ops as _ops

FORWARD, BACKPROP_INPUT, BACKPROP_FILTER = (_vocabulary.names("direction").index(d)
                                           for d in ("forward", "backprop_input", "backprop_filter"))

# TensorFlow's op names: (direction, depthwise). Each is registered as "TfOps>" + name.
_RAW_OPS = _vocabulary.ops()

# The package's functions, by the op each one runs.
_FUNCTIONS = {
    "conv2d": "Conv2D",
    "conv2d_transpose": "Conv2DBackpropInput",
    "conv2d_backprop_input": "Conv2DBackpropInput",
    "conv2d_backprop_input_v2": "Conv2DBackpropInputV2",
    "conv2d_backprop_filter": "Conv2DBackpropFilter",
    "conv2d_backprop_filter_v2": "Conv2DBackpropFilterV2",
    "depthwise_conv2d_native": "DepthwiseConv2dNative",
    "depthwise_conv2d_backprop_input": "DepthwiseConv2dNativeBackpropInput",
    "depthwise_conv2d_backprop_filter": "DepthwiseConv2dNativeBackpropFilter",
}

# The dtype codes of TfOpsExplain: each dtype's position in the library's list.
_DTYPE_CODES = {tf.as_dtype(name): code for code, name in enumerate(_vocabulary.names("element"))}

# The CPU plan's algorithms, and the GPU plan's entries in the order they are tried: no launch (an
# empty tensor), CUTLASS's implicit GEMMs, our direct kernel (one thread an output, for groups of
# few output columns), our tiled GEMM on tensor cores (half, bfloat16) or on CUDA cores.
ALGORITHMS = _vocabulary.names("cpu_algorithm")
GPU_ALGORITHMS = _vocabulary.names("gpu_entry")

_BUFFER_SIZE = 4096


class _ReadOnlyDict(dict):
    """A dict that cannot be changed (Plan.blocking), hashable so that a Plan is."""

    def _read_only(self, *args, **kwargs):
        raise TypeError("a Plan's blocking cannot be changed")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only

    def __hash__(self):
        return hash(tuple(sorted(self.items())))

    def __reduce__(self):
        return (_ReadOnlyDict, (dict(self),))

    def __repr__(self):
        return repr(dict(self))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the CPU or GPU kernels run for one call of an op (tf_ops.explain), or ran (a
    TF_OPS_VERBOSE line).

    algorithm: the pass, one of ALGORITHMS ("direct": the direct sums), or on the GPU one of
        GPU_ALGORITHMS.
    inner_pass: the pass it runs inside, for one that runs another (space_to_depth runs banded
        or indirect over its copy), else None.
    direction: "forward", "backprop_input" or "backprop_filter".
    dtype: the element type ("float16", "bfloat16", "float32", "float64", "int32").
    layout: "NHWC" or "NCHW".
    isa: the instruction set of the micro-kernels (tf_ops.cpu_kernel_isa()); "cuda" on the GPU.
    accuracy: "direct" (every result a direct sum) or "winograd" (within Winograd's bound); on
        the GPU, float32 on CUTLASS's tensor cores: "tf32" or "tf32x3" (docs/accuracy.md).
    workspace_bytes: the memory the call takes beyond its inputs and output.
    work_units: the pieces of work the call splits into for the thread pool (on the GPU: thread
        blocks, every launch's).
    blocking: the pass's tiling and blocking choices, name to value (may be empty).
    device: "cpu" or "gpu".
    refused: the algorithms (on the GPU, the entries) the planner tried before `algorithm`, in
        order, each as (name, rule that refused it: _vocabulary.names("cpu_rule") or "gpu_rule");
        on the GPU, CUTLASS's status after can_implement's rule: can_implement(CUTLASS:_Error_...).
    """
    algorithm: str
    inner_pass: Optional[str]
    direction: str
    dtype: str
    layout: str
    isa: str
    accuracy: str
    workspace_bytes: int
    work_units: int
    blocking: Mapping[str, str] = dataclasses.field(default_factory=dict)
    device: str = "cpu"
    refused: Tuple[Tuple[str, str], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "blocking", _ReadOnlyDict(self.blocking or {}))
        object.__setattr__(self, "refused", tuple(tuple(r) for r in self.refused))

    def __str__(self):
        algorithm = self.algorithm + (f" (pass {self.inner_pass})" if self.inner_pass else "")
        blocking = ", blocking " + ",".join(f"{k}:{v}" for k, v in self.blocking.items()) if self.blocking else ""
        return (f"{algorithm}: {self.direction} {self.dtype} {self.layout} on {self.device} ({self.isa}), "
                f"accuracy {self.accuracy}, workspace {self.workspace_bytes} bytes, "
                f"work units {self.work_units}{blocking}"
                + (", refused " + ", ".join(f"{e} ({r})" for e, r in self.refused) if self.refused else ""))


def _parse_fields(line):
    """The key=value fields of a plan line, as a dict of strings in the line's order: a line
    of TfOpsExplain, or a TF_OPS_VERBOSE line ("tf_ops_verbose <device> key=value ...
    time_ms=<float>"), whose device is returned as the field "device"."""
    words = line.split()
    fields = {}
    if words[:1] == ["tf_ops_verbose"]:
        if len(words) < 2:
            raise ValueError(f"a tf_ops_verbose line without its device: {line!r}")
        fields["device"] = words[1]
        words = words[2:]
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"{word!r} is not a key=value field, in the plan line {line!r}")
        if key in fields:
            raise ValueError(f"the field {key!r} appears twice in the plan line {line!r}")
        fields[key] = value
    return fields


def _blocking(value):
    """The blocking field ("k:v,k:v") as a dict."""
    blocking = {}
    for item in filter(None, value.split(",")):
        key, _, val = item.partition(":")
        blocking[key] = val
    return blocking


def _plan(fields):
    """A Plan from the fields of _parse_fields."""
    try:
        return Plan(
            algorithm=fields["algorithm"],
            inner_pass=fields.get("pass"),
            direction=fields["direction"],
            dtype=fields["dtype"],
            layout=fields["layout"],
            isa=fields["isa"],
            accuracy=fields["accuracy"],
            workspace_bytes=int(fields["workspace_bytes"]),
            work_units=int(fields["work_units"]),
            blocking=_blocking(fields.get("blocking", "")),
            device=fields.get("device", "cpu"),
            refused=tuple(tuple(item.split(":", 1)) for item in filter(None, fields.get("refused", "").split(";"))),
        )
    except KeyError as e:
        raise ValueError(f"the plan line lacks the field {e.args[0]!r}: {fields}") from None


def _from_line(line):
    """The Plan of a TfOpsExplain line or a TF_OPS_VERBOSE line (its time_ms is left out)."""
    return _plan(_parse_fields(line))


def _error(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _list_string(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


def _resolve_op(op):
    """(raw op name, direction, depthwise, whether it is the function conv2d) of an op name."""
    if isinstance(op, bytes):
        op = op.decode()
    if callable(op) and getattr(op, "__module__", None) == _ops.__name__:
        op = op.__name__  # the function itself, e.g. tf_ops.conv2d
    if isinstance(op, str):
        raw = op[len("TfOps>"):] if op.startswith("TfOps>") else op
        if raw in _RAW_OPS:
            return (raw, *_RAW_OPS[raw], False)
        if op in _FUNCTIONS:
            return (_FUNCTIONS[op], *_RAW_OPS[_FUNCTIONS[op]], op == "conv2d")
    names = ", ".join(sorted(_RAW_OPS) + sorted(_FUNCTIONS))
    raise _error(f"explain: unknown op {op!r}; known: {names} (the op names may start with 'TfOps>')")


def _dims(value, name):
    """A shape as a list of ints."""
    try:
        if isinstance(value, tf.TensorShape):
            value = value.as_list()
        dims = list(value)
        if any(isinstance(d, bool) or d is None or int(d) != d for d in dims):
            raise TypeError
        return [int(d) for d in dims]
    except (TypeError, ValueError):
        raise _error(f"explain: {name} must be a list of integers, got {name}={value!r}") from None


def _allowed_dtypes(raw):
    """The dtypes the op TfOps>raw declares."""
    op_def = op_def_registry.get("TfOps>" + raw)
    return [tf.as_dtype(t) for attr in op_def.attr if attr.name == "T" for t in attr.allowed_values.list.type]


def _dtype_code(dtype, raw):
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError:
        raise _error(f"explain: dtype={dtype!r} is not a TensorFlow dtype") from None
    allowed = _allowed_dtypes(raw)
    if dtype not in allowed or dtype not in _DTYPE_CODES:
        names = ", ".join(t.name for t in allowed)
        raise _error(f"explain: TfOps>{raw} has no kernel for dtype {dtype.name}; it takes {names}")
    return _DTYPE_CODES[dtype], dtype


def _attrs(strides, dilations, padding, explicit_paddings, data_format):
    """The attributes as the op takes them, (strides, dilations, padding, explicit_paddings), from
    the forms the package's functions take too: strides and dilations as an int or 1, 2 or 4
    values, padding as a list of (before, after) pairs. The library checks their values as the
    op's kernels check its attributes."""
    try:
        strides = _ops._sequence(strides, "strides", data_format)
        dilations = _ops._sequence(dilations, "dilations", data_format)
    except (TypeError, ValueError) as e:
        raise _error(f"explain: {e}") from None
    if isinstance(padding, bytes):
        padding = padding.decode()
    given = list(explicit_paddings) if explicit_paddings is not None else []
    if isinstance(padding, (list, tuple)):
        if given:
            raise _error("explain: padding as a list of pairs and explicit_paddings cannot both be given")
        try:
            padding, given = _ops._padding(padding)
        except (TypeError, ValueError) as e:
            raise _error(f"explain: {e}") from None
    elif padding not in ("SAME", "VALID", "EXPLICIT"):
        raise _error(f"explain: padding must be 'SAME', 'VALID', 'EXPLICIT' or a list of 4 (before, after) "
                     f"pairs, got padding={padding!r}")
    return strides, dilations, padding, _dims(given, "explicit_paddings")


_FUNCTION = None


def _explain_function():
    """TfOpsExplain of the loaded op library, through ctypes."""
    global _FUNCTION
    if _FUNCTION is None:
        int64s = ctypes.POINTER(ctypes.c_int64)
        _FUNCTION = _loader.c_function(
            "TfOpsExplain", ctypes.c_int64, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                             int64s, int64s, int64s, int64s, ctypes.c_int64, ctypes.c_char_p,
                                             ctypes.c_int64])
    return _FUNCTION


def _explain_line(device, direction, dtype, data_format, padding, sizes, strides, dilations, explicit_paddings):
    """The line TfOpsExplain writes for these arguments (the whole line, however long)."""
    fn = _explain_function()

    def int64s(values):
        return (ctypes.c_int64 * max(1, len(values)))(*values)

    arguments = (1 if device == "gpu" else 0, direction, dtype, data_format.encode(), padding.encode(), int64s(sizes), int64s(strides),
                 int64s(dilations), int64s(explicit_paddings), len(explicit_paddings))
    size = _BUFFER_SIZE
    while True:
        out = ctypes.create_string_buffer(size)
        length = fn(*arguments, out, size)
        if length < size:
            return out.value.decode()
        size = length + 1


def _arguments(op, input_shape, filter_shape, strides, padding, data_format, dilations, dtype,
               explicit_paddings):
    """The arguments of _explain_line for a call: (direction, dtype code, data_format, padding,
    sizes, strides, dilations, explicit_paddings)."""
    raw, direction, depthwise, folds_batch = _resolve_op(op)
    dtype_code, _ = _dtype_code(dtype, raw)
    if isinstance(data_format, bytes):
        data_format = data_format.decode()
    if data_format not in ("NHWC", "NCHW"):
        raise _error(f"explain: data_format must be 'NHWC' or 'NCHW', got data_format={data_format!r}")
    shape = _dims(input_shape, "input_shape")
    if len(shape) != 4 and not (folds_batch and len(shape) > 4):
        ranks = "4 or more dimensions" if folds_batch else "4 dimensions"
        raise _error(f"explain: input_shape must have {ranks}, got input_shape={_list_string(shape)} "
                     f"(rank {len(shape)})")
    if len(shape) > 4:  # conv2d folds leading batch dimensions into one
        batch = 1
        for d in shape[:-3]:
            batch *= d
        shape = [batch] + shape[-3:]
    filt = _dims(filter_shape, "filter_shape")
    if len(filt) != 4:
        raise _error(f"explain: filter_shape must have 4 dimensions, got filter_shape={_list_string(filt)} "
                     f"(rank {len(filt)})")
    n, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if data_format == "NCHW" else shape
    kh, kw, fi, k = filt
    if depthwise:
        if fi != c:
            raise _error(f"{raw}: input and filter must have the same depth: {c} vs {fi} "
                         f"(input shape {_list_string(shape)}, filter shape {_list_string(filt)})")
        fi, k = 1, fi * k
    attrs = _attrs(strides, dilations, padding, explicit_paddings, data_format)
    return (direction, dtype_code, data_format, attrs[2], [n, h, w, c, kh, kw, fi, k], attrs[0], attrs[1],
            attrs[3])


def explain(op, input_shape=None, filter_shape=None, strides=1, padding="VALID", data_format="NHWC", dilations=1,
            dtype=tf.float32, explicit_paddings=None, device="cpu"):
    """The plan tf_ops' CPU kernels would run for one call of `op`, now (this processor's
    instruction set, the current exact mode), without running it: a tf_ops.Plan. With
    device="gpu" (a build with CUDA), the launches of the GPU kernels instead.

    op: TensorFlow's op name ("Conv2D", "Conv2DBackpropInput", ..., also with the "TfOps>"
        prefix) or the package's function, or its name ("conv2d", "conv2d_transpose", ...).
    input_shape: the shape of the forward convolution's input in data_format (for the
        backprop-input ops, TensorFlow's input_sizes: 4 values).
    filter_shape: [KH, KW, FI, K] (grouped: FI divides the input depth); depthwise:
        [KH, KW, C, M].
    strides, dilations: an int, 2 values (rows, columns) or 4 in data_format order.
    padding: "VALID", "SAME", "EXPLICIT" (with explicit_paddings: TensorFlow's 8 values in
        data_format order) or a list of 4 (before, after) pairs.
    dtype: a tf.DType or what tf.as_dtype takes, one of the op's dtypes.

    Raises tf.errors.InvalidArgumentError, naming the value, for arguments the op would
    reject.

    Given a graph instead of an op (a GraphDef, a tf.Graph or a ConcreteFunction, and no other
    argument), what tf_ops.enable() makes of it: tf_ops.explain_rewrite(graph).
    """
    if isinstance(op, (tf.compat.v1.GraphDef, tf.Graph)) or isinstance(getattr(op, "graph", None), tf.Graph):
        from tf_ops import _enable
        return _enable.explain_rewrite(op)
    if device not in ("cpu", "gpu"):
        raise _error(f"explain: device must be 'cpu' or 'gpu', got device={device!r}")
    line = _explain_line(device, *_arguments(op, input_shape, filter_shape, strides, padding, data_format, dilations,
                                             dtype, explicit_paddings))
    if line.startswith("error:"):
        raise _error(line[len("error:"):].strip())
    return _from_line(line)


def _int_list(text):
    """An argparse type: comma-separated integers."""
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv=None):
    """python -m tf_ops explain: prints the plan of one call, a field a line; exit status 2,
    with the message on stderr, for arguments the op would reject."""
    parser = argparse.ArgumentParser(
        prog="python -m tf_ops explain",
        description="The plan tf_ops' CPU kernels would run for one call of an op, on this processor "
                    "and in the current exact mode (TF_OPS_EXACT=1: exact mode), without running it; with "
                    "--device gpu, the GPU kernels' launches (a build with CUDA).")
    parser.add_argument("op", help="TensorFlow's op name (Conv2D, Conv2DBackpropInput, ...) or the function's "
                                   "(conv2d, conv2d_transpose, ...)")
    parser.add_argument("--input", required=True, type=_int_list, metavar="N,H,W,C",
                        help="shape of the forward convolution's input, in --data-format order "
                             "(the backprop-input ops' input_sizes)")
    parser.add_argument("--filter", required=True, type=_int_list, metavar="KH,KW,FI,K",
                        help="filter shape (depthwise: KH,KW,C,M)")
    parser.add_argument("--strides", type=_int_list, default=[1], help="1, 2 or 4 values (default 1)")
    parser.add_argument("--dilations", type=_int_list, default=[1], help="1, 2 or 4 values (default 1)")
    parser.add_argument("--padding", default="VALID", help="VALID (default), SAME or EXPLICIT")
    parser.add_argument("--explicit-paddings", type=_int_list, default=None, metavar="PADDINGS",
                        help="with --padding EXPLICIT: TensorFlow's 8 values, in --data-format order")
    parser.add_argument("--data-format", default="NHWC", help="NHWC (default) or NCHW")
    parser.add_argument("--dtype", default="float32", help="float16, bfloat16, float32 (default), float64 or int32")
    parser.add_argument("--device", default="cpu", help="cpu (default) or gpu")
    args = parser.parse_args(argv)
    try:
        plan = explain(args.op, args.input, args.filter, strides=args.strides, padding=args.padding,
                       data_format=args.data_format, dilations=args.dilations, dtype=args.dtype,
                       explicit_paddings=args.explicit_paddings, device=args.device)
    except tf.errors.InvalidArgumentError as e:
        print(f"python -m tf_ops explain: {e.message}", file=sys.stderr)
        return 2
    rows = [("algorithm", plan.algorithm)]
    if plan.inner_pass:
        rows.append(("pass", plan.inner_pass))
    rows += [("direction", plan.direction), ("dtype", plan.dtype), ("layout", plan.layout),
             ("device", plan.device), ("isa", plan.isa), ("accuracy", plan.accuracy),
             ("workspace_bytes", plan.workspace_bytes), ("work_units", plan.work_units)]
    if plan.blocking:
        rows.append(("blocking", ", ".join(f"{k}={v}" for k, v in plan.blocking.items())))
    rows += [("refused", f"{entry}: {rule}") for entry, rule in plan.refused]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0
