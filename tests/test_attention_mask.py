"""Attention masks that torch's fused attention kernels refuse (a last dim
that is not contiguous: Hugging Face's all-True mask under torch.compile,
broadcast from the query dim) are made contiguous in Dynamo's graph before
AOTAutograd picks the kernel (ember/backend.py, _fused_attention_masks).  On a
GPU the traced graph then holds a fused attention op, not the math
decomposition (tests/test_gpu_cuda.py); here the rewrite itself, on CPU
graphs, with eager's answers."""
import pytest
import torch
import torch.nn.functional as F

from ember import backend as eb


def _strided(q, k, keep):
    # [batch, 1, q, k] from a [q] bool: strides (0, q, 1, 0), as Hugging Face's
    return keep[None, None, :, None].expand(q.shape[0], 1, q.shape[2], k.shape[2])


def attn_strided(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_strided(q, k, keep))


def attn_positional(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, _strided(q, k, keep), 0.0, False)


def attn_dense(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_strided(q, k, keep).contiguous())


def attn_none(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v) * keep[:, None].to(q.dtype)


def _rewritten(fn, *args):
    seen = []

    def capture(gm, example_inputs):
        seen.append((eb._fused_attention_masks(gm, devices=("cpu",)), gm.code))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=capture, fullgraph=True)(*args)
    assert len(seen) == 1
    return out, seen[0][0], seen[0][1]


@pytest.mark.parametrize("fn, made", [(attn_strided, 1), (attn_positional, 1), (attn_dense, 0), (attn_none, 0)])
def test_mask_made_contiguous(fn, made):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g) for _ in range(3))
    keep = torch.rand(16, generator=g) > 0.3
    keep[0] = True  # no query row with every key masked (eager gives NaN there)
    out, n, code = _rewritten(fn, q, k, v, keep)
    assert n == made
    assert ("contiguous" in code) == (made > 0 or fn is attn_dense)
    torch.testing.assert_close(out, fn(q, k, v, keep))


def test_cuda_masks_only_by_default():
    # a CPU graph is left as it is: the CPU's fused kernel takes strided masks
    q = torch.randn(2, 3, 16, 8)
    keep = torch.ones(16, dtype=torch.bool)
    seen = []

    def capture(gm, example_inputs):
        seen.append(eb._fused_attention_masks(gm))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(attn_strided, backend=capture, fullgraph=True)(q, q, q, keep)
    assert seen == [0]
