"""The GPU plan's CUTLASS entries (cc/core/gpu/gpu_plan.h, cutlass_conv.h), on a machine without
a GPU:
- the mapping (tests/cutlass/mapping.cu): every plan over the emulated sweep's geometries and
  the CUTLASS thresholds, in every element type, whose CUTLASS problem and tensor references
  go through CUTLASS's host reference convolution and match float64 loops of TensorFlow's
  semantics; can_implement accepting each; every entry chosen and every refusal rule reached.
  Two planted mapping bugs (the padding after instead of before, the output size from CUTLASS's
  formula) each fail it;
- the compiled code of the installed library (cuobjdump -sass): the CUTLASS kernels of every
  dense entry, for sm_80 and sm_90, are multistage tensor-core pipelines (LDGSTS, LDSM, HMMA);
  no convolution kernel spills (STL/LDL); every kernel in the fatbin belongs to an entry the
  planner names; nvcc built the CUTLASS sets warning-clean;
- explain(device="gpu") names the chosen entry and every earlier entry's refusal.
What needs a GPU (their results, speed, compute-sanitizer) runs in tests/gpu/run.sh."""
import concurrent.futures
import glob
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf

import core_build
import tf_ops
from test_cuda_kernels import find_nvcc

MAPPING = core_build.ROOT / "tests" / "cutlass" / "mapping.cu"
CUTLASS_SOURCES = ["cc/core/gpu/cutlass_tf32x3.cu", "cc/core/gpu/cutlass_tf32.cu", "cc/core/gpu/cutlass_half.cu",
                   "cc/core/gpu/cutlass_bfloat16.cu", "cc/core/gpu/cutlass_conv.cu"]
# The entries whose kernels are CUTLASS's, by what their kernel's name says.
CUTLASS_ENTRIES = ("cutlass_fprop", "cutlass_dgrad_unity", "cutlass_dgrad_strided", "cutlass_wgrad")


def cutlass_include():
    """CUTLASS's include folder (the one the library was built with, else PyPI's nvidia-cutlass),
    or None."""
    recorded = (tf_ops.build_info().get("cuda") or {}).get("cutlass_include")
    candidates = [recorded] if recorded else []
    candidates += glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "cutlass_library", "source",
                                         "include"))
    for include in candidates:
        if include and os.path.isfile(os.path.join(include, "cutlass", "cutlass.h")):
            return include
    return None


def find_tool(name):
    """A CUDA binary tool (cuobjdump, nvdisasm) from PATH or PyPI's nvidia-cuda-* packages."""
    found = shutil.which(name)
    if found:
        return found
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        for path in sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "bin", name))):
            if os.access(path, os.X_OK):
                return path
    return None


class MappingTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.nvcc, cls.include = find_nvcc(), cutlass_include()
        if cls.nvcc is None or cls.include is None:
            raise AssertionError("the mapping test needs nvcc and CUTLASS's headers "
                                 f"(nvcc: {cls.nvcc}, CUTLASS: {cls.include}): "
                                 "python -m pip install 'nvidia-cutlass>=4.2,<5'")
        cls._tmp = tempfile.TemporaryDirectory()
        tmp = cls._tmp.name
        util = os.path.join(os.path.dirname(cls.include), "tools", "util", "include")
        flags = ["-std=c++17", "-O1", f"-I{core_build.ROOT}", "-isystem", cls.include, "-isystem", util,
                 "--expt-relaxed-constexpr", "-arch=sm_80", "-Werror", "all-warnings", "-Xcompiler",
                 "-Wall,-Wextra,-Werror"]

        def nvcc(*args):
            proc = subprocess.run([cls.nvcc, *args], capture_output=True, text=True)
            if proc.returncode != 0:
                raise AssertionError(f"nvcc {' '.join(args)}:\n{proc.stdout}{proc.stderr}"[-4000:])

        def compile_one(src, obj, extra=()):
            nvcc(*flags, *extra, "-c", str(core_build.ROOT / src), "-o", obj)
            return obj

        # The CUTLASS side once; the planner (whose CutlassShapeOf the plants change) three times.
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            heavy = [pool.submit(compile_one, "tests/cutlass/mapping.cu", os.path.join(tmp, "mapping.o")),
                     pool.submit(compile_one, "cc/core/gpu/cutlass_conv.cu", os.path.join(tmp, "table.o")),
                     pool.submit(compile_one, "cc/core/conv_geometry.cc", os.path.join(tmp, "geometry.o")),
                     pool.submit(compile_one, "cc/core/vocabulary.cc", os.path.join(tmp, "vocabulary.o"))]
            planners = {plant: pool.submit(compile_one, "cc/core/gpu/gpu_plan.cc",
                                           os.path.join(tmp, f"plan{plant}.o"),
                                           [f"-DTF_OPS_PLANT_CUTLASS_MAPPING={plant}"] if plant else [])
                        for plant in (0, 1, 2)}
            objects = [f.result() for f in heavy]
            cls.programs = {}
            for plant, future in planners.items():
                program = os.path.join(tmp, f"mapping{plant}")
                nvcc("-arch=sm_80", *objects, future.result(), "-o", program)
                cls.programs[plant] = program

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def test_mapping(self):
        code, output = core_build.run(self.programs[0])
        self.assertEqual(code, 0, output[-3000:])
        summary = re.search(r"^mapping: (\d+) geometries, (\d+) plans, (\d+) CUTLASS problems run through CUTLASS's "
                            r"host reference, \d+ \(direction, entry\) chosen, \d+ \(entry, rule\) refusals, "
                            r"0 failures$", output, re.M)
        self.assertIsNotNone(summary, output[-3000:])
        geometries, plans, references = map(int, summary.groups())
        self.assertGreater(geometries, 300)
        self.assertGreater(references, 500)

    def test_planted_mapping_bugs_fail(self):
        expected = {1: r"element \d+: CUTLASS's reference", 2: r"operand \d of CUTLASS's problem is"}
        for plant, pattern in expected.items():
            with self.subTest(plant=plant):
                code, output = core_build.run(self.programs[plant])
                self.assertNotEqual(code, 0, output[-2000:])
                self.assertRegex(output, r"^FAIL .*" + pattern)
                failures = int(re.search(r"(\d+) failures$", output, re.M).group(1))
                self.assertGreater(failures, 20)


def sass_functions(library, arch, cuobjdump):
    """{mangled function name: its SASS} of one architecture's code in `library`."""
    proc = subprocess.run([cuobjdump, "-sass", "-arch", arch, library], capture_output=True, text=True,
                          env=dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ["PATH"]))
    assert proc.returncode == 0, proc.stderr
    functions = {}
    for chunk in re.split(r"^\s*Function : ", proc.stdout, flags=re.M)[1:]:
        name, _, body = chunk.partition("\n")
        functions[name.strip()] = body
    return functions


def entry_of(mangled):
    """The plan entry a kernel of the library serves, from its mangled name; None for a kernel
    no entry names."""
    if "ImplicitGemmConvolutionStridedDgrad" in mangled:
        return "cutlass_dgrad_strided"
    if "ImplicitGemmConvolution" in mangled:
        # The kernel's conv::Operator template argument: 0 forward, 1 backprop input, 2 filter.
        operator = re.search(r"Operator[E]?([0-2])", mangled)
        return {"0": "cutlass_fprop", "1": "cutlass_dgrad_unity", "2": "cutlass_wgrad"}.get(
            operator.group(1) if operator else "", None)
    for kernel, entry in (("FilterToKrscKernel", "cutlass_layout"), ("KrscSumsKernel", "cutlass_layout"),
                          ("MmaKernel", "gpu_mma"), ("GemmKernel", "gpu_gemm"), ("DirectFilterKernel", "gpu_direct"),
                          ("DirectKernel", "gpu_direct"), ("ReduceSlices", "gpu_slices")):
        if kernel in mangled:
            return entry
    return None


class CompiledKernelsTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.info = tf_ops.build_info()
        cls.cuda = cls.info.get("cuda")
        cls.library = os.path.join(os.path.dirname(tf_ops.__file__), "_tf_ops.so")

    def _functions(self, arch):
        cuobjdump = find_tool("cuobjdump")
        if cuobjdump is None or find_tool("nvdisasm") is None:
            raise AssertionError("reading the kernels' SASS needs cuobjdump and nvdisasm: python -m pip install "
                                 "'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14'")
        return sass_functions(self.library, arch, cuobjdump)

    def test_sass(self):
        if not self.cuda:
            self.skipTest("a build without CUDA: no GPU code to read")
        for arch in ("sm_80", "sm_90"):
            with self.subTest(arch=arch):
                if arch.removeprefix("sm_") not in self.cuda["archs"]:
                    self.fail(f"the library was not built for {arch}: {self.cuda['archs']}")
                functions = self._functions(arch)
                entries = {}
                for name, sass in functions.items():
                    entry = entry_of(name)
                    self.assertIsNotNone(entry, f"{arch}: a kernel no plan entry names: {name}")
                    entries.setdefault(entry, []).append((name, sass))
                    spills = re.findall(r"\b(STL|LDL)(\.\w+)*\b", sass)
                    self.assertEqual(spills, [], f"{arch}: {name} spills to local memory")
                for entry in CUTLASS_ENTRIES:
                    kernels = entries.get(entry, [])
                    # One kernel per element type and float math: half, bfloat16, TF32, 3xTF32.
                    self.assertEqual(len(kernels), 4, f"{arch}: {entry}: {[n for n, _ in kernels]}")
                    for name, sass in kernels:
                        # ldmatrix moves 16-bit elements; the float32 (TF32) kernels read their
                        # shared tiles with plain 32-bit loads.
                        sixteen_bit = "half_t" in name or "bfloat16_t" in name
                        for instruction in ("LDGSTS", "HMMA") + (("LDSM",) if sixteen_bit else ("LDS",)):
                            self.assertRegex(sass, rf"\b{instruction}\b", f"{arch}: {entry} {name} lacks {instruction}")
                    self.assertEqual(sum("half_t" in n or "bfloat16_t" in n for n, _ in kernels), 2, entry)
                for entry in ("gpu_mma", "gpu_gemm", "gpu_direct", "cutlass_layout"):
                    self.assertIn(entry, entries, f"{arch}: no {entry} kernel")

    @pytest.mark.exhaustive
    def test_cutlass_sets_built_warning_clean(self):
        # Where the installed library was built from these sources with warnings as errors
        # (TF_OPS_WERROR=1, CI's set-up), nvcc's recorded output is the check; otherwise the sets
        # are compiled here, for sm_80 and sm_90, warnings as errors.
        if not self.cuda:
            self.skipTest("a build without CUDA")
        flags = " ".join(self.cuda.get("flags", []))
        if "-Werror all-warnings" in flags and self.info.get("core_sha256") == core_build.core_sha256():
            for source in CUTLASS_SOURCES:
                self.assertEqual(self.cuda["output"].get(source), "", source)
            return
        nvcc, include = find_nvcc(), cutlass_include()
        self.assertIsNotNone(nvcc)
        self.assertIsNotNone(include, "CUTLASS's headers: python -m pip install -r tests/requirements.txt")

        def compile_one(source):
            with tempfile.TemporaryDirectory() as tmp:
                return subprocess.run(
                    [nvcc, "-std=c++17", "-O3", f"-I{core_build.ROOT}", "-isystem", include, "--expt-relaxed-constexpr",
                     "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-Werror",
                     "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-c", str(core_build.ROOT / source), "-o",
                     os.path.join(tmp, "set.o")], capture_output=True, text=True)

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            for source, proc in zip(CUTLASS_SOURCES, pool.map(compile_one, CUTLASS_SOURCES)):
                self.assertEqual(proc.returncode, 0, source + ": " + (proc.stdout + proc.stderr)[-3000:])
                self.assertEqual(proc.stdout + proc.stderr, "", source)


class ExplainEntriesTest(tf.test.TestCase):
    """explain(device="gpu") shows the chosen entry and the refusals before it, for named layers."""

    def setUp(self):
        super().setUp()
        if not tf_ops.build_info().get("cuda"):
            self.skipTest("a build without CUDA")

    def test_named_layers(self):
        vgg = dict(input_shape=[8, 56, 56, 64], filter_shape=[3, 3, 64, 64], padding="SAME")
        cases = [
            # (op, kwargs, entry, refusals as (entry, rule))
            ("conv2d", dict(vgg, dtype=tf.float16), "cutlass_fprop", [("gpu_zero", "not_empty")]),
            ("conv2d_backprop_input", dict(vgg, dtype=tf.bfloat16, strides=2), "cutlass_dgrad_strided",
             [("gpu_zero", "not_empty"), ("cutlass_dgrad_unity", "strided")]),
            ("conv2d_backprop_filter", dict(vgg, dtype=tf.float16), "cutlass_wgrad", [("gpu_zero", "not_empty")]),
            # An RGB stem: three channels, not a whole 128-bit access.
            ("conv2d", dict(input_shape=[8, 224, 224, 3], filter_shape=[7, 7, 3, 64], strides=2, padding="SAME",
                            dtype=tf.float16), "gpu_mma",
             [("gpu_zero", "not_empty"), ("cutlass_fprop", "can_implement"), ("gpu_direct", "columns")]),
            ("conv2d", dict(vgg, data_format="NCHW", input_shape=[8, 64, 56, 56]), "gpu_gemm",
             [("gpu_zero", "not_empty"), ("cutlass_fprop", "layout"), ("gpu_direct", "columns"),
              ("gpu_mma", "not_half")]),
            ("depthwise_conv2d_native", dict(vgg, filter_shape=[3, 3, 64, 1]), "gpu_direct",
             [("gpu_zero", "not_empty"), ("cutlass_fprop", "groups")]),
            ("conv2d", dict(vgg, dtype=tf.float64), "gpu_gemm",
             [("gpu_zero", "not_empty"), ("cutlass_fprop", "element_type"), ("gpu_direct", "columns"),
              ("gpu_mma", "not_half")]),
        ]
        for op, kwargs, entry, refusals in cases:
            with self.subTest(op=op, **{k: str(v) for k, v in kwargs.items()}):
                plan = tf_ops.explain(op, device="gpu", **kwargs)
                self.assertEqual(plan.algorithm, entry)
                self.assertEqual([(e, r.partition("(")[0]) for e, r in plan.refused], refusals)
                self.assertIn(entry, str(plan))
        # CUTLASS's own reason travels with its refusal.
        plan = tf_ops.explain("conv2d", [8, 224, 224, 3], [7, 7, 3, 64], device="gpu", dtype=tf.float16)
        self.assertIn(("cutlass_fprop", "can_implement(CUTLASS:_Error_Invalid_Problem)"), plan.refused)
        # float32: TF32 while TensorFlow allows it, else 3xTF32 (TensorFlow's switch, read per call).
        self.assertEqual(tf_ops.explain("conv2d", device="gpu", **vgg).accuracy, "tf32")
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            self.assertEqual(tf_ops.explain("conv2d", device="gpu", **vgg).accuracy, "tf32x3")
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(True)
