"""setup.py and BUILD.bazel build the same op library: the same sources, and the same
instruction-set flags for each micro-kernel file."""
import ast
import pathlib
import re

import tensorflow as tf

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


if __name__ == "__main__":
    tf.test.main()
