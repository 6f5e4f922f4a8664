"""Average pooling as ATen ops that ember lowers: decompositions for the
backend's table (ember/backend.py).

A pooling window is a view: the input, zero-padded (constant_pad_nd, which
ember computes inline), unfolded twice along H and W (unfold is a view), so
avg_pool2d is a sum over the two trailing window dims, one ember reduction
kernel whose loads are the padded input's index arithmetic, divided by the
divisor torch defines (count_include_pad, ceil_mode, divisor_override).  The
backward spreads grad / divisor back over every window that covers an input
element: grad placed every stride elements into zeros (two slice_scatters),
padded by kernel - 1, and summed over stride-1 windows of the kernel's size,
again one reduction.  _adaptive_avg_pool2d and its backward are avg pooling
when the input sizes are multiples of the output sizes; otherwise (windows of
varying size and start, not a view) torch's own decomposition or kernel runs.
max_pool2d is not here: its indices (first maximum, last NaN, never a padding
position) and their backward are not one reduction over a view.

The functions only see concrete sizes (ember compiles graphs with static
shapes); anything they do not handle returns NotImplemented, and the op is
then traced as is and runs through torch.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _pair(v, name: str):
    if isinstance(v, int):
        return v, v
    v = list(v)
    if len(v) == 1:
        return v[0], v[0]
    if len(v) == 2:
        return v[0], v[1]
    raise ValueError(f"avg_pool2d: {name} must be one int or two")


def _out_size(n: int, k: int, p: int, s: int, ceil_mode: bool) -> int:
    """Windows along one dim, as torch counts them: with ceil_mode a last,
    partial window is added if it starts inside the input or its left padding."""
    span = n + 2 * p - k
    o = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


class _Geometry:
    """kernel, stride, padding and sizes of one avg_pool2d call."""

    def __init__(self, x_shape, kernel_size, stride, padding, ceil_mode):
        self.kh, self.kw = _pair(kernel_size, "kernel_size")
        st = stride if (isinstance(stride, int) or len(stride)) else kernel_size
        self.sh, self.sw = _pair(st, "stride")
        self.ph, self.pw = _pair(padding, "padding")
        self.H, self.W = x_shape[-2], x_shape[-1]
        self.OH = _out_size(self.H, self.kh, self.ph, self.sh, ceil_mode)
        self.OW = _out_size(self.W, self.kw, self.pw, self.sw, ceil_mode)

    def usable(self) -> bool:
        return (min(self.kh, self.kw, self.sh, self.sw) > 0 and min(self.ph, self.pw) >= 0
                and self.ph * 2 <= self.kh and self.pw * 2 <= self.kw
                and min(self.H, self.W, self.OH, self.OW) > 0)


def _window_sizes(n, k, p, s, o, count_include_pad, device):
    """Per output position along one dim: the elements its window counts.  A
    window runs from i*s - p for k elements but stops at the end of the right
    padding; without count_include_pad only real elements count."""
    lo = torch.arange(o, device=device) * s - p
    hi = torch.clamp(lo + k, max=n + p)
    if not count_include_pad:
        lo, hi = torch.clamp(lo, min=0), torch.clamp(hi, max=n)
    return hi - lo


def _divisor(g: _Geometry, count_include_pad: bool, divisor_override, device):
    """The divisor: a Python int where every window has the same one, else a
    [OH, OW] int64 tensor."""
    if divisor_override:
        return int(divisor_override)

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


def _sum_dtype(dtype):
    """Windows are summed in float for bfloat16/float16 (eager's accumulator)."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override: Optional[int] = None):
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                                torch.int64):
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode)
    if not g.usable() or x.numel() == 0:
        return NotImplemented
    # pad so that every window lies inside: p on the left, to the last window's end on the right
    right_h = (g.OH - 1) * g.sh + g.kh - g.H - g.ph
    right_w = (g.OW - 1) * g.sw + g.kw - g.W - g.pw
    xp = F.pad(x, (g.pw, right_w, g.ph, right_h))
    win = xp.unfold(-2, g.kh, g.sh).unfold(-2, g.kw, g.sw)
    total = torch.sum(win, (-2, -1), dtype=_sum_dtype(x.dtype))
    return _divide(total, _divisor(g, count_include_pad, divisor_override, x.device), x.dtype)


def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override: Optional[int]):
    if x.dim() not in (3, 4) or not grad.dtype.is_floating_point:
        return NotImplemented
    g = _Geometry(x.shape, kernel_size, stride, padding, ceil_mode)
    if not g.usable() or x.numel() == 0 or tuple(grad.shape[-2:]) != (g.OH, g.OW):
        return NotImplemented
    q = _divide(grad.to(_sum_dtype(grad.dtype)), _divisor(g, count_include_pad, divisor_override, grad.device),
                _sum_dtype(grad.dtype))
    # q at every stride-th position of zeros: u[a] = q[a / s] where s divides a
    uh, uw = (g.OH - 1) * g.sh + 1, (g.OW - 1) * g.sw + 1
    u = torch.slice_scatter(q.new_zeros(q.shape[:-2] + (uh, g.OW)), q, -2, 0, None, g.sh)
    u = torch.slice_scatter(q.new_zeros(q.shape[:-2] + (uh, uw)), u, -1, 0, None, g.sw)
    # input element h gets u[a] for h + p - k < a <= h + p: a stride-1 window
    # of k elements starting at h + p in u padded by k - 1 on the left
    up = F.pad(u, (g.kw - 1, max(0, g.pw + g.W - uw), g.kh - 1, max(0, g.ph + g.H - uh)))
    up = up[..., g.ph:g.ph + g.H + g.kh - 1, g.pw:g.pw + g.W + g.kw - 1]
    win = up.unfold(-2, g.kh, 1).unfold(-2, g.kw, 1)
    return torch.sum(win, (-2, -1)).to(grad.dtype)


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
    ks = _adaptive_as_avg(x.shape, output_size) if x.dim() in (3, 4) else None
    if ks is None:
        fn = _torch_decomp(aten._adaptive_avg_pool2d.default)
        return fn(x, output_size) if fn is not None else NotImplemented
    return avg_pool2d(x, ks[0], ks[1])


def adaptive_avg_pool2d_backward(grad, x):
    ks = _adaptive_as_avg(x.shape, grad.shape[-2:]) if x.dim() in (3, 4) else None
    if ks is None:
        return NotImplemented
    return avg_pool2d_backward(grad, x, ks[0], ks[1], 0, False, True, None)


def decompositions() -> dict:
    return {
        aten.avg_pool2d.default: avg_pool2d,
        aten.avg_pool2d_backward.default: avg_pool2d_backward,
        aten._adaptive_avg_pool2d.default: adaptive_avg_pool2d,
        aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    }
