// Checks the kept buffers of Workspace (cc/core/cpu/fast_common.h): a call's buffer is reused
// by the next call's request of its size; a request for no bytes takes no kept buffer; a
// request takes a kept buffer at most twice its size, never a larger one that a later
// request of the same call needs; no more than kKeptWorkspaceBytes stay kept. Prints
// "workspace: N checks, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "cc/core/cpu/fast_common.h"

namespace {

using tf_ops::cpu::fast::kKeptWorkspaceBytes;
using tf_ops::cpu::fast::Workspace;

int checks = 0, failed = 0;

void Check(bool ok, const char* what) {
  ++checks;
  if (!ok) {
    ++failed;
    std::printf("FAIL %s\n", what);
  }
}

constexpr char kMark[] = "kept workspace";

// The address of a buffer of `bytes`, marked, that is then kept.
const char* Keep(size_t bytes) {
  Workspace w(bytes);
  std::memcpy(w.data<char>(), kMark, sizeof(kMark));
  return w.data<char>();
}

// Whether w holds the buffer Keep returned as `kept`, still marked (a buffer freed and mapped
// again at the same address would read zeros).
bool Holds(Workspace& w, const char* kept) {
  return w.data<char>() == kept && std::memcmp(kept, kMark, sizeof(kMark)) == 0;
}

}  // namespace

int main() {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t big = kKeptWorkspaceBytes / 2 + kMiB;  // two cannot both be kept
  {
    const char* kept = Keep(big);
    Workspace same(big);
    Check(Holds(same, kept), "the next request of the size reuses the kept buffer");
  }
  {
    // The shape of a forward Winograd call: no bytes of transposed filter, then the
    // transformed filter.
    const char* kept = Keep(big);
    Workspace none(0);
    Workspace filter(big);
    Check(Holds(filter, kept), "a request for no bytes leaves the kept buffer");
  }
  {
    const char* kept = Keep(big);
    Workspace small(kMiB);
    Check(small.data<char>() != kept, "a small request does not take a much larger buffer");
    Workspace filter(big);
    Check(Holds(filter, kept), "the larger request that follows gets it");
  }
  {
    const char* kept = Keep(big);
    Workspace half(big / 2 + 1);
    Check(Holds(half, kept), "a request of more than half a kept buffer reuses it");
  }
  {
    // Two buffers past half the bound at once: on return the one returned last stays.
    const char* kept;
    {
      Workspace a(big), b(big);
      std::memcpy(a.data<char>(), kMark, sizeof(kMark));
      std::memset(b.data<char>(), 0, sizeof(kMark));
      kept = a.data<char>();  // b returns first, then a, and b is dropped for the bound
    }
    Workspace c(big);
    Check(Holds(c, kept), "past the bound, the buffer returned last stays kept");
  }
  std::printf("workspace: %d checks, %d failed\n", checks, failed);
  return failed == 0 ? 0 : 1;
}
