"""Smoke test of an op library built outside pip (bazel test //:bazel_smoke_test).

Loads the library named on the command line (or by TF_OPS_LIBRARY) through the tf_ops
package and runs the self-check of `python -m tf_ops` on it: every op against the float64
reference and TensorFlow's built-in op. Exits non-zero if the library is not the one that
got loaded, if its recorded TensorFlow version is not the running one, or if any row fails.

    python tests/bazel_smoke.py bazel-bin/_tf_ops.so
"""
import os
import sys


def main(argv):
    if len(argv) > 1:
        os.environ["TF_OPS_LIBRARY"] = os.path.abspath(argv[1])
    library = os.environ.get("TF_OPS_LIBRARY")
    if not library:
        print("usage: bazel_smoke.py PATH_TO_OP_LIBRARY (or set TF_OPS_LIBRARY)", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import tensorflow as tf

    import tf_ops
    from tf_ops.__main__ import selfcheck_main

    print(f"tf_ops package: {os.path.dirname(tf_ops.__file__)}")
    if os.path.realpath(tf_ops.library_path()) != os.path.realpath(library):
        print(f"FAIL: tf_ops.library_path() is {tf_ops.library_path()}, not {library}")
        return 1
    # The library that is mapped into this process is the one asked for, and no other copy.
    with open("/proc/self/maps") as f:
        mapped = {parts[5].strip() for parts in (line.split(None, 5) for line in f) if len(parts) == 6}
    ours = {p for p in mapped if os.path.basename(p) == os.path.basename(os.path.realpath(library))}
    if ours != {os.path.realpath(library)}:
        print(f"FAIL: mapped op libraries {sorted(ours)}, expected {os.path.realpath(library)}")
        return 1
    info = tf_ops.build_info()
    if info.get("tf_version") != tf.__version__:
        print(f"FAIL: library built for TensorFlow {info.get('tf_version')}, running {tf.__version__}")
        return 1
    return selfcheck_main(["--repeats", "1"])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
