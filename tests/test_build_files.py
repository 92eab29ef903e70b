"""setup.py and BUILD.bazel build the same op library: the same sources, and the same
instruction-set flags for each micro-kernel file. The built libraries need no newer C and C++
runtime than the systems TensorFlow's wheel installs on."""
import ast
import importlib.util
import pathlib
import re
import shutil
import subprocess

import tensorflow as tf

import tf_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _assignments(text, names):
    """The literal values assigned to `names` at the top level of Python or Starlark text
    (`+=` extends a list)."""
    values = {}
    for node in ast.parse(text).body:
        for stmt in [node] + (node.body if isinstance(node, ast.If) else []):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if name in names:
                    try:
                        values[name] = ast.literal_eval(stmt.value)
                    except ValueError:
                        pass
            elif isinstance(stmt, ast.AugAssign) and getattr(stmt.target, "id", None) in names:
                values[stmt.target.id] = values[stmt.target.id] + ast.literal_eval(stmt.value)
    return values


class BuildFilesTest(tf.test.TestCase):

    def test_setup_and_bazel_agree(self):
        setup = _assignments((ROOT / "setup.py").read_text(), {"SOURCES", "MICROKERNEL_FLAGS"})
        build = (ROOT / "BUILD.bazel").read_text()
        bazel = _assignments(re.sub(r"^load\(.*?\)$", "", build, flags=re.M | re.S),
                             {"MICROKERNEL_FLAGS"})
        self.assertEqual(bazel["MICROKERNEL_FLAGS"], setup["MICROKERNEL_FLAGS"])
        # Every source of the op library: the C++ ops:: API (tf_ops_ops.cc, tf_ops_gradients.cc)
        # is a target of its own.
        bazel_sources = set(re.findall(r'"(cc/[\w/]+\.cc)"', build)) - {
            "cc/ops/tf_ops_ops.cc", "cc/ops/tf_ops_gradients.cc"}
        self.assertEqual(bazel_sources, set(setup["SOURCES"]))
        self.assertEqual(set(setup["MICROKERNEL_FLAGS"]) - set(setup["SOURCES"]), set())

    def test_libraries_need_old_runtimes(self):
        """The libraries' versioned symbols: glibc no newer than TensorFlow's manylinux tag (so
        auditwheel tags the wheel no newer, .ci/check_wheel.py), libstdc++ no newer than 5.1
        (cc/compat/libstdcxx_compat.cc: otherwise the compiler that built the wheel would set its
        tag)."""
        objdump = shutil.which("objdump")
        self.assertIsNotNone(objdump, "objdump (binutils) reads the libraries' symbol versions")
        spec = importlib.util.spec_from_file_location("check_wheel", ROOT / ".ci" / "check_wheel.py")
        check_wheel = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(check_wheel)
        glibc, _ = check_wheel.tensorflow_glibc()  # tensorflow's or tensorflow-cpu's tag
        limits = {"GLIBC": glibc, "GLIBCXX": LIBSTDCXX_5_1, "CXXABI": CXXABI_5_1}
        package = pathlib.Path(tf_ops.__file__).parent
        for library in ("_tf_ops.so", "libtf_ops_cc.so"):
            table = subprocess.run([objdump, "-T", str(package / library)], check=True,
                                   capture_output=True, text=True).stdout
            newer = sorted({line.split()[-1] for line in table.splitlines()
                            for name, version in re.findall(r"\((GLIBC|GLIBCXX|CXXABI)_([\d.]+)\)", line)
                            if tuple(map(int, version.split("."))) > limits[name]})
            self.assertEqual(newer, [], f"{library} needs symbols newer than {limits}")


# What libstdc++ 5.1 (GCC 5) exports: the C++ runtime every manylinux_2_24 and newer system has.
LIBSTDCXX_5_1 = (3, 4, 21)
CXXABI_5_1 = (1, 3, 9)


if __name__ == "__main__":
    tf.test.main()
