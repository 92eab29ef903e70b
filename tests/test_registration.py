"""Every dtype an op declares in REGISTER_OP has a CPU kernel, and vice versa; in a library
built with CUDA (build_info()["cuda"]), a GPU kernel too, its sizes vectors in host memory."""
import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

import tf_ops


def _declared_types(op_name):
    op_def = op_def_registry.get(op_name)
    attr = next(a for a in op_def.attr if a.name == "T")
    return {tf.dtypes.as_dtype(t) for t in attr.allowed_values.list.type}


def _kernel_types(op_name, device="CPU"):
    types = set()
    for k in kernels.get_registered_kernels_for_op(op_name).kernel:
        if k.device_type != device:
            continue
        for c in k.constraint:
            if c.name == "T":
                types.update(tf.dtypes.as_dtype(t) for t in c.allowed_values.list.type)
    return types


class RegistrationTest(tf.test.TestCase):

    def test_every_declared_dtype_has_a_cpu_kernel(self):
        for name, op_name in tf_ops.OP_NAMES.items():
            with self.subTest(op=op_name):
                declared = _declared_types(op_name)
                self.assertTrue(declared)
                self.assertEqual(declared, _kernel_types(op_name))

    def test_gpu_kernels_in_a_cuda_build(self):
        cuda = tf_ops.build_info().get("cuda")
        if not cuda:
            # Without a CUDA compiler at build time: no GPU kernel may be registered either.
            for op_name in tf_ops.OP_NAMES.values():
                self.assertEqual(_kernel_types(op_name, "GPU"), set(), op_name)
            return
        self.assertRegex(cuda["version"], r"^\d+\.\d+$")
        self.assertTrue(cuda["archs"])
        # Registered unless a driver here cannot run them, which gpu_support() would say.
        self.assertEqual(tf_ops.gpu_support(), "")
        for name, op_name in tf_ops.OP_NAMES.items():
            with self.subTest(op=op_name):
                self.assertEqual(_kernel_types(op_name, "GPU"), _declared_types(op_name))
                host = {m for k in kernels.get_registered_kernels_for_op(op_name).kernel
                        if k.device_type == "GPU" for m in k.host_memory_arg}
                sizes = {"Conv2DBackpropInput": {"input_sizes"},
                         "DepthwiseConv2dNativeBackpropInput": {"input_sizes"},
                         "Conv2DBackpropFilter": {"filter_sizes"},
                         "DepthwiseConv2dNativeBackpropFilter": {"filter_sizes"}}.get(name, set())
                self.assertEqual(host, sizes)

    def test_declared_dtypes_match_tensorflow(self):
        for name, op_name in tf_ops.OP_NAMES.items():
            with self.subTest(op=op_name):
                self.assertEqual(_declared_types(op_name), _declared_types(name))

    def test_attrs_and_defaults_match_tensorflow(self):
        for name, op_name in tf_ops.OP_NAMES.items():
            with self.subTest(op=op_name):
                ours, theirs = op_def_registry.get(op_name), op_def_registry.get(name)
                self.assertEqual([(a.name, a.type) for a in ours.input_arg],
                                 [(a.name, a.type) for a in theirs.input_arg])
                self.assertEqual([(a.name, a.type_attr, a.type) for a in ours.input_arg],
                                 [(a.name, a.type_attr, a.type) for a in theirs.input_arg])

                def attrs(op_def):
                    return {a.name: (a.type, a.default_value.SerializeToString(deterministic=True),
                                     a.allowed_values.SerializeToString(deterministic=True))
                            for a in op_def.attr}

                self.assertEqual(attrs(ours), attrs(theirs))

    def test_library_path_and_build_info(self):
        self.assertTrue(tf_ops.library_path().endswith("_tf_ops.so"))
        info = tf_ops.build_info()
        # Built for this minor release of TensorFlow (any patch release of it loads the library).
        self.assertEqual(info["tf_version"].split(".")[:2], tf.__version__.split(".")[:2])
        self.assertIn("-std=c++17", info["compile_flags"])


if __name__ == "__main__":
    tf.test.main()
