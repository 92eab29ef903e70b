// Running a pass's units on a thread pool: the ParallelFor (conv_cpu.h) that the TensorFlow
// glue builds on TensorFlow's intra-op pool. TF-free: the pool is any type with NumThreads(),
// CurrentThreadId() (-1 outside the pool) and Schedule(std::function<void()>), as
// tsl::thread::ThreadPool has.
#ifndef TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_
#define TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <cstring>
#include <new>
#include <stdexcept>

namespace tf_ops {
namespace cpu {

namespace pull_chunks_internal {

// The counter a pass's jobs take chunks from. It lives on the heap, held by the caller and by
// each job it scheduled (refs), so that a job that starts after the pass returned still finds
// it. The wait is on POSIX threads rather than std::condition_variable: libstdc++ 12 and newer
// export condition_variable::wait only under GLIBCXX_3.4.30, and std::shared_ptr reads
// glibc 2.32's __libc_single_threaded, either of which would raise the wheel's manylinux tag
// past TensorFlow's (see cc/compat/libstdcxx_compat.cc).
class ChunkState {
 public:
  ChunkState(int64_t units, int64_t share, int refs,
             const std::function<void(int64_t, int64_t)>* fn)
      : units_(units), share_(share), fn_(fn), refs_(refs) {
    pthread_mutex_init(&mu_, nullptr);
    pthread_cond_init(&finished_, nullptr);
  }
  ~ChunkState() {
    pthread_cond_destroy(&finished_);
    pthread_mutex_destroy(&mu_);
  }

  // Takes chunks until none is left. fn is read only while a chunk is held, so a job that
  // finds the counter spent never touches it.
  void Pull() {
    int64_t begin = next_.load();
    while (begin < units_) {
      const int64_t end = begin + std::max<int64_t>(1, (units_ - begin) / share_);
      if (next_.compare_exchange_weak(begin, end)) {
        (*fn_)(begin, end);
        if (done_.fetch_add(end - begin) + (end - begin) == units_) {
          pthread_mutex_lock(&mu_);
          pthread_cond_broadcast(&finished_);
          pthread_mutex_unlock(&mu_);
        }
        begin = next_.load();
      }
    }
  }

  // Returns once every unit is done.
  void Wait() {
    pthread_mutex_lock(&mu_);
    while (done_.load() != units_) pthread_cond_wait(&finished_, &mu_);
    pthread_mutex_unlock(&mu_);
  }

  // Drops one holder's reference; the last one frees the state.
  void Release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

 private:
  const int64_t units_, share_;
  const std::function<void(int64_t, int64_t)>* const fn_;
  std::atomic<int64_t> next_{0}, done_{0};
  std::atomic<int> refs_;
  pthread_mutex_t mu_;
  pthread_cond_t finished_;
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
// As many threads take part as PullChunksJobs says, so no more threads work at once than the
// pool has; a pass worth one thread runs on the caller, in one call. A caller from outside
// the pool (TensorFlow's executor threads, eager callers) schedules every job on the pool and
// sleeps until the units are done; a pool thread (a pass inside a pass) works as one of the
// jobs, so that it never waits on a pool whose threads are all busy. It returns once every
// unit is done; a job that starts after the counter ran out finds nothing to do.
//
// An outside caller that worked beside jobs - 1 scheduled ones ran many passes at one
// thread's speed when it followed an op of TensorFlow's that had used the whole pool, as if
// it shared a core with the job it woke (a pass of under a millisecond ends before the
// kernel moves either), which is why an outside caller sleeps instead.
template <typename Pool>
void PullChunks(Pool& pool, int64_t units, int64_t cost,
                const std::function<void(int64_t, int64_t)>& fn) {
  if (units <= 0) return;
  const int64_t jobs = PullChunksJobs(pool.NumThreads(), units, cost);
  if (jobs <= 1) return fn(0, units);
  const bool inside = pool.CurrentThreadId() >= 0;
  const int64_t scheduled = inside ? jobs - 1 : jobs;
  // Held by the caller and by each scheduled job.
  auto* state = new pull_chunks_internal::ChunkState(units, 2 * jobs,
                                                     static_cast<int>(scheduled) + 1, &fn);
  int64_t started = 0;
  try {
    for (; started < scheduled; ++started) {
      pool.Schedule([state] {
        state->Pull();
        state->Release();
      });
    }
  } catch (...) {
    // A job that could not be scheduled (out of memory): the caller does its share, and the
    // pass still returns only once the jobs already scheduled are done with fn.
    state->Pull();
    state->Wait();
    for (int64_t j = started; j <= scheduled; ++j) state->Release();
    throw;
  }
  if (inside) state->Pull();
  state->Wait();
  state->Release();
}

// PullChunks over a `fn` that may throw. An exception that a range throws is noted, the
// ranges that start after it do nothing, and one like it (std::bad_alloc, or a
// std::runtime_error with its message) is thrown on the calling thread once every range has
// returned: no exception ends a pool thread. (Not std::exception_ptr, whose reference counting
// libstdc++ exports only under a version newer than the wheel may need.)
template <typename Pool>
void PullChunksRethrowing(Pool& pool, int64_t units, int64_t cost,
                          const std::function<void(int64_t, int64_t)>& fn) {
  // The first failure, noted without allocating (a handler runs where memory may be short).
  std::atomic<bool> failed{false};
  bool out_of_memory = false;
  char message[256] = "";
  const auto fail = [&](bool oom, const char* what) noexcept {
    if (failed.exchange(true)) return;
    out_of_memory = oom;
    std::strncpy(message, what, sizeof(message) - 1);
  };
  PullChunks(pool, units, cost, [&](int64_t begin, int64_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      fn(begin, end);
    } catch (const std::bad_alloc&) {
      fail(true, "");
    } catch (const std::exception& e) {
      fail(false, e.what());
    } catch (...) {
      fail(false, "an exception of unknown type");
    }
  });
  if (!failed.load()) return;
  if (out_of_memory) throw std::bad_alloc();
  throw std::runtime_error(message);
}

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_PULL_CHUNKS_H_
