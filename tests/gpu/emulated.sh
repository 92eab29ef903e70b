#!/usr/bin/env bash
# The GPU harness without a GPU: the same kernel sources and C entry point as run.sh, built by the
# host compiler with the CUDA emulator (tests/cuda_emu) into a library the harness drives on the
# CPU (--emulated), against PyTorch on the CPU. It checks the harness itself (its cases, reference,
# bounds, determinism check and benchmark loop); the kernels' own proof under the emulator is
# tests/test_cuda_kernels.py. Needs g++, numpy and PyTorch (CPU is enough).
# Usage: bash tests/gpu/emulated.sh   (writes its logs to $OUT, default a new temporary folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
lib="$out/libtf_ops_gpu_emulated.so"
${CXX:-g++} -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Werror -I. -Itests/cuda_emu -DTF_OPS_CUDA_EMU \
  -x c++ cc/core/gpu/conv_gpu.cu tests/gpu/capi.cu -x none tests/cuda_emu/cuda_emu.cc cc/core/conv_geometry.cc cc/core/vocabulary.cc \
  cc/core/gpu/gpu_plan.cc cc/core/gpu/gpu_run.cc \
  -o "$lib"
echo "built $lib (emulated)"
python3 tests/gpu/harness.py --emulated --lib "$lib" parity 2>&1 | tee "$out/parity.log"
python3 tests/gpu/harness.py --emulated --lib "$lib" bench --quick --out "$out/bench_emulated.csv" 2>&1 \
  | tee "$out/bench.log"
