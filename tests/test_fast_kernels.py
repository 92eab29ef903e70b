"""The fast CPU kernels (cc/core/cpu/conv_fast.cc) agree with the direct loops they replace,
which stay in the library as the oracle (TF_OPS_CPU_KERNELS=direct), and with the float64
reference, on the shapes where their blocking switches on: channel counts past each tile
width (16, 32, 64 columns; 6, 12, 14 rows) with odd remainders, reductions long enough to be
split into chunks, rows long enough for affine runs, strides above the filter size (residue
classes with no tap), groups, dilations, NCHW, stride-1 passes with short tiles (banded,
filter rows merged or not), and depthwise channel counts that mix the wide, 16-wide and
scalar blocks, with and without the row kernels. Every instruction set's micro-kernels are
checked too."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

import common
import core_build
from tiers import EXHAUSTIVE
import tf_ops
from tf_ops import _loader

HERE = pathlib.Path(__file__).resolve().parent
HALF_TYPES = [tf.float32, tf.float16, tf.bfloat16]

# (name, config). Filter in-depth below the input depth means groups.
CASES = [
    ("chunked forward reduction (100 input channels), 128 columns, long rows",
     common.make_config("NHWC", 2, 11, 37, 100, [3, 3, 100, 128], (1, 1), (1, 1), "SAME")),
    ("5x5, 101 input channels: chunked reductions of odd length (float and bfloat16 pairs)",
     common.make_config("NHWC", 1, 9, 12, 101, [5, 5, 101, 128], (1, 1), (1, 1), "SAME")),
    ("70 = 64 + 6 output channels, 5 = 3 + 2 groups of 2 in 10",
     common.make_config("NHWC", 2, 12, 13, 10, [3, 3, 2, 70], (1, 1), (1, 1), "SAME")),
    ("45 input / 130 output channels, stride 2, explicit pads",
     common.make_config("NHWC", 1, 23, 29, 45, [3, 3, 45, 130], (2, 2), (1, 1), "EXPLICIT",
                        (1, 2, 0, 1))),
    ("NCHW, 2 groups, strides (2, 1), dilations (2, 1)",
     common.make_config("NCHW", 2, 17, 19, 24, [3, 3, 12, 40], (2, 1), (2, 1), "SAME")),
    ("stem-like: 3 input channels, 7x7, stride 2",
     common.make_config("NHWC", 3, 19, 18, 3, [7, 7, 3, 64], (2, 2), (1, 1), "SAME")),
    ("1x1, stride 2 > filter: residue classes with no tap",
     common.make_config("NHWC", 2, 14, 15, 33, [1, 1, 33, 17], (2, 2), (1, 1), "VALID")),
    ("chunked backprop-input reduction (300 output channels), 20 input channels, long rows",
     common.make_config("NHWC", 2, 9, 40, 20, [3, 3, 20, 300], (1, 1), (1, 1), "SAME")),
    ("filter columns that read no input: 1-column input, column dilation 2",
     common.make_config("NHWC", 2, 9, 1, 4, [3, 3, 4, 5], (2, 1), (1, 2), "SAME")),
    ("stride 3 x 2, dilation 2 x 3, 5x4 filter, NCHW",
     common.make_config("NCHW", 2, 21, 26, 18, [5, 4, 18, 33], (3, 2), (2, 3), "SAME")),
    ("stride 1, 16 channels: banded, each filter row's taps merged into one reduction",
     common.make_config("NHWC", 2, 11, 23, 16, [3, 3, 16, 16], (1, 1), (1, 1), "SAME")),
    ("stride 1, 5 input channels, 5x5: merged (bfloat16 pairs: odd rows, not merged)",
     common.make_config("NHWC", 2, 13, 17, 5, [5, 5, 5, 24], (1, 1), (1, 1), "SAME")),
    ("stride 1, dilation 2: banded, taps not merged",
     common.make_config("NHWC", 2, 12, 15, 8, [3, 3, 8, 16], (1, 1), (2, 2), "SAME")),
    ("stride 1, 7x7, 64 input channels: banded, two reduction chunks",
     common.make_config("NHWC", 1, 10, 12, 64, [7, 7, 64, 8], (1, 1), (1, 1), "SAME")),
    ("column stride 2 over a 1-column input: a single pixel class that no tap reaches",
     common.make_config("NCHW", 2, 8, 1, 2, [1, 1, 2, 3], (1, 2), (3, 1), "EXPLICIT",
                        (0, 0, 1, 0))),
    ("1x1, stride 1, no padding: one affine run over every pixel of the batch, 70 columns",
     common.make_config("NHWC", 3, 5, 7, 40, [1, 1, 40, 70], (1, 1), (1, 1), "VALID")),
    ("stride 1, explicit pads (2, 0, 1, 3), 2x3 filter, 3 groups, NCHW",
     common.make_config("NCHW", 2, 9, 14, 6, [2, 3, 2, 9], (1, 1), (1, 1), "EXPLICIT",
                        (2, 0, 1, 3))),
]
DEPTHWISE_CASES = [
    ("85 = 64 + 16 + 5 channels, stride 1",
     common.make_config("NHWC", 2, 13, 41, 85, [3, 3, 85, 1], (1, 1), (1, 1), "SAME", depthwise=True)),
    ("85 channels, strides (2, 3), dilation 2, NCHW",
     common.make_config("NCHW", 2, 23, 31, 85, [3, 3, 85, 1], (2, 3), (2, 2), "SAME", depthwise=True)),
    ("5 channels: scalar remainder only, 5x5 VALID",
     common.make_config("NHWC", 3, 17, 20, 5, [5, 5, 5, 1], (1, 1), (1, 1), "VALID", depthwise=True)),
    ("depth multiplier 2, filter columns that read no input (1-column input, dilation 2)",
     common.make_config("NHWC", 2, 10, 1, 2, [3, 3, 2, 2], (3, 1), (3, 2), "SAME", depthwise=True)),
    ("depth multiplier 3 (grouped GEMM), stride 2",
     common.make_config("NHWC", 2, 15, 16, 20, [3, 3, 20, 3], (2, 2), (1, 1), "SAME", depthwise=True)),
    ("stride 3 over a 2x2 filter (pixel classes no tap reaches), 70 columns: several groups",
     common.make_config("NHWC", 2, 8, 70, 48, [2, 2, 48, 1], (3, 3), (1, 1), "SAME", depthwise=True)),
    ("96 = 64 + 32 channels, batch 1, explicit pads",
     common.make_config("NHWC", 1, 30, 29, 96, [3, 3, 96, 1], (1, 1), (1, 1), "EXPLICIT",
                        (0, 2, 1, 1), depthwise=True)),
    ("112 = 64 + 32 + 16 channels, 5x5, stride 2: row kernels of 5 columns 2 apart (forward),"
     " 3 and 2 columns (backprop input) at every width",
     common.make_config("NHWC", 2, 19, 45, 112, [5, 5, 112, 1], (2, 2), (1, 1), "SAME",
                        depthwise=True)),
    ("48 = 32 + 16 channels, 7x2 filter, strides (1, 2), VALID: 2 columns 2 apart, 1 column",
     common.make_config("NHWC", 2, 14, 33, 48, [7, 2, 48, 1], (1, 2), (1, 1), "VALID",
                        depthwise=True)),
    ("3x7 filter: more columns than the row kernels take, 32 channels",
     common.make_config("NHWC", 1, 15, 40, 32, [3, 7, 32, 1], (1, 1), (1, 1), "SAME",
                        depthwise=True)),
]
GEMM_KINDS = ["conv2d", "backprop_input", "backprop_input_v2", "backprop_filter", "backprop_filter_v2"]
DEPTHWISE_KINDS = ["depthwise", "depthwise_backprop_input", "depthwise_backprop_filter"]


def run_direct(kind, cfg, arrays, dtype):
    """The op through the direct loops."""
    before = _loader._switch("direct_kernels", True)
    try:
        return common.run_ours(kind, cfg, arrays, dtype)
    finally:
        _loader._switch("direct_kernels", before)


class FastKernelsTest(tf.test.TestCase):

    def _check(self, kinds, cases, seed):
        rng = np.random.default_rng(seed)
        for name, cfg in cases:
            self.assertIsNotNone(cfg, name)
            for kind in kinds:
                for dtype in HALF_TYPES:
                    what = f"{name}: {common.describe(kind, cfg, dtype)}"
                    arrays = common.make_inputs(rng, cfg, dtype)
                    fast = common.run_ours(kind, cfg, arrays, dtype)
                    direct = run_direct(kind, cfg, arrays, dtype)
                    ref = common.run_reference(kind, cfg, arrays)
                    self.assertLessEqual(common.max_error(fast, ref), common.TOLERANCE[dtype],
                                         f"fast vs reference: {what}")
                    self.assertLessEqual(common.max_error(direct, ref), common.TOLERANCE[dtype],
                                         f"direct vs reference: {what}")
                    # Both sum in float32 and round once; they differ by summation order only.
                    self.assertLessEqual(common.max_error(fast, direct), common.TOLERANCE[dtype],
                                         f"fast vs direct: {what}")

    def test_gemm_kernels(self):
        self._check(GEMM_KINDS, CASES, 1)

    def test_depthwise_kernels(self):
        self._check(DEPTHWISE_KINDS, DEPTHWISE_CASES, 2)

    def test_nchw_in_chunks_matches_nhwc(self):
        # NCHW runs on NHWC copies of chunks of images (2**21 elements at most, one image at
        # least): 3 images of 40 x 120 x 150 go in chunks of 2 and 1. The same op in NHWC on
        # the transposed tensors is the reference here (the float64 one would take minutes).
        rng = np.random.default_rng(4)
        for depthwise, filter_shape in ((False, [3, 3, 40, 8]), (True, [3, 3, 40, 1])):
            nhwc = common.make_config("NHWC", 3, 120, 150, 40, filter_shape, (1, 2), (1, 1), "SAME",
                                      depthwise=depthwise)
            nchw = common.make_config("NCHW", 3, 120, 150, 40, filter_shape, (1, 2), (1, 1), "SAME",
                                      depthwise=depthwise)
            kinds = DEPTHWISE_KINDS if depthwise else ["conv2d", "backprop_input", "backprop_filter"]
            for kind in kinds:
                for dtype in (tf.float32, tf.bfloat16):
                    arrays = common.make_inputs(rng, nhwc, dtype)
                    to_nchw = {k: np.transpose(v, (0, 3, 1, 2)) if k != "w" else v
                               for k, v in arrays.items()}
                    ours = common.run_ours(kind, nchw, to_nchw, dtype)
                    expected = common.run_ours(kind, nhwc, arrays, dtype)
                    if "filter" not in kind:
                        expected = np.transpose(expected, (0, 3, 1, 2))
                    self.assertLessEqual(common.max_error(ours, expected), common.TOLERANCE[dtype],
                                         common.describe(kind, nchw, dtype))

    def test_isa_is_reported(self):
        self.assertIn(tf_ops.cpu_kernel_isa(), ("amx_bf16", "avx512_bf16", "avx512", "avx2", "generic"))

    def test_every_instruction_set(self):
        # The micro-kernels are compiled once per instruction set and picked at run time;
        # TF_OPS_CPU_ISA names the table, so each set this processor has runs here.
        script = (
            "import sys, numpy as np, tensorflow as tf, common, tf_ops\n"
            "from test_fast_kernels import CASES, DEPTHWISE_CASES\n"
            "print('isa', tf_ops.cpu_kernel_isa())\n"
            "rng = np.random.default_rng(3)\n"
            "worst = 0.0\n"
            "for cases, kinds in ((CASES[:4], ['conv2d', 'backprop_input', 'backprop_filter']),\n"
            "                     (DEPTHWISE_CASES, ['depthwise', 'depthwise_backprop_input',\n"
            "                                        'depthwise_backprop_filter'])):\n"
            "    for name, cfg in cases:\n"
            "        for kind in kinds:\n"
            "            for dtype in (tf.float32, tf.float16, tf.bfloat16):\n"
            "                arrays = common.make_inputs(rng, cfg, dtype)\n"
            "                err = common.max_error(common.run_ours(kind, cfg, arrays, dtype),\n"
            "                                       common.run_reference(kind, cfg, arrays))\n"
            "                if err > common.TOLERANCE[dtype]:\n"
            "                    sys.exit(f'{err} {common.describe(kind, cfg, dtype)}')\n"
            "print('ok')\n")
        # The fast tier runs the best one (the kernel sweep proves it whole there).
        isas = core_build.available_isas() if EXHAUSTIVE else core_build.available_isas()[-1:]
        for isa in isas:
            env = dict(os.environ, TF_OPS_CPU_ISA=isa, TF_CPP_MIN_LOG_LEVEL="2")
            proc = subprocess.run([sys.executable, "-c", script], cwd=str(HERE), env=env,
                                  capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, f"{isa}: {proc.stderr[-3000:]}")
            self.assertIn(f"isa {isa}", proc.stdout)
            self.assertIn("ok", proc.stdout)


class ForcedInstructionSetTest(tf.test.TestCase):
    """TF_OPS_CPU_ISA names the kernel table for the whole process; a name that is no table, or
    one this processor cannot run, is refused with its value named: at import, and by each op
    of a library loaded without tf_ops' Python package."""

    SCRIPT_IMPORT = "import tf_ops\n"
    SCRIPT_OP = (
        "import sys, tensorflow as tf\n"
        "lib = tf.load_op_library(sys.argv[1])\n"
        "try:\n"
        "    lib.tf_ops_conv2d(input=tf.ones([1, 4, 4, 2]), filter=tf.ones([1, 1, 2, 2]), strides=[1, 1, 1, 1],\n"
        "                      padding='VALID')\n"
        "except tf.errors.InvalidArgumentError as e:\n"
        "    print('refused:', e.message)\n")

    def _run(self, script, isa, *args):
        env = dict(os.environ, TF_OPS_CPU_ISA=isa, TF_CPP_MIN_LOG_LEVEL="2")
        with tempfile.TemporaryDirectory() as cwd:
            return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=300)

    def test_refused_names(self):
        usable = core_build.available_isas()
        lacking = [isa for isa in ("avx2", "avx512", "avx512_bf16", "amx_bf16") if isa not in usable]
        for isa, why in [("avx3", "not an instruction set of the CPU kernels (generic, avx2, avx512, "
                                  "avx512_bf16, amx_bf16)")] + [
                (isa, f"this processor (or its operating system) cannot run the {isa} kernels; it runs "
                      + ", ".join(usable)) for isa in lacking]:
            proc = self._run(self.SCRIPT_IMPORT, isa)
            self.assertNotEqual(proc.returncode, 0, isa)
            self.assertIn(f"ImportError: tf_ops: TF_OPS_CPU_ISA={isa}: {why}", proc.stderr)
            proc = self._run(self.SCRIPT_OP, isa, tf_ops.library_path())
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            self.assertIn("refused:", proc.stdout)
            self.assertIn(f" Conv2D: TF_OPS_CPU_ISA={isa}: {why}", proc.stdout)


class NarrowingTest(tf.test.TestCase):
    """The vector float -> half / bfloat16 conversions that write half and bfloat16 results
    round exactly as Eigen's scalar conversions (the direct loops') do: checked bit for bit
    by a driver of the installed library's micro-kernels, on every instruction set this
    processor has."""

    def test_vector_conversions_match_eigen(self):
        # Built like the other drivers (tests/core_build.py): linked against the installed
        # library, whose micro-kernels it converts with (sanitized under TF_OPS_SANITIZE=1).
        with tempfile.TemporaryDirectory() as tmp:
            driver = core_build.build(tmp, "narrow_driver", [("tests/cc/narrow_driver.cc", [])])
            code, out = core_build.run(driver, timeout=300)
        self.assertEqual(code, 0, out)
        lines = [line.split() for line in out.splitlines() if not line.startswith(" ")]
        if tf_ops.cpu_kernel_isa() != "generic":
            self.assertNotEqual(lines, [], "no instruction set with vector conversions was checked")
        for isa, dtype, count, mismatches in lines:
            self.assertGreater(int(count), 60000, f"{isa} {dtype}")
            self.assertEqual(int(mismatches), 0, f"{isa} {dtype}")

    def test_bfloat16_gemm_results_round_as_eigen(self):
        # The bfloat16 GEMMs round their float sums in the micro-kernel (with AVX-512 BF16,
        # through vcvtne2ps2bf16 unless a lane is a NaN or denormal). A 1x1 layer with a filter
        # of ones sums three bfloat16 pieces of a float (its top, middle and low 8 significant
        # bits: every partial sum exact), so each output is that float rounded: compared bit
        # for bit with Eigen's rounding (TensorFlow's cast, NaNs aside: see below), over the
        # narrow driver's kinds of values (specials, rounding ties, a sweep of bit patterns)
        # for the 16-, 32- and 64-column tiles. On a processor without AVX-512 BF16 this
        # checks the conversions that run there instead.
        specials = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                    0x7F800001, 0x7FBFFFFF, 0xFF812345, 0x7F7FFFFF, 0xFF7FFFFF, 0x0C800000,
                    0x477FE000, 0x477FF000, 0x477FEFFF, 0x38800000, 0x3F808000, 0x3F818000]
        hi = np.arange(0, 0x10000, 97, dtype=np.uint32)
        lo = np.array([0x7FFF, 0x8000, 0x8001, 0x18000, 0x0FFF, 0x1000, 0x1001, 0x3000],
                      dtype=np.uint32)
        ties = ((hi[:, None] << 16) ^ lo[None, :]).ravel()
        sweep = np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(np.uint32)
        bits = np.concatenate([np.array(specials, np.uint32), ties, sweep])
        exponent = (bits >> 23) & 0xFF
        finite = exponent < 255
        # Every piece a normal bfloat16 (vdpbf16ps reads denormals as zero), or all zero.
        keep = (exponent >= 25) | ((bits & 0x7FFFFFFF) == 0)
        bits = bits[keep]
        finite = finite[keep]
        value = bits.view(np.float32)
        # A NaN's top piece is a NaN too (its payload may sit in the low bits alone).
        top_bits = np.where(np.isnan(value), bits | 0x00400000, bits) & 0xFFFF0000
        top = top_bits.astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore"):  # inf - inf where not finite, then dropped
            rest = np.where(finite, value - top, np.float32(0)).astype(np.float32)
        middle = (rest.view(np.uint32) & 0xFFFF0000).view(np.float32)
        low = (rest - middle).astype(np.float32)
        pieces = np.stack([top, middle, low], axis=-1)
        self.assertTrue(np.array_equal((pieces.view(np.uint32) & 0xFFFF), np.zeros_like(pieces, np.uint32)))
        # The sums start from +0, so a -0 sums to +0.
        expected_sum = np.where(finite, (top + middle) + low, value).astype(np.float32)
        expected_sum[expected_sum == 0] = 0.0
        expected = tf.bitcast(tf.cast(tf.constant(expected_sum), tf.bfloat16), tf.uint16).numpy()
        # A NaN becomes the quiet NaN of its sign (tf.cast drops the sign; Eigen's scalar
        # conversion, which the direct loops use, keeps it).
        nan = np.isnan(value)
        expected[nan] = (bits[nan] >> 16) & 0x8000 | 0x7FC0
        x = tf.bitcast(tf.constant((pieces.view(np.uint32) >> 16).astype(np.uint16)), tf.bfloat16)
        x = tf.reshape(x, [1, 1, -1, 3])
        for k in (16, 32, 64):
            y = tf_ops.conv2d(x, tf.ones([1, 1, 3, k], tf.bfloat16), 1, "VALID")
            got = tf.bitcast(y, tf.uint16).numpy().reshape(-1, k)
            for j in (0, k - 1):
                wrong = np.nonzero(got[:, j] != expected)[0]
                if wrong.size:
                    i = wrong[0]
                    self.fail(f"{k} columns: {wrong.size} of {len(expected)} differ, e.g. "
                              f"0x{bits[i]:08x} -> 0x{got[i, j]:04x}, Eigen 0x{expected[i]:04x}")


class PlanCacheTest(tf.test.TestCase):
    """An op keeps its CPU calls' plans by geometry and by the switches they were planned under
    (cc/core/cpu/conv_cpu.h: PlanCache): a kept plan gives what planning again gives, a switch
    changed between two calls of one geometry takes effect at once, and more geometries than it
    keeps are planned again."""

    def setUp(self):
        super().setUp()
        self.exact_before = tf_ops.set_exact_mode(False)

    def tearDown(self):
        tf_ops.set_exact_mode(self.exact_before)
        _loader._switch("plan_cache", True)
        super().tearDown()

    def test_kept_plans_follow_geometry_and_switches(self):
        rng = np.random.default_rng(5)
        # 3x3 at stride 1 with 32 channels: Winograd unless in exact mode, whose sums differ in
        # their last bits from the direct ones.
        x = tf.constant(rng.standard_normal((2, 12, 12, 32)), tf.float32)
        w = tf.constant(rng.standard_normal((3, 3, 32, 32)), tf.float32)
        # One graph for every batch size: one op kernel, one cache, for every call.
        conv = tf.function(lambda x: tf_ops.conv2d(x, w, 1, "SAME"),
                           input_signature=[tf.TensorSpec([None, 12, 12, 32], tf.float32)])

        def run(exact, cache, inputs=x):
            tf_ops.set_exact_mode(exact)
            _loader._switch("plan_cache", cache)
            return conv(inputs).numpy()

        uncached = {exact: run(exact, False) for exact in (False, True)}
        self.assertFalse(np.array_equal(uncached[False], uncached[True]),
                         "Winograd and the direct sums agree to the bit: the test shows nothing")
        for exact in (False, True, False, True):  # one geometry, the switch flipped between calls
            self.assertAllEqual(run(exact, True), uncached[exact])
        # Twice as many geometries as a cache keeps, twice round: each result as planned anew.
        batches = range(1, 2 * 8 + 1)
        expected = {n: run(False, False, x[:1].numpy().repeat(n, 0)) for n in batches}
        for _ in range(2):
            for n in batches:
                self.assertAllEqual(run(False, True, x[:1].numpy().repeat(n, 0)), expected[n])


class WorkspaceTest(tf.test.TestCase):
    """A call's workspace (cc/core/cpu/fast_common.h): one block of its plan's size, asked for
    once, before anything runs; the passes' buffers aligned, disjoint and nested inside it;
    what does not fit or comes back out of order counted (the kernel sweep holds every call to
    none) and never handed out twice; a call that cannot have its block writes nothing."""

    def test_workspace(self):
        with tempfile.TemporaryDirectory() as tmp:
            driver = core_build.build(tmp, "workspace_driver",
                                      [("tests/cc/workspace_driver.cc", [])])
            code, out = core_build.run(driver, timeout=300)
        self.assertEqual(code, 0, out)
        summary = re.search(r"workspace: (\d+) checks, (\d+) failed", out)
        self.assertIsNotNone(summary, out)
        self.assertEqual(int(summary.group(1)), 20, out)
        self.assertEqual(int(summary.group(2)), 0, out)


class PullChunksTest(tf.test.TestCase):
    """The ParallelFor that the fast kernels run on in TensorFlow (cc/core/cpu/pull_chunks.h),
    on a pool of the driver's own: every unit exactly once, no more threads at work than the
    pass's jobs, the caller among them, and passes started from inside the pool finishing
    (under the sanitizer job, with ASan watching the jobs that start after their pass
    returned; and under ThreadSanitizer)."""

    def _assert_all_ok(self, code, out):
        self.assertEqual(code, 0, out)
        summary = re.search(r"pull_chunks: (\d+) checks, (\d+) failed", out)
        self.assertIsNotNone(summary, out)
        self.assertGreaterEqual(int(summary.group(1)), 400, out)
        self.assertEqual(int(summary.group(2)), 0, out)

    def test_pull_chunks(self):
        with tempfile.TemporaryDirectory() as tmp:
            driver = core_build.build(tmp, "pull_chunks_driver",
                                      [("tests/cc/pull_chunks_driver.cc", [])])
            self._assert_all_ok(*core_build.run(driver, timeout=300))

    def test_pull_chunks_under_thread_sanitizer(self):
        # The header alone, with ThreadSanitizer: the counter, the wait and the state that
        # late jobs share with their pass, free of data races.
        cxx = os.environ.get("CXX", "g++")
        with tempfile.TemporaryDirectory() as tmp:
            driver = os.path.join(tmp, "pull_chunks_tsan")
            build = subprocess.run(
                [cxx, "-std=c++17", "-O1", "-g", "-fsanitize=thread", "-Wall", "-Wextra", "-Werror",
                 f"-I{core_build.ROOT}", str(core_build.ROOT / "tests/cc/pull_chunks_driver.cc"),
                 "-o", driver, "-pthread"], capture_output=True, text=True)
            self.assertEqual(build.returncode, 0, build.stdout + build.stderr)
            code, out = core_build.run(driver, env=dict(os.environ, TSAN_OPTIONS="halt_on_error=1"),
                                       timeout=300)
        self.assertNotIn("ThreadSanitizer", out)
        self._assert_all_ok(code, out)


if __name__ == "__main__":
    tf.test.main()
