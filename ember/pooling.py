"""Pooling as ATen ops that ember lowers: decompositions for ember's one
table of them (ember/decompositions.py).

A pooling window is a view: the input, zero-padded (constant_pad_nd, which
ember computes inline), unfolded twice along H and W (unfold is a view), so
avg_pool2d is a sum over the two trailing window dims, one ember reduction
kernel whose loads are the padded input's index arithmetic, divided by the
divisor torch defines (count_include_pad, ceil_mode, divisor_override).  The
backward is ember's only where the windows tile the input (kernel = stride,
no padding: each element's gradient is its window's, a broadcast); where
windows overlap, torch's kernel scatters the gradients faster than a sum over
every window that could cover an element (measured on 2 cores: 3x3 stride-2
max pooling of [16, 64, 112, 112], forward and backward, 103 ms that way
against eager's 50 ms), so it runs there.
_adaptive_avg_pool2d and its backward are avg pooling
when the input sizes are multiples of the output sizes; otherwise (windows of
varying size and start, not a view) torch's own decomposition or kernel runs.

max_pool2d_with_indices pads with the dtype's lowest value and takes, over
the (dilated) windows, the max and two index reductions that give torch's
index: the first maximum, the last NaN where there is one, the first real
element where every element is the lowest value (never a padding position).
Its backward, for tiled windows, gives each element its window's gradient
where the window's index is the element.

The functions only see concrete sizes (ember compiles graphs with static
shapes); anything they do not handle returns NotImplemented, and the op is
then traced as is and runs through torch.  On a GPU the windows' rows are
short (9 elements for a 3x3 window): the CUDA code generator gives each
such row one thread of a block of many (src/codegen_cuda.c, short_rows).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

aten = torch.ops.aten


_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64)  # torch's CPU pooling's


def _pair(v, name: str):
    if isinstance(v, int):
        return v, v
    v = list(v)
    if len(v) == 1:
        return v[0], v[0]
    if len(v) == 2:
        return v[0], v[1]
    raise ValueError(f"pooling: {name} must be one int or two")


def _here(*ts, ints: bool = True) -> bool:
    """Tensors this module's decompositions take: on the CPU, or on a GPU
    (where torch's pooling kernels take no integer input but max pooling's)."""
    for t in ts:
        if t.device.type == "cuda" and not ints and not t.dtype.is_floating_point:
            return False
        if t.device.type not in ("cpu", "cuda"):
            return False
    return True


def _out_size(n: int, k: int, p: int, s: int, ceil_mode: bool, d: int = 1) -> int:
    """Windows along one dim, as torch counts them: with ceil_mode a last,
    partial window is added if it starts inside the input or its left padding."""
    span = n + 2 * p - (k - 1) * d - 1
    o = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


class _Geometry:
    """kernel, stride, padding, dilation and sizes of one pooling call."""

    def __init__(self, x_shape, kernel_size, stride, padding, ceil_mode, dilation=1):
        self.kh, self.kw = _pair(kernel_size, "kernel_size")
        st = stride if (isinstance(stride, int) or len(stride)) else kernel_size
        self.sh, self.sw = _pair(st, "stride")
        self.ph, self.pw = _pair(padding, "padding")
        self.dh, self.dw = _pair(dilation, "dilation")
        self.H, self.W = x_shape[-2], x_shape[-1]
        self.ceil_mode = ceil_mode
        self.OH = _out_size(self.H, self.kh, self.ph, self.sh, ceil_mode, self.dh)
        self.OW = _out_size(self.W, self.kw, self.pw, self.sw, ceil_mode, self.dw)
        self.eh, self.ew = (self.kh - 1) * self.dh + 1, (self.kw - 1) * self.dw + 1  # window extents

    def usable(self) -> bool:
        return (min(self.kh, self.kw, self.sh, self.sw, self.dh, self.dw) > 0 and min(self.ph, self.pw) >= 0
                and self.ph * 2 <= self.eh and self.pw * 2 <= self.ew
                and all(n > 0 for n in (self.H, self.W, self.OH, self.OW)))  # min() of sizes: a guard between them

    def windows(self, x, value=0):
        """x padded with value and unfolded: [..., OH, OW, kh, kw], window (oh, ow)
        holding x[oh * sh - ph + i * dh, ow * sw - pw + j * dw]."""
        right_h = (self.OH - 1) * self.sh + self.eh - self.H - self.ph
        right_w = (self.OW - 1) * self.sw + self.ew - self.W - self.pw
        if not self.ceil_mode:
            # padding as much on the right as on the left gives the same windows (unfold counts
            # (H + 2 * ph - eh) // sh + 1 of them, OH), and with symbolic sizes constant pads,
            # which ember lowers (a right pad of (OH - 1) * sh + eh - H - ph varies with H's parity)
            right_h, right_w = self.ph, self.pw
        xp = F.pad(x, (self.pw, right_w, self.ph, right_h), value=value)
        return xp.unfold(-2, self.eh, self.sh).unfold(-2, self.ew, self.sw)[..., ::self.dh, ::self.dw]

    def tiled(self) -> bool:
        """Windows that tile the input: each element in at most one window
        (kernel = stride, no padding or dilation; a remainder of rows or
        columns no window covers, as a 2x2 pool of an odd size leaves)."""
        return (self.kh == self.sh and self.kw == self.sw and self.ph == self.pw == 0 and self.dh == self.dw == 1
                and self.OH * self.kh <= self.H and self.OW * self.kw <= self.W)

    def untile(self, q, value=0):
        """q ([..., OH, OW]) at every input element of its window: [..., H, W]
        (a view of q expanded, made dense; value where no window covers), for
        tiled windows."""
        lead = q.shape[:-2]
        e = q.reshape(lead + (self.OH, 1, self.OW, 1)).expand(lead + (self.OH, self.kh, self.OW, self.kw))
        e = e.reshape(lead + (self.OH * self.kh, self.OW * self.kw))
        if (self.OH * self.kh, self.OW * self.kw) != (self.H, self.W):
            e = F.pad(e, (0, self.W - self.OW * self.kw, 0, self.H - self.OH * self.kh), value=value)
        return e


def _window_sizes(n, k, p, s, o, count_include_pad, device):
    """Per output position along one dim: the elements its window counts.  A
    window runs from i*s - p for k elements but stops at the end of the right
    padding; without count_include_pad only real elements count."""
    # min(a, b) as b - relu(b - a): a bound that is a symbolic size is a pointwise operand ember
    # lowers, where clamp's would be a fallback
    lo = torch.arange(o, device=device) * s - p
    hi = lo + k
    hi = hi - torch.relu(hi - (n + p))
    if not count_include_pad:
        lo, hi = torch.relu(lo), hi - torch.relu(hi - n)
    return hi - lo


def _divisor(g: _Geometry, count_include_pad: bool, divisor_override, device):
    """The divisor: a Python int where every window has the same one, else a
    [OH, OW] int64 tensor."""
    if divisor_override:
        return int(divisor_override)
    if not all(type(v) is int for v in (g.H, g.W, g.OH, g.OW)):
        # symbolic sizes: per-window counts as tensors at every size (counting them here would
        # make Dynamo specialize the number of windows, a compile per image size)
        h = _window_sizes(g.H, g.kh, g.ph, g.sh, g.OH, count_include_pad, device)
        w = _window_sizes(g.W, g.kw, g.pw, g.sw, g.OW, count_include_pad, device)
        return h.unsqueeze(1) * w.unsqueeze(0)

    def sizes(n, k, p, s, o):
        out = []
        for i in range(o):
            lo, hi = i * s - p, min(i * s - p + k, n + p)
            if not count_include_pad:
                lo, hi = max(lo, 0), min(hi, n)
            out.append(hi - lo)
        return out
    hs = sizes(g.H, g.kh, g.ph, g.sh, g.OH)
    ws = sizes(g.W, g.kw, g.pw, g.sw, g.OW)
    if len(set(hs)) == 1 and len(set(ws)) == 1:
        return hs[0] * ws[0]
    h = _window_sizes(g.H, g.kh, g.ph, g.sh, g.OH, count_include_pad, device)
    w = _window_sizes(g.W, g.kw, g.pw, g.sw, g.OW, count_include_pad, device)
    return h.unsqueeze(1) * w.unsqueeze(0)


def _divide(total, d, dtype):
    if dtype.is_floating_point:
        return (total / d).to(dtype)
    return torch.div(total, d, rounding_mode="trunc").to(dtype)  # integers: C++'s truncating division


def acc_dtype(dtype):
    """The dtype eager's kernels compute 16-bit floats in (float32); others
    their own.  Windows are summed in it here; BatchNorm (backend) too."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _as_input(x, *outs):
    """The results laid out as eager's pooling lays them out: channels_last for a 4-d input in
    channels_last (its suggested memory format), as torch's kernels return; else as computed."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        outs = tuple(o.contiguous(memory_format=torch.channels_last) for o in outs)
    return outs if len(outs) > 1 else outs[0]


def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override: Optional[int] = None):
    if not _here(x, ints=False) or x.dim() not in (3, 4) or x.dtype not in _DTYPES:
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode)
    if not g.usable() or x.numel() == 0:
        return NotImplemented
    total = torch.sum(g.windows(x), (-2, -1), dtype=acc_dtype(x.dtype))
    return _as_input(x, _divide(total, _divisor(g, count_include_pad, divisor_override, x.device), x.dtype))


def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override: Optional[int]):
    """Only for windows that tile the input (a 2x2 pool of stride 2): each
    input element's gradient is its window's, divided, a broadcast.
    Overlapping windows go to torch's kernel, which scatters faster than a sum
    over every window that could cover an element."""
    if not _here(grad, x) or x.dim() not in (3, 4) or not grad.dtype.is_floating_point:
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode)
    if not g.usable() or not g.tiled() or x.numel() == 0 or tuple(grad.shape[-2:]) != (g.OH, g.OW):
        return NotImplemented
    q = _divide(grad.to(acc_dtype(grad.dtype)), _divisor(g, count_include_pad, divisor_override, grad.device),
                acc_dtype(grad.dtype))
    return g.untile(q).to(grad.dtype)


def _lowest(dtype):
    return -float("inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _flat_windows(g: _Geometry, device):
    """Per window element its flat input index h * W + w, -1 for padding:
    [OH, OW, kh, kw], a few ops that ember inlines into the reductions."""
    flat = torch.arange(g.H * g.W, device=device).view(g.H, g.W)
    return g.windows(flat, -1)


def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if not _here(x) or x.dim() not in (3, 4) or x.dtype not in _DTYPES:
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode, dilation)
    if not g.usable() or x.numel() == 0:
        return NotImplemented
    low = _lowest(x.dtype)
    win = g.windows(x, low)
    # NaN if the window holds one; the result is the reduction's own value, not a
    # view of it, so that ember may lay it out for a convolution after it (NHWC)
    out = torch.amax(win, (-2, -1))
    top = out[..., None, None]
    flat = _flat_windows(g, x.device)
    # torch's index: the first maximum; the first real element if all are the lowest value
    first = torch.amin(torch.where((flat >= 0) & ((win == top) | (top == low)), flat, g.H * g.W), (-2, -1))
    if x.dtype.is_floating_point:  # ... and the last NaN where there is one
        last_nan = torch.amax(torch.where(win != win, flat, -1), (-2, -1))
        first = torch.where(last_nan >= 0, last_nan, first)
    return _as_input(x, out, first)


def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Only for windows that tile the input: an element's gradient is its
    window's where the window chose it, else 0.  Overlapping windows (3x3
    of stride 2) go to torch's kernel (see avg_pool2d_backward)."""
    if not _here(grad, x, indices) or x.dim() not in (3, 4) or not grad.dtype.is_floating_point:
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode, dilation)
    if not g.usable() or not g.tiled() or x.numel() == 0 or tuple(grad.shape[-2:]) != (g.OH, g.OW):
        return NotImplemented
    here = torch.arange(g.H * g.W, device=grad.device).view(g.H, g.W)
    return torch.where(g.untile(indices, -1) == here, g.untile(grad), 0).to(grad.dtype)


def _adaptive_as_avg(shape, output_size):
    """(kernel, stride) when every window has the same size, else None."""
    oh, ow = _pair(output_size, "output_size")
    h, w = shape[-2], shape[-1]
    if min(oh, ow, h, w) <= 0 or h % oh or w % ow:
        return None
    return (h // oh, w // ow), (h // oh, w // ow)


def _torch_decomp(op):
    from torch._decomp import decomposition_table
    return decomposition_table.get(op)


def adaptive_avg_pool2d(x, output_size):
    ks = _adaptive_as_avg(x.shape, output_size) if x.dim() in (3, 4) and _here(x, ints=False) else None
    if ks is None:
        fn = _torch_decomp(aten._adaptive_avg_pool2d.default)
        return fn(x, output_size) if fn is not None else NotImplemented
    return avg_pool2d(x, ks[0], ks[1])


def adaptive_avg_pool2d_backward(grad, x):
    ks = _adaptive_as_avg(x.shape, grad.shape[-2:]) if x.dim() in (3, 4) and _here(grad, x) else None
    if ks is None:
        return NotImplemented
    return avg_pool2d_backward(grad, x, ks[0], ks[1], 0, False, True, None)


def decompositions() -> dict:
    return {
        aten.avg_pool2d.default: avg_pool2d,
        aten.avg_pool2d_backward.default: avg_pool2d_backward,
        aten._adaptive_avg_pool2d.default: adaptive_avg_pool2d,
        aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
        aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
        aten.max_pool2d_with_indices_backward.default: max_pool2d_with_indices_backward,
    }
