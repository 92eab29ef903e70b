"""One scenario of tf_ops.enable() in a fresh process (tests/test_enable.py starts one per
scenario, with oneDNN on or off): the same model or function run with the rewrite off and then
on, the graphs that ran collected from TensorFlow (context.enable_graph_collection), results,
gradients and weights compared. Prints one JSON line: the convolution ops each run's graphs
held, and the largest differences.

    python tests/enable_worker.py SCENARIO [SCENARIO ...]

SCENARIO: keras, compat_v1, savedmodel_write=DIR, savedmodel_load=DIR, tape (which leaves exact
mode on: last), planted=PLUGIN_SO (alone: it loads another plugin optimizer).
"""
import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

# Which of a graph's ops are convolutions: the family's own names, the remapper's fused forms,
# oneDNN's (_MklConv2D, _MklNativeFusedConv2D, _MklDepthwiseConv2dNative, ...) and ours.
CONV_WORDS = ("Conv2D", "Conv2d", "Depthwise")


def conv_ops(graph_defs):
    ops = set()
    for graph_def in graph_defs:
        for node in graph_def.node:
            if any(w in node.op for w in CONV_WORDS):
                ops.add(node.op)
        for function in graph_def.library.function:
            for node in function.node_def:
                if any(w in node.op for w in CONV_WORDS):
                    ops.add(node.op)
    return sorted(ops)


def ran_graphs():
    """The partitioned graphs of the functions that ran since the last call."""
    metadata = context.export_run_metadata()
    context.context().clear_kernel_cache()
    graphs = []
    for function_graph in metadata.function_graphs:
        graphs.extend(function_graph.partition_graphs)
    return graphs


def max_diff(a, b):
    """The largest difference between a and b, relative to b's largest magnitude (a gradient's
    small elements are sums that cancel: their error is that of the large terms)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))) if a.size else 0.0


def keras_scenario():
    import keras
    import tf_ops

    def model():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((16, 16, 3))
        y = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.DepthwiseConv2D(3, strides=2, padding="same", activation="relu6")(y)
        y = keras.layers.Conv2D(8, 1, activation="elu")(y)
        y = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same", activation="sigmoid")(y)
        y = keras.layers.Conv2D(2, 3, padding="valid", use_bias=False)(y)
        m = keras.Model(inputs, y)
        m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
        return m

    rng = np.random.default_rng(0)
    x = rng.standard_normal([8, 16, 16, 3]).astype(np.float32)
    t = rng.standard_normal([8, 14, 14, 2]).astype(np.float32)
    out = {}
    for mode in ("off", "on"):
        if mode == "on":
            tf_ops.enable()
        m = model()
        m.fit(x, t, batch_size=4, epochs=1, shuffle=False, verbose=0)
        fit_graphs = ran_graphs()
        pred = m.predict(x, batch_size=8, verbose=0)
        out[mode] = {"fit_ops": conv_ops(fit_graphs), "predict_ops": conv_ops(ran_graphs()),
                     "pred": pred, "weights": [w.numpy() for w in m.weights]}
    return {"off_fit": out["off"]["fit_ops"], "off_predict": out["off"]["predict_ops"],
            "on_fit": out["on"]["fit_ops"], "on_predict": out["on"]["predict_ops"],
            "pred_diff": max_diff(out["on"]["pred"], out["off"]["pred"]),
            "weight_diff": max(max_diff(a, b) for a, b in zip(out["on"]["weights"], out["off"]["weights"]))}


def tape_step(x, w, dw, b, wt):
    """A training step's worth of tf.nn calls: a fusable conv + bias + relu, a depthwise conv, a
    transposed conv, and the gradients of a loss through all of them."""
    with tf.GradientTape() as tape:
        tape.watch([x, w, dw, b, wt])
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
        y = tf.nn.depthwise_conv2d(y, dw, [1, 2, 2, 1], "SAME")
        y = tf.nn.conv2d_transpose(y, wt, [4, 12, 12, 5], 2, "SAME")
        loss = tf.reduce_sum(y * y)
    return [y] + tape.gradient(loss, [x, w, dw, b, wt])


def tape_step_tf_ops(x, w, dw, b, wt):
    """tape_step written with tf_ops's functions: the ops the rewrite makes of tape_step's."""
    import tf_ops
    with tf.GradientTape() as tape:
        tape.watch([x, w, dw, b, wt])
        y = tf.nn.relu(tf.nn.bias_add(tf_ops.conv2d(x, w, 1, "SAME"), b))
        y = tf_ops.depthwise_conv2d_native(y, dw, [1, 2, 2, 1], "SAME")
        y = tf_ops.conv2d_transpose(y, wt, [4, 12, 12, 5], 2, "SAME")
        loss = tf.reduce_sum(y * y)
    return [y] + tape.gradient(loss, [x, w, dw, b, wt])


def tape_scenario():
    import tf_ops
    rng = np.random.default_rng(1)
    args = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in
            ([4, 12, 12, 3], [3, 3, 3, 6], [3, 3, 6, 2], [6], [3, 3, 5, 12])]
    results = {}
    for mode in ("off", "on", "disabled", "plugins_off", "jit"):
        if mode == "on":
            tf_ops.enable()
            tf_ops.enable()  # twice: harmless
        elif mode == "disabled":
            tf_ops.disable()
        elif mode == "plugins_off":
            tf_ops.enable()
            tf.config.optimizer.set_experimental_options({"use_plugin_optimizers": False})
        elif mode == "jit":
            tf.config.optimizer.set_experimental_options({"use_plugin_optimizers": True})
        fn = tf.function(tape_step, jit_compile=mode == "jit")
        values = [v.numpy() for v in fn(*args)]
        results[mode] = {"ops": conv_ops(ran_graphs()), "values": values}
    enabled_at_end = tf_ops.is_enabled()  # on since "plugins_off": the option, not disable(), turned it off
    # In exact mode the rewritten graph gives, bit for bit, what tf_ops's own functions give.
    tf_ops.set_exact_mode(True)
    tf_ops.enable()
    enabled = [v.numpy() for v in tf.function(tape_step)(*args)]
    ran = conv_ops(ran_graphs())
    tf_ops.disable()
    direct = [v.numpy() for v in tf.function(tape_step_tf_ops)(*args)]
    off = results["off"]["values"]
    return {"exact_ops": ran, "exact_bitwise": all(np.array_equal(a, b) for a, b in zip(enabled, direct)),
            "exact_diff": max(max_diff(a, b) for a, b in zip(enabled, off)),**{f"{mode}_ops": r["ops"] for mode, r in results.items()},
            **{f"{mode}_diff": max(max_diff(a, b) for a, b in zip(r["values"], off)) for mode, r in results.items()},
            "enabled_at_end": enabled_at_end}


class Upsample(tf.Module):
    """A module written without tf_ops: conv2d_transpose, a depthwise conv and a conv + bias."""

    def __init__(self):
        rng = np.random.default_rng(2)
        self.wt = tf.Variable(rng.standard_normal([3, 3, 4, 6]).astype(np.float32))
        self.dw = tf.Variable(rng.standard_normal([3, 3, 4, 1]).astype(np.float32))
        self.w = tf.Variable(rng.standard_normal([1, 1, 4, 2]).astype(np.float32))
        self.b = tf.Variable(rng.standard_normal([2]).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([2, 5, 5, 6], tf.float32)])
    def __call__(self, x):
        y = tf.nn.conv2d_transpose(x, self.wt, [2, 10, 10, 4], 2, "SAME")
        y = tf.nn.depthwise_conv2d(y, self.dw, [1, 1, 1, 1], "SAME")
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(y, self.w, 1, "VALID"), self.b))


def savedmodel_write(path):
    assert "tf_ops" not in sys.modules
    tf.saved_model.save(Upsample(), path)
    return {"written": path, "tf_ops_imported": "tf_ops" in sys.modules}


def savedmodel_load(path):
    import tf_ops
    x = tf.constant(np.random.default_rng(3).standard_normal([2, 5, 5, 6]).astype(np.float32))
    out = {}
    for mode in ("off", "on"):
        if mode == "on":
            tf_ops.enable()
        loaded = tf.saved_model.load(path)
        out[mode] = (loaded(x).numpy(), conv_ops(ran_graphs()))
    return {"off_ops": out["off"][1], "on_ops": out["on"][1], "diff": max_diff(out["on"][0], out["off"][0])}


def compat_v1_scenario():
    import tf_ops
    rng = np.random.default_rng(4)
    xv = rng.standard_normal([2, 9, 9, 4]).astype(np.float32)
    wv = rng.standard_normal([3, 3, 4, 5]).astype(np.float32)
    out = {}
    for mode in ("off", "on"):
        if mode == "on":
            tf_ops.enable()
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [2, 9, 9, 4])
            w = tf.constant(wv) * 1.0
            y = tf.compat.v1.nn.conv2d(x, w, [1, 2, 2, 1], "SAME")
            grads = tf.compat.v1.gradients(tf.reduce_sum(y * y), [x, w])
            with tf.compat.v1.Session(graph=graph) as sess:
                options = tf.compat.v1.RunOptions(output_partition_graphs=True)
                metadata = tf.compat.v1.RunMetadata()
                values = sess.run([y] + grads, {x: xv}, options=options, run_metadata=metadata)
        out[mode] = (values, conv_ops(metadata.partition_graphs))
    return {"off_ops": out["off"][1], "on_ops": out["on"][1],
            "diff": max(max_diff(a, b) for a, b in zip(out["on"][0], out["off"][0]))}


def planted_scenario(plugin):
    """Another plugin optimizer holds CPU (loaded as TensorFlow loads tensorflow-plugins): enable()
    is a Python error, and nothing is registered."""
    from tensorflow.python.framework import load_library
    load_library.load_pluggable_device_library(plugin)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.environ["TF_OPS_ENABLE"] = "1"
        import tf_ops
    import_warning = [str(w.message) for w in caught if "TF_OPS_ENABLE" in str(w.message)]
    try:
        tf_ops.enable()
        error = ""
    except RuntimeError as e:
        error = str(e)
    # The process goes on, and its graphs keep TensorFlow's ops.
    y = tf.function(lambda a, b: tf.nn.conv2d(a, b, 1, "SAME"))(tf.ones([1, 4, 4, 2]), tf.ones([3, 3, 2, 2]))
    return {"error": error, "import_warning": import_warning, "enabled": tf_ops.is_enabled(),
            "sum": float(tf.reduce_sum(y))}


def main():
    """Runs each scenario named on the command line in turn (NAME or NAME=ARG), the rewrite off at
    the start of each; prints "RESULT NAME JSON" for each."""
    context.enable_graph_collection()
    scenarios = {"keras": keras_scenario, "tape": tape_scenario, "compat_v1": compat_v1_scenario,
                 "savedmodel_write": savedmodel_write, "savedmodel_load": savedmodel_load,
                 "planted": planted_scenario}
    for word in sys.argv[1:]:
        name, _, arg = word.partition("=")
        if "tf_ops" in sys.modules:
            sys.modules["tf_ops"].disable()
        ran_graphs()
        result = scenarios[name](*([arg] if arg else []))
        print(f"RESULT {name} " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
