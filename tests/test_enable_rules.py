"""The rules of tf_ops.enable()'s rewrite (cc/kernels/graph_rewrite.h), on GraphDefs directly:
tf_ops.explain_rewrite runs the same rewrite the plugin optimizer runs, without a session and
without registering anything. Every rule is crossed: each op of the family, each fused_ops list
the rewrite unfolds (and the results of the unfolded graph against the stock ops), lists it does
not, a node not placed, a device with no TfOps kernel, dtypes and attributes the TfOps op or its
kernel refuses, input counts, name collisions, and a second pass that changes nothing."""
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2
from tensorflow.python.framework import kernels

import tf_ops

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _graph(build):
    """The GraphDef of what `build` makes in a fresh graph, every node placed on the CPU."""
    graph = tf.Graph()
    with graph.as_default():
        build()
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.device = CPU
    return graph_def


def _node(graph_def, name):
    return next(n for n in graph_def.node if n.name == name)


def _family_graph():
    """One node of each stock op of the family (float32, NHWC, stride 2), named after it."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 4], name="x")
        w = tf.compat.v1.placeholder(tf.float32, [3, 3, 4, 6], name="w")
        dw = tf.compat.v1.placeholder(tf.float32, [3, 3, 4, 2], name="dw")
        dy = tf.compat.v1.placeholder(tf.float32, [2, 4, 4, 6], name="dy")
        ddy = tf.compat.v1.placeholder(tf.float32, [2, 4, 4, 8], name="ddy")
        s = [1, 2, 2, 1]
        tf.raw_ops.Conv2D(input=x, filter=w, strides=s, padding="SAME", name="Conv2D")
        tf.raw_ops.Conv2DBackpropInput(input_sizes=[2, 8, 8, 4], filter=w, out_backprop=dy, strides=s,
                                       padding="SAME", name="Conv2DBackpropInput")
        tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 4, 6], out_backprop=dy, strides=s,
                                        padding="SAME", name="Conv2DBackpropFilter")
        tf.raw_ops.Conv2DBackpropInputV2(input=x, filter=w, out_backprop=dy, strides=s, padding="SAME",
                                         name="Conv2DBackpropInputV2")
        tf.raw_ops.Conv2DBackpropFilterV2(input=x, filter=w, out_backprop=dy, strides=s, padding="SAME",
                                          name="Conv2DBackpropFilterV2")
        tf.raw_ops.DepthwiseConv2dNative(input=x, filter=dw, strides=s, padding="SAME", name="DepthwiseConv2dNative")
        tf.raw_ops.DepthwiseConv2dNativeBackpropInput(input_sizes=[2, 8, 8, 4], filter=dw, out_backprop=ddy,
                                                      strides=s, padding="SAME",
                                                      name="DepthwiseConv2dNativeBackpropInput")
        tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(input=x, filter_sizes=[3, 3, 4, 2], out_backprop=ddy,
                                                       strides=s, padding="SAME",
                                                       name="DepthwiseConv2dNativeBackpropFilter")
    return _graph(build)


FAMILY = [op for op in tf_ops.OP_NAMES]


def _fused(name, fused_ops, num_args, dtype=tf.float32, arg_types=None, op="_FusedConv2D", **attrs):
    """A remapper-made fused node by hand (its Python wrapper is not public): input x, filter w,
    args a0, a1, ..."""
    node = node_def_pb2.NodeDef(name=name, op=op, device=CPU)
    node.input.extend(["x", "w"] + [f"a{i}" for i in range(num_args)])
    a = node.attr
    a["T"].type = dtype.as_datatype_enum
    a["num_args"].i = num_args
    if op == "_FusedConv2D":  # the depthwise form's args are all of type T
        a["TArgs"].list.type.extend([(t or dtype).as_datatype_enum for t in (arg_types or [None] * num_args)])
    a["strides"].list.i.extend(attrs.pop("strides", [1, 1, 1, 1]))
    a["padding"].s = attrs.pop("padding", "SAME").encode()
    a["data_format"].s = attrs.pop("data_format", "NHWC").encode()
    a["dilations"].list.i.extend([1, 1, 1, 1])
    a["fused_ops"].list.s.extend(s.encode() for s in fused_ops)
    a["epsilon"].f = attrs.pop("epsilon", 0.001)
    a["leakyrelu_alpha"].f = attrs.pop("leakyrelu_alpha", 0.2)
    for key, value in attrs.items():
        a[key].CopyFrom(value)
    return node


def _fused_graph(node, depthwise=False, dtype=tf.float32, channels=6):
    """x [2, 8, 8, 4], w, and args a0... as placeholders, then `node`."""
    def build():
        tf.compat.v1.placeholder(dtype, [2, 8, 8, 4], name="x")
        tf.compat.v1.placeholder(dtype, [3, 3, 4, 2 if depthwise else channels], name="w")
    graph_def = _graph(build)
    arg_types = node.attr["TArgs"].list.type if "TArgs" in node.attr else []
    for i in range(node.attr["num_args"].i):
        arg_type = arg_types[i] if i < len(arg_types) else dtype.as_datatype_enum
        placeholder = node_def_pb2.NodeDef(name=f"a{i}", op="Placeholder", device=CPU)
        placeholder.attr["dtype"].type = arg_type
        graph_def.node.append(placeholder)
    graph_def.node.append(node)
    return graph_def


class RewriteRulesTest(tf.test.TestCase):

    def test_every_op_of_the_family_becomes_its_tfops_op(self):
        graph_def = _family_graph()
        rewrite = tf_ops.explain_rewrite(graph_def)
        self.assertCountEqual([e.node for e in rewrite.rewritten], FAMILY, str(rewrite))
        self.assertEqual(rewrite.kept, [])
        for op in FAMILY:
            before, after = _node(graph_def, op), _node(rewrite.graph_def, op)
            self.assertEqual(after.op, "TfOps>" + op)
            # Same name, inputs and device; the stock attributes kept as they were.
            self.assertEqual(list(after.input), list(before.input))
            self.assertEqual(after.device, before.device)
            for key, value in before.attr.items():
                self.assertEqual(after.attr[key], value, f"{op}: {key}")
        # Nothing else touched, nothing added.
        self.assertEqual(len(rewrite.graph_def.node), len(graph_def.node))
        for before in graph_def.node:
            if before.op not in FAMILY:
                self.assertEqual(_node(rewrite.graph_def, before.name), before)
        # tf_ops.explain, given a graph, says the same.
        self.assertEqual(tf_ops.explain(graph_def).entries, rewrite.entries)
        # The rewritten graph is one TensorFlow accepts (every op's definition, every input).
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(rewrite.graph_def, name="")

    def test_second_pass_changes_nothing(self):
        graph_def = _family_graph()
        graph_def.node.append(_fused("f", ["BiasAdd", "Relu"], 1))
        graph_def.node.extend(_fused_graph(_fused("g", ["BiasAdd"], 1)).node[-2:-1])  # its a0
        once = tf_ops.explain_rewrite(graph_def)
        twice = tf_ops.explain_rewrite(once.graph_def)
        self.assertEqual(twice.entries, ())
        self.assertEqual(twice.graph_def, once.graph_def)

    def test_a_node_not_placed_or_without_a_device_type_is_kept(self):
        graph_def = _family_graph()
        _node(graph_def, "Conv2D").device = ""
        _node(graph_def, "Conv2DBackpropInput").device = "/job:localhost/replica:0/task:0"
        _node(graph_def, "Conv2DBackpropFilter").device = "not a device name"
        rewrite = tf_ops.explain_rewrite(graph_def, device=None)
        kept = {e.node: e for e in rewrite.kept}
        self.assertCountEqual(kept, ["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])
        for entry in kept.values():
            self.assertEqual(entry.rule, "device")
            self.assertEqual(_node(rewrite.graph_def, entry.node), _node(graph_def, entry.node))
        # explain_rewrite's default places unplaced nodes on the CPU, as TensorFlow would.
        _node(graph_def, "Conv2DBackpropInput").device = "/device:CPU:0"
        _node(graph_def, "Conv2DBackpropFilter").device = "/device:CPU:0"
        self.assertEqual(len(tf_ops.explain_rewrite(graph_def).rewritten), len(FAMILY))

    def test_a_device_without_tfops_kernels_is_kept(self):
        graph_def = _family_graph()
        _node(graph_def, "Conv2D").device = "/job:localhost/replica:0/task:0/device:TPU:0"
        _node(graph_def, "Conv2DBackpropInput").device = "/job:localhost/replica:0/task:0/device:GPU:0"
        rewrite = tf_ops.explain_rewrite(graph_def)
        kept = {e.node: e for e in rewrite.kept}
        self.assertEqual(kept["Conv2D"].rule, "kernel")
        self.assertIn("TPU", kept["Conv2D"].detail)
        gpu_registered = any(k.device_type == "GPU" for k in
                             kernels.get_registered_kernels_for_op("TfOps>Conv2DBackpropInput").kernel)
        if gpu_registered:
            self.assertNotIn("Conv2DBackpropInput", kept)
        else:
            self.assertEqual(kept["Conv2DBackpropInput"].rule, "kernel")

    def test_dtypes_and_attributes_the_tfops_op_refuses_are_kept(self):
        graph_def = _family_graph()
        # A dtype outside the TfOps op's list (int32 has a Conv2D kernel, not a depthwise one).
        _node(graph_def, "DepthwiseConv2dNative").attr["T"].type = tf.int32.as_datatype_enum
        _node(graph_def, "Conv2D").attr["T"].type = tf.int32.as_datatype_enum
        # Attributes the kernel's constructor refuses.
        strides = _node(graph_def, "Conv2DBackpropInput").attr["strides"]
        del strides.list.i[:]
        strides.list.i.extend([1, 2, 2])
        _node(graph_def, "Conv2DBackpropFilter").attr["dilations"].list.i[3] = 2
        _node(graph_def, "Conv2DBackpropInputV2").attr["padding"].s = b"EXPLICIT"  # no explicit_paddings
        # An attribute missing, one of another type (an input too many: below).
        del _node(graph_def, "DepthwiseConv2dNativeBackpropInput").attr["padding"]
        _node(graph_def, "DepthwiseConv2dNativeBackpropFilter").attr["strides"].CopyFrom(attr_value_pb2.AttrValue(s=b"2"))
        rewrite = tf_ops.explain_rewrite(graph_def)
        kept = {e.node: e.rule for e in rewrite.kept}
        self.assertEqual(kept, {
            "DepthwiseConv2dNative": "node_def", "Conv2DBackpropInput": "attributes",
            "Conv2DBackpropFilter": "attributes", "Conv2DBackpropInputV2": "attributes",
            "DepthwiseConv2dNativeBackpropInput": "node_def",
            "DepthwiseConv2dNativeBackpropFilter": "node_def"}, str(rewrite))
        # int32 Conv2D has a TfOps kernel.
        self.assertCountEqual([e.node for e in rewrite.rewritten], ["Conv2D", "Conv2DBackpropFilterV2"])
        for name in kept:
            self.assertEqual(_node(rewrite.graph_def, name), _node(graph_def, name))
        extra = _family_graph()
        _node(extra, "Conv2D").input.append("x")
        self.assertEqual({e.node: e.rule for e in tf_ops.explain_rewrite(extra).kept}, {"Conv2D": "node_def"})

    def test_fused_lists_unfold_into_the_tfops_op_and_the_ops_they_stand_for(self):
        cases = [
            (["BiasAdd"], 1, {}, ["BiasAdd"]),
            (["BiasAdd", "Relu"], 1, {}, ["BiasAdd", "Relu"]),
            (["BiasAdd", "Relu6"], 1, {}, ["BiasAdd", "Relu6"]),
            (["BiasAdd", "Elu"], 1, {}, ["BiasAdd", "Elu"]),
            (["BiasAdd", "LeakyRelu"], 1, {"leakyrelu_alpha": 0.3}, ["BiasAdd", "LeakyRelu"]),
            (["BiasAdd", "Tanh"], 1, {}, ["BiasAdd", "Tanh"]),
            (["BiasAdd", "Sigmoid"], 1, {}, ["BiasAdd", "Sigmoid"]),
            (["BiasAdd", "Add"], 2, {}, ["BiasAdd", "AddV2"]),
            (["BiasAdd", "Add", "Relu"], 2, {}, ["BiasAdd", "AddV2", "Relu"]),
            (["FusedBatchNorm"], 4, {"epsilon": 0.01}, ["FusedBatchNormV3"]),
            (["FusedBatchNorm", "Relu"], 4, {"epsilon": 0.01}, ["FusedBatchNormV3", "Relu"]),
        ]
        rng = np.random.default_rng(7)
        x = rng.standard_normal([2, 8, 8, 4]).astype(np.float32)
        for depthwise in (False, True):
            channels = 8 if depthwise else 6
            w = rng.standard_normal([3, 3, 4, 2 if depthwise else 6]).astype(np.float32)
            conv = (tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME") if depthwise
                    else tf.nn.conv2d(x, w, 2, "SAME")).numpy()
            for fused_ops, num_args, attrs, ops in cases:
                if depthwise and num_args != 1:
                    continue
                with self.subTest(fused_ops=fused_ops, depthwise=depthwise):
                    node = _fused("f", fused_ops, num_args, strides=[1, 2, 2, 1],
                                  op="_FusedDepthwiseConv2dNative" if depthwise else "_FusedConv2D", **attrs)
                    graph_def = _fused_graph(node, depthwise=depthwise)
                    rewrite = tf_ops.explain_rewrite(graph_def)
                    want = ("TfOps>DepthwiseConv2dNative" if depthwise else "TfOps>Conv2D",) + tuple(ops)
                    self.assertEqual([e.became for e in rewrite.rewritten], [want], str(rewrite))
                    # The last op keeps the fused node's name and device.
                    last = _node(rewrite.graph_def, "f")
                    self.assertEqual((last.op, last.device), (ops[-1], CPU))
                    # Its results: those of the stock ops the list names, in order.
                    args = [rng.standard_normal([channels]).astype(np.float32) for _ in range(num_args)]
                    if fused_ops[0] == "FusedBatchNorm":
                        args[3] = np.abs(args[3]) + 0.5
                        y = (conv - args[2]) / np.sqrt(args[3] + attrs["epsilon"]) * args[0] + args[1]
                    else:
                        y = conv + args[0]
                        if num_args == 2:
                            args[1] = rng.standard_normal(conv.shape).astype(np.float32)
                            y = y + args[1]
                    act = {"Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu, "Tanh": tf.tanh,
                           "Sigmoid": tf.sigmoid, "LeakyRelu": lambda v: tf.nn.leaky_relu(v, 0.3)}.get(ops[-1])
                    if act is not None:
                        y = act(y).numpy()
                    got = _run(rewrite.graph_def, "f:0", {"x:0": x, "w:0": w, **{f"a{i}:0": a for i, a in
                                                                               enumerate(args)}})
                    self.assertAllClose(got, y, rtol=1e-4, atol=1e-4)

    def test_fused_lists_not_understood_are_kept(self):
        cases = {
            "gelu": _fused("f", ["BiasAdd", "GeluExact"], 1),
            "empty": _fused("f", [], 0),
            "args": _fused("f", ["BiasAdd", "Relu"], 2),
            "host_args": _fused("f", ["BiasAdd"], 1, num_host_args=attr_value_pb2.AttrValue(i=1)),
            "targs": _fused("f", ["BiasAdd"], 1, arg_types=[tf.float64]),
            "filter_format": _fused("f", ["BiasAdd"], 1, filter_format=attr_value_pb2.AttrValue(s=b"OIHW")),
            "vect_c": _fused("f", ["BiasAdd"], 1, data_format="NCHW_VECT_C"),
            # FusedBatchNormV3 takes no float64: kept whole.
            "double_bn": _fused("f", ["FusedBatchNorm"], 4, dtype=tf.float64),
        }
        rules = {"gelu": "fused_ops", "empty": "node_def", "args": "fused_ops", "host_args": "node_def",
                 "targs": "node_def", "filter_format": "attributes", "vect_c": "node_def", "double_bn": "node_def"}
        for label, node in cases.items():
            with self.subTest(label):
                graph_def = _fused_graph(node, dtype=tf.as_dtype(node.attr["T"].type))
                rewrite = tf_ops.explain_rewrite(graph_def)
                self.assertEqual([(e.node, e.rule) for e in rewrite.entries], [("f", rules[label])], str(rewrite))
                self.assertEqual(rewrite.graph_def, graph_def)

    def test_made_names_never_collide(self):
        node = _fused("f", ["BiasAdd", "Add", "Relu"], 2)
        graph_def = _fused_graph(node)
        for taken in ("f/tf_ops_conv", "f/tf_ops_conv_1", "f/tf_ops_BiasAdd"):
            graph_def.node.append(node_def_pb2.NodeDef(name=taken, op="NoOp", device=CPU))
        rewrite = tf_ops.explain_rewrite(graph_def)
        names = [n.name for n in rewrite.graph_def.node]
        self.assertEqual(len(names), len(set(names)))
        self.assertIn("f/tf_ops_conv_2", names)
        self.assertIn("f/tf_ops_BiasAdd_1", names)
        self.assertEqual(_node(rewrite.graph_def, "f/tf_ops_conv_2").op, "TfOps>Conv2D")

    def test_control_inputs_stay_before_the_rewritten_nodes(self):
        node = _fused("f", ["BiasAdd", "Relu"], 1)
        node.input.append("^x")
        graph_def = _fused_graph(node)
        rewrite = tf_ops.explain_rewrite(graph_def)
        conv = next(n for n in rewrite.graph_def.node if n.op == "TfOps>Conv2D")
        self.assertEqual(list(conv.input), ["x", "w", "^x"])

    def test_not_a_graph(self):
        with self.assertRaisesRegex(ValueError, "not a valid GraphDef"):
            tf_ops.explain_rewrite(b"\xff\xff\xff")
        with self.assertRaisesRegex(TypeError, "GraphDef"):
            tf_ops.explain_rewrite(42)


def _run(graph_def, fetch, feeds):
    """Runs `fetch` of graph_def with `feeds`, through a wrapped function (the rewrite is not on in
    this process: the graph runs as given)."""
    names = list(feeds)

    def imported(*values):
        return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(names, values)),
                                              return_elements=[fetch], name="")[0]

    specs = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for v in feeds.values()]
    fn = tf.compat.v1.wrap_function(imported, specs)
    return fn(*[tf.constant(v) for v in feeds.values()]).numpy()


if __name__ == "__main__":
    tf.test.main()
