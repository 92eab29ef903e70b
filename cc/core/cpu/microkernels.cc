// The kernel tables (microkernels.h): the processor's best, one named by TF_OPS_CPU_ISA, and
// the tests' choice.
#include "cc/core/cpu/microkernels.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tf_ops {
namespace cpu {

namespace {

// Whether the processor has AMX-TILE and AMX-BF16 and the OS lets this process use the tiles
// (on Linux, once granted on request: ARCH_REQ_XCOMP_PERM for the tile data).
bool AmxUsable() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;  // AMX-BF16, AMX-TILE
  uint32_t xcr0_low, xcr0_high;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((xcr0_low & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// The table for the best instruction set the processor supports, at most `cap` (a value of
// TF_OPS_CPU_ISA; empty: no cap).
KernelTable BuildKernels(const std::string& cap) {
  const bool allow_amx = cap.empty() || cap == "amx_bf16";
  const bool allow_bf16 = allow_amx || cap == "avx512_bf16";
  const bool allow_avx512 = allow_bf16 || cap == "avx512";
  const bool allow_avx2 = allow_avx512 || cap == "avx2";
  KernelTable t = *GenericKernels();
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (allow_avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    t = *Avx512Kernels();
    if (allow_bf16 && __builtin_cpu_supports("avx512bf16")) {
      t.isa = "avx512_bf16";
      t.gemm_bf16_pairs = Avx512Bf16GemmKernels();
      if (allow_amx && AmxUsable()) {
        t.isa = "amx_bf16";
        t.amx_tiles = true;
        t.gemm_bf16_pairs = AmxBf16GemmKernels();
      }
      // bfloat16 GEMMs run on the pair kernels, rounding included.
      for (GemmKernel& k : t.gemm) {
        k.indirect[kElemBF16] = nullptr;
        k.affine[kElemBF16] = nullptr;
        k.affine_narrow[kElemBF16] = nullptr;
      }
    }
  } else if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c")) {
    t = *Avx2Kernels();
  }
#else
  (void)allow_avx2;
#endif
  return t;
}

// The table UseKernelsForTesting chose, if it was called.
std::atomic<const KernelTable*> chosen_kernels{nullptr};

constexpr const char* kIsaNames[] = {"generic", "avx2", "avx512", "avx512_bf16", "amx_bf16"};

// The table of TF_OPS_CPU_ISA (the processor's best where it is unset), or the processor's best
// and why the value was refused.
struct EnvironmentKernels {
  KernelTable table;
  std::string error;
};

const EnvironmentKernels& FromEnvironment() {
  static const EnvironmentKernels chosen = [] {
    const char* env = std::getenv("TF_OPS_CPU_ISA");
    EnvironmentKernels e;
    const std::string isa = env != nullptr ? env : "";
    const KernelTable* named = isa.empty() ? nullptr : KernelsNamed(isa, &e.error);
    e.table = named != nullptr ? *named : BuildKernels("");
    if (!e.error.empty()) e.error = "TF_OPS_CPU_ISA=" + isa + ": " + e.error;
    return e;
  }();
  return chosen;
}

}  // namespace

const KernelTable* KernelsNamed(const std::string& isa, std::string* error) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<const KernelTable>> tables;
  // The names, of every table or of those this processor runs, for an error message.
  const auto list = [](bool usable_only) {
    std::string names;
    for (const char* name : kIsaNames) {
      if (usable_only && std::strcmp(BuildKernels(name).isa, name) != 0) continue;
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    return names;
  };
  if (std::find(std::begin(kIsaNames), std::end(kIsaNames), isa) == std::end(kIsaNames)) {
    *error = "not an instruction set of the CPU kernels (" + list(false) + ")";
    return nullptr;
  }
  const KernelTable built = BuildKernels(isa);
  if (isa != built.isa) {
    *error = "this processor (or its operating system) cannot run the " + isa + " kernels; it runs " + list(true);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : tables) {
    if (isa == t->isa) return t.get();
  }
  tables.push_back(std::make_unique<const KernelTable>(built));
  return tables.back().get();
}

const KernelTable& Kernels() {
  if (const KernelTable* chosen = chosen_kernels.load(std::memory_order_acquire)) return *chosen;
  return FromEnvironment().table;
}

const std::string& KernelIsaError() { return FromEnvironment().error; }

const char* UseKernelsForTesting(const std::string& cap) {
  // The best table at most `cap` is one this processor runs, so KernelsNamed has it.
  std::string error;
  const KernelTable* table = KernelsNamed(BuildKernels(cap).isa, &error);
  chosen_kernels.store(table, std::memory_order_release);
  return table->isa;
}

const char* FastKernelIsa() { return Kernels().isa; }

}  // namespace cpu
}  // namespace tf_ops
