"""Flags for C++ programs that use tf_ops' C++ op API (tf_ops::ops, its gradients, and the
ops and kernels), like tf.sysconfig's for TensorFlow's:

    g++ prog.cc $(python -m tf_ops.sysconfig --cflags --libs) -o prog

is the whole build. The compile flags carry TensorFlow's (its headers as system headers, so
that a program's own warning flags apply to its own code) and the folder of tf_ops' header
(#include "cc/ops/tf_ops_ops.h"). The link flags name every library such a program needs:
TensorFlow's C++ API and framework libraries, tf_ops' C++ API library and the op library,
the last two inside --no-as-needed (a program calls nothing in the op library: linking it is
what registers the ops and kernels when the program starts), with run paths to both
folders, so the program runs without LD_LIBRARY_PATH.
"""
import argparse
import os
import shlex
import sys

import tensorflow as tf

from tf_ops._loader import library_path

CPP_API_LIBRARY = "libtf_ops_cc.so"


def get_include():
    """The folder of tf_ops' C++ header (cc/ops/tf_ops_ops.h inside it)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def get_lib():
    """The folder of tf_ops' libraries (the C++ API library libtf_ops_cc.so and the op
    library _tf_ops.so)."""
    return os.path.dirname(os.path.abspath(__file__))


def get_compile_flags():
    """-I for tf_ops' header, then TensorFlow's compile flags (C++17, its ABI and alignment
    macros), its include folder as -isystem."""
    flags = [f"-I{get_include()}"]
    for flag in tf.sysconfig.get_compile_flags():
        if flag.startswith("-I"):
            flags += ["-isystem", flag[2:]]
        else:
            flags.append(flag.replace("--std=", "-std="))
    return flags


def get_link_flags():
    """TensorFlow's C++ API and framework libraries, tf_ops' C++ API library and its op
    library (inside --no-as-needed), with run paths to their folders."""
    tf_lib = tf.sysconfig.get_lib()
    ops_lib = os.path.dirname(library_path())
    flags = [f"-L{tf_lib}", "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
             f"-L{get_lib()}"]
    if ops_lib != get_lib():  # TF_OPS_LIBRARY names an op library built elsewhere
        flags.append(f"-L{ops_lib}")
    flags += ["-Wl,--push-state,--no-as-needed", f"-l:{CPP_API_LIBRARY}",
              f"-l:{os.path.basename(library_path())}", "-Wl,--pop-state"]
    for folder in dict.fromkeys([tf_lib, get_lib(), ops_lib]):
        flags.append(f"-Wl,-rpath,{folder}")
    return flags


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tf_ops.sysconfig",
                                     description="Prints the flags a C++ program using tf_ops needs.")
    parser.add_argument("--cflags", action="store_true", help="compile flags (get_compile_flags)")
    parser.add_argument("--libs", action="store_true", help="link flags (get_link_flags)")
    parser.add_argument("--include", action="store_true", help="the header folder (get_include)")
    parser.add_argument("--lib", action="store_true", help="the library folder (get_lib)")
    args = parser.parse_args(argv)
    if not (args.cflags or args.libs or args.include or args.lib):
        parser.error("ask for at least one of --cflags, --libs, --include, --lib")
    out = []
    if args.cflags:
        out += get_compile_flags()
    if args.libs:
        out += get_link_flags()
    if args.include:
        out.append(get_include())
    if args.lib:
        out.append(get_lib())
    print(shlex.join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
