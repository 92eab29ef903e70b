"""A float64 numpy reference of the convolution family, independent of TensorFlow and of
the compiled kernels. Slow but direct: every op is the sum over filter taps of strided
slices of a zero-padded buffer.

Shapes follow TensorFlow: activations in `data_format`, filters [KH, KW, FI, K] with
groups = C / FI (depthwise filters [KH, KW, C, M]).
"""
import numpy as np


def _div_trunc(a, b):
    """Integer division truncating toward zero, as C++ does."""
    q = abs(a) // b
    return q if a >= 0 else -q


def window(in_size, k, dilation, stride, padding, pads=(0, 0)):
    """(out, pad_before, pad_after) of one spatial dimension; None if the size is negative."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-in_size // stride)
        need = max(0, (out - 1) * stride + eff - in_size)
        before, after = need // 2, need - need // 2
    elif padding == "VALID":
        before, after = 0, 0
        out = _div_trunc(in_size - eff + stride, stride)
    else:
        before, after = pads
        out = _div_trunc(in_size + before + after - eff + stride, stride)
    return (out, before, after) if out >= 0 else None


class Geometry:
    """Sizes of one convolution, NHWC-ordered, from shapes and TensorFlow-style attrs."""

    def __init__(self, x_shape, w_shape, strides, padding, explicit_paddings, dilations,
                 data_format="NHWC", depthwise=False):
        nchw = data_format == "NCHW"
        h, w, c = (2, 3, 1) if nchw else (1, 2, 3)
        self.n, self.h, self.w, self.c = x_shape[0], x_shape[h], x_shape[w], x_shape[c]
        self.kh, self.kw = w_shape[0], w_shape[1]
        if depthwise:
            self.fi, self.k = 1, w_shape[2] * w_shape[3]
        else:
            self.fi, self.k = w_shape[2], w_shape[3]
        self.groups = self.c // self.fi
        self.sh, self.sw = strides[h], strides[w]
        self.dh, self.dw = dilations[h], dilations[w]
        pads_h = tuple(explicit_paddings[2 * h:2 * h + 2]) if padding == "EXPLICIT" else (0, 0)
        pads_w = tuple(explicit_paddings[2 * w:2 * w + 2]) if padding == "EXPLICIT" else (0, 0)
        rows = window(self.h, self.kh, self.dh, self.sh, padding, pads_h)
        cols = window(self.w, self.kw, self.dw, self.sw, padding, pads_w)
        if rows is None or cols is None:
            raise ValueError("negative output size")
        self.oh, self.pt, self.pb = rows
        self.ow, self.pl, self.pr = cols
        self.nchw = nchw

    def padded(self):
        hp = max(self.h + self.pt + self.pb, (self.oh - 1) * self.sh + (self.kh - 1) * self.dh + 1, 0)
        wp = max(self.w + self.pl + self.pr, (self.ow - 1) * self.sw + (self.kw - 1) * self.dw + 1, 0)
        return hp, wp

    def tap_slices(self, kh, kw):
        r0, c0 = kh * self.dh, kw * self.dw
        return (slice(None), slice(r0, r0 + (self.oh - 1) * self.sh + 1, self.sh) if self.oh else slice(0, 0),
                slice(c0, c0 + (self.ow - 1) * self.sw + 1, self.sw) if self.ow else slice(0, 0))

    def to_nhwc(self, t):
        return np.transpose(t, (0, 2, 3, 1)) if self.nchw else t

    def from_nhwc(self, t):
        return np.transpose(t, (0, 3, 1, 2)) if self.nchw else t


def _grouped(g, t, fi_or_k):
    """[N, H, W, G*F] -> [N, H, W, G, F]."""
    return t.reshape(t.shape[:3] + (g.groups, fi_or_k))


def _filter(g, w):
    """[KH, KW, FI, K] (or depthwise [KH, KW, C, M]) -> [KH, KW, FI, G, K/G]."""
    kg = g.k // g.groups if g.groups else 0
    return np.asarray(w, np.float64).reshape(g.kh, g.kw, g.fi, g.groups, kg)


def conv2d(x, w, strides, padding, explicit_paddings=(), dilations=(1, 1, 1, 1),
           data_format="NHWC", depthwise=False):
    g = Geometry(x.shape, w.shape, strides, padding, explicit_paddings, dilations, data_format, depthwise)
    xs = g.to_nhwc(np.asarray(x, np.float64))
    hp, wp = g.padded()
    xp = np.zeros((g.n, hp, wp, g.c))
    xp[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w, :] = xs
    wf = _filter(g, w)
    y = np.zeros((g.n, g.oh, g.ow, g.groups, wf.shape[-1]))
    for kh in range(g.kh):
        for kw in range(g.kw):
            patch = _grouped(g, xp[g.tap_slices(kh, kw)], g.fi)
            y += np.einsum("nhwgi,igk->nhwgk", patch, wf[kh, kw])
    return g.from_nhwc(y.reshape(g.n, g.oh, g.ow, g.k))


def conv2d_backprop_input(input_shape, w, dy, strides, padding, explicit_paddings=(),
                          dilations=(1, 1, 1, 1), data_format="NHWC", depthwise=False):
    g = Geometry(tuple(input_shape), w.shape, strides, padding, explicit_paddings, dilations,
                 data_format, depthwise)
    dys = g.to_nhwc(np.asarray(dy, np.float64))
    hp, wp = g.padded()
    dxp = np.zeros((g.n, hp, wp, g.c))
    wf = _filter(g, w)
    dyg = _grouped(g, dys, wf.shape[-1])
    for kh in range(g.kh):
        for kw in range(g.kw):
            contrib = np.einsum("nhwgk,igk->nhwgi", dyg, wf[kh, kw])
            dxp[g.tap_slices(kh, kw)] += contrib.reshape(contrib.shape[:3] + (g.c,))
    return g.from_nhwc(dxp[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w, :])


def conv2d_backprop_filter(x, filter_shape, dy, strides, padding, explicit_paddings=(),
                           dilations=(1, 1, 1, 1), data_format="NHWC", depthwise=False):
    g = Geometry(x.shape, tuple(filter_shape), strides, padding, explicit_paddings, dilations,
                 data_format, depthwise)
    xs = g.to_nhwc(np.asarray(x, np.float64))
    hp, wp = g.padded()
    xp = np.zeros((g.n, hp, wp, g.c))
    xp[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w, :] = xs
    kg = g.k // g.groups if g.groups else 0
    dyg = _grouped(g, g.to_nhwc(np.asarray(dy, np.float64)), kg)
    dw = np.zeros((g.kh, g.kw, g.fi, g.groups, kg))
    for kh in range(g.kh):
        for kw in range(g.kw):
            patch = _grouped(g, xp[g.tap_slices(kh, kw)], g.fi)
            dw[kh, kw] = np.einsum("nhwgi,nhwgk->igk", patch, dyg)
    return dw.reshape(tuple(filter_shape))
