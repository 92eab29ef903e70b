// Checks PullChunks (cc/core/cpu/pull_chunks.h), the ParallelFor of the TensorFlow glue, on a
// pool of its own with the interface of TensorFlow's: every unit runs exactly once, in ranges
// that cover [0, units) without overlap; no more threads work at once than PullChunksJobs
// says; a pass worth one thread runs on the caller in one call; a caller from outside the
// pool runs no unit of a pass of more jobs, and a pool thread takes part in its own; a pass of
// no units calls nothing; passes started from every pool thread at once (a pass inside a
// pass) finish. Prints
// "pull_chunks: N checks, M failed".
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cc/core/cpu/pull_chunks.h"

namespace {

thread_local int current_thread_id = -1;

// A pool with tsl::thread::ThreadPool's three members that PullChunks reads.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i] {
        current_thread_id = i;
        for (;;) {
          std::function<void()> task;
          {
            std::unique_lock<std::mutex> lock(mu_);
            ready_.wait(lock, [&] { return quit_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      });
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int NumThreads() const { return static_cast<int>(threads_.size()); }
  int CurrentThreadId() const { return current_thread_id; }
  void Schedule(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(fn));
    }
    ready_.notify_one();
  }

 private:
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool quit_ = false;
};

// A Pool whose Schedule fails (std::bad_alloc, as out of memory) from its `works`-th call on.
class FailingPool : public Pool {
 public:
  FailingPool(int threads, int works) : Pool(threads), works_(works) {}
  void Schedule(std::function<void()> fn) {
    if (works_-- <= 0) throw std::bad_alloc();
    Pool::Schedule(std::move(fn));
  }

 private:
  int works_;
};

std::atomic<int> checks{0}, failed{0};  // Check runs on pool threads too
// Passes of more than one job from a pool thread, and those in which it ran units.
std::atomic<int> inside_passes{0}, inside_worked{0};

void Check(bool ok, const char* what, int threads, int64_t units, int64_t cost) {
  ++checks;
  if (!ok) {
    ++failed;
    std::printf("FAIL %s: %d threads, %lld units, cost %lld\n", what, threads,
                static_cast<long long>(units), static_cast<long long>(cost));
  }
}

// One pass from the calling thread (outside the pool or not), checked.
void CheckPass(Pool& pool, int64_t units, int64_t cost) {
  const int threads = pool.NumThreads();
  const bool outside = pool.CurrentThreadId() < 0;
  std::vector<std::atomic<int>> runs(static_cast<size_t>(units));
  for (auto& r : runs) r.store(0);
  std::atomic<int> busy{0}, most{0}, calls{0}, on_caller{0}, bad_range{0};
  const std::thread::id caller = std::this_thread::get_id();
  tf_ops::cpu::PullChunks(pool, units, cost, [&](int64_t begin, int64_t end) {
    const int now = busy.fetch_add(1) + 1;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    calls.fetch_add(1);
    if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
    if (begin < 0 || end > units || begin >= end) bad_range.fetch_add(1);
    for (int64_t u = std::max<int64_t>(begin, 0); u < std::min(end, units); ++u) {
      runs[u].fetch_add(1);
    }
    // Long enough that the jobs overlap.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    busy.fetch_sub(1);
  });
  bool once = true;
  for (auto& r : runs) once &= r.load() == 1;
  Check(once, "every unit exactly once", threads, units, cost);
  Check(bad_range.load() == 0, "ranges inside [0, units)", threads, units, cost);
  const int64_t jobs = tf_ops::cpu::PullChunksJobs(threads, units, cost);
  Check(most.load() <= jobs, "no more threads at once than the pass's jobs", threads, units,
        cost);
  if (units == 0) {
    Check(calls.load() == 0, "no units: no call", threads, units, cost);
  } else if (jobs <= 1) {
    Check(calls.load() == 1 && on_caller.load() == 1, "one thread's pass: one call, on the caller",
          threads, units, cost);
  } else if (outside) {
    Check(on_caller.load() == 0, "a caller outside the pool leaves a shared pass to the pool",
          threads, units, cost);
  } else {
    inside_passes.fetch_add(1);
    if (on_caller.load() > 0) inside_worked.fetch_add(1);
  }
}

}  // namespace

int main() {
  // Each PullChunks returns once its last unit is done; a job that starts later finds the
  // counter spent and must not touch the pass's stack (ASan, under the sanitizer job, and
  // ThreadSanitizer check that).
  for (int threads : {1, 2, 3, 4}) {
    Pool pool(threads);
    for (int64_t units : {0, 1, 2, 3, 7, 64, 1000}) {
      for (int64_t cost : {1, 1000, 100000, 10000000}) CheckPass(pool, units, cost);
    }
    Check(tf_ops::cpu::PullChunksJobs(threads, 1000, 10000000) == threads,
          "a large pass takes every thread", threads, 1000, 10000000);
    Check(tf_ops::cpu::PullChunksJobs(threads, 1000, 1) == 1, "a tiny pass takes one thread",
          threads, 1000, 1);
    // Every pool thread starts a pass at once; each pass's jobs can only queue behind the
    // others, so each caller must take part. A watchdog fails the run if they deadlock.
    std::atomic<int> finished{0};
    std::mutex mu;
    std::condition_variable all;
    for (int i = 0; i < threads; ++i) {
      pool.Schedule([&] {
        CheckPass(pool, 500, 10000000);
        // Counted under the lock, so that main, which sees the count only under it, cannot
        // leave this iteration (and destroy mu and all) while a thread still reaches them.
        std::lock_guard<std::mutex> lock(mu);
        finished.fetch_add(1);
        all.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    const bool done = all.wait_for(lock, std::chrono::seconds(60),
                                   [&] { return finished.load() == threads; });
    Check(done, "passes started by every pool thread at once finish", threads, 500, 10000000);
    if (!done) {
      std::printf("pull_chunks: %d checks, %d failed\n", checks.load(), failed.load());
      std::fflush(stdout);
      std::_Exit(1);
    }
  }
  // A range that throws, on a pool thread or the caller: the caller gets the exception's
  // like once every range has returned, the process goes on, and ranges after it do nothing.
  for (int threads : {1, 3}) {
    Pool pool(threads);
    for (const bool oom : {true, false}) {
      std::atomic<int64_t> ran{0};
      bool caught = false;
      try {
        tf_ops::cpu::PullChunksRethrowing(pool, 1000, 10000000, [&](int64_t begin, int64_t end) {
          ran.fetch_add(end - begin);
          if (begin <= 500 && 500 < end) {
            if (oom) throw std::bad_alloc();
            throw std::runtime_error("range 500");
          }
        });
      } catch (const std::bad_alloc&) {
        caught = oom;
      } catch (const std::runtime_error& e) {
        caught = !oom && std::string(e.what()) == "range 500";
      }
      Check(caught, oom ? "a range's bad_alloc comes back to the caller" : "a range's error comes back, its message kept",
            threads, 1000, 10000000);
      Check(ran.load() <= 1000, "no range runs twice", threads, 1000, 10000000);
    }
  }
  // A job that cannot be scheduled: the caller does the rest, the pass returns only once the
  // jobs already scheduled are done (ASan watches them), every unit once, and the scheduling's
  // exception comes back.
  for (int works : {0, 1, 2}) {
    FailingPool pool(4, works);
    std::vector<std::atomic<int>> seen(1000);
    bool caught = false;
    try {
      tf_ops::cpu::PullChunks(pool, 1000, 10000000, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) seen[u].fetch_add(1);
      });
    } catch (const std::bad_alloc&) {
      caught = true;
    }
    bool once = true;
    for (const auto& s : seen) once = once && s.load() == 1;
    Check(caught && once, "a job that cannot be scheduled: every unit once, and the error back", 4, 1000, 10000000);
  }
  // Whether a pool thread gets a chunk of its own pass depends on how fast the jobs start;
  // over every pass, one that works gets some.
  Check(inside_passes.load() > 0 && inside_worked.load() > 0,
        "a pool thread takes part in its own pass", 0, 0, 0);
  std::printf("pull_chunks: %d checks, %d failed\n", checks.load(), failed.load());
  return failed.load() == 0 ? 0 : 1;
}
