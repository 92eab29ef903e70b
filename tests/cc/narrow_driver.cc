// Checks the instruction sets' vector float -> half / bfloat16 conversions (the narrow[]
// entries of microkernels.h) bit for bit against Eigen's scalar conversions, over special
// values, rounding ties and a sweep of float bit patterns. NaNs must map to NaNs of the same
// sign (payloads may differ). Prints one line per (instruction set, type): name, values
// checked, mismatches; exits 1 on any mismatch.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "Eigen/Core"
#include "cc/core/cpu/microkernels.h"

namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<float> Inputs() {
  std::vector<float> v;
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff812345u, 0x00000001u,
                               0x807fffffu, 0x00800000u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
                               0x38800000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x7f7fffffu};
  for (uint32_t s : specials) v.push_back(FromBits(s));
  // Rounding ties and their neighbours for bfloat16 (low 16 bits 0x8000) and half (bit 12).
  for (uint32_t hi = 0; hi < 0x10000u; hi += 97) {
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x0fffu, 0x1000u, 0x1001u, 0x3000u}) {
      v.push_back(FromBits((hi << 16) ^ lo));
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65537) {
    v.push_back(FromBits(static_cast<uint32_t>(bits)));
  }
  return v;
}

template <typename E>
uint16_t EigenBits(float f) {
  const E e(f);
  uint16_t bits;
  std::memcpy(&bits, &e, 2);
  return bits;
}

bool Same(uint16_t got, uint16_t want, int exponent_mask) {
  const bool got_nan = (got & exponent_mask) == exponent_mask && (got & ~(exponent_mask | 0x8000)) != 0;
  const bool want_nan = (want & exponent_mask) == exponent_mask && (want & ~(exponent_mask | 0x8000)) != 0;
  if (got_nan || want_nan) return got_nan && want_nan && (got & 0x8000) == (want & 0x8000);
  return got == want;
}

int Check(const char* isa, const tf_ops::cpu::KernelTable& table, const std::vector<float>& in) {
  int failures = 0;
  for (int kind : {tf_ops::cpu::kElemF16, tf_ops::cpu::kElemBF16}) {
    const bool half = kind == tf_ops::cpu::kElemF16;
    std::vector<uint16_t> out(in.size());
    // An odd length, so that the scalar tail runs too.
    table.narrow[kind](in.data(), static_cast<int64_t>(in.size()) - 1, out.data());
    table.narrow[kind](in.data() + in.size() - 1, 1, out.data() + in.size() - 1);
    int64_t mismatches = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t want = half ? EigenBits<Eigen::half>(in[i]) : EigenBits<Eigen::bfloat16>(in[i]);
      if (!Same(out[i], want, half ? 0x7c00 : 0x7f80)) {
        if (mismatches++ < 5) {
          uint32_t bits;
          std::memcpy(&bits, &in[i], 4);
          std::printf("  %s %s: 0x%08x -> 0x%04x, Eigen 0x%04x\n", isa, half ? "half" : "bfloat16",
                      bits, out[i], want);
        }
      }
    }
    std::printf("%s %s %zu %lld\n", isa, half ? "half" : "bfloat16", in.size(),
                static_cast<long long>(mismatches));
    failures += mismatches > 0;
  }
  return failures;
}

}  // namespace

int main() {
  const std::vector<float> in = Inputs();
  int failures = 0;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    failures += Check("avx2", *tf_ops::cpu::Avx2Kernels(), in);
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
    failures += Check("avx512", *tf_ops::cpu::Avx512Kernels(), in);
  }
  return failures > 0 ? 1 : 0;
}
