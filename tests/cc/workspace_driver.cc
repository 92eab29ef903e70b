// Checks the call's workspace block (cc/core/cpu/fast_common.h, WorkspaceArena): Workspaces
// take aligned, disjoint bytes of it in order and give them back last taken first, so that a
// call's nested scopes fit in the block ArenaBytes sizes from their plan's total; a request
// that does not fit (a plan that counted too few bytes) is counted and gets a heap buffer of
// its own; bytes given back out of order are counted and never handed out twice; a request
// for no bytes takes none; a Workspace outside any arena, and every Workspace of an inner
// arena, are not the outer arena's; the tally counts what the Workspaces asked for. And
// RunPlan asks its WorkspaceFn for exactly the plan's block, once, and gives up, having
// written nothing, where the block cannot be had. Prints "workspace: N checks, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/plan.h"

namespace {

using tf_ops::cpu::fast::AlignUp;
using tf_ops::cpu::fast::ArenaBytes;
using tf_ops::cpu::fast::kBufferAlign;
using tf_ops::cpu::fast::ThreadWorkspace;
using tf_ops::cpu::fast::Workspace;
using tf_ops::cpu::fast::WorkspaceArena;

int checks = 0, failed = 0;

void Check(bool ok, const char* what) {
  ++checks;
  if (!ok) {
    ++failed;
    std::printf("FAIL %s\n", what);
  }
}

bool Inside(const char* p, int64_t bytes, const std::vector<char>& block) {
  return p >= block.data() && p + bytes <= block.data() + block.size();
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kBufferAlign == 0; }

// What the kernel sweep holds RunPlan to, on one plan: the block asked for, and the result.
void CheckRunPlan() {
  using namespace tf_ops;
  using namespace tf_ops::cpu;
  ConvGeometry g;
  const std::string err = MakeConvGeometry(2, 12, 12, 16, 3, 3, 16, 16, ConvAttrs{}, &g);
  Check(err.empty(), "the geometry");
  // Exact: sums of ones, exact in float.
  const Plan plan = PlanConv(Direction::kForward, g, Layout::kNCHW, Element::kFloat, Kernels(), /*exact=*/true);
  Check(plan.workspace_bytes > 0, "an NCHW plan holds workspace");
  std::vector<float> x(g.input_elements(), 1.0f), w(g.filter_elements(), 1.0f), y(g.output_elements(), -1.0f);
  std::vector<int64_t> asked;
  RunResult r = RunPlan(plan, g, x.data(), w.data(), y.data(), SerialFor, [&](int64_t bytes) -> void* {
    asked.push_back(bytes);
    return nullptr;
  });
  Check(r == RunResult::kNoWorkspace && asked.size() == 1 && asked[0] == ArenaBytes(plan.workspace_bytes),
        "RunPlan asks once for the plan's block, and gives up where it cannot be had");
  bool untouched = true;
  for (float v : y) untouched = untouched && v == -1.0f;
  Check(untouched, "having written nothing");
  std::vector<char> block;
  asked.clear();
  ThreadWorkspace().overflows = 0;
  r = RunPlan(plan, g, x.data(), w.data(), y.data(), SerialFor, [&](int64_t bytes) -> void* {
    asked.push_back(bytes);
    block.resize(bytes);
    return block.data();
  });
  bool right = true;
  for (float v : y) right = right && v == 16.0f * 9;  // VALID: every output sums 9 taps of 16 channels
  Check(r == RunResult::kRan && asked.size() == 1 && ThreadWorkspace().overflows == 0 && right,
        "and runs in the block it was given");
}

}  // namespace

int main() {
  constexpr int64_t kBytes = int64_t{1} << 16;  // more than the block holds
  // Three nested scopes of 100, 200 and 300 bytes, then two of 250 and 350 after them.
  std::vector<char> block(ArenaBytes(600));
  {
    WorkspaceArena arena(block.data() + 1, static_cast<int64_t>(block.size()) - 1);  // any alignment
    Check(WorkspaceArena::Current() == &arena, "the arena is the thread's current one");
    ThreadWorkspace().peak = ThreadWorkspace().live;
    {
      Workspace a(100);
      Workspace none(0);
      Workspace b(200);
      char* pa = a.data<char>();
      char* pb = b.data<char>();
      Check(none.data<char>() != nullptr && !Inside(none.data<char>(), 1, block), "no bytes take none of the block");
      {
        Workspace c(300);
        char* pc = c.data<char>();
        Check(Inside(pa, 100, block) && Inside(pb, 200, block) && Inside(pc, 300, block), "inside the block");
        Check(Aligned(pa) && Aligned(pb) && Aligned(pc), "aligned");
        Check(pb >= pa + 100 && pc >= pb + 200, "disjoint, in order");
      }
      Workspace d(300);
      Check(d.data<char>() >= pb + 200 && Inside(d.data<char>(), 300, block), "given back, taken again");
    }
    Check(ThreadWorkspace().peak - ThreadWorkspace().live == 600, "the tally's peak is what the scopes asked for");
    {
      Workspace e(250), f(350);
      Check(e.data<char>() == AlignUp(block.data() + 1) && Inside(f.data<char>(), 350, block),
            "all given back: the next scopes start at the block's start");
    }
    ThreadWorkspace().overflows = ThreadWorkspace().misorders = 0;
    {
      Workspace big(kBytes);
      std::memset(big.data<char>(), 1, kBytes);
      Check(!Inside(big.data<char>(), kBytes, block) && ThreadWorkspace().overflows == 1,
            "a request past the block: counted, and a buffer of its own");
    }
    {
      auto* g = new Workspace(100);
      Workspace h(100);
      char* ph = h.data<char>();
      delete g;  // out of order
      Check(ThreadWorkspace().misorders == 1, "out of order: counted");
      Workspace i(100);
      Check(i.data<char>() >= ph + 100, "and the bytes still held are not handed out again");
    }
    {
      std::vector<char> inner_block(ArenaBytes(100));
      WorkspaceArena inner(inner_block.data(), static_cast<int64_t>(inner_block.size()));
      Workspace j(100);
      Check(Inside(j.data<char>(), 100, inner_block), "an inner arena serves its scope");
    }
    Check(WorkspaceArena::Current() == &arena, "and the outer one is current again after it");
  }
  Check(WorkspaceArena::Current() == nullptr, "no arena after the call");
  {
    Workspace k(kBytes);
    std::memset(k.data<char>(), 1, kBytes);
    Check(Aligned(k.data<char>()) && !Inside(k.data<char>(), kBytes, block), "outside an arena: the heap");
  }
  CheckRunPlan();
  std::printf("workspace: %d checks, %d failed\n", checks, failed);
  return failed == 0 ? 0 : 1;
}
