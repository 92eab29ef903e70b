#include "cc/core/cpu/roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace {

// The reduction of each timed tile: long enough that loading and storing the accumulators is
// a small part (one part in kDepth / mr of the loads), short enough that a tile's filter panel
// (kDepth x nb floats, 32-128 KiB) stays in the L2 cache, as the GEMM pass keeps it.
constexpr int64_t kDepth = 512;
constexpr int64_t kTilesPerCall = 8;

// Operands of one thread's tile calls: activations, a packed panel and the results, filled
// with small values (no denormals, no overflow however often the tile runs).
struct Operands {
  std::vector<float> a, b, c;
  Operands(int64_t a_size, int64_t b_size, int64_t c_size) : a(a_size), b(b_size), c(c_size) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f + static_cast<float>(i % 7) * 0.125f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f - static_cast<float>(i % 5) * 0.125f;
  }
};

// What one row times: the sizes of each thread's operands, and a call on them that returns the
// floating-point operations it did.
struct Timed {
  int64_t a_size, b_size, c_size;
  std::function<double(Operands&)> call;
};

// Runs `timed` on `threads` threads at once (run_together), each with operands of its own,
// repeating its call for about `seconds` after a common start; returns all threads' operations
// over the time from that start to the last one's end, in GFLOP/s.
double RateOnThreads(const RunTogether& run_together, int threads, double seconds, const Timed& timed) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> flops(threads, 0.0);
  Clock::time_point start;
  run_together(threads, [&](int i) {
    Operands ops(timed.a_size, timed.b_size, timed.c_size);
    timed.call(ops);  // warm the caches and the clock
    if (ready.fetch_add(1) + 1 == threads) {
      start = Clock::now();
      go.store(true, std::memory_order_release);
    }
    while (!go.load(std::memory_order_acquire)) {
    }
    const Clock::time_point until =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    double done = 0;
    do {
      done += timed.call(ops);
    } while (Clock::now() < until);
    flops[i] = done;
  });
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / elapsed / 1e9;
}

PeakLoop PeakOf(const KernelTable& t) {
  const std::string isa = t.isa;
#if defined(__x86_64__)
  if (isa == "avx2") return Avx2PeakLoop();
  if (isa != "generic") return Avx512PeakLoop();
#endif
  return GenericPeakLoop();
}

}  // namespace

std::string Roofline(const std::string& isa, int threads, double seconds, const RunTogether& run_together,
                     std::vector<RooflineRow>* rows) {
  if (threads < 1 || threads > 1024) return "threads must be 1 to 1024, not " + std::to_string(threads);
  if (!(seconds > 0 && seconds <= 60)) return "seconds must be above 0 and at most 60";
  std::string error;
  const KernelTable* table = KernelsNamed(isa, &error);
  if (table == nullptr) return error;
  rows->clear();

  // Each rate is the best of three runs of a third of `seconds`, so that a moment of another
  // process's work on a shared machine does not set it; the peak is measured first and again
  // last, the higher kept.
  const auto best_rate = [&](const Timed& timed) {
    double best = 0;
    for (int run = 0; run < 3; ++run) best = std::max(best, RateOnThreads(run_together, threads, seconds / 3, timed));
    return best;
  };
  const PeakLoop peak = PeakOf(*table);
  constexpr int64_t kRounds = 1 << 16;
  const Timed peak_loop{0, 0, 0, [&](Operands&) {
                          volatile float sink = peak.fn(kRounds);
                          (void)sink;
                          return static_cast<double>(kRounds) * peak.flops_per_round;
                        }};
  rows->push_back({"peak", "independent multiply-adds on the table's vectors", best_rate(peak_loop)});

  // Each distinct tile once, with the entries that hold it: (first entry, "gemm[i,j,...]").
  std::vector<std::pair<int, std::string>> tiles;
  for (int i = 0; i < kGemmTiles; ++i) {
    const GemmKernel& k = table->gemm[i];
    auto same = std::find_if(tiles.begin(), tiles.end(), [&](const auto& t) {
      return table->gemm[t.first].mr == k.mr && table->gemm[t.first].nb == k.nb;
    });
    if (same == tiles.end()) {
      tiles.emplace_back(i, std::to_string(i));
    } else {
      same->second += "," + std::to_string(i);
    }
  }
  for (const auto& [i, entries] : tiles) {
    const GemmKernel& k = table->gemm[i];
    const std::string name = std::to_string(k.mr) + "x" + std::to_string(k.nb);
    const std::string where = "gemm[" + entries + "]";
    // Forward and backprop input: kTilesPerCall tiles of k.mr pixels, each a row of kDepth
    // channels, against one packed panel.
    rows->push_back({"gemm.affine " + name, where,
                     best_rate({kTilesPerCall * k.mr * kDepth, kDepth * k.nb, kTilesPerCall * k.mr * k.nb,
                                [&k](Operands& ops) {
                                  const void* a[1] = {ops.a.data()};
                                  const float* b[1] = {ops.b.data()};
                                  k.affine[kElemF32](kTilesPerCall, 1, a, kDepth, b, kDepth, ops.c.data(), k.nb,
                                                     false);
                                  return 2.0 * kTilesPerCall * k.mr * k.nb * kDepth;
                                }})});
    // Backprop filter: each stride of both operands, summed into the tile.
    for (const StridedKernel& s : k.strided) {
      if (s.fn == nullptr) continue;
      rows->push_back({"gemm.strided " + std::to_string(s.mr) + "x" + std::to_string(k.nb), where,
                       best_rate({kDepth * s.mr, kDepth * k.nb, s.mr * k.nb, [&k, &s](Operands& ops) {
                                    s.fn(1, kDepth, ops.a.data(), 0, s.mr, s.mr, ops.b.data(), 0, k.nb, ops.c.data(),
                                         k.nb);
                                    return 2.0 * s.mr * k.nb * kDepth;
                                  }})});
    }
  }
  (*rows)[0].gflops = std::max((*rows)[0].gflops, best_rate(peak_loop));
  return "";
}

}  // namespace cpu
}  // namespace tf_ops
