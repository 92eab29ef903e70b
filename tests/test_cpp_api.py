"""The C++ op API (cc/ops/tf_ops_ops.h): the example program and the C++ test program are
compiled with the pip TensorFlow's compile flags (warnings as errors), linked against its
libtensorflow_cc / libtensorflow_framework and tf_ops' op library, and run.

tests/cc/cpp_api_test.cc compares every op class, with its attributes, against TensorFlow's
built-in ops, checks static shapes, error statuses and AddSymbolicGradients through the ops;
it prints one line per check. examples/cpp/tf_ops_example.cc is the program the README shows."""
import os
import re
import subprocess
import tempfile
import unittest

import tensorflow as tf

import cc_build
import tf_ops

OP_CLASSES = ["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropInputV2", "Conv2DBackpropFilter",
              "Conv2DBackpropFilterV2", "DepthwiseConv2dNative",
              "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"]


class CppApiTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if tf_ops.build_info().get("sanitize"):
            # A program linked against the sanitized library would need the sanitizer
            # runtimes of the same build; the sanitizer job does not run this test.
            raise unittest.SkipTest("tf_ops was built with sanitizers")
        cls._tmp = tempfile.TemporaryDirectory()
        test_source = cc_build.ROOT / "tests/cc/cpp_api_test.cc"
        cls.programs, cls.compile_s, cls.link_s = cc_build.build_programs(cls._tmp.name, {
            "tf_ops_example": (cc_build.ROOT / "examples/cpp/tf_ops_example.cc", True),
            "cpp_api_test": (test_source, True),
            "cpp_api_test_unlinked": (test_source, False),
        })
        print(f"\nC++ API: compiled in {cls.compile_s:.1f} s, linked in {cls.link_s:.1f} s")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _run(self, name, *args):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.run([str(self.programs[name]), *args], capture_output=True, text=True,
                              timeout=300, cwd=self._tmp.name, env=env)

    def _assert_all_ok(self, proc, min_checks):
        out = proc.stdout
        failed = [line for line in out.splitlines() if line.startswith("FAIL")]
        self.assertEqual(failed, [], out + proc.stderr)
        self.assertEqual(proc.returncode, 0, out + proc.stderr)
        summary = re.search(r"cpp_api_test: (\d+) checks, (\d+) failed", out)
        self.assertIsNotNone(summary, out + proc.stderr)
        self.assertEqual(int(summary.group(2)), 0)
        self.assertGreaterEqual(int(summary.group(1)), min_checks, out)
        return [line[5:] for line in out.splitlines() if line.startswith("ok  ")]

    def test_example_agrees_with_tensorflow(self):
        proc = self._run("tf_ops_example")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("TfOps>Conv2DBackpropInput -> [1,8,8,2]", proc.stdout)
        diffs = [float(v) for v in re.findall(r"max \|diff\| = (\S+)", proc.stdout)]
        self.assertLen(diffs, 4, proc.stdout)
        for d in diffs:
            self.assertLessEqual(d, 1e-4, proc.stdout)
        self.assertIn("tf_ops example: OK", proc.stdout)

    def test_cpp_api(self):
        proc = self._run("cpp_api_test")
        out = proc.stdout
        ok = self._assert_all_ok(proc, 160)
        for op in OP_CLASSES:
            # Each op: compared with TensorFlow, its static shape checked, and both of its
            # gradients compared.
            self.assertTrue(any(re.match(rf"{op} \S+ .* vs TensorFlow: max", line) for line in ok),
                            f"{op} not compared with TensorFlow\n{out}")
            self.assertTrue(any(re.match(rf"{op} \S+ .*: static shape \[", line) for line in ok),
                            f"{op} static shape not checked\n{out}")
            grads = [line for line in ok
                     if re.match(rf"{op} \S+ .*: gradient d/\w+ vs TensorFlow: max", line)]
            self.assertGreaterEqual(len(grads), 2, f"{op} gradients not compared\n{out}")
        # Bad attributes and inputs: non-OK statuses with the expected messages.
        errors = [line for line in ok if line.startswith("error: ")]
        self.assertGreaterEqual(len(errors), 11, out)

    def test_program_without_the_library(self):
        # Linked without _tf_ops.so: the ops are missing and the error says how to link it;
        # loading it with TF_LoadLibrary then registers the ops and kernels (the gradients
        # are compiled into the program).
        proc = self._run("cpp_api_test_unlinked", "--without-library", tf_ops.library_path())
        ok = self._assert_all_ok(proc, 7)
        self.assertTrue(any(line.startswith("unlinked: CheckOpsRegistered") for line in ok), ok)
        self.assertTrue(any(line.startswith("loaded at run time: Conv2D gradient")
                            for line in ok), ok)


if __name__ == "__main__":
    tf.test.main()
