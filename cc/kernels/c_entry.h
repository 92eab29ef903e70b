// What the library's C entry points (called from Python through ctypes) share.
#ifndef TF_OPS_CC_KERNELS_C_ENTRY_H_
#define TF_OPS_CC_KERNELS_C_ENTRY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tf_ops {

// Copies `size` bytes of `text` into out, NUL-terminated and cut to out_size - 1 bytes where it
// does not fit; returns `size`, so that a caller whose buffer was too small can ask again.
inline int64_t CopyOut(const char* text, size_t size, char* out, int64_t out_size) {
  if (out_size > 0) {
    const size_t n = std::min<size_t>(size, static_cast<size_t>(out_size - 1));
    std::copy(text, text + n, out);
    out[n] = '\0';
  }
  return static_cast<int64_t>(size);
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_KERNELS_C_ENTRY_H_
