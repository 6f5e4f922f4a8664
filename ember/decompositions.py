"""Which ATen ops ember takes whole and which it lets be decomposed: one table.

AOTAutograd traces every graph through a decomposition table before ember
sees it.  Ours starts from PyTorch's core ATen decompositions (as Inductor's
does) and each row below changes it for some ops, with the reason:

- ``C``: ember's C core takes the op whole: lowered as itself (a line of
  src/ops.def) or replaced by its formula in other ops as it is added
  (src/expand.c, the F_COMPOSITE lines).  It is kept out of the table.
- ``TORCH_KERNEL``: kept whole and run by torch's own kernel (a fallback).
- ``TORCH``: torch's decomposition (torch._decomp), into ops ember lowers.
- ``EMBER``: ember's own decomposition in Python: here, or in pooling.py.

An op is in one row at most.  tests/test_decompositions.py checks the table
against the C core: every ``C`` op is in src/ops.def, no ``C`` or
``TORCH_KERNEL`` op is decomposed, and an op of src/ops.def that the table
does decompose is named in a ``TORCH`` row, so that no lowering is shadowed
without a reason.  Anything not named here follows the core decompositions.

Adding an op to ember: a line in src/ops.def; if torch would decompose it
(it is in core_aten_decompositions, or a row below), a ``C`` row too.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import torch

from . import pooling

aten = torch.ops.aten

C, TORCH_KERNEL, TORCH, EMBER = "c", "torch kernel", "torch", "ember"


class Row(NamedTuple):
    ops: Tuple            # OpOverloads (C, TORCH_KERNEL, EMBER) or OpOverloadPackets (TORCH: every overload)
    who: str              # C, TORCH_KERNEL, TORCH or EMBER
    reason: str
    impl: Optional[Callable] = None  # EMBER: the decomposition


# ---------------------------------------------------------------- ember's own decompositions
def _addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    out = torch.mm(mat1, mat2)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out
    return out + (bias if beta == 1 else bias * beta)


def _reduced_dims(x, dim):
    if dim is None:
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    return [d % max(x.dim(), 1) for d in dim] if len(dim) else list(range(x.dim()))


def _var_mean(x, dim=None, *, correction=None, keepdim=False, _std=False):
    # float16 and bfloat16 are computed in float32 and rounded once at the end,
    # as eager does (their squares summed in 16 bits overflow: var([100., -100.] * 32) was inf)
    if x.is_complex() or not x.is_floating_point():
        return NotImplemented
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    dims = _reduced_dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d] if x.dim() else 1
    c = 1 if correction is None else correction
    mean = torch.mean(x, dims, keepdim=True)
    diff = x - mean
    # torch.sym_max: a symbolic count stays one expression (no guard on its sign)
    var = torch.sum(diff * diff, dims, keepdim=keepdim) / torch.sym_max(0, n - c)
    if not keepdim:
        mean = torch.squeeze(mean, dims) if dims else mean
    if _std:
        var = torch.sqrt(var)
    return var.to(dtype), mean.to(dtype)


def _var(x, dim=None, *, correction=None, keepdim=False):
    r = _var_mean(x, dim, correction=correction, keepdim=keepdim)
    return r if r is NotImplemented else r[0]


def _std(x, dim=None, *, correction=None, keepdim=False):
    r = _var_mean(x, dim, correction=correction, keepdim=keepdim, _std=True)
    return r if r is NotImplemented else r[0]


def _max_dim(x, dim, keepdim=False):
    # both take the first extreme (or the first NaN), as torch.max(x, dim) does
    return torch.amax(x, dim, keepdim), torch.argmax(x, dim, keepdim)


def _min_dim(x, dim, keepdim=False):
    return torch.amin(x, dim, keepdim), torch.argmin(x, dim, keepdim)


def _pointwise_conv1d(x, w, stride, padding, transposed, groups) -> bool:
    """A kernel-size-1 Conv1d on the CPU (SqueezeBERT's layers, grouped or not),
    unstrided and unpadded, in float32 or float64: a matrix product per group."""
    return (x.device.type == "cpu" and x.dim() == 3 and w.dim() == 3 and w.shape[2] == 1
            and not transposed and list(stride) == [1] and list(padding) == [0]
            and x.dtype in (torch.float32, torch.float64) and w.dtype == x.dtype)


def _conv1x1(x, w, bias, groups):
    # out[b, g] = w[g] @ x[b, g]: one batched product over (batch, group), its
    # operands views of x and w (a permuted x, [B, T, C] seen as [B, C, T],
    # is a transposed operand, not a copy), the bias added in the ember kernel
    # that reads the result
    b, c, t = x.shape
    o = w.shape[0]
    out = torch.matmul(w.reshape(1, groups, o // groups, c // groups), x.reshape(b, groups, c // groups, t))
    out = out.reshape(b, o, t)
    return out if bias is None else out + bias.reshape(1, o, 1)


def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if _pointwise_conv1d(x, w, stride, padding, transposed, groups):
        return _conv1x1(x, w, bias, groups)
    # on the GPU only: there cuDNN's bias is a separate torch kernel, and on the CPU oneDNN adds it inside
    if bias is None or x.device.type != "cuda":
        return NotImplemented
    out = aten.convolution.default(x, w, None, stride, padding, dilation, transposed, output_padding, groups)
    return out + bias.reshape([1, -1] + [1] * (out.dim() - 2))


def _convolution_backward(grad_out, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    # the pointwise Conv1d's gradients as products of the same views:
    # grad_x[b, g] = w[g]^T @ grad_out[b, g], grad_w[g] = sum_b grad_out[b, g] @ x[b, g]^T
    if not _pointwise_conv1d(x, w, stride, padding, transposed, groups):
        return NotImplemented
    b, c, t = x.shape
    o = w.shape[0]
    go = grad_out.reshape(b, groups, o // groups, t)
    gx = gw = gb = None
    if output_mask[0]:
        wt = w.reshape(1, groups, o // groups, c // groups).transpose(-1, -2)
        gx = torch.matmul(wt, go).reshape(b, c, t)
    if output_mask[1]:
        xt = x.reshape(b, groups, c // groups, t).transpose(-1, -2)
        gw = torch.matmul(go, xt).sum(0).reshape(w.shape)
    if output_mask[2]:
        gb = grad_out.sum((0, 2))
    return gx, gw, gb


def _repeat(x, repeats):
    # torch's decomposition (torch._refs.repeat) clones the expanded input in
    # its own layout, so a permuted input gives a non-contiguous result that a
    # later .view() rejects (WavLM's position bias); aten.repeat's result is
    # contiguous: each dim d of size p becomes (repeats[d], p), expanded and
    # copied in that order, then merged
    repeats = [int(r) for r in repeats]
    if len(repeats) < x.dim():
        return NotImplemented
    shape = [1] * (len(repeats) - x.dim()) + list(x.shape)
    target = [r * p for r, p in zip(repeats, shape)]
    if 0 in target:
        return torch.empty(target, dtype=x.dtype, device=x.device)
    x = x.reshape(shape)
    x = x.reshape([d for p in shape for d in (1, p)])
    x = x.expand([d for r, p in zip(repeats, shape) for d in (r, p)])
    return torch.clone(x, memory_format=torch.contiguous_format).view(target)


def _weight_norm_interface_backward(grad_w, v, g, norms, dim):
    # w = v * g / |v|, the norm over every dim but dim (weight_norm: the
    # speech models' positional convolution): with s = sum(grad_w * v) over
    # those dims, grad_g = s / |v| and grad_v = g / |v| * (grad_w - v * s / |v|^2),
    # as ATen's kernel computes them; 16-bit inputs in float32, as it does
    if not 0 <= dim < v.dim() or norms.dim() != v.dim():
        return NotImplemented
    dtype_v, dtype_g = v.dtype, g.dtype
    if dtype_v in (torch.float16, torch.bfloat16):
        grad_w, v, g, norms = grad_w.float(), v.float(), g.float(), norms.float()
    dims = [d for d in range(v.dim()) if d != dim]
    s = torch.sum(grad_w * v, dims, keepdim=True)
    grad_v = (g / norms) * (grad_w - v * (s / (norms * norms)))
    grad_g = s / norms
    return grad_v.to(dtype_v), grad_g.to(dtype_g)


# ---------------------------------------------------------------- the table
TABLE: Tuple[Row, ...] = (
    # -- taken whole by the C core
    Row((aten._native_batch_norm_legit_functional.default, aten.native_batch_norm_backward.default,
         aten._native_batch_norm_legit_no_training.default), C,
        "BatchNorm's three forms reach ember as one node per layer and src/expand.c computes each "
        "from its formula; decomposed, they were twenty-odd traced ops each, which DenseNet121's 121 "
        "BatchNorms paid for on every first call in AOTAutograd's tracing and partitioning"),
    Row((aten.select_scatter.default,), C,
        "one ember expression (src/remap.c), not torch's arange == index mask and where"),
    Row((aten.threshold_backward.default, aten.sigmoid_backward.default, aten.tanh_backward.default,
         aten.gelu_backward.default), C,
        "activations' backwards are one ember op each, not torch's two to ten: fewer nodes to trace "
        "on every first call (a ReLU network traces one threshold_backward per ReLU)"),
    Row((aten.native_layer_norm.default, aten.native_layer_norm_backward.default), C,
        "LayerNorm (and its backward) as one node per layer, src/expand.c computing torch's "
        "decomposition op for op: decomposed, they were about ten and twenty traced ops per "
        "LayerNorm, and small_vit's training step spent 1.2 s more in AOTAutograd.  A graph with "
        "symbolic sizes keeps the decompositions (decompositions(symbolic=True)): the C core "
        "expands composites at static sizes only"),
    Row((aten.roll.default,), C,
        "a roll is index arithmetic, (i - shift) mod size, fused into its readers (src/remap.c); "
        "torch's decomposition gathers arange-built indices with index_select, which kept the "
        "kernels reading a shifted window's rows from vectorizing their loads"),
    # -- kept whole, run by torch
    Row((aten.scaled_dot_product_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default),
        TORCH_KERNEL,
        "torch's fused attention kernel (flash, memory-efficient): the math decomposition would "
        "materialize the [batch, heads, seq, seq] scores"),
    # -- torch's decompositions, beyond the core ones
    Row((aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data),
        TORCH, "into a max, exp and sum over the row: one ember kernel with staged reductions"),
    Row((aten.native_group_norm,), TORCH,
        "into mean and variance reductions and pointwise ops that fuse (group norm through var_mean, "
        "ember's own below)"),
    Row((aten._native_batch_norm_legit, aten.native_batch_norm, aten._batch_norm_with_update_functional,
         aten.batch_norm_backward), TORCH,
        "batch norm's other forms: into the three the C core takes whole (or their reductions)"),
    Row((aten.mse_loss, aten.mse_loss_backward, aten.nll_loss_forward, aten.nll_loss_backward), TORCH,
        "losses into pointwise ops, reductions and a gather, which ember lowers"),
    Row((aten.silu, aten.silu_backward, aten.hardswish, aten.hardsigmoid, aten.mish), TORCH,
        "activations (and silu's backward) into pointwise ops that fuse with their neighbours"),
    Row((aten.linalg_vector_norm, aten.dist), TORCH, "norms into abs, pow, sum and amax; dist into a norm"),
    Row((aten.view_copy, aten.permute_copy, aten.unbind_copy, aten.narrow_copy), TORCH,
        "the *_copy ops into a view + clone"),
    Row((aten.new_empty_strided,), TORCH, "into empty_strided, which ember makes itself"),
    Row((aten.ldexp,), TORCH, "into pow and mul"),
    Row((aten.true_divide.Tensor, aten.true_divide.Scalar), TORCH,
        "into div; src/ops.def lowers them too: under dynamic=True Dynamo's math on unspecialized floats "
        "(gpt2's sqrt(2 / pi)) reaches the backend as true_divide, past this table"),
    Row((aten.sgn.default, aten.frac.default, aten.isposinf.default, aten.isneginf.default,
         aten.isfinite.default, aten.alias_copy.default, aten.softplus.default, aten.threshold.default,
         aten.nan_to_num.default, aten.clamp_min.default, aten.clamp_max.default, aten.clamp_min.Tensor,
         aten.clamp_max.Tensor, aten.rsub.Scalar, aten.rsub.Tensor, aten.floor_divide.default,
         aten.lerp.Scalar, aten.lerp.Tensor, aten.addcmul.default, aten.addcdiv.default,
         aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.zeros.default, aten.ones.default,
         aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default, aten.arange.default,
         aten.arange.start, aten.sum.default, aten.all.default, aten.all.dim, aten.all.dims,
         aten._unsafe_view.default, aten._reshape_alias.default, aten.transpose.int, aten.t.default,
         aten.squeeze.default, aten.squeeze.dim, aten.detach.default, aten.split.Tensor,
         aten.unbind.int), TORCH,
        "core ATen decompositions into ops ember lowers, kept; src/ops.def lowers these ops too, for "
        "graphs that reach the C core without this table (C clients, graphs built by hand)"),
    # -- ember's own, in Python
    Row((aten.addmm.default,), EMBER,
        "mm through torch, then the bias add in an ember kernel, where it fuses with what follows "
        "(gelu(x @ w + b) becomes one kernel after the mm)", _addmm),
    Row((aten.convolution.default,), EMBER,
        "on the GPU, the convolution through torch without its bias, and the bias add in the ember "
        "kernel that reads the result (the BatchNorm, norm or activation after it): torch adds a "
        "cuDNN convolution's bias in a kernel of its own, one more pass over the output.  On the "
        "CPU a kernel-size-1 Conv1d (SqueezeBERT) is a batched matrix product over batch and "
        "groups: torch's grouped convolution ran oneDNN-less, a copy and a product per group, and "
        "concatenated the groups", _convolution),
    Row((aten.convolution_backward.default,), EMBER,
        "the CPU's kernel-size-1 Conv1d's gradients as matrix products of views (the forward's "
        "row): torch's grouped backward copied and concatenated per group", _convolution_backward),
    Row((aten.var_mean.correction,), EMBER,
        "at the aten level, so both reductions land in one ember kernel (torch's goes through prims); "
        "16-bit inputs computed in float32 and rounded once, as eager does", _var_mean),
    Row((aten.var.correction,), EMBER, "var_mean's variance: its reductions in one kernel", _var),
    Row((aten.std.correction,), EMBER, "var_mean's variance, square-rooted: one kernel", _std),
    Row((aten.max.dim,), EMBER, "values and indices as two reductions ember fuses into one kernel", _max_dim),
    Row((aten.min.dim,), EMBER, "amin and argmin, fused into one kernel as max.dim's", _min_dim),
    Row((aten._weight_norm_interface_backward.default,), EMBER,
        "weight_norm's backward as reductions over every dim but one and pointwise ops that fuse "
        "with the convolution's weight gradient; torch's kernel ran as a fallback in the speech "
        "models' (HuBERT, wav2vec2, WavLM) positional convolution", _weight_norm_interface_backward),
    Row((aten.repeat.default,), EMBER,
        "into expand + a contiguous clone, contiguous as aten.repeat's result is (torch's "
        "decomposition keeps a permuted input's layout, which a later view() rejects)", _repeat),
) + tuple(Row((op,), EMBER, "pooling windows as views of the padded input, summed or maxed by an ember "
              "reduction (pooling.py says when it declines and torch runs)", fn)
          for op, fn in pooling.decompositions().items())


def _build() -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions
    table = dict(core_aten_decompositions())
    for row in TABLE:
        if row.who == TORCH:
            table.update(get_decompositions(list(row.ops)))
    for row in TABLE:
        if row.who in (C, TORCH_KERNEL):
            for op in row.ops:
                table.pop(op, None)
        elif row.who == EMBER:
            for op in row.ops:
                table[op] = row.impl
    return table


_DECOMPS: Optional[dict] = None
_DECOMPS_SYMBOLIC: Optional[dict] = None

# the C rows whose composites src/expand.c expands at static sizes only: a graph with symbolic
# sizes takes torch's decomposition of them instead (BatchNorm's training forms stay whole there
# and run as torch's kernel, as they did before this table had them)
_STATIC_ONLY = (aten.native_layer_norm.default, aten.native_layer_norm_backward.default)


def decompositions(symbolic: bool = False) -> dict:
    """The decomposition table handed to AOTAutograd (built once each);
    symbolic: for a graph with symbolic sizes."""
    global _DECOMPS, _DECOMPS_SYMBOLIC
    if _DECOMPS is None:
        _DECOMPS = _build()
    if not symbolic:
        return _DECOMPS
    if _DECOMPS_SYMBOLIC is None:
        from torch._decomp import get_decompositions
        _DECOMPS_SYMBOLIC = {**_DECOMPS, **get_decompositions(list(_STATIC_ONLY))}
    return _DECOMPS_SYMBOLIC
