"""Trains a small model built from tf_ops.layers for a few steps, on one device or under a
tf.distribute strategy, and saves the final weights.

    python distribute_worker.py MODE OUT.npz [fit]

MODE: single (the default strategy), mirrored (MirroredStrategy over two logical CPU devices)
or multiworker (MultiWorkerMirroredStrategy; TF_CONFIG names this worker). Mode cluster
starts two multiworker processes, a cluster on 127.0.0.1 with free ports, waits for them
(bounded time) and writes OUT with 0 and 1 inserted before ".npz". The loop feeds
each replica its slice of every global batch and scales the loss by the global batch size, so
every mode computes the same updates up to the order of floating-point sums. With `fit`, the
model trains through Keras's model.fit instead (single and mirrored).
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

mode, out = sys.argv[1], sys.argv[2]
use_fit = "fit" in sys.argv[3:]
TIMEOUT_S = 240

if mode == "cluster":
    import socket
    import subprocess

    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    workers = []
    for index in range(2):
        config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        workers.append(subprocess.Popen(
            [sys.executable, __file__, "multiworker", out.replace(".npz", f"{index}.npz")],
            env=dict(os.environ, TF_CONFIG=json.dumps(config))))
    try:
        codes = [w.wait(timeout=TIMEOUT_S) for w in workers]
    finally:
        for w in workers:
            w.kill()
    sys.exit(max(codes))
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

import tf_ops  # noqa: E402
from tf_ops import layers  # noqa: E402

GLOBAL_BATCH, STEPS = 8, 4

if mode == "single":
    strategy = tf.distribute.get_strategy()
elif mode == "mirrored":
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
x = rng.standard_normal((GLOBAL_BATCH * STEPS, 4, 4, 6)).astype("float32")
y = rng.standard_normal((GLOBAL_BATCH * STEPS, 16, 16, 3)).astype("float32")

with strategy.scope():
    keras.utils.set_random_seed(7)
    inputs = keras.Input((4, 4, 6))
    t = layers.Conv2DTranspose(8, 3, strides=2, padding="same", groups=2, activation="relu")(inputs)
    t = layers.DepthwiseConv2DTranspose(3, strides=2, padding="same")(t)
    t = layers.DepthwiseConv2D(3, padding="same", dilation_rate=2)(t)
    model = keras.Model(inputs, layers.Conv2D(3, 3, padding="same")(t))
    optimizer = keras.optimizers.SGD(0.05)
initial = [w.numpy() for w in model.weights]

if use_fit:
    with strategy.scope():
        model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
else:
    replicas = strategy.num_replicas_in_sync
    part = GLOBAL_BATCH // replicas

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(xb) - yb)) / (GLOBAL_BATCH * 16 * 16 * 3)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def replica_part(data, s):
        # Replica r of the whole job (ids run across workers) takes part r of batch s.
        def part_of(ctx):
            start = s * GLOBAL_BATCH + ctx.replica_id_in_sync_group * part
            return data[start:start + part]
        return strategy.experimental_distribute_values_from_function(part_of)

    for s in range(STEPS):
        strategy.run(step, args=(replica_part(x, s), replica_part(y, s)))

np.savez(out, replicas=strategy.num_replicas_in_sync,
         **{f"initial_{i}": w for i, w in enumerate(initial)},
         **{f"final_{i}": w.numpy() for i, w in enumerate(model.weights)})
print("ok", strategy.num_replicas_in_sync)
