// Runs one kernel of planted.cu under the emulator: `planted_driver CASE SEED`. Prints the
// emulator's reports (lines "REPORT ..."), then "result" and the output values.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "planted.cu"

namespace {

using tf_ops::gpu::Launch;
using namespace planted;

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: planted_driver CASE SEED\n");
    return 2;
  }
  const std::string name = argv[1];
  tf_ops_emu::SetSeed(std::strtoull(argv[2], nullptr, 10));
  std::vector<float> in(4 * kThreads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 1.0f / static_cast<float>(i + 1) + (i % 7 == 0 ? 1e4f : 0.0f);
  std::vector<float> out(4 * kThreads, 0.0f);
  std::vector<unsigned> words(32, 0);
  cudaError_t e = cudaSuccess;
  if (name == "rotate") {
    e = Launch("RotateWithBarrier", RotateWithBarrier, dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "missing_barrier") {
    e = Launch("RotateWithoutBarrier", RotateWithoutBarrier, dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "race") {
    e = Launch("RacingWrites", RacingWrites, dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "tiled") {
    e = Launch("TiledSum", TiledSum, dim3(1), dim3(kThreads), 0, nullptr, in.data(), 4, out.data());
  } else if (name == "tiled_missing_second_barrier") {
    e = Launch("TiledSumMissingSecondBarrier", TiledSumMissingSecondBarrier, dim3(1), dim3(kThreads), 0,
               nullptr, in.data(), 4, out.data());
  } else if (name == "uninitialised") {
    e = Launch("UninitialisedRead", UninitialisedRead, dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "out_of_bounds") {
    // A buffer of exactly n floats, so that the write past it is AddressSanitizer's to catch.
    std::vector<float> exact(kThreads - 1);
    e = Launch("OutOfBoundsWrite", OutOfBoundsWrite, dim3(1), dim3(kThreads), 0, nullptr, exact.data(),
               kThreads - 1);
  } else if (name == "divergent_barrier") {
    e = Launch("DivergentBarrier", DivergentBarrier, dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "exit_before_barrier") {
    e = Launch("ExitBeforeBarrier", ExitBeforeBarrier, dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "atomic_sum") {
    e = Launch("AtomicSum", AtomicSum, dim3(4), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "shuffle_sum") {
    e = Launch("WarpShuffleSum", WarpShuffleSum, dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "warp_synced") {
    e = Launch("WarpExchangeSynced", WarpExchangeSynced, dim3(1), dim3(32), 0, nullptr, out.data());
  } else if (name == "warp_unsynced") {
    e = Launch("WarpExchangeUnsynced", WarpExchangeUnsynced, dim3(1), dim3(32), 0, nullptr, out.data());
  } else if (name == "ballot") {
    e = Launch("BallotAndDynamicShared", BallotAndDynamicShared, dim3(1), dim3(32), 32 * sizeof(unsigned),
               nullptr, words.data());
  } else if (name == "mma" || name == "mma_swapped") {
    e = Launch("MmaProduct", MmaProduct, dim3(1), dim3(32), 0, nullptr, out.data(), name == "mma_swapped");
  } else if (name == "bad_launch") {
    e = Launch("RotateWithBarrier", RotateWithBarrier, dim3(1), dim3(2048), 0, nullptr, in.data(), out.data());
  } else {
    std::fprintf(stderr, "no case %s\n", name.c_str());
    return 2;
  }
  for (const std::string& r : tf_ops_emu::Reports()) std::printf("REPORT %s\n", r.c_str());
  std::printf("launch %s\n", cudaGetErrorString(e));
  std::printf("result");
  for (float v : out) std::printf(" %a", v);
  for (unsigned w : words) std::printf(" %u", w);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
