"""The CUDA kernels (cc/core/gpu), on a machine without a GPU:
- their source, compiled by the host compiler, runs under the emulator (tests/cuda_emu): every
  direction and element type over the listed feature matrix (both kernels forced) and over
  geometries generated from the dispatch's thresholds (conv_gpu_plan.h), under several
  scheduling seeds, on the op's stream, with poisoned outputs and workspaces, every output
  element stored once, bitwise the same under each seed, with zero emulator reports, against the
  float64 direct loops and the CPU kernels (tests/cuda_emu/gpu_sweep.cc); every case of the plan
  reached; every launch within the __launch_bounds__ nvcc compiled;
- planted bugs in the kernels (an overlapping tile index, a tap offset wrong when stride and
  dilation share a factor, slices of grouped problems summed out of order, a lost update between
  slices, a read of workspace nothing wrote, 16-bit sums rounded after every tensor-core step, a
  launch on the null stream, launch bounds below the block) are each caught by several
  geometries (the exhaustive tier);
- nvcc builds them warning-clean for the architectures the library is built for.
The default tier runs the sweep's smallest cover of the plan, unsanitized, under two seeds; the
exhaustive tier (pytest --exhaustive, as CI runs it) covers every case of the plan three times
under three seeds, then once more under AddressSanitizer and UndefinedBehaviorSanitizer, and runs
the planted bugs. What needs a GPU (speed, compute-sanitizer) runs in tests/gpu/run.sh."""
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import tempfile

import pytest
import tensorflow as tf

import core_build
import tf_ops
from tiers import EXHAUSTIVE

EMU_FLAGS = ["-DTF_OPS_CUDA_EMU", f"-I{core_build.ROOT / 'tests' / 'cuda_emu'}"]
KERNELS = "cc/core/gpu/conv_gpu.cu"
# The sweep's listed geometries, one SPEC line each.
LISTED = sum(line.startswith("SPEC(") for line in
             (core_build.ROOT / "tests" / "cuda_emu" / "sweep_geometries.inc").read_text().splitlines())


def find_nvcc():
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for candidate in (shutil.which("nvcc"), os.path.join(cuda_home, "bin", "nvcc")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def kernel_base_name(mangled):
    """A kernel's name without namespaces or template arguments, from its Itanium-mangled
    name (_ZN <length><identifier>... I|E...)."""
    assert mangled.startswith("_ZN"), mangled
    i, last = 3, None
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        last, i = mangled[j:j + n], j + n
    return last


def launch_bounds(source, tmp):
    """The kernels of `source` as nvcc compiles them: {kernel name: the least of its
    instantiations' .maxntid, or None where one has none}; None without nvcc."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    ptx = os.path.join(tmp, "kernels.ptx")
    subprocess.run([nvcc, "-std=c++17", f"-I{core_build.ROOT}", "-arch=compute_80", "-ptx", str(source), "-o", ptx],
                   check=True, capture_output=True)
    bounds = {}
    for entry in open(ptx).read().split(".entry ")[1:]:
        name = kernel_base_name(entry[:entry.index("(")])
        header = entry[:entry.index("{")]
        found = re.search(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", header)
        bound = int(found.group(1)) * int(found.group(2)) * int(found.group(3)) if found else None
        if name in bounds and (bounds[name] is None or bound is None):
            bounds[name] = None
        else:
            bounds[name] = min(bound, bounds.get(name, bound))
    return bounds


def write_bounds(bounds, path):
    with open(path, "w") as f:
        for name, bound in sorted(bounds.items()):
            if bound is not None:
                f.write(f"{name} {bound}\n")
    return path


def build_sweep(tmp, name, kernels=KERNELS, sanitize=False):
    return core_build.build(
        tmp, name, [(str(kernels), ["-x", "c++"]), ("tests/cuda_emu/cuda_emu.cc", []),
                    ("tests/cuda_emu/gpu_sweep.cc", [])],
        extra_flags=EMU_FLAGS, sanitize=sanitize)


SweepResult = collections.namedtuple("SweepResult", "code output paths failed launched cases total runs")


def run_sweep(program, *args, parts=1):
    """Runs the sweep in `parts` processes side by side; what they reached and found, summed."""
    def one(i):
        return core_build.run(program, *args, "--shard", f"{i}/{parts}", timeout=3600)

    with concurrent.futures.ThreadPoolExecutor(max_workers=parts) as pool:
        results = list(pool.map(one, range(parts)))
    code, output, paths = 0, "", collections.Counter()
    failed, launched, cases, total, runs = set(), {}, 0, 0, 0
    for c, out in results:
        code = code or c
        output += out
        for index, n in re.findall(r"^path (\d+) (\d+)$", out, re.M):
            paths[int(index)] += int(n)
        failed.update(re.findall(r"^failed case (\d+):", out, re.M))
        for name, most in re.findall(r"^launched (\w+) (\d+)$", out, re.M):
            launched[name] = max(launched.get(name, 0), int(most))
        summary = re.search(r"^cases (\d+) of (\d+) runs (\d+) seeds", out, re.M)
        if summary:
            cases += int(summary.group(1))
            total = int(summary.group(2))
            runs += int(summary.group(3))
    return SweepResult(code, output, paths, failed, launched, cases, total, runs)


def required_paths(program):
    _, output = core_build.run(program, "--paths")
    return dict((int(i), name) for i, name in re.findall(r"^required (\d+) (.*)$", output, re.M))


class CudaKernelsTest(tf.test.TestCase):

    def _sweep(self, tmp, sanitize, cover, seeds, bounds_file):
        program = build_sweep(tmp, "gpu_sweep_sanitized" if sanitize else "gpu_sweep", sanitize=sanitize)
        args = ["--cover", str(cover), "--seeds", str(seeds)]
        if bounds_file:
            args += ["--launch-bounds", bounds_file]
        result = run_sweep(program, *args, parts=max(1, os.cpu_count() or 1))
        failures = [line for line in result.output.splitlines() if line.startswith("FAIL")]
        self.assertEqual(failures, [], "\n".join(failures[:30]))
        self.assertEqual(result.code, 0, result.output[-3000:])
        self.assertEqual(len(re.findall(r"^cases \d+ of \d+ runs \d+ seeds \d+ reports 0 failures 0$",
                                        result.output, re.M)), max(1, os.cpu_count() or 1), result.output[-2000:])
        # Every case once: the listed ones and generated ones.
        self.assertEqual(result.cases, result.total)
        self.assertGreater(result.total, LISTED)
        # PlanLaunch's rules hold over sizes on both sides of its thresholds.
        code, output = core_build.run(program, "--plan-check")
        self.assertEqual(code, 0, output[-3000:])
        self.assertRegex(output, r"plans checked \d+ broken 0")
        # The CUTLASS plans' filter layouts (HWIO to KRSC, the split sums back to HWIO), their
        # kernels launched within their bounds too.
        code, output = core_build.run(program, *(["--launch-bounds", bounds_file] if bounds_file else []),
                                      "--layouts")
        self.assertEqual(code, 0, output[-3000:])
        self.assertRegex(output, r"layouts checked 45 failures 0")
        for name, most in re.findall(r"^launched (\w+) (\d+)$", output, re.M):
            result.launched[name] = max(result.launched.get(name, 0), int(most))
        # Every case of the plan, for every direction and kernel, reached.
        unreached = [name for index, name in required_paths(program).items() if result.paths[index] == 0]
        self.assertEqual(unreached, [], "not reached: " + "; ".join(unreached))
        return result

    def test_emulated_sweep(self):
        with tempfile.TemporaryDirectory() as tmp:
            bounds = launch_bounds(core_build.ROOT / KERNELS, tmp)
            bounds_file = write_bounds(bounds, os.path.join(tmp, "bounds.txt")) if bounds else None
            tiers = [(False, 3, 3), (True, 1, 1)] if EXHAUSTIVE else [(False, 1, 2)]
            for sanitize, cover, seeds in tiers:
                result = self._sweep(tmp, sanitize, cover, seeds, bounds_file)
                if bounds is not None:
                    # Every kernel nvcc compiled declares its launch bounds, and the sweep
                    # launched every one (within them: the emulator reports any launch over).
                    self.assertEqual([n for n, b in bounds.items() if b is None], [])
                    self.assertEqual(sorted(result.launched), sorted(bounds))
                    for name, most in result.launched.items():
                        self.assertLessEqual(most, bounds[name], name)
        if bounds is None:
            self.skipTest("swept without the launch-bounds check: no nvcc on PATH or under CUDA_HOME")


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

    @pytest.mark.exhaustive
    def test_nvcc_builds_the_kernels_warning_clean(self):
        nvcc = find_nvcc()
        if nvcc is None:
            self.skipTest("no nvcc on PATH or under CUDA_HOME")
        source = "cc/core/gpu/conv_gpu.cu"
        gencode = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                   "-gencode", "arch=compute_90,code=compute_90"]
        warnings = ["-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror"]
        # Where the installed library's own build compiled this checkout's kernels with this
        # nvcc, these architectures and warnings as errors (CI's set-up: TF_OPS_WERROR=1), its
        # recorded output is the check; otherwise they are compiled here.
        info = tf_ops.build_info()
        cuda = info.get("cuda") or {}
        built = cuda.get("flags", [])
        if (cuda.get("nvcc") == nvcc and info.get("core_sha256") == core_build.core_sha256()
                and " ".join(warnings) in " ".join(built) and " ".join(gencode) in " ".join(built)):
            self.assertIn(source, cuda["output"])
            self.assertEqual(cuda["output"][source], "")
            return
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(
                [nvcc, "-std=c++17", "-O3", f"-I{core_build.ROOT}", *gencode, *warnings,
                 "-c", str(core_build.ROOT / source), "-o", os.path.join(tmp, "conv_gpu.o")],
                capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout + proc.stderr, "")



# Planted bugs in the kernels: (name, [(context, old, new)]: in the one place `context` appears in
# the kernels, its `old` (an expression, or a statement where it ends in ';') replaced by `new`;
# the failure it must cause; how many of the exhaustive cover's cases at least must catch it).
PLANTED = [
    # Tile n0 read from the block index as if there were one tile in M: tiles overlap and others
    # go unwritten where there are several in both M and N.
    ("overlapping tile index", [("n0 = block / m_tiles % n_tiles * tile_n", "block / m_tiles % n_tiles * tile_n",
                                 "block % n_tiles * tile_n")],
     r"stored (0|2) times over the op|stored in this launch: an output written twice", 3),
    # The class's output row stepped by the dilation instead of dilation / gcd(stride, dilation).
    ("tap offset where stride and dilation share a factor",
     [("c->t.a * th.delta + c->e.i", "c->t.a * th.delta", "c->t.a * s.dilation_rows")], r"element \d+: gpu", 3),
    # Slices of grouped problems read back in another order than they were written.
    ("groups with split reductions", [("((s * p.groups + grp) * p.M + m)", "((s * p.groups + grp) * p.M + m)",
                                       "((grp * p.slices + s) * p.M + m)")],
     r"element \d+: gpu|differs from the CPU", 3),
    # Slices added into the first slice's sums in place, without an atomic: a lost update on a GPU.
    ("lost update between slices",
     [("p.partial.Store((z * p.M + m) * p.N + col, v);", "p.partial.Store((z * p.M + m) * p.N + col, v);",
       "p.partial.Store((z % p.groups * p.M + m) * p.N + col,\n"
       "                     (z >= p.groups ? p.partial.data[(z % p.groups * p.M + m) * p.N + col] : typename Problem::Acc(0)) + v);"),
      ("for (int64_t s = 1; s < p.slices; ++s) sum +=", "s < p.slices", "s < 1")],
     r"an output written twice", 3),
    # The slices' sum reads one slice past those written (its workspace one slice larger).
    ("read of workspace nothing wrote",
     [("workspace(plan.partial_elements(sizes) * sizeof(Acc))", "plan.partial_elements(sizes) * sizeof(Acc)",
       "(plan.partial_elements(sizes) + p.groups * p.M * p.N) * sizeof(Acc)"),
      ("for (int64_t s = 1; s < p.slices; ++s) sum +=", "s < p.slices", "s <= p.slices")],
     r"element \d+: gpu (nan|-?nan)|differs from the CPU", 3),
    # 16-bit sums rounded to 16 bits after every tensor-core step.
    ("16-bit accumulation", [("for (int ni = 0; ni < 4; ++ni) Mma16816(acc[mi][ni], af[mi], bf[ni], T());",
                              "Mma16816(acc[mi][ni], af[mi], bf[ni], T());",
                              "Mma16816(acc[mi][ni], af[mi], bf[ni], T());\n"
                              "          for (float& v : acc[mi][ni]) v = Elem<T>::Load(Elem<T>::Store(v));")],
     r"(float16|bfloat16), .*element \d+: gpu", None),
    # A launch on the null stream instead of the op's.
    ("launch on the null stream", [("Launch<GemmKernel<Problem>>(grid, block, 0, stream,", "stream", "nullptr")],
     r"emulator: kernel GemmKernel<.*launch on stream \(nil\), not the op's stream", 3),
]
# Launch bounds below the block the kernel is launched with: a bug of what nvcc compiles (the
# emulated kernels ignore __launch_bounds__), so the sweep runs the kernels as they are, checking
# their launches against the bounds nvcc compiled from the planted source.
PLANTED_BOUNDS = ("launch bounds below the block",
                  ("__launch_bounds__(Tiling::kThreads, 2) GemmKernel",
                   "__launch_bounds__(Tiling::kThreads / 2, 2) GemmKernel"),
                  r"more than the 128 of its __launch_bounds__, which CUDA refuses", 3)


def plant_switches(source, bugs):
    """`source` with every bug's edits compiled in, bug i's where tf_ops_emu::planted_bug == i
    (the sweep's --plant i), the original code otherwise: one build runs every bug."""
    spans = {}
    for index, (name, edits, _, _) in enumerate(bugs):
        for context, old, new in edits:
            assert source.count(context) == 1 and context.count(old) == 1, (name, context, old)
            start = source.index(context) + context.index(old)
            spans.setdefault((start, start + len(old)), []).append((index, new))
    ordered = sorted(spans)
    assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:])), "planted edits overlap"
    for start, end in reversed(ordered):
        old, alternatives = source[start:end], spans[start, end]
        if old.endswith(";"):
            text = "".join(f"if (::tf_ops_emu::planted_bug == {i}) {{ {new} }} else " for i, new in alternatives)
            text += f"{{ {old} }}"
        else:
            text = "(" + "".join(f"::tf_ops_emu::planted_bug == {i} ? ({new}) : " for i, new in alternatives)
            text += f"({old}))"
        source = source[:start] + text + source[end:]
    return source


@pytest.mark.exhaustive
class PlantedKernelBugsTest(tf.test.TestCase):
    """Each planted bug fails the exhaustive cover's sweep (one seed, unsanitized) on several
    cases; the 16-bit accumulation on most of the cases that run 16-bit sums longer than one
    tensor-core step."""

    def test_planted_bugs_are_caught(self):
        source = (core_build.ROOT / KERNELS).read_text()
        with tempfile.TemporaryDirectory() as tmp:
            kernels = os.path.join(tmp, "conv_gpu.cu")
            with open(kernels, "w") as f:
                f.write(plant_switches(source, PLANTED))
            program = build_sweep(tmp, "gpu_sweep_planted", kernels=kernels)
            # The launch bounds nvcc compiles from the kernels as they are, and from them with the
            # bounds planted.
            name, (old, new), pattern, least = PLANTED_BOUNDS
            self.assertEqual(source.count(old), 1, name)
            planted_bounds = os.path.join(tmp, "bounds_planted.cu")
            with open(planted_bounds, "w") as f:
                f.write(source.replace(old, new))
            bounds = launch_bounds(core_build.ROOT / KERNELS, tmp)
            checked = ["--launch-bounds", write_bounds(bounds, os.path.join(tmp, "bounds.txt"))] if bounds else []
            runs = [(name, ["--plant", str(index), *checked], pattern, least)
                    for index, (name, _, pattern, least) in enumerate(PLANTED)]
            if bounds is not None:
                low = launch_bounds(planted_bounds, tmp)
                runs.append((name, ["--launch-bounds", write_bounds(low, os.path.join(tmp, "bounds_low.txt"))],
                             pattern, least))

            # With no bug chosen, the planted copy runs clean: what fails below, its bug made fail.
            runs.append((None, checked, None, None))

            def run(item):
                name, args, pattern, least = item
                return name, run_sweep(program, "--cover", "3" if name else "1", "--seeds", "1", *args), pattern, least

            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
                results = list(pool.map(run, runs))
        unplanted = results.pop()[1]
        self.assertEqual((unplanted.code, unplanted.failed), (0, set()), unplanted.output[-3000:])
        self.assertEqual(unplanted.cases, unplanted.total)
        caught, missed = {}, []
        for name, result, pattern, least in results:
            caught[name] = f"{len(result.failed)} of {result.total}"
            if result.code == 0 or not re.search(pattern, result.output):
                missed.append(f"{name}: exit {result.code}, no /{pattern}/ in {result.output[-1500:]}")
            elif len(result.failed) < (least if least is not None else result.total // 2 + 1):
                # (the 16-bit accumulation: most cases)
                missed.append(f"{name}: caught by only {caught[name]} cases")
        print("planted bugs, cases caught:", caught)
        self.assertEqual(missed, [], "\n".join(missed))
        # Without nvcc there are no launch bounds to plant below.
        self.assertEqual(len(results), len(PLANTED) + (bounds is not None))


if __name__ == "__main__":
    tf.test.main()
