// Runs one kernel of planted.cu under the emulator: `planted_driver CASE SEED [LAUNCH_BOUNDS]`. Prints the
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
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: planted_driver CASE SEED [LAUNCH_BOUNDS]\n");
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
    e = Launch<RotateWithBarrier>(dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "missing_barrier") {
    e = Launch<RotateWithoutBarrier>(dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "race") {
    e = Launch<RacingWrites>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "tiled") {
    e = Launch<TiledSum>(dim3(1), dim3(kThreads), 0, nullptr, in.data(), 4, out.data());
  } else if (name == "tiled_missing_second_barrier") {
    e = Launch<TiledSumMissingSecondBarrier>(dim3(1), dim3(kThreads), 0,
               nullptr, in.data(), 4, out.data());
  } else if (name == "uninitialised") {
    e = Launch<UninitialisedRead>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "out_of_bounds") {
    // A buffer of exactly n floats, so that the write past it is AddressSanitizer's to catch.
    std::vector<float> exact(kThreads - 1);
    e = Launch<OutOfBoundsWrite>(dim3(1), dim3(kThreads), 0, nullptr, exact.data(),
               kThreads - 1);
  } else if (name == "divergent_barrier") {
    e = Launch<DivergentBarrier>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "exit_before_barrier") {
    e = Launch<ExitBeforeBarrier>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "atomic_sum") {
    e = Launch<AtomicSum>(dim3(4), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "shuffle_sum") {
    e = Launch<WarpShuffleSum>(dim3(2), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "warp_synced") {
    e = Launch<WarpExchangeSynced>(dim3(1), dim3(32), 0, nullptr, out.data());
  } else if (name == "warp_unsynced") {
    e = Launch<WarpExchangeUnsynced>(dim3(1), dim3(32), 0, nullptr, out.data());
  } else if (name == "ballot") {
    e = Launch<BallotAndDynamicShared>(dim3(1), dim3(32), 32 * sizeof(unsigned),
               nullptr, words.data());
  } else if (name == "mma" || name == "mma_swapped") {
    e = Launch<MmaProduct>(dim3(1), dim3(32), 0, nullptr, out.data(), name == "mma_swapped");
  } else if (name == "store_once" || name == "overlapping_stores") {
    tf_ops_emu::TrackStores(out.data(), out.size() * sizeof(float), sizeof(float));
    if (name == "store_once") e = Launch<StoreOnce>(dim3(4), dim3(kThreads), 0, nullptr, out.data());
    if (name == "overlapping_stores") e = Launch<OverlappingStores>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
    int once = 0;
    for (int count : tf_ops_emu::TrackedStores()) once += count == 1;
    words[0] = static_cast<unsigned>(once);
  } else if (name == "lost_update") {
    e = Launch<LostUpdate>(dim3(4), dim3(kThreads), 0, nullptr, in.data(), out.data());
  } else if (name == "stream" || name == "other_stream") {
    // The op was given `stream`; the driver launches on it, then on the null stream, then
    // zeroes memory on yet another.
    static int stream_object, other_object;
    const auto stream = reinterpret_cast<cudaStream_t>(&stream_object);
    tf_ops_emu::ExpectStream(stream);
    e = Launch<StoreOnce>(dim3(1), dim3(kThreads), 0, stream, out.data());
    if (name == "other_stream") {
      e = Launch<StoreOnce>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
      cudaMemsetAsync(out.data(), 0, 4, reinterpret_cast<cudaStream_t>(&other_object));
    }
    tf_ops_emu::ClearExpectedStream();
  } else if (name == "launch_bounds" || name == "within_bounds" || name == "unbounded") {
    // argv[3]: the bounds table ("Bounded 64", as the test writes it).
    if (argc < 4) return 2;
    const std::string err = tf_ops_emu::LoadLaunchBounds(argv[3]);
    if (!err.empty()) {
      std::fprintf(stderr, "%s\n", err.c_str());
      return 2;
    }
    if (name == "launch_bounds") e = Launch<Bounded>(dim3(1), dim3(2 * kThreads), 0, nullptr, out.data());
    if (name == "within_bounds") e = Launch<Bounded>(dim3(2), dim3(kThreads), 0, nullptr, out.data());
    if (name == "unbounded") e = Launch<StoreOnce>(dim3(1), dim3(kThreads), 0, nullptr, out.data());
  } else if (name == "bad_launch") {
    e = Launch<RotateWithBarrier>(dim3(1), dim3(2048), 0, nullptr, in.data(), out.data());
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
