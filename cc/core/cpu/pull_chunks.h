// Running a pass's units on a thread pool: the ParallelFor (conv_cpu.h) that the TensorFlow
// glue builds on TensorFlow's intra-op pool. TF-free: the pool is any type with
// NumThreads(), CurrentThreadId() (-1 on a thread that is not the pool's) and
// Schedule(std::function<void()>), as tsl::thread::ThreadPool has.
#ifndef TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_
#define TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace tf_ops {
namespace cpu {

namespace pull_chunks_internal {

// The counter a pass's jobs take chunks from, shared with jobs that may start after the pass
// returned.
struct ChunkState {
  std::atomic<int64_t> next{0}, done{0};
  int64_t units = 0, share = 1;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::mutex mu;
  std::condition_variable finished;

  // Takes chunks until none is left. fn is read only while a chunk is held, so a job that
  // finds the counter spent never touches it.
  void Pull() {
    int64_t begin = next.load();
    while (begin < units) {
      const int64_t end = begin + std::max<int64_t>(1, (units - begin) / share);
      if (next.compare_exchange_weak(begin, end)) {
        (*fn)(begin, end);
        if (done.fetch_add(end - begin) + (end - begin) == units) {
          std::lock_guard<std::mutex> lock(mu);
          finished.notify_all();
        }
        begin = next.load();
      }
    }
  }
};

}  // namespace pull_chunks_internal

// How many of a pool's `threads` a pass of `units` units of `cost` cycles each pays for:
// Eigen's cost model (100,000 cycles to start, 100,000 a thread), at most one a unit.
inline int64_t PullChunksJobs(int64_t threads, int64_t units, int64_t cost) {
  constexpr double kStartupCycles = 100000, kPerThreadCycles = 100000;
  const double total = static_cast<double>(units) * static_cast<double>(cost);
  const double wanted = std::min<double>(static_cast<double>(threads),
                                         (total - kStartupCycles) / kPerThreadCycles + 0.9);
  return std::min<int64_t>(units, std::max<int64_t>(1, static_cast<int64_t>(wanted)));
}

// Runs fn over [0, units) in chunks that the threads taking part take from a shared counter
// as they finish the last, each chunk a share of what is left (large chunks first, for
// locality; small ones last, for balance), rather than fixed ranges handed out up front:
// units cost unequal amounts (edge tiles skip taps; classes differ in taps), and a thread
// with a fixed range would sit idle at the end. Every pass's results are fixed by its units
// alone, whoever runs them and however they are split into ranges (the kernel sweep checks
// every path for that).
//
// The pool's threads run the pass, as many as PullChunksJobs says, and the calling thread
// waits; a pass worth one thread runs on the caller, in one call. A caller that is one of
// the pool's threads takes chunks too, so a pass never waits on a pool whose threads are all
// busy (a pass inside a pass runs, at worst, on its caller alone). Running the caller as
// well as every pool thread, as the pool's own ParallelFor does, puts one thread more than
// the pool has cores to work: TensorFlow's executor threads are not the pool's, and a thread
// descheduled while it holds a chunk holds up the pass. The caller waits until every unit is
// done; a job that starts after the counter ran out finds nothing to do.
template <typename Pool>
void PullChunks(Pool& pool, int64_t units, int64_t cost,
                const std::function<void(int64_t, int64_t)>& fn) {
  if (units <= 0) return;
  const int64_t jobs = PullChunksJobs(pool.NumThreads(), units, cost);
  if (jobs <= 1) return fn(0, units);
  auto state = std::make_shared<pull_chunks_internal::ChunkState>();
  state->units = units;
  state->share = 2 * jobs;
  state->fn = &fn;
  const bool caller_takes_part = pool.CurrentThreadId() >= 0;
  for (int64_t j = caller_takes_part ? 1 : 0; j < jobs; ++j) {
    pool.Schedule([state] { state->Pull(); });
  }
  if (caller_takes_part) state->Pull();
  std::unique_lock<std::mutex> lock(state->mu);
  state->finished.wait(lock, [&] { return state->done.load() == units; });
}

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_
