"""Fuzzing tf_ops.enable()'s rewrite with malformed and hostile graphs (a SavedModel can come
from anywhere): missing or mistyped attributes, wrong input counts, unknown dtypes, huge or
negative sizes, names that collide, devices that are not devices, fused_ops lists of any kind,
a function library whose functions call themselves. The graphs go through the same rewrite the
plugin optimizer runs (tf_ops.explain_rewrite), in a subprocess so that a crash fails the test
with its seed instead of taking pytest down.

The only allowed outcomes, for each node: left exactly as it was, or rewritten into nodes that
TensorFlow's importer accepts (each op's definition, attributes and input counts and types, with
its inputs fed by placeholders of the types the node expects) and that a second pass leaves
alone; the graph's other nodes and its library unchanged; new names unique.

    pytest -q tests/test_enable_fuzz.py                    (the tier's budget)
    TF_OPS_ENABLE_FUZZ_GRAPHS=5000 pytest -q tests/test_enable_fuzz.py
    python tests/test_enable_fuzz.py SEED GRAPHS           one run by hand
"""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tiers import budget  # noqa: E402

GRAPHS = budget("TF_OPS_ENABLE_FUZZ_GRAPHS", fast=150, exhaustive=1500)
SEED = int(os.environ.get("TF_OPS_FUZZ_SEED", "20261208"))

FAMILY = ["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropInputV2", "Conv2DBackpropFilter", "Conv2DBackpropFilterV2",
          "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
          "_FusedConv2D", "_FusedDepthwiseConv2dNative"]
HUGE = [-2**63, -2**31, -1, 0, 1, 2, 3, 2**31 - 1, 2**31, 2**62, 2**63 - 1]
DEVICES = ["", "/job:localhost/replica:0/task:0/device:CPU:0", "/device:CPU:0", "/cpu:0", "/device:GPU:0",
           "/device:TPU:0", "/device:CPU:99999999999999999999", "garbage", "/job:a/replica:-1/task:x/device:CPU:0"]
WORDS = ["SAME", "VALID", "EXPLICIT", "NHWC", "NCHW", "NCHW_VECT_C", "HWIO", "OIHW", "", "BiasAdd", "Add", "Relu",
         "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", "FusedBatchNorm", "GeluExact", "_MklSwish", "\xff"]


def _random_attr(rng, attr_value_pb2):
    kind = rng.integers(9)
    value = attr_value_pb2.AttrValue()
    if kind == 0:
        value.s = str(rng.choice(WORDS)).encode("utf-8", "surrogatepass")
    elif kind == 1:
        value.i = int(rng.choice(HUGE))
    elif kind == 2:
        value.f = float(rng.choice([np.nan, np.inf, -1.0, 0.0, 1e30]))
    elif kind == 3:
        value.b = bool(rng.integers(2))
    elif kind == 4:
        value.type = int(rng.choice([0, 1, 2, 3, 14, 19, 23, 101, 9999]))
    elif kind == 5:
        value.list.i.extend(int(v) for v in rng.choice(HUGE, size=rng.integers(0, 10)))
    elif kind == 6:
        value.list.s.extend(str(w).encode("utf-8", "surrogatepass") for w in rng.choice(WORDS, size=rng.integers(0, 5)))
    elif kind == 7:
        value.list.type.extend(int(t) for t in rng.choice([1, 2, 3, 14, 19, 9999], size=rng.integers(0, 6)))
    else:
        value.shape.dim.add().size = int(rng.choice(HUGE))
    return value


def _base_graph(tf):
    """Every op of the family, placed on the CPU, and fused nodes of every list the rewrite
    unfolds, their args fed by placeholders."""
    sys.path.insert(0, str(HERE))
    import test_enable_rules as rules
    graph_def = rules._family_graph()
    for i, (fused_ops, num_args) in enumerate([(["BiasAdd"], 1), (["BiasAdd", "Relu"], 1), (["BiasAdd", "Add"], 2),
                                                 (["FusedBatchNorm", "Relu"], 4)]):
        node = rules._fused(f"fused{i}", fused_ops, num_args)
        node.input[2:] = [f"arg{i}_{k}" for k in range(num_args)]
        graph_def.node.append(node)
        for k in range(num_args):
            arg = graph_def.node.add(name=f"arg{i}_{k}", op="Placeholder", device=rules.CPU)
            arg.attr["dtype"].type = tf.float32.as_datatype_enum
    node = rules._fused("fused_dw", ["BiasAdd", "Relu6"], 1, op="_FusedDepthwiseConv2dNative")
    node.input[2] = "arg0_0"
    graph_def.node.append(node)
    return graph_def


def _mutate(rng, graph_def, attr_value_pb2):
    nodes = [n for n in graph_def.node if n.op in FAMILY]
    for _ in range(rng.integers(1, 6)):
        node = nodes[rng.integers(len(nodes))]
        what = rng.integers(12)
        keys = sorted(node.attr.keys())
        if what == 0 and keys:
            del node.attr[str(rng.choice(keys))]
        elif what == 1 and keys:
            node.attr[str(rng.choice(keys))].CopyFrom(_random_attr(rng, attr_value_pb2))
        elif what == 2:
            node.attr[str(rng.choice(["T", "strides", "dilations", "explicit_paddings", "padding", "data_format",
                                      "fused_ops", "num_args", "TArgs", "num_host_args", "filter_format",
                                      "epsilon", "leakyrelu_alpha", "_output_shapes", "extra"]))].CopyFrom(
                _random_attr(rng, attr_value_pb2))
        elif what == 3:
            node.device = str(rng.choice(DEVICES))
        elif what == 4 and len(node.input):
            del node.input[rng.integers(len(node.input))]
        elif what == 5:
            node.input.append(str(rng.choice(["x", "w", "^x", "", "missing:7", "x:-1", "^", node.name])))
        elif what == 6:
            node.op = str(rng.choice(FAMILY))
        elif what == 7:
            node.name = str(rng.choice([n.name for n in graph_def.node] + ["fused0/tf_ops_conv", "fused1/tf_ops_BiasAdd"]))
        elif what == 8:
            node.attr["fused_ops"].list.Clear()
            node.attr["fused_ops"].list.s.extend(
                str(w).encode("utf-8", "surrogatepass") for w in rng.choice(WORDS, size=rng.integers(0, 5)))
            node.attr["num_args"].i = int(rng.integers(-1, 6))
        elif what == 9:
            graph_def.node.add(name=str(rng.choice(["fused0/tf_ops_conv", "fused2/tf_ops_AddV2", "x"])), op="NoOp",
                               device=str(rng.choice(DEVICES)))
        elif what == 10:
            function = graph_def.library.function.add()
            function.signature.name = f"f{rng.integers(3)}"
            call = function.node_def.add(name="call", op=function.signature.name)
            call.input.append("x")
            node.op = function.signature.name if rng.integers(4) == 0 else node.op
        else:
            strides = node.attr["strides"].list
            del strides.i[:]
            strides.i.extend(int(v) for v in rng.choice(HUGE, size=rng.integers(0, 7)))


def _importable(tf, node):
    """"" where TensorFlow's importer accepts `node` with its data inputs fed by placeholders of
    the types its op definition gives them (its control inputs dropped), else why not."""
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return f"{node.op}: no such op"
    mini = graph_pb2.GraphDef()
    copy = mini.node.add()
    copy.CopyFrom(node)
    del copy.input[:]
    types = []
    for arg in op_def.input_arg:
        if arg.number_attr:
            count = node.attr[arg.number_attr].i
            types += [node.attr[arg.type_attr].type] * count
        elif arg.type_list_attr:
            types += list(node.attr[arg.type_list_attr].list.type)
        else:
            types.append(node.attr[arg.type_attr].type if arg.type_attr else arg.type)
    for k, dtype in enumerate(types):
        feed = mini.node.add(name=f"feed{k}", op="Placeholder")
        feed.attr["dtype"].type = dtype
        copy.input.append(f"feed{k}")
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(mini, name="")
    except Exception as e:  # noqa: BLE001 - any refusal is the finding
        return f"{node.op}: {type(e).__name__}: {e}"
    return ""


def fuzz(seed, graphs):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2
    import tf_ops
    rng = np.random.default_rng(seed)
    base = _base_graph(tf)
    failures, rewritten, kept = [], 0, 0
    for index in range(graphs):
        graph_def = type(base)()
        graph_def.CopyFrom(base)
        _mutate(rng, graph_def, attr_value_pb2)
        rewrite = tf_ops.explain_rewrite(graph_def, device=None)
        out = rewrite.graph_def
        rewritten += len(rewrite.rewritten)
        kept += len(rewrite.kept)
        names = {e.node for e in rewrite.rewritten}

        def fail(message):
            failures.append(f"graph {index} (seed {seed}): {message}")

        if out.library != graph_def.library or len(out.node) < len(graph_def.node):
            fail("the library changed or nodes were lost")
            continue
        for before, after in zip(graph_def.node, out.node):
            if before == after:
                continue
            if after.name != before.name or before.name not in names:
                fail(f"node {before.name} ({before.op}) changed without a rewrite entry")
            elif after.device != before.device:
                fail(f"node {before.name} moved from {before.device!r} to {after.device!r}")
        made = [(a, b) for b, a in zip(graph_def.node, out.node) if a != b]
        made += [(a, None) for a in out.node[len(graph_def.node):]]
        old_names = {n.name for n in graph_def.node}
        new_names = [n.name for n in out.node[len(graph_def.node):]]
        if len(set(new_names)) != len(new_names) or old_names & set(new_names):
            fail(f"made names collide: {new_names}")
        originals = {n.name: n for n in graph_def.node}
        for node, before in made:
            problem = _importable(tf, node)
            # TensorFlow's importer also runs the op's shape function, which refuses (as it
            # refuses the stock node's) sizes a kernel takes, such as strides above 2**31.
            original = before if before is not None else originals.get(node.name.split("/tf_ops_")[0])
            if problem and (original is None or not _importable(tf, original)):
                fail(f"node {node.name} rewritten into one TensorFlow refuses: {problem}")
        again = tf_ops.explain_rewrite(out, device=None)
        if again.rewritten or again.graph_def != out:
            fail("a second pass changed the graph")
    print(f"enable fuzz: {graphs} graphs, {rewritten} nodes rewritten, {kept} left alone, {len(failures)} failures")
    for failure in failures[:20]:
        print("FAILURE " + failure)
    return 1 if failures else 0


def test_hostile_graphs_are_left_alone_or_rewritten_validly():
    proc = subprocess.run([sys.executable, __file__, str(SEED), str(GRAPHS)], capture_output=True, text=True,
                          timeout=1200)
    summary = [line for line in proc.stdout.splitlines() if line.startswith(("enable fuzz", "FAILURE"))]
    assert proc.returncode == 0, (f"exit {proc.returncode}; replay: python {__file__} {SEED} {GRAPHS}\n"
                                  + "\n".join(summary) + "\n" + proc.stderr[-3000:])
    assert summary and " 0 failures" in summary[0], summary
    # The fuzzing reached both outcomes.
    rewritten, kept = map(int, re.search(r"(\d+) nodes rewritten, (\d+) left alone", summary[0]).groups())
    assert rewritten > 0 and kept > 0, summary[0]


if __name__ == "__main__":
    sys.exit(fuzz(int(sys.argv[1]), int(sys.argv[2])))
