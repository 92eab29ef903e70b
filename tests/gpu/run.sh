#!/usr/bin/env bash
# The GPU harness, for a machine with an NVIDIA GPU, nvcc and PyTorch (TensorFlow is not needed):
# builds the TF-free CUDA kernels (cc/core/gpu) into a small library, then
#   1. the parity sweep against PyTorch (cuDNN) and the float64 reference, every direction and
#      element type, NHWC and NCHW, strides, dilations, paddings, groups, depthwise;
#   2. bitwise determinism: every case run three times;
#   3. compute-sanitizer's memcheck, racecheck, synccheck and initcheck over a small sweep, our
#      kernels alone;
#   4. the benchmark against cuDNN through PyTorch on the shapes of `python -m tf_ops bench`.
# Writes its logs and the benchmark table to $OUT (default: a new temporary folder).
# Usage: bash tests/gpu/run.sh   (TF_OPS_CUDA_ARCHS="90" limits the architectures built;
# CUTLASS_INCLUDE names CUTLASS's headers where PyPI's nvidia-cutlass is not installed, e.g. a
# copy carried to a machine without network: cp -r "$(python -c 'import cutlass_library, os;
# print(os.path.dirname(cutlass_library.__file__))')/source/include" .cutlass-include)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
archs=${TF_OPS_CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')}
gencode=()
for a in ${archs//;/ }; do gencode+=(-gencode "arch=compute_${a},code=sm_${a}"); done
cutlass=${CUTLASS_INCLUDE:-}
[[ -n "$cutlass" || ! -d .cutlass-include ]] || cutlass=.cutlass-include
[[ -n "$cutlass" ]] || cutlass=$(python3 -c 'import importlib.util, os; s = importlib.util.find_spec("cutlass_library"); print(os.path.join(s.submodule_search_locations[0], "source", "include"))')
lib="$out/libtf_ops_gpu.so"
# One nvcc process a source, in parallel, then one link.
objs=()
pids=()
for src in cc/core/gpu/conv_gpu.cu cc/core/gpu/cutlass_*.cu cc/core/gpu/gpu_plan.cc cc/core/gpu/gpu_run.cc \
           tests/gpu/capi.cu cc/core/conv_geometry.cc cc/core/vocabulary.cc; do
  obj="$out/$(basename "$src").o"
  nvcc -std=c++17 -O3 -I. -isystem "$cutlass" --expt-relaxed-constexpr -Xcompiler -fPIC "${gencode[@]}" \
    -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -c "$src" -o "$obj" &
  objs+=("$obj") pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
nvcc -shared "${gencode[@]}" "${objs[@]}" -o "$lib"
echo "built $lib for ${archs}"
# Each step runs whatever an earlier one found; the exit status says whether all passed.
status=0
python3 tests/gpu/harness.py --lib "$lib" parity 2>&1 | tee "$out/parity.log" || status=1
# The four sanitizer tools side by side (each a process of its own on the one GPU).
tools=(memcheck racecheck synccheck initcheck)
pids=()
for tool in "${tools[@]}"; do
  compute-sanitizer --tool "$tool" --error-exitcode 1 python3 tests/gpu/harness.py --lib "$lib" small \
    > "$out/sanitizer_$tool.log" 2>&1 &
  pids+=($!)
done
for i in "${!tools[@]}"; do
  tool=${tools[$i]}
  if wait "${pids[$i]}"; then
    echo "compute-sanitizer $tool: clean"
  else
    echo "compute-sanitizer $tool: errors (see $out/sanitizer_$tool.log)"; tail -n 30 "$out/sanitizer_$tool.log"; status=1
  fi
done
python3 tests/gpu/harness.py --lib "$lib" bench --out "$out/bench_gpu.csv" 2>&1 | tee "$out/bench.log" || status=1
exit $status
