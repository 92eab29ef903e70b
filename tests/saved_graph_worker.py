"""Runs a saved model or graph in a fresh process, as a user's serving job would.

    python saved_graph_worker.py KIND DIR [--no-import]

KIND is savedmodel (a tf.Module's `run`), keras_export (a Keras model's `serve`), graphdef
(a serialized GraphDef with placeholders "x:0" and output "y:0") or session (the same through
a TF1 Session). Inputs come from DIR/x.npy, the output goes to DIR/y_loaded.npy. With
--no-import, tf_ops is not imported: loading must fail naming the missing op.
"""
import os
import sys

import numpy as np
import tensorflow as tf

kind, directory = sys.argv[1], sys.argv[2]
if "--no-import" not in sys.argv:
    import tf_ops  # noqa: F401  (registers the TfOps> ops)

x = np.load(os.path.join(directory, "x.npy"))
path = os.path.join(directory, "artifact")
if kind in ("savedmodel", "keras_export"):
    loaded = tf.saved_model.load(path)  # kept alive: its functions refer to its variables
    y = loaded.run(x) if kind == "savedmodel" else loaded.serve(x)
else:
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    if kind == "graphdef":
        run = tf.compat.v1.wrap_function(
            lambda t: tf.graph_util.import_graph_def(graph_def, input_map={"x:0": t},
                                                     return_elements=["y:0"])[0],
            [tf.TensorSpec(x.shape, tf.float32)])
        y = run(tf.constant(x))
    else:
        with tf.Graph().as_default() as graph:
            tf.graph_util.import_graph_def(graph_def, name="")
            with tf.compat.v1.Session(graph=graph) as session:
                y = session.run("y:0", feed_dict={"x:0": x})
np.save(os.path.join(directory, "y_loaded.npy"), np.asarray(y))
print("ok")
