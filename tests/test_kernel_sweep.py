"""The dense differential sweep of the fast CPU kernels against the direct loops
(tests/cc/sweep_driver.cc): every quantity the fast kernels' dispatchers and blockings read,
over its whole small range and across every threshold, in float32, float16 and bfloat16,
against float64 with a bound relative to the sum of absolute products; and the coverage check
that every path and every micro-kernel of the instruction set's table was reached.

The driver links only the TF-free core (cc/core), compiled with the flags the installed
library was built with, and runs once per instruction set this processor has (capped by
TF_OPS_CPU_ISA). Under TF_OPS_SANITIZE=1 (.ci/sanitize) it is built with AddressSanitizer and
UndefinedBehaviorSanitizer and runs the best instruction set only."""
import concurrent.futures
import os
import pathlib
import re
import subprocess
import tempfile

import tensorflow as tf

import tf_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE_SOURCES = ["cc/core/conv_geometry.cc", "cc/core/cpu/conv_cpu.cc", "cc/core/cpu/conv_fast.cc"]
SANITIZE = os.environ.get("TF_OPS_SANITIZE") == "1"


def available_isas():
    """The instruction sets of the micro-kernels this processor runs, narrowest first."""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    isas = ["generic"]
    if all(f in flags for f in (" avx2", " fma", " f16c")):
        isas.append("avx2")
    if all(f in flags for f in (" avx512f", " avx512vl", " avx512bw", " avx512dq")):
        isas.append("avx512")
        if " avx512_bf16" in flags:
            isas.append("avx512_bf16")
    return isas


def build_driver(out_dir):
    """Compiles the core and the driver with the library's own compile flags (each
    instruction-set file with its own), the checkout's headers first."""
    info = tf_ops.build_info()
    flags = [f for f in info["compile_flags"] if f not in ("-fPIC", f"-I{info['source_dir']}")]
    flags = [f"-I{ROOT}", *flags, "-Werror"]
    if SANITIZE:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    cxx = os.environ.get("CXX", info.get("compiler", "g++"))
    units = [(src, []) for src in CORE_SOURCES + ["tests/cc/sweep_driver.cc"]]
    units += list(info["microkernel_flags"].items())

    def compile_unit(unit):
        src, extra = unit
        obj = os.path.join(out_dir, src.replace("/", "_") + ".o")
        proc = subprocess.run([cxx, *flags, *extra, "-c", str(ROOT / src), "-o", obj],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError(f"compiling {src} failed:\n{proc.stderr[-4000:]}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_unit, units))
    driver = os.path.join(out_dir, "sweep_driver")
    subprocess.run([cxx, *objects, *(["-fsanitize=address,undefined"] if SANITIZE else []),
                    "-lpthread", "-o", driver], check=True)
    return driver


def run_driver(driver, isa, *args):
    env = dict(os.environ, TF_OPS_CPU_ISA=isa)
    if SANITIZE:
        env.pop("LD_PRELOAD", None)  # the driver links its own sanitizer runtimes
    proc = subprocess.run([driver, *args], capture_output=True, text=True, env=env, timeout=1800)
    return proc.returncode, proc.stdout + proc.stderr


class KernelSweepTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.driver = build_driver(cls._tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def test_every_space_on_every_instruction_set(self):
        isas = available_isas()
        if SANITIZE:
            isas = isas[-1:]
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = dict(zip(isas, pool.map(lambda isa: run_driver(self.driver, isa), isas)))
        for isa, (code, out) in results.items():
            self.assertIn(f"isa {isa}\n", out, out[-3000:])
            failures = [line for line in out.splitlines() if line.startswith(("FAIL", "UNREACHED"))]
            self.assertEqual(failures, [], f"{isa}:\n" + "\n".join(failures[:40]))
            self.assertEqual(code, 0, f"{isa}:\n{out[-3000:]}")
            cases = int(re.search(r"^cases (\d+) runs (\d+) failures 0$", out, re.M).group(1))
            self.assertGreater(cases, 100000, isa)
            kernels = re.search(r"^kernels (\d+) reached of (\d+)$", out, re.M)
            self.assertEqual(kernels.group(1), kernels.group(2), isa)
            self.assertRegex(out, r"(?m)^unreached 0$")

    def test_driver_reports_a_wrong_result(self):
        # The sweep's checks can fail: a fast kernel that drops a filter column (through the
        # driver's planted fault) is reported, with the geometry.
        code, out = run_driver(self.driver, available_isas()[-1], "--space", "columns",
                               "--plant-fault")
        self.assertEqual(code, 1, out[-2000:])
        self.assertRegex(out, r"FAIL backprop input float32 \[columns merged\] NHWC x\[")


if __name__ == "__main__":
    tf.test.main()
