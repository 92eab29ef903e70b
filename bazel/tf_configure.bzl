"""Repository rule that exposes the pip-installed TensorFlow to Bazel.

`tf_configure(name = "local_config_tf")` runs Python (`PYTHON_BIN_PATH`, default `python3`),
reads `tf.sysconfig` and creates the repository `@local_config_tf` with:

  :tf_headers                  TensorFlow's headers (as system headers) and the defines its
                               ABI needs (-D_GLIBCXX_USE_CXX11_ABI, -DEIGEN_MAX_ALIGN_BYTES)
  :libtensorflow_framework     libtensorflow_framework.so.2, which every op library links
  :libtensorflow_cc            libtensorflow_cc.so.2, which the C++ client API needs
  :python_toolchain            that same Python as the toolchain for py_binary/py_test, so
                               tests load the op library into the TensorFlow it was built for
  //:tf_config.bzl             TF_COPTS (the other compile flags from tf.sysconfig),
                               TF_DEFINES, TF_VERSION and the Python's version

Nothing is hard-coded: a different Python or TensorFlow is picked up by changing
PYTHON_BIN_PATH (Bazel re-runs the rule when it changes) or by `bazel sync --configure`.
"""

_SYSCONFIG_SCRIPT = """
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
info = {
    "include_dir": tf.sysconfig.get_include(),
    "lib_dir": tf.sysconfig.get_lib(),
    "compile_flags": tf.sysconfig.get_compile_flags(),
    "link_flags": tf.sysconfig.get_link_flags(),
    "version": tf.__version__,
    "git_version": getattr(tf, "__git_version__", ""),
    "python": sys.executable,
    "python_version": sys.version.split()[0],
}
print("TF_CONFIG_JSON=" + json.dumps(info))
"""

_MARKER = "TF_CONFIG_JSON="

def _python_bin(rctx):
    python = rctx.os.environ.get("PYTHON_BIN_PATH", "python3").strip()
    if "/" in python:
        return python
    found = rctx.which(python)
    if not found:
        fail("tf_configure: '%s' is not on PATH; set PYTHON_BIN_PATH to the Python " % python +
             "that has TensorFlow installed.")
    return str(found)

def _read_sysconfig(rctx, python):
    result = rctx.execute([python, "-c", _SYSCONFIG_SCRIPT], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        fail("tf_configure: could not import tensorflow with %s (set PYTHON_BIN_PATH to the " % python +
             "Python that has TensorFlow installed):\n" + result.stderr)
    for line in result.stdout.splitlines():
        if line.startswith(_MARKER):
            return json.decode(line[len(_MARKER):])
    fail("tf_configure: %s printed no TensorFlow configuration:\n%s\n%s" % (python, result.stdout, result.stderr))

def _find_library(rctx, dirs, names):
    """The first of `names` that exists in one of `dirs`, as a path; None if none does."""
    for d in dirs:
        for name in names:
            p = rctx.path(d + "/" + name)
            if p.exists:
                return p
    return None

def _quote_list(items):
    return "[" + ", ".join(['"%s"' % i.replace("\\", "\\\\").replace('"', '\\"') for i in items]) + "]"

def _tf_configure_impl(rctx):
    python = _python_bin(rctx)
    info = _read_sysconfig(rctx, python)

    # Compile flags: -I<dir> becomes the include path of :tf_headers, -D<x> its defines; the
    # C++ standard is the caller's choice; anything else goes to TF_COPTS.
    include_dirs = [info["include_dir"]]
    defines = []
    copts = []
    for flag in info["compile_flags"]:
        if flag.startswith("-I"):
            if flag[2:] not in include_dirs:
                include_dirs.append(flag[2:])
        elif flag.startswith("-D"):
            defines.append(flag[2:])
        elif flag.startswith("-std") or flag.startswith("--std"):
            continue
        else:
            copts.append(flag)
    if len(include_dirs) > 1:
        fail("tf_configure: more than one TensorFlow include directory: %s" % include_dirs)
    rctx.symlink(include_dirs[0], "include")

    # Link flags: -L<dir> are where the libraries are, -l:<file> / -l<name> the framework
    # library; anything else is kept as a link option of :libtensorflow_framework.
    lib_dirs = [info["lib_dir"]]
    framework_names = []
    linkopts = []
    for flag in info["link_flags"]:
        if flag.startswith("-L"):
            lib_dirs.append(flag[2:])
        elif flag.startswith("-l:"):
            framework_names.append(flag[3:])
        elif flag.startswith("-l"):
            framework_names += ["lib%s.so" % flag[2:], "lib%s.dylib" % flag[2:]]
        else:
            linkopts.append(flag)
    framework = _find_library(rctx, lib_dirs, framework_names or ["libtensorflow_framework.so.2"])
    if framework == None:
        fail("tf_configure: none of %s found in %s" % (framework_names, lib_dirs))
    rctx.symlink(framework, framework.basename)
    tf_cc = _find_library(rctx, lib_dirs, ["libtensorflow_cc.so.2", "libtensorflow_cc.2.dylib"])
    if tf_cc != None:
        rctx.symlink(tf_cc, tf_cc.basename)
        tf_cc_srcs = '["%s"]' % tf_cc.basename
    else:
        tf_cc_srcs = '[":libtensorflow_cc_missing"]'

    rctx.file("BUILD.bazel", """# Generated by tf_configure from the TensorFlow {version} of {python}.
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

# include/external holds copies of third-party trees (CUDA, gRPC, ...) that TensorFlow's own
# build reached through include paths of their own; tf.sysconfig's include path is include/
# alone and no header under it includes "external/...", so they are left out: half the files,
# which every sandboxed compile action would otherwise link in.
cc_library(
    name = "tf_headers",
    hdrs = glob(["include/**"], exclude = ["include/external/**"]),
    defines = {defines},
    includes = ["include"],
)

# The two third-party trees under include/external that XLA's headers include (for the XLA
# lowerings, cc/kernels/conv_xla.cc).
cc_library(
    name = "xla_headers",
    hdrs = glob(["include/external/highwayhash/**", "include/external/farmhash_archive/**"]),
    includes = ["include/external/highwayhash", "include/external/farmhash_archive/src"],
    deps = [":tf_headers"],
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["{framework}"],
    linkopts = {linkopts},
)

cc_library(
    name = "libtensorflow_cc",
    srcs = {tf_cc_srcs},
    deps = [":libtensorflow_framework"],
)

genrule(
    name = "libtensorflow_cc_missing_rule",
    outs = ["libtensorflow_cc_missing.so"],
    cmd = "echo 'libtensorflow_cc.so.2 is not in {lib_dir}: this TensorFlow has no C++ API library' >&2; exit 1",
)

alias(
    name = "libtensorflow_cc_missing",
    actual = ":libtensorflow_cc_missing_rule",
)

py_runtime(
    name = "python3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "python_runtimes",
    py3_runtime = ":python3_runtime",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":python_runtimes",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

exports_files(["tf_config.bzl"])
""".format(
        version = info["version"],
        python = info["python"],
        defines = _quote_list(defines),
        framework = framework.basename,
        linkopts = _quote_list(linkopts),
        tf_cc_srcs = tf_cc_srcs,
        lib_dir = info["lib_dir"],
    ))

    rctx.file("tf_config.bzl", """# Generated by tf_configure.
TF_COPTS = {copts}
TF_DEFINES = {defines}
TF_VERSION = "{version}"
TF_GIT_VERSION = "{git_version}"
PYTHON = "{python}"
PYTHON_VERSION = "{python_version}"
""".format(
        copts = _quote_list(copts),
        defines = _quote_list(defines),
        version = info["version"],
        git_version = info["git_version"],
        python = info["python"],
        python_version = info["python_version"],
    ))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH"],
    configure = True,
    local = True,
    doc = "Creates a repository for the TensorFlow installed in PYTHON_BIN_PATH's Python.",
)
