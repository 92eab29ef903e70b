"""The C++ op API (cc/ops/tf_ops_ops.h), as the installed package ships it: the example program
and the C++ test program are compiled with tf_ops.sysconfig's flags (warnings as errors),
linked against TensorFlow's libtensorflow_cc / libtensorflow_framework, tf_ops' C++ API
library and its op library, and run; the README's one-line build of the example too (the
exhaustive tier: the example itself is built and run in both).

tests/cc/cpp_api_test.cc compares every op class, with its attributes, against TensorFlow's
built-in ops, checks static shapes, error statuses and AddSymbolicGradients through the ops;
it prints one line per check. examples/cpp/tf_ops_example.cc is the program the README shows."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

import pytest
import tensorflow as tf

import cc_build
import tf_ops

OP_CLASSES = ["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropInputV2", "Conv2DBackpropFilter",
              "Conv2DBackpropFilterV2", "DepthwiseConv2dNative",
              "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"]


def assert_example_ok(test, proc):
    test.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
    test.assertIn("TfOps>Conv2DBackpropInput -> [1,8,8,2]", proc.stdout)
    diffs = [float(v) for v in re.findall(r"max \|diff\| = (\S+)", proc.stdout)]
    test.assertLen(diffs, 4, proc.stdout)
    for d in diffs:
        test.assertLessEqual(d, 1e-4, proc.stdout)
    test.assertIn("tf_ops example: OK", proc.stdout)


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
        assert_example_ok(self, self._run("tf_ops_example"))

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


class ReadmeOneLinerTest(tf.test.TestCase):
    """The README's build of the example, alone (CI's wheel job runs it on the installed wheel)."""

    @pytest.mark.exhaustive
    def test_readme_one_liner_builds_the_example_from_the_installed_package(self):
        # The README's build: the example alone in a folder of its own, one g++ line whose
        # flags all come from the installed package (no checkout on any path), then run.
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(cc_build.ROOT / "examples/cpp/tf_ops_example.cc", tmp)
            line = (f"{shlex.quote(cc_build.CXX)} -O2 tf_ops_example.cc "
                    f"$({shlex.quote(sys.executable)} -m tf_ops.sysconfig --cflags --libs) -o tf_ops_example")
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
            env.pop("PYTHONPATH", None)
            build = subprocess.run(["bash", "-c", line], cwd=tmp, capture_output=True, text=True,
                                   timeout=600, env=env)
            self.assertEqual(build.returncode, 0, line + "\n" + build.stdout + build.stderr)
            flags = subprocess.run([sys.executable, "-m", "tf_ops.sysconfig", "--cflags", "--libs"],
                                   cwd=tmp, capture_output=True, text=True, env=env).stdout
            # The checkout or a path inside it (a sibling such as <checkout>_venv is not one, nor
            # a virtual environment inside it, as README.md makes, where the package is installed).
            self.assertNotRegex(flags, rf"{re.escape(str(cc_build.ROOT))}(?![^\s,]*/site-packages/)(/|\s|,|$)")
            assert_example_ok(self, subprocess.run(["./tf_ops_example"], cwd=tmp, capture_output=True,
                                                   text=True, timeout=300, env=env))


if __name__ == "__main__":
    tf.test.main()
