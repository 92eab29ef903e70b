"""Runs saved models or graphs in a fresh process, as a user's serving job would.

    python saved_graph_worker.py DIR KIND [KIND ...] [--no-import]

Each KIND is savedmodel (a tf.Module's `run`), keras_export (a Keras model's `serve`), graphdef
(a serialized GraphDef with placeholders "x:0" and output "y:0") or session (the same through
a TF1 Session), its artifact in DIR/KIND/artifact and its input in DIR/KIND/x.npy. Each is
loaded and run in turn: the output goes to DIR/KIND/y.npy, or what was raised to
DIR/KIND/error.txt. With --no-import, tf_ops is not imported (loading must fail naming the
missing op), and the files are y_no_import.npy and error_no_import.txt.
"""
import os
import sys
import traceback

import numpy as np
import tensorflow as tf

args = [a for a in sys.argv[1:] if a != "--no-import"]
root, kinds = args[0], args[1:]
suffix = "_no_import" if "--no-import" in sys.argv else ""
if not suffix:
    import tf_ops  # noqa: F401  (registers the TfOps> ops)


def run(kind, directory):
    x = np.load(os.path.join(directory, "x.npy"))
    path = os.path.join(directory, "artifact")
    if kind in ("savedmodel", "keras_export"):
        loaded = tf.saved_model.load(path)  # kept alive: its functions refer to its variables
        return loaded.run(x) if kind == "savedmodel" else loaded.serve(x)
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    if kind == "graphdef":
        wrapped = tf.compat.v1.wrap_function(
            lambda t: tf.graph_util.import_graph_def(graph_def, input_map={"x:0": t},
                                                     return_elements=["y:0"])[0],
            [tf.TensorSpec(x.shape, tf.float32)])
        return wrapped(tf.constant(x))
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run("y:0", feed_dict={"x:0": x})


for kind in kinds:
    directory = os.path.join(root, kind)
    try:
        y = run(kind, directory)
    except Exception:  # noqa: BLE001  (the test reads what was raised)
        with open(os.path.join(directory, f"error{suffix}.txt"), "w") as f:
            f.write(traceback.format_exc())
        continue
    np.save(os.path.join(directory, f"y{suffix}.npy"), np.asarray(y))
print("ok")
