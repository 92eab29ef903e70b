"""The CUDA kernels (cc/core/gpu), on a machine without a GPU:
- their source, compiled by the host compiler, runs under the emulator (tests/cuda_emu) with
  AddressSanitizer and UndefinedBehaviorSanitizer: every direction and element type over the
  feature matrix, in both kernels (the tiled GEMM and the direct one, each forced), under three
  scheduling seeds, bitwise the same under each, with zero emulator
  reports, against the float64 direct loops and the CPU kernels (tests/cuda_emu/gpu_sweep.cc);
- nvcc builds them warning-clean for the architectures the library is built for.
What needs a GPU (speed, compute-sanitizer) runs in tests/gpu/run.sh."""
import concurrent.futures
import os
import re
import shutil
import subprocess
import tempfile

import tensorflow as tf

import core_build
import tf_ops

EMU_FLAGS = ["-DTF_OPS_CUDA_EMU", f"-I{core_build.ROOT / 'tests' / 'cuda_emu'}"]
# The sweep's geometries, one SPEC line each.
GEOMETRIES = sum(line.startswith("SPEC(") for line in
                 (core_build.ROOT / "tests" / "cuda_emu" / "sweep_geometries.inc").read_text().splitlines())


def find_nvcc():
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for candidate in (shutil.which("nvcc"), os.path.join(cuda_home, "bin", "nvcc")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


class CudaKernelsTest(tf.test.TestCase):

    def test_emulated_sweep(self):
        with tempfile.TemporaryDirectory() as tmp:
            program = core_build.build(
                tmp, "gpu_sweep",
                [("cc/core/gpu/conv_gpu.cu", ["-x", "c++"]), ("tests/cuda_emu/cuda_emu.cc", []),
                 ("tests/cuda_emu/gpu_sweep.cc", [])],
                extra_flags=EMU_FLAGS, sanitize=True,
                # The CPU micro-kernels (the comparison's, run under the sanitizers in
                # .ci/sanitize) unsanitized: with the sanitizers they take minutes to compile.
                sanitize_kernels=False)
            # One geometry a process, as many at once as there are cores, taken from the end of
            # the list: the geometries that take longest (the filter-gradient slices, the
            # 70-channel tiles) are last there, so they start first and the cores finish together.
            workers = max(1, os.cpu_count() or 1)
            with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(
                    lambda i: core_build.run(program, "--seeds", "3", "--shard", f"{i}/{GEOMETRIES}"),
                    reversed(range(GEOMETRIES))))
        cases = runs = 0
        for code, output in results:
            failures = [line for line in output.splitlines() if line.startswith("FAIL")]
            self.assertEqual(failures, [], "\n".join(failures[:30]))
            self.assertEqual(code, 0, output[-3000:])
            summary = re.search(r"^cases (\d+) runs (\d+) seeds 3 reports 0 failures 0$", output, re.M)
            self.assertIsNotNone(summary, output[-2000:])
            cases += int(summary.group(1))
            runs += int(summary.group(2))
        # Every geometry once: 2 kernels x (5 + 5 + 4) element types x 3 seeds each.
        self.assertGreaterEqual(GEOMETRIES, 16)
        self.assertEqual((cases, runs), (GEOMETRIES, GEOMETRIES * 2 * 14 * 3))

    def test_driver_check(self):
        # Where the GPU kernels are registered: not where a driver is present that cannot run
        # them (too old for CUDA 13, or a GPU older than the oldest architecture built), which
        # is said in one sentence; without a driver (this machine) they are, with no message.
        cuda = tf_ops.build_info().get("cuda")
        if not cuda:
            self.skipTest("the library was built without CUDA kernels")
        home = cuda["home"]
        with tempfile.TemporaryDirectory() as tmp:
            program = os.path.join(tmp, "gpu_support_driver")
            subprocess.run([os.environ.get("CXX", "g++"), "-std=c++17", "-Wall", "-Wextra", "-Werror",
                            f"-I{core_build.ROOT}", "-isystem", os.path.join(home, "include"),
                            str(core_build.ROOT / "tests/cc/gpu_support_driver.cc"),
                            str(core_build.ROOT / "cc/core/gpu/gpu_support.cc"),
                            os.path.join(home, "lib64", "libcudart_static.a"), "-ldl", "-lrt", "-lpthread",
                            "-o", program], check=True)
            code, output = core_build.run(program)
        self.assertEqual(code, 0, output)
        lines = dict(line.split(" ", 1) for line in output.splitlines() if " register=" in line)
        self.assertIn("register=1", lines["here"])
        self.assertRegex(lines["here"], r"message=$")
        self.assertEqual(lines["no_driver"], "register=1 driver=0 runtime=13000 devices=0 message=")
        self.assertEqual(lines["old_driver"],
                         "register=0 driver=12040 runtime=13000 devices=1 message=tf_ops: the NVIDIA driver "
                         "supports CUDA 12.4, older than the CUDA 13.0 of tf_ops' GPU kernels (driver 580 or "
                         "newer), so tf_ops' ops run on the CPU.")
        self.assertEqual(lines["old_gpu"],
                         "register=0 driver=13000 runtime=13000 devices=2 message=tf_ops: GPU 1 has compute "
                         "capability 7.5, older than the 8.0 tf_ops' GPU kernels are built for, so tf_ops' ops "
                         "run on the CPU.")
        self.assertEqual(lines["good"], "register=1 driver=13010 runtime=13000 devices=2 message=")

    def test_nvcc_builds_the_kernels_warning_clean(self):
        nvcc = find_nvcc()
        if nvcc is None:
            self.skipTest("no nvcc on PATH or under CUDA_HOME")
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(
                [nvcc, "-std=c++17", "-O3", f"-I{core_build.ROOT}",
                 "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                 "-gencode", "arch=compute_90,code=compute_90", "-Werror", "all-warnings",
                 "-Xcompiler", "-Wall,-Wextra,-Werror", "-c", str(core_build.ROOT / "cc/core/gpu/conv_gpu.cu"),
                 "-o", os.path.join(tmp, "conv_gpu.o")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout + proc.stderr, "")


if __name__ == "__main__":
    tf.test.main()
