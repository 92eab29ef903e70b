// Winograd F(4x4, 3x3) for the fast CPU kernels (conv_fast.cc): 3x3 convolutions of stride
// and dilation 1, forward, backprop input (a 3x3 stride-1 correlation of the output gradient
// with the filter turned half a turn and its channel axes swapped) and backprop filter, NHWC,
// with enough channels on both sides of each group to pay for the transforms.
//
// Each 4x4 block of outputs is
//   Y = A^T [ sum_c (G g_c G^T) . (B^T d_c B) ] A
// with d_c the 6x6 source patch and g_c the 3x3 filter of channel c, and
//   B^T = [4  0 -5  0  1  0]   G = [ 1/4     0     0 ]   A^T = [1  1  1  1  1  0]
//         [0 -4 -4  1  1  0]       [-1/6  -1/6  -1/6 ]         [0  1 -1  2 -2  0]
//         [0  4 -4 -1  1  0]       [-1/6   1/6  -1/6 ]         [0  1  1  4  4  0]
//         [0 -2 -1  2  1  0]       [1/24  1/12   1/6 ]         [0  1 -1  8 -8  1]
//         [0  2 -1 -2  1  0]       [1/24 -1/12   1/6 ]
//         [0  4  0 -5  0  1]       [ 0     0     1   ]
// The filter gradient is the derivative of that identity with respect to g:
//   dW = sum over tiles and images of G^T [ (A e A^T) . (B^T d B) ] G
// with e the 4x4 output-gradient tile: 36 GEMMs reduced over tiles, G^T . G applied once
// to their sums.
// The 36 element-wise products summed over c are 36 GEMMs (tiles x channels times channels x
// output channels) on the gemm micro-kernels; 36 multiplies per 16 outputs and channel pair,
// against 144 for the direct sum. The transforms run on the micro-kernel table's winograd
// routines. Its rounding errors are larger than the direct sum's (docs/accuracy.md's
// table states the bound); exact mode (SetExactMode) turns it off.
//
// Work units are blocks of tiles (taken across images) of one group, or of half its columns;
// every output element is produced by one unit with its reduction in one fixed order, so
// results are bitwise the same whatever the number of threads.
#ifndef TF_OPS_CC_CORE_CPU_CONV_WINOGRAD_H_
#define TF_OPS_CC_CORE_CPU_CONV_WINOGRAD_H_

#include <memory>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {

// Whether the Winograd pass takes this geometry (NHWC or NCHW alike), direction `forward`
// or backprop input, for element type T, with exact mode off.
template <typename T>
bool WinogradApplies(const KernelTable& table, const ConvGeometry& g, bool forward);

// The same for the filter gradient.
template <typename T>
bool WinogradFilterApplies(const KernelTable& table, const ConvGeometry& g);

// The blocking of a fused pass (one group, a transformed filter larger than the source's and
// than a core's cache): tiles per chunk (tb), chunks, units per column block (parts), source
// channels a unit takes at a time (kc), and the transformed source's plane (floats a point).
struct WinogradFusedBlocking {
  int64_t tb = 0, chunks = 0, parts = 0, kc = 0, v_plane = 0;
};

// The blocking of an unfused pass: a unit transforms a block of `tb` tiles of its groups (of
// every group's channels, Ct of them, where `all`; else of one group's), `tile_blocks` blocks;
// ug units a block row (groups); the transformed filter read from memory (`streamed`), and
// each block's column blocks split in `parts`.
struct WinogradTileBlocking {
  bool all = false, streamed = false;
  int64_t Ct = 0, ug = 0, tb = 0, tile_blocks = 0, parts = 1;
};

// How a forward or backprop-input Winograd pass over one geometry runs (PlanWinograd): the
// float GEMMs' micro-kernel (Kernels().gemm[gemm]), fused or by blocks of tiles, and the
// workspace bytes it holds at most at once (on elements of `element_size` bytes) and its work
// units (the units of its main loop).
struct WinogradPlan {
  int gemm = 0;
  bool fused = false;
  WinogradFusedBlocking fused_blocking;
  WinogradTileBlocking tiles;
  int64_t workspace_bytes = 0, units = 0;
};
WinogradPlan PlanWinograd(const KernelTable& table, const ConvGeometry& g, bool forward, int64_t element_size);

// Runs `plan` (PlanWinograd of g), NHWC: forward reads src = x and writes dst = y; backprop
// input reads src = dy and writes dst = dx.
template <typename T>
void WinogradNhwc(const WinogradPlan& plan, const ConvGeometry& g, bool forward, const T* w, const T* src, T* dst,
                  const ParallelFor& parallel_for);

// How the filter gradient over a chunk of images (WinogradFilter's geometry) runs
// (PlanWinogradFilter): its float GEMMs' micro-kernel (Kernels().gemm[gemm]); fused (each
// unit's sums transformed straight into dw), sliced (`slices` sets of sums, each over its share
// of a call's tiles, `slice_block` tiles transformed at a time), or neither (a call's tiles in
// chunks of at most `chunk_tiles`, through memory); the workspace bytes it holds at most at
// once and its work units.
struct WinogradFilterPlan {
  int gemm = 0;
  bool fused = false;
  int64_t slices = 1, slice_block = 0, chunk_tiles = 0;
  int64_t workspace_bytes = 0, units = 0;
};
WinogradFilterPlan PlanWinogradFilter(const KernelTable& table, const ConvGeometry& g);

// The filter gradient as `plan` (PlanWinogradFilter of g) runs it, accumulated over NHWC chunks
// of images: Accumulate() each chunk in order (every chunk's geometry differs from the
// constructor's only in its batch, none larger), then Finish(); the gradient is then in dw as
// floats, [3][3][FI][K], every element written (dw's values on construction are never read).
template <typename T>
class WinogradFilter {
 public:
  WinogradFilter(const WinogradFilterPlan& plan, const ConvGeometry& g, float* dw, const ParallelFor& parallel_for);
  ~WinogradFilter();
  WinogradFilter(const WinogradFilter&) = delete;
  WinogradFilter& operator=(const WinogradFilter&) = delete;
  void Accumulate(const ConvGeometry& chunk, const T* x, const T* dy);
  void Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;  // freed if the constructor throws
};

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_CONV_WINOGRAD_H_
