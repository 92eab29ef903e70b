"""python -m tf_ops bench --models: training steps of whole models, tf_ops' layers against Keras's,
and the same Keras models unchanged with tf_ops.enable() against without it.

Each model is built by Keras (keras.applications with weights=None, and a generator of
transposed convolutions), then cloned with every Conv2D, DepthwiseConv2D and Conv2DTranspose
replaced by tf_ops.layers' layer of the same name and config, Keras's weights copied in. A
step is the forward pass in training mode, the loss and the gradients of every trainable
weight (one tf.function each side, no XLA); the two sides' steps alternate on the same batch.
The gradients of both, with the batch norms in inference mode, are compared with those of the
Keras model in float64 (the same weights and batch): per weight tensor,
max |g - g64| / max |g64|, the largest over the model's tensors.

The enable() rows take each Keras model as it is (no layer swapped): its training step and its
inference (the forward pass, batch norms in inference mode) traced and first run with the rewrite
off, then again as new functions with it on (docs/enable.md); the graphs that ran are checked to
hold TfOps> nodes for every convolution and no other, then the two sides alternate.
"""
import json
import os
import statistics
import time

import numpy as np
import tensorflow as tf
import keras

from tensorflow.python.eager import context

import tf_ops
from tf_ops import _bench
from tf_ops import layers as ours

SWAPS = {keras.layers.Conv2D: ours.Conv2D, keras.layers.DepthwiseConv2D: ours.DepthwiseConv2D,
         keras.layers.Conv2DTranspose: ours.Conv2DTranspose}


def generator(side, channels, batch_noise=64):
    """A DCGAN-style generator: a dense layer to side/8 x side/8 x 4*channels, then three 5x5
    stride-2 transposed convolutions (batch norm and ReLU between) to side x side x 3."""
    s = side // 8
    return keras.Sequential([
        keras.Input((batch_noise,)),
        keras.layers.Dense(s * s * 4 * channels, use_bias=False),
        keras.layers.Reshape((s, s, 4 * channels)),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.Conv2DTranspose(2 * channels, 5, strides=2, padding="same", use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.Conv2DTranspose(channels, 5, strides=2, padding="same", use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.Conv2DTranspose(3, 5, strides=2, padding="same", activation="tanh"),
    ], name="generator")


# name, builder, batch, input shape (without the batch), classes (0: the output is an image)
MODELS = [
    ("resnet50", lambda: keras.applications.ResNet50(weights=None, input_shape=(96, 96, 3), classes=10),
     8, (96, 96, 3), 10),
    ("mobilenet_v2", lambda: keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3), classes=10),
     8, (96, 96, 3), 10),
    ("dcgan_generator", lambda: generator(64, 64), 16, (64,), 0),
]
QUICK_MODELS = [
    ("mobilenet_v2", lambda: keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3), alpha=0.35,
                                                            classes=4), 4, (64, 64, 3), 4),
    ("dcgan_generator", lambda: generator(16, 8), 2, (64,), 0),
]


def swap_layer(layer):
    """The layer for the clone: tf_ops' where it has one, else a copy of Keras's."""
    return SWAPS.get(type(layer), type(layer)).from_config(layer.get_config())


def as_float64(layer):
    config = layer.get_config()
    config["dtype"] = "float64"
    return layer.__class__.from_config(config)


def clone(model, fn):
    copy = keras.models.clone_model(model, clone_function=fn)
    copy.set_weights(model.get_weights())
    return copy


def swapped_count(model):
    return sum(type(layer) in SWAPS.values() for layer in model.layers)


def step_function(model, classes, training=True):
    """The training step's gradients: forward (in training mode, or with batch norms as the
    fixed affine maps of inference), loss, tape gradients."""

    @tf.function(jit_compile=False, reduce_retracing=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=training)
            if classes:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, out))
            else:
                loss = tf.reduce_mean(tf.square(out - y))
        return tape.gradient(loss, model.trainable_variables)

    return step


def batch_of(rng, batch, shape, classes, out_shape, dtype):
    x = rng.uniform(-1, 1, size=(batch,) + shape).astype(np.float32)
    y = (rng.integers(0, classes, size=(batch,)) if classes
         else rng.uniform(-1, 1, size=(batch,) + out_shape).astype(np.float32))
    return tf.constant(x, dtype), tf.constant(y, dtype if not classes else tf.int32)


def gradient_error(grads, reference):
    """max over tensors of max |g - g64| / max |g64|. Tensors whose float64 gradient stays below
    1e-6 of the largest tensor's are left out: their gradient is 0 but for rounding (the beta
    of a batch norm whose output another batch norm normalizes), and relative to itself the
    rounding is as large as the gradient."""
    reference = [np.asarray(r, np.float64) for r in reference]
    largest = max(float(np.max(np.abs(r))) for r in reference)
    worst = 0.0
    for g, r in zip(grads, reference):
        scale = float(np.max(np.abs(r)))
        if scale > 1e-6 * largest:
            worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - r)) / scale))
    return worst


def bench_model(name, build, batch, shape, classes, budget, seed):
    keras.utils.set_random_seed(seed)
    theirs = build()
    model_ours = clone(theirs, swap_layer)
    model_64 = clone(theirs, as_float64)
    swapped = swapped_count(model_ours)
    if swapped == 0:
        raise RuntimeError(f"{name}: no convolution was swapped for tf_ops' layers")
    out_shape = tuple(theirs.output_shape[1:])
    rng = np.random.default_rng(seed)
    x, y = batch_of(rng, batch, shape, classes, out_shape, tf.float32)
    x64, y64 = tf.cast(x, tf.float64), (y if classes else tf.cast(y, tf.float64))

    # The gradients are compared with batch norms in inference mode: in training mode a batch norm
    # over few values (the last stages' small images) amplifies float32 rounding far past the
    # convolutions' own (both sides then differ from float64 by 10-30%, alike).
    reference = step_function(model_64, classes, training=False)(x64, y64)
    error_theirs = gradient_error(step_function(theirs, classes, training=False)(x, y), reference)
    error_ours = gradient_error(step_function(model_ours, classes, training=False)(x, y), reference)
    step_theirs, step_ours = step_function(theirs, classes), step_function(model_ours, classes)
    times_ours, times_theirs = _bench.interleaved_times(lambda: step_ours(x, y), lambda: step_theirs(x, y),
                                                        budget, 3, 200)
    ms_ours, ms_theirs = statistics.median(times_ours) * 1e3, statistics.median(times_theirs) * 1e3
    return {"model": name, "batch": batch, "input": list(shape), "convolutions_swapped": swapped,
            "ours_ms": ms_ours, "keras_ms": ms_theirs, "ratio": ms_theirs / ms_ours,
            "runs": len(times_ours), "grad_error_ours": error_ours, "grad_error_keras": error_theirs}


def inference_function(model):
    @tf.function(jit_compile=False, reduce_retracing=True)
    def infer(x, y):
        return model(x, training=False)

    return infer


def ran_convolutions(call):
    """Runs `call` with TensorFlow's graph collection on; the convolution nodes of the graphs that
    ran: (TfOps> ones, any other)."""
    context.enable_graph_collection()
    try:
        call()
        metadata = context.export_run_metadata()
    finally:
        context.disable_graph_collection()
    ours = others = 0
    for function_graph in metadata.function_graphs:
        for graph in function_graph.partition_graphs:
            for node in graph.node:
                if node.op.startswith("TfOps>"):
                    ours += 1
                elif any(word in node.op for word in ("Conv2D", "Conv2d", "Depthwise")):
                    others += 1
    return ours, others


def bench_enable(name, build, batch, shape, classes, budget, seed):
    """The Keras model as built, with tf_ops.enable() and without: training step and inference."""
    keras.utils.set_random_seed(seed)
    model = build()
    rng = np.random.default_rng(seed)
    x, y = batch_of(rng, batch, shape, classes, tuple(model.output_shape[1:]), tf.float32)
    row = {"model": name, "batch": batch, "input": list(shape)}
    for kind, make in (("train", lambda: step_function(model, classes)), ("infer", lambda: inference_function(model))):
        tf_ops.disable()
        stock = make()
        _, stock_nodes = ran_convolutions(lambda: stock(x, y))  # its graph optimized without the rewrite
        tf_ops.enable()
        try:
            rewritten = make()
            ours_nodes, left = ran_convolutions(lambda: rewritten(x, y))
        finally:
            tf_ops.disable()
        if ours_nodes == 0 or left:
            raise RuntimeError(f"{name} {kind}: with enable(), {ours_nodes} TfOps> nodes and {left} other "
                               "convolutions ran")
        times_ours, times_stock = _bench.interleaved_times(lambda: rewritten(x, y), lambda: stock(x, y), budget, 3,
                                                           200)
        ms_ours, ms_stock = statistics.median(times_ours) * 1e3, statistics.median(times_stock) * 1e3
        row[kind] = {"keras_ms": ms_stock, "ours_ms": ms_ours, "ratio": ms_stock / ms_ours, "runs": len(times_ours),
                     "tf_ops_nodes": ours_nodes, "stock_nodes": stock_nodes}
    return row


def geometric_mean(values):
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def main(args):
    started = time.perf_counter()
    onednn = _bench.sc.onednn_enabled()
    machine = _bench.machine_facts()
    budget = 0.05 if args.quick else max(args.budget, 3.0)
    print(f"tf_ops {tf_ops.__version__} (CPU micro-kernels: {tf_ops.cpu_kernel_isa()}); TensorFlow "
          f"{tf.__version__}, Keras {keras.__version__}, oneDNN {'on' if onednn else 'off'}; "
          f"processor: {machine['processor']}; {machine['intra_op_threads']} threads")
    print(f"each model: its training step's gradients, ours and Keras's steps alternating for "
          f"{budget:g} s a side, median times; gradients against the float64 Keras model")
    print()
    rows, failures = [], 0
    for i, (name, build, batch, shape, classes) in enumerate(QUICK_MODELS if args.quick else MODELS, 1):
        try:
            rows.append(bench_model(name, build, batch, shape, classes, budget, seed=i))
        except Exception as e:  # noqa: BLE001  (report, keep going, fail at the end)
            failures += 1
            print(f"{name}: failed: {_bench._first_line(e)}", flush=True)
    print(f"{'model':<16} {'batch':>5} {'convs':>5} {'Keras ms':>9} {'ours ms':>9} {'Keras/ours':>10} "
          f"{'grad err Keras':>14} {'grad err ours':>13}")
    for r in rows:
        print(f"{r['model']:<16} {r['batch']:5d} {r['convolutions_swapped']:5d} {r['keras_ms']:9.1f} "
              f"{r['ours_ms']:9.1f} {r['ratio']:10.2f} {r['grad_error_keras']:14.1e} {r['grad_error_ours']:13.1e}")
    print()
    print("Keras/ours > 1: the model with tf_ops' layers trains faster. grad err: the largest over weight "
          "tensors of max |g - g64| / max |g64|, g64 from the Keras model in float64.")
    print()
    enable_rows = []
    for i, (name, build, batch, shape, classes) in enumerate(QUICK_MODELS if args.quick else MODELS, 1):
        try:
            enable_rows.append(bench_enable(name, build, batch, shape, classes, budget, seed=i))
        except Exception as e:  # noqa: BLE001  (report, keep going, fail at the end)
            failures += 1
            print(f"{name} with enable(): failed: {_bench._first_line(e)}", flush=True)
    print(f"{'unchanged model':<16} {'batch':>5} {'nodes':>5} {'train Keras':>11} {'enabled':>9} {'ratio':>6} "
          f"{'infer Keras':>11} {'enabled':>9} {'ratio':>6}")
    for r in enable_rows:
        t, f = r["train"], r["infer"]
        print(f"{r['model']:<16} {r['batch']:5d} {t['tf_ops_nodes']:5d} {t['keras_ms']:11.1f} {t['ours_ms']:9.1f} "
              f"{t['ratio']:6.2f} {f['keras_ms']:11.1f} {f['ours_ms']:9.1f} {f['ratio']:6.2f}")
    enable_means = {kind: geometric_mean([r[kind]["ratio"] for r in enable_rows]) for kind in ("train", "infer")}
    print(f"geometric mean: training step {enable_means['train']:.2f}, inference {enable_means['infer']:.2f} "
          "(Keras's time over the same model's with tf_ops.enable(), ms a step, medians)")
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "tf_ops": tf_ops.__version__,
              "cpu_kernel_isa": tf_ops.cpu_kernel_isa(), "tensorflow": tf.__version__,
              "keras": keras.__version__, "onednn": onednn, "machine": machine,
              "settings": {"quick": args.quick, "budget_s": budget}, "rows": rows,
              "enable_rows": enable_rows, "enable_geomean": enable_means,
              "failures": failures, "wall_s": time.perf_counter() - started}
    os.makedirs(args.out, exist_ok=True)
    path = _bench.result_stem(args.out, "models", args.quick, onednn) + ".json"
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {path}; total wall time {time.perf_counter() - started:.1f} s")
    return 1 if failures else 0
