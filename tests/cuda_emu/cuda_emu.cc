// The emulator's runtime (see cuda_emu.h): fibers, barriers, warp collectives, shared memory
// with shadow state, launch checks and reports.
#include "cuda_emu.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <unordered_map>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define TF_OPS_EMU_ASAN 1
#endif

namespace {
thread_local cudaError_t last_error = cudaSuccess;
}  // namespace

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

namespace tf_ops_emu {
void CheckStream(const char* what, cudaStream_t stream);
void NoteMemset(const void* p, size_t bytes);
}  // namespace tf_ops_emu

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  tf_ops_emu::CheckStream("memset", stream);
  if (bytes > 0 && p == nullptr) return last_error = cudaErrorInvalidValue;
  if (bytes > 0) std::memset(p, value, bytes);
  tf_ops_emu::NoteMemset(p, bytes);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  return *p == nullptr ? (last_error = cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int, cudaStream_t stream) {
  tf_ops_emu::CheckStream("copy", stream);
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return last_error = cudaErrorInvalidValue;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

namespace tf_ops_emu {

ThreadIndex* current = nullptr;
int planted_bug = -1;

struct Shadow;
struct Region {
  size_t bytes = 0;
  std::unique_ptr<unsigned char[]> data;
  std::vector<Shadow> shadow;
};

namespace {

constexpr size_t kStaticSharedLimit = 48 * 1024;  // without an opt-in, as on every CUDA GPU
constexpr size_t kReportsPerLaunch = 20;
#if defined(TF_OPS_EMU_ASAN)
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif

enum class Wait { kNone, kBarrier, kWarp };

// A fiber's saved execution context. On x86-64 a switch saves the callee-saved registers and
// the SSE and x87 control words on the stack it leaves, and the stack pointer here: no system
// call (ucontext's swapcontext saves and restores the signal mask, two system calls per switch,
// which took about 40% of the emulator's time). Elsewhere, ucontext.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t context;
};
#endif

struct Fiber {
  Context context;
  ThreadIndex index;
  int tid = 0, warp = 0, lane = 0;
  bool done = false;
  Wait wait = Wait::kNone;
  const char* file = nullptr;
  int line = 0;
};

}  // namespace

// Shadow state of one byte of shared memory.
struct Shadow {
  int32_t writer = -1;       // thread that last wrote it
  uint32_t write_epoch = 0;  // block barrier epoch of that write
  uint32_t write_warp_epoch = 0;
  int32_t reader = -1;  // a thread that read it in read_epoch
  uint32_t read_epoch = 0, read_warp_epoch = 0;
  bool many_readers = false;  // more than one thread read it in read_epoch
  bool written = false;
};

namespace {


struct WarpState {
  uint32_t epoch = 0;  // completed __syncwarp / collectives
  unsigned arrived = 0, left = 0, mask = 0;
  bool draining = false;
  const char* file = nullptr;
  int line = 0;
  uint64_t values[32][kExchangeWords] = {};
};

struct State {
  uint64_t seed = 1;
  std::vector<std::string> reports;
  int64_t launches = 0;
  // The launch being run.
  const char* kernel = "";
  size_t launch_reports = 0;
  size_t dynamic_shared = 0;
  void (*trampoline)(void*) = nullptr;
  void* closure = nullptr;
  // The block being run.
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<WarpState> warps;
  std::map<std::pair<const char*, int>, std::unique_ptr<Region>> regions;
  Region dynamic_region;
  size_t static_shared = 0;
  int live = 0, exited = 0, arrived = 0;
  uint64_t barrier_generation = 0;
  uint32_t epoch = 0;
  int64_t progress = 0;
  Fiber* running = nullptr;
  Context scheduler;
  bool aborted = false;
  // Streams.
  bool expect_stream = false;
  cudaStream_t stream = nullptr;
  // Launch bounds by kernel name (loaded: bounds_loaded), and the largest block launched.
  bool bounds_loaded = false;
  std::map<std::string, int64_t> bounds, launched;
  // The launch's global stores: element address -> (block, thread) that stored it.
  std::unordered_map<uintptr_t, std::pair<uint64_t, int>> stores;
  uint64_t block_linear = 0;
  dim3 grid;
  // The tracked buffer's store counts.
  uintptr_t tracked_base = 0;
  size_t tracked_bytes = 0, tracked_elem = 1;
  std::vector<int> tracked;
};

State& S() {
  static State* const state = new State;
  return *state;
}

std::string Dim(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

void Report(const Fiber* f, const std::string& what) {
  State& s = S();
  if (s.launch_reports++ >= kReportsPerLaunch) return;
  std::string where = std::string("kernel ") + s.kernel;
  if (f != nullptr) where += " block " + Dim(f->index.block_idx) + " thread " + Dim(f->index.thread_idx);
  s.reports.push_back(where + ": " + what);
}

std::string Site(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return std::string(slash != nullptr ? slash + 1 : file) + ":" + std::to_string(line);
}

#if defined(TF_OPS_EMU_ASAN)
void* fake_stack = nullptr;
#endif

void FiberMain();

#if defined(__x86_64__)
// Saves the running context on its stack and in *from_sp, and resumes the one saved at to_sp.
extern "C" void tf_ops_emu_switch(void** from_sp, void* to_sp);
asm(R"(
    .pushsection .text
    .p2align 4
    .type tf_ops_emu_switch, @function
tf_ops_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tf_ops_emu_switch, .-tf_ops_emu_switch
    .popsection
)");

// A context that starts FiberMain on the stack [base, base + bytes): laid out as a switch
// leaves a stack, returning into FiberMain with the stack aligned as at a call (FiberMain
// never returns).
void Prepare(Context* c, char* base, size_t bytes) {
#if defined(TF_OPS_EMU_ASAN)
  // The stack's last fiber left the shadow of its frames that never returned.
  ASAN_UNPOISON_MEMORY_REGION(base, bytes);
#endif
  uint32_t mxcsr, fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(base) + bytes) & ~uintptr_t{15});
  *--sp = nullptr;                                 // FiberMain's return address
  *--sp = reinterpret_cast<void*>(&FiberMain);     // where the first switch returns to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;     // rbp, rbx, r12-r15
  *--sp = reinterpret_cast<void*>(uint64_t{mxcsr} | uint64_t{fpcw} << 32);
  c->sp = sp;
}

void Switch(Context* from, Context* to) { tf_ops_emu_switch(&from->sp, to->sp); }
#else
void Prepare(Context* c, char* base, size_t bytes) {
  getcontext(&c->context);
  c->context.uc_stack.ss_sp = base;
  c->context.uc_stack.ss_size = bytes;
  c->context.uc_link = nullptr;
  makecontext(&c->context, FiberMain, 0);
}

void Switch(Context* from, Context* to) { swapcontext(&from->context, &to->context); }
#endif

// Switches from the running fiber back to the scheduler.
void Yield() {
  State& s = S();
  Fiber* f = s.running;
#if defined(TF_OPS_EMU_ASAN)
  __sanitizer_start_switch_fiber(&fake_stack, nullptr, 0);
#endif
  Switch(&f->context, &s.scheduler);
#if defined(TF_OPS_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  current = &f->index;
}

void FiberMain() {
  State& s = S();
#if defined(TF_OPS_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  s.trampoline(s.closure);
  Fiber* f = s.running;
  f->done = true;
  --s.live;
  ++s.exited;
  ++s.progress;
  if (s.arrived > 0) {
    Report(f, "exited while other threads of its block wait at a barrier");
    if (s.arrived == s.live) {  // release them, as a GPU that counts exited threads would
      s.arrived = 0;
      ++s.barrier_generation;
      ++s.epoch;
    }
  }
#if defined(TF_OPS_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, nullptr, 0);  // this fiber's stack is done with
#endif
  Switch(&f->context, &s.scheduler);  // never resumed
  std::abort();
}

bool Synchronized(const Fiber& f, int other, uint32_t epoch, uint32_t warp_epoch) {
  State& s = S();
  if (other < 0 || other == f.tid || epoch != s.epoch) return true;
  const Fiber& o = s.fibers[other];
  return o.warp == f.warp && s.warps[f.warp].epoch > warp_epoch;
}

bool Access(Region* region, size_t index, size_t count, size_t elem, const char* name, bool write) {
  State& s = S();
  Fiber& f = *s.running;
  if (index >= count) {
    Report(&f, std::string("shared memory '") + name + "' indexed at " + std::to_string(index) +
                   ", past its " + std::to_string(count) + " elements");
    return false;
  }
  const size_t first = index * elem;
  const uint32_t warp_epoch = s.warps[f.warp].epoch;
  for (size_t b = first; b < first + elem; ++b) {
    Shadow& sh = region->shadow[b];
    if (!write && !sh.written) {
      Report(&f, std::string("reads shared memory '") + name + "'[" + std::to_string(index) +
                     "] that nothing wrote");
      return true;
    }
    if (!Synchronized(f, sh.writer, sh.write_epoch, sh.write_warp_epoch)) {
      const Fiber& o = s.fibers[sh.writer];
      Report(&f, std::string(write ? "writes" : "reads") + " shared memory '" + name + "'[" +
                     std::to_string(index) + "] that thread " + Dim(o.index.thread_idx) +
                     " wrote since the last barrier");
      return true;
    }
    if (write) {
      // Another thread read it since the last barrier (two or more readers: one of them is
      // another thread).
      const bool read_by_other =
          sh.reader >= 0 && (sh.many_readers ? sh.read_epoch == s.epoch
                                             : !Synchronized(f, sh.reader, sh.read_epoch, sh.read_warp_epoch));
      if (read_by_other) {
        Report(&f, std::string("writes shared memory '") + name + "'[" + std::to_string(index) +
                       "] that another thread read since the last barrier");
        return true;
      }
      sh.writer = f.tid, sh.write_epoch = s.epoch, sh.write_warp_epoch = warp_epoch;
      sh.written = true;
      sh.reader = -1, sh.many_readers = false;
    } else if (sh.read_epoch != s.epoch || sh.reader < 0) {
      sh.reader = f.tid, sh.read_epoch = s.epoch, sh.read_warp_epoch = warp_epoch, sh.many_readers = false;
    } else if (sh.reader != f.tid) {
      sh.many_readers = true;
    }
  }
  return true;
}

void NewRegion(Region* r, size_t bytes) {
  r->bytes = bytes;
  r->data.reset(new unsigned char[std::max<size_t>(1, bytes)]);
  std::memset(r->data.get(), 0xcd, std::max<size_t>(1, bytes));  // what a GPU leaves is arbitrary
  r->shadow.assign(bytes, Shadow());
}

void RunBlock(dim3 grid, dim3 block, dim3 block_idx, std::mt19937_64& rng) {
  State& s = S();
  const int threads = static_cast<int>(block.x * block.y * block.z);
  s.fibers.assign(threads, Fiber());
  s.warps.assign((threads + 31) / 32, WarpState());
  s.regions.clear();
  NewRegion(&s.dynamic_region, s.dynamic_shared);
  s.static_shared = 0;
  s.live = threads, s.exited = 0, s.arrived = 0, s.epoch = 0, s.aborted = false;
  while (static_cast<int>(s.stacks.size()) < threads) s.stacks.emplace_back(new char[kStackBytes]);
  for (int t = 0; t < threads; ++t) {
    Fiber& f = s.fibers[t];
    f.tid = t, f.warp = t / 32, f.lane = t % 32;
    f.index.thread_idx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
    f.index.block_idx = block_idx, f.index.block_dim = block, f.index.grid_dim = grid;
    Prepare(&f.context, s.stacks[t].get(), kStackBytes);
  }
  std::vector<int> order(threads);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  while (s.live > 0) {
    const int64_t before = s.progress;
    for (int t : order) {
      Fiber& f = s.fibers[t];
      if (f.done) continue;
      s.running = &f;
      current = &f.index;
#if defined(TF_OPS_EMU_ASAN)
      __sanitizer_start_switch_fiber(&fake_stack, s.stacks[t].get(), kStackBytes);
#endif
      Switch(&s.scheduler, &f.context);
#if defined(TF_OPS_EMU_ASAN)
      __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
      s.running = nullptr;
    }
    if (s.progress == before && s.live > 0) {
      // Every live thread waits and none can go on: name where two of them wait.
      const Fiber* a = nullptr;
      const Fiber* b = nullptr;
      for (const Fiber& f : s.fibers) {
        if (f.done) continue;
        if (a == nullptr) a = &f;
        else if (b == nullptr && (f.file != a->file || f.line != a->line || f.wait != a->wait)) b = &f;
      }
      std::string what = "deadlock: threads wait at " + Site(a->file, a->line);
      if (b != nullptr) what += " and, thread " + Dim(b->index.thread_idx) + ", at " + Site(b->file, b->line);
      Report(a, what);
      return;  // the fibers' stacks are reused by the next block
    }
  }
}

}  // namespace

void ExpectStream(cudaStream_t stream) {
  S().expect_stream = true;
  S().stream = stream;
}
void ClearExpectedStream() { S().expect_stream = false; }

std::string Pointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

void CheckStream(const char* what, cudaStream_t stream) {
  State& s = S();
  if (s.expect_stream && stream != s.stream) {
    Report(nullptr, std::string(what) + " on stream " + Pointer(stream) + ", not the op's stream " + Pointer(s.stream));
  }
}

std::string LoadLaunchBounds(const char* path) {
  State& s = S();
  std::ifstream in(path);
  if (!in) return std::string("cannot read ") + path;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t bound = 0;
    if (!(fields >> name >> bound) || bound <= 0) return "not a line \"NAME MAX_THREADS\": " + line;
    auto [it, fresh] = s.bounds.try_emplace(name, bound);
    if (!fresh) it->second = std::min(it->second, bound);
  }
  s.bounds_loaded = true;
  return "";
}

const std::map<std::string, int64_t>& LaunchedKernels() { return S().launched; }

std::string KernelNameOf(const char* pretty) {
  // "... [with auto kKernel = ns::{anonymous}::Name<ns::Arg<float> >]": the text after the
  // first " = " up to the ']' or ';' that closes it, namespaces dropped.
  std::string text(pretty);
  const size_t eq = text.find(" = ");
  if (eq == std::string::npos) return text;
  std::string name;
  int depth = 0;
  for (size_t i = eq + 3; i < text.size(); ++i) {
    const char c = text[i];
    if (depth == 0 && (c == ';' || c == ']')) break;
    depth += c == '<' ? 1 : c == '>' ? -1 : 0;
    name += c;
  }
  if (!name.empty() && name[0] == '&') name.erase(0, 1);
  // Drop each qualifier: the identifier (or "{anonymous}") before every "::".
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 2, "::") == 0) {
      while (!out.empty() && (std::isalnum(static_cast<unsigned char>(out.back())) || out.back() == '_' ||
                              out.back() == '{' || out.back() == '}')) {
        out.pop_back();
      }
      ++i;
    } else {
      out += name[i];
    }
  }
  return out;
}

void NoteStore(const void* p, size_t bytes) {
  State& s = S();
  const Fiber& f = *s.running;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto [it, fresh] = s.stores.try_emplace(at, s.block_linear, f.tid);
  const bool in_tracked = at >= s.tracked_base && at + bytes <= s.tracked_base + s.tracked_bytes;
  if (in_tracked) ++s.tracked[(at - s.tracked_base) / s.tracked_elem];
  if (!fresh) {
    const uint64_t b = it->second.first;
    const dim3 block = f.index.block_dim;
    const int t = it->second.second;
    const dim3 other_block(static_cast<unsigned>(b % s.grid.x), static_cast<unsigned>(b / s.grid.x % s.grid.y),
                           static_cast<unsigned>(b / (uint64_t{s.grid.x} * s.grid.y)));
    const dim3 other_thread(t % block.x, t / block.x % block.y, t / (block.x * block.y));
    std::string where = "global memory at " + Pointer(p);
    if (in_tracked) where += " (element " + std::to_string((at - s.tracked_base) / s.tracked_elem) + " of the output)";
    Report(&f, "stores " + where + ", which block " + Dim(other_block) + " thread " + Dim(other_thread) +
                   " stored in this launch: an output written twice");
  }
}

void NoteMemset(const void* p, size_t bytes) {
  State& s = S();
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t e = s.tracked_base; e + s.tracked_elem <= s.tracked_base + s.tracked_bytes; e += s.tracked_elem) {
    if (e >= at && e + s.tracked_elem <= at + bytes) ++s.tracked[(e - s.tracked_base) / s.tracked_elem];
  }
}

void TrackStores(const void* base, size_t bytes, size_t elem) {
  State& s = S();
  s.tracked_base = reinterpret_cast<uintptr_t>(base);
  s.tracked_elem = std::max<size_t>(1, elem);
  s.tracked_bytes = bytes / s.tracked_elem * s.tracked_elem;
  s.tracked.assign(s.tracked_bytes / s.tracked_elem, 0);
}
const std::vector<int>& TrackedStores() { return S().tracked; }

void SetSeed(uint64_t seed) { S().seed = seed; }
const std::vector<std::string>& Reports() { return S().reports; }
void ClearReports() {
  S().reports.clear();
  S().launches = 0;
}
int64_t Launches() { return S().launches; }
unsigned LaneId() { return static_cast<unsigned>(S().running->lane); }

void SyncThreads(const char* file, int line) {
  State& s = S();
  Fiber& f = *s.running;
  ++s.progress;
  if (s.exited > 0) Report(&f, "reaches the barrier at " + Site(file, line) + " after threads of its block exited");
  f.wait = Wait::kBarrier, f.file = file, f.line = line;
  ++s.arrived;
  const uint64_t generation = s.barrier_generation;
  if (s.arrived == s.live) {
    for (const Fiber& o : s.fibers) {
      if (!o.done && o.wait == Wait::kBarrier && (o.file != file || o.line != line)) {
        Report(&f, "waits at the barrier at " + Site(file, line) + " while thread " +
                       Dim(o.index.thread_idx) + " waits at " + Site(o.file, o.line));
        break;
      }
    }
    s.arrived = 0;
    ++s.barrier_generation;
    ++s.epoch;
  } else {
    while (s.barrier_generation == generation) Yield();
  }
  f.wait = Wait::kNone;
}

// A warp collective: every lane of `mask` deposits `size` bytes (up to kExchangeWords words) of
// `value`; once the whole mask has arrived, `out` gets every lane's words.
void ExchangeWords(unsigned mask, const void* value, size_t size, const char* file, int line,
                   uint64_t out[32][kExchangeWords]) {
  State& s = S();
  Fiber& f = *s.running;
  WarpState& w = s.warps[f.warp];
  ++s.progress;
  f.wait = Wait::kWarp, f.file = file, f.line = line;
  if (!(mask >> f.lane & 1u)) Report(&f, "calls a warp collective at " + Site(file, line) + " outside its mask");
  while (w.draining) Yield();
  if (w.arrived == 0) {
    w.mask = mask, w.file = file, w.line = line;
  } else if (w.mask != mask || w.file != file || w.line != line) {
    Report(&f, "calls the warp collective at " + Site(file, line) + " while its warp is in the one at " +
                   Site(w.file, w.line));
  }
  std::memset(w.values[f.lane], 0, sizeof(w.values[f.lane]));
  std::memcpy(w.values[f.lane], value, size);
  w.arrived |= 1u << f.lane;
  while ((w.arrived & w.mask) != w.mask && !w.draining) {
    for (int lane = 0; lane < 32; ++lane) {
      const int tid = f.warp * 32 + lane;
      if ((w.mask >> lane & 1u) && (tid >= static_cast<int>(s.fibers.size()) || s.fibers[tid].done)) {
        Report(&f, "waits in a warp collective at " + Site(file, line) + " for lane " +
                       std::to_string(lane) + ", which has exited or does not exist");
        w.mask &= ~(1u << lane);
      }
    }
    if ((w.arrived & w.mask) != w.mask) Yield();
  }
  if (!w.draining) {
    w.draining = true;  // complete: the lanes are synchronized from here on
    ++w.epoch;
  }
  std::memcpy(out, w.values, sizeof(w.values));
  w.left |= 1u << f.lane;
  if ((w.left & w.arrived) == w.arrived) {
    w.arrived = w.left = 0;
    w.draining = false;
  }
  ++s.progress;
  f.wait = Wait::kNone;
}

void Exchange(unsigned mask, const void* value, size_t size, const char* file, int line, uint64_t out[32]) {
  uint64_t all[32][kExchangeWords];
  ExchangeWords(mask, value, size, file, line, all);
  for (int lane = 0; lane < 32; ++lane) out[lane] = all[lane][0];
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the warp's 16 x 16 A and 16 x 8 B gathered
// from the lanes' fragments as PTX lays them out (lane = 4 g + q: A's words 0-3 hold rows g,
// g + 8, g, g + 8 at columns 2q, 2q + 1, then 2q + 8, 2q + 9; B's words 0-1 column g at rows 2q,
// 2q + 1, then 2q + 8, 2q + 9; D's four floats rows g, g, g + 8, g + 8 at columns 2q, 2q + 1),
// the low half of a word the lower index. Products are exact in double; each D is rounded once.
void Mma16816(bool bf16, float d[4], const uint32_t a[4], const uint32_t b[2], const char* file, int line) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  uint64_t all[32][kExchangeWords];
  ExchangeWords(0xffffffffu, mine, sizeof(mine), file, line, all);
  const auto word = [&](int lane, int i) {
    uint32_t v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(all[lane]) + 4 * i, 4);
    return v;
  };
  const auto value = [&](uint32_t w, int half) {
    const uint16_t bits = static_cast<uint16_t>(w >> (16 * half));
    return bf16 ? static_cast<double>(__bfloat162float(__nv_bfloat16{bits}))
                : static_cast<double>(__half2float(__half{bits}));
  };
  const int g = static_cast<int>(LaneId()) / 4, q = static_cast<int>(LaneId()) % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
    double sum = d[i];
    for (int k = 0; k < 16; ++k) {
      const int a_lane = (row % 8) * 4 + (k % 8) / 2, a_word = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      const int b_lane = col * 4 + (k % 8) / 2, b_word = k >= 8 ? 1 : 0;
      sum += value(word(a_lane, a_word), k & 1) * value(word(b_lane, 4 + b_word), k & 1);
    }
    d[i] = static_cast<float>(sum);
  }
}

void SyncWarp(unsigned mask, const char* file, int line) {
  uint64_t all[32];
  const uint64_t none = 0;
  Exchange(mask, &none, sizeof(none), file, line, all);
}

Region* SharedRegion(const char* file, int line, size_t bytes, bool dynamic) {
  State& s = S();
  if (dynamic) return &s.dynamic_region;
  auto [it, fresh] = s.regions.try_emplace({file, line});
  if (fresh) {
    it->second.reset(new Region);
    NewRegion(it->second.get(), bytes);
    s.static_shared += bytes;
    if (s.static_shared + s.dynamic_shared > kStaticSharedLimit) {
      Report(s.running, "uses " + std::to_string(s.static_shared + s.dynamic_shared) +
                            " bytes of shared memory, over the 48 KiB a block may have");
    }
  } else if (it->second->bytes != bytes) {
    Report(s.running, "declares the shared array at " + Site(file, line) + " with another size");
  }
  return it->second.get();
}

void* RegionData(Region* region) { return region->data.get(); }
size_t RegionBytes(Region* region) { return region->bytes; }

bool SharedAccess(Region* region, size_t index, size_t count, size_t elem, const char* name, bool write) {
  return Access(region, index, count, elem, name, write);
}

cudaError_t Run(const char* name, dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream,
                void (*trampoline)(void*), void* closure) {
  State& s = S();
  s.kernel = name;
  s.launch_reports = 0;
  ++s.launches;
  CheckStream("launch", stream);
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const std::string base(name, std::strcspn(name, "<"));
  int64_t& most = s.launched[base];
  most = std::max<int64_t>(most, static_cast<int64_t>(threads));
  if (s.bounds_loaded) {
    const auto bound = s.bounds.find(base);
    if (bound == s.bounds.end()) {
      Report(nullptr, "a kernel with no __launch_bounds__ in the compiled code");
    } else if (static_cast<int64_t>(threads) > bound->second) {
      Report(nullptr, "launch with a block of " + std::to_string(threads) + " threads, more than the " +
                          std::to_string(bound->second) + " of its __launch_bounds__, which CUDA refuses");
      return last_error = cudaErrorLaunchOutOfResources;
    }
  }
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535 || dynamic_shared > kStaticSharedLimit) {
    Report(nullptr, "launch with grid " + Dim(grid) + ", block " + Dim(block) + " and " +
                        std::to_string(dynamic_shared) + " bytes of dynamic shared memory, which CUDA refuses");
    return last_error = cudaErrorInvalidConfiguration;
  }
  s.dynamic_shared = dynamic_shared;
  s.trampoline = trampoline, s.closure = closure;
  std::mt19937_64 rng(s.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(s.launches));
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (blocks > (uint64_t{1} << 22)) {
    Report(nullptr, "launch of " + std::to_string(blocks) + " blocks, more than the emulator runs");
    return last_error = cudaErrorInvalidValue;
  }
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  s.stores.clear();
  s.grid = grid;
  for (uint64_t b : order) {
    s.block_linear = b;
    const dim3 idx(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                   static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y)));
    RunBlock(grid, block, idx, rng);
  }
  current = nullptr;
  return cudaSuccess;
}

}  // namespace tf_ops_emu
