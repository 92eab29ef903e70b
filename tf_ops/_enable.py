"""tf_ops.enable(): TensorFlow's own graphs (tf.function, Keras fit/predict/evaluate, loaded
SavedModels, tf.compat.v1 sessions) run their convolutions on the TfOps> kernels, without a
change to the code that builds them.

The op library holds a plugin graph optimizer (cc/kernels/graph_plugin.cc) that TensorFlow's
meta-optimizer runs over every graph it optimizes for CPU (and GPU, where the library's GPU
kernels are registered): it replaces Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, their
V2 forms, the depthwise ops and the remapper's _FusedConv2D / _FusedDepthwiseConv2dNative with
the TfOps> ops (the rules: cc/kernels/graph_rewrite.h). The optimizer is registered the first
time enable() is called, never at import; from then on a switch, read each time it runs, says
whether it rewrites. Graphs are optimized when a function is first traced and run: functions
that ran before enable() keep their graphs, and eager ops are not graphs (docs/enable.md).
"""
import contextlib
import ctypes
import dataclasses
import os
import runpy
import sys
import warnings
from typing import List, Tuple

import tensorflow as tf

from tf_ops import _loader

_BUFFER = 4096


def _device_types():
    """The device types the rewrite registers for: CPU, and GPU where the library's GPU kernels
    are registered in this process."""
    types = ["CPU"]
    if (_loader.build_info().get("cuda") and not _loader.gpu_support()
            and tf.config.list_physical_devices("GPU")):
        types.append("GPU")
    return types


def _plugin_optimizers_off():
    return tf.config.optimizer.get_experimental_options().get("use_plugin_optimizers") is False


def enable():
    """From now on, graphs TensorFlow optimizes run their convolutions on tf_ops's kernels (see
    the module's doc). Registers the graph optimizer the first time; raises RuntimeError, and
    changes nothing, where another plugin optimizer already holds a device type (TensorFlow
    takes one per device type). Calling it again is harmless."""
    register = _loader.c_function("TfOpsGraphRegister", ctypes.c_int64,
                                  [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64])
    out = ctypes.create_string_buffer(_BUFFER)
    size = register(",".join(_device_types()).encode(), out, _BUFFER)
    if size:
        raise RuntimeError(f"tf_ops.enable(): {out.value.decode()}")
    _loader._switch("rewrite", True)
    if _plugin_optimizers_off():
        warnings.warn("tf_ops.enable(): tf.config.optimizer's use_plugin_optimizers is off, so TensorFlow runs no "
                      "plugin optimizer: graphs keep TensorFlow's convolutions until it is turned on", stacklevel=2)


def disable():
    """Graphs optimized from now on keep TensorFlow's own convolutions. Functions already
    traced and run keep the graphs they were optimized to."""
    _loader._switch("rewrite", False)


def is_enabled():
    """Whether the rewrite is on (enable() called, disable() not since)."""
    return bool(_loader.c_function("TfOpsSwitch", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int])(b"rewrite", -1))


@contextlib.contextmanager
def enabled():
    """`with tf_ops.enabled():` enable() inside, the setting before restored after."""
    before = is_enabled()
    enable()
    try:
        yield
    finally:
        if not before:
            disable()


@dataclasses.dataclass(frozen=True)
class RewriteEntry:
    """What the rewrite does with one node of the family: `became` the ops it becomes (the TfOps
    op first), or, where it is left alone, empty, with the `rule` that refused it and why."""
    node: str
    op: str
    became: Tuple[str, ...]
    rule: str = ""
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """explain_rewrite's answer: the rewritten GraphDef and an entry per node of the family."""
    graph_def: object
    entries: Tuple[RewriteEntry, ...]

    @property
    def rewritten(self) -> List[RewriteEntry]:
        return [e for e in self.entries if e.became]

    @property
    def kept(self) -> List[RewriteEntry]:
        return [e for e in self.entries if not e.became]

    def __str__(self):
        return "\n".join(
            f"rewrote {e.node} {e.op} -> {'+'.join(e.became)}" if e.became
            else f"kept {e.node} {e.op}: {e.rule} ({e.detail})" for e in self.entries)


def _parse_report(text):
    entries = []
    for line in text.splitlines():
        if line.startswith("rewrote "):
            head, became = line[len("rewrote "):].rsplit(" -> ", 1)
            node, op = head.rsplit(" ", 1)
            entries.append(RewriteEntry(node, op, tuple(became.split("+"))))
        elif line.startswith("kept "):
            head, why = line[len("kept "):].split(": ", 1) if ": " in line else (line[5:], "")
            node, op = head.rsplit(" ", 1)
            rule, _, detail = why.partition(" (")
            entries.append(RewriteEntry(node, op, (), rule, detail[:-1] if detail.endswith(")") else detail))
    return tuple(entries)


def _serialized(graph):
    """The serialized GraphDef of a GraphDef, a tf.Graph, a ConcreteFunction or bytes."""
    if isinstance(graph, (bytes, bytearray)):
        return bytes(graph)
    if isinstance(graph, tf.compat.v1.GraphDef):
        return graph.SerializeToString()
    if isinstance(graph, tf.Graph):
        return graph.as_graph_def().SerializeToString()
    if hasattr(graph, "graph") and isinstance(graph.graph, tf.Graph):  # a ConcreteFunction
        return graph.graph.as_graph_def().SerializeToString()
    raise TypeError(f"explain_rewrite takes a GraphDef, a tf.Graph or a ConcreteFunction, not {type(graph).__name__}")


def explain_rewrite(graph, device="/device:CPU:0"):
    """What tf_ops.enable() does to `graph` (a GraphDef, a tf.Graph, a ConcreteFunction or a
    serialized GraphDef), now,
    without running it: a Rewrite, whose str() lists which nodes become which ops and which are
    left alone and why (the lines TF_OPS_VERBOSE=1 prints as each graph is rewritten). Nodes
    with no device are taken as placed on `device` (TensorFlow places them before it optimizes;
    None or "" leaves them unplaced)."""
    data = _serialized(graph)
    rewrite = _loader.c_function("TfOpsGraphRewrite", ctypes.c_int64,
                                 [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64])
    size = 2 * len(data) + _BUFFER
    while True:
        out = ctypes.create_string_buffer(size)
        need = rewrite(data, len(data), (device or "").encode(), out, size)
        if need < 0:
            raise ValueError("explain_rewrite: the graph is not a valid GraphDef")
        if need <= size:
            break
        size = need
    raw = out.raw[:need]
    graph_size = int.from_bytes(raw[:8], "little")
    graph_def = tf.compat.v1.GraphDef.FromString(raw[8:8 + graph_size])
    return Rewrite(graph_def, _parse_report(raw[8 + graph_size:].decode()))


def enable_from_environment():
    """TF_OPS_ENABLE=1 at import: enable(); where it cannot, a warning saying why (the import
    goes on, without the rewrite)."""
    if os.environ.get("TF_OPS_ENABLE") != "1":
        return
    try:
        enable()
    except RuntimeError as e:
        disable()
        warnings.warn(f"TF_OPS_ENABLE=1: {e}", stacklevel=3)


def run_main(argv):
    """python -m tf_ops run SCRIPT [ARGS...] (or -m MODULE [ARGS...]): runs an unchanged script
    with enable() on, as `python SCRIPT ARGS` would run it."""
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print("usage: python -m tf_ops run SCRIPT [ARGS...] | python -m tf_ops run -m MODULE [ARGS...]\n\n"
              "Runs the script (or module) as python would, with tf_ops.enable() on: its TensorFlow graphs run "
              "their convolutions on tf_ops's kernels (docs/enable.md).", file=sys.stderr if argv[:1] != ["-h"]
              and argv[:1] != ["--help"] else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    enable()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0
