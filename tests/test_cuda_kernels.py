"""The CUDA kernels (cc/core/gpu), on a machine without a GPU:
- their source, compiled by the host compiler, runs under the emulator (tests/cuda_emu) with
  AddressSanitizer and UndefinedBehaviorSanitizer: every direction and element type over the
  feature matrix, under three scheduling seeds, bitwise the same under each, with zero emulator
  reports, against the float64 direct loops and the CPU kernels (tests/cuda_emu/gpu_sweep.cc);
- nvcc builds them warning-clean for the architectures the library is built for.
What needs a GPU (speed, compute-sanitizer) runs in tests/gpu/run.sh."""
import os
import re
import shutil
import subprocess
import tempfile

import tensorflow as tf

import core_build

EMU_FLAGS = ["-DTF_OPS_CUDA_EMU", f"-I{core_build.ROOT / 'tests' / 'cuda_emu'}"]


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
                extra_flags=EMU_FLAGS, sanitize=True)
            code, output = core_build.run(program, "--seeds", "3")
        failures = [line for line in output.splitlines() if line.startswith("FAIL")]
        self.assertEqual(failures, [], "\n".join(failures[:30]))
        self.assertEqual(code, 0, output[-3000:])
        summary = re.search(r"^cases (\d+) runs (\d+) seeds 3 reports 0 failures 0$", output, re.M)
        self.assertIsNotNone(summary, output[-2000:])
        # 16 geometries x (5 + 5 + 4) element types x 3 seeds.
        self.assertEqual((int(summary.group(1)), int(summary.group(2))), (16, 672))

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
