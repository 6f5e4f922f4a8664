"""Average pooling through ember (ember/pooling.py: sums over unfolded,
zero-padded windows): avg_pool2d and its backward for every combination of
kernel, stride, padding, ceil_mode, count_include_pad and divisor_override,
batched and unbatched inputs, channels_last and transposed layouts, float and
int64 dtypes; adaptive_avg_pool2d where it is average pooling (sizes that
divide), and where it is not (torch runs it; results still equal eager's).
Results are compared with eager; training compares input gradients."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import EAGER, check, compile_fn, ember_stats

CONFIGS = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None), (3, 2, 1, False, True, None), (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None), ((2, 3), (1, 2), (1, 1), False, False, None), (3, 3, 1, True, True, 5),
    ((3, 1), (2, 1), (1, 0), True, False, None), (4, 3, 2, True, True, None), (1, 1, 0, False, True, None),
]


def _pool(cfg):
    k, s, p, cm, cip, div = cfg
    return lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=cm, count_include_pad=cip, divisor_override=div)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_avg_pool2d_configs(cfg):
    _, st = check(_pool(cfg), lambda: (torch.randn(2, 3, 11, 8),))
    if not EAGER:
        assert not st["fallbacks"], st


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int64])
def test_avg_pool2d_dtypes_and_unbatched(dtype):
    def make():
        x = torch.randn(3, 9, 10) * 20
        return (x.to(dtype),)
    check(lambda x: (_pool(CONFIGS[2])(x), _pool(CONFIGS[3])(x), _pool(CONFIGS[5])(x)), make)


def test_avg_pool2d_layouts_and_fusion():
    # channels_last and a transposed input; the relu before and the scaling after fuse
    def f(x, y):
        return F.avg_pool2d(torch.relu(x), 3, 2, 1) * 2, F.avg_pool2d(y.transpose(-1, -2), 2)
    _, st = check(f, lambda: (torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last),
                              torch.randn(2, 3, 8, 6)))
    if not EAGER:
        assert st["kernels"] == 2 and not st["fallbacks"], st


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_avg_pool2d_training(cfg):
    x = torch.randn(2, 3, 11, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: (_pool(cfg)(x.sin()) ** 2).sum()
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)
    if not EAGER:
        assert not ember_stats()["fallbacks"], ember_stats()


def test_adaptive_avg_pool2d():
    def f(x):
        return F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (4, 3)), F.adaptive_avg_pool2d(x[0], (2, 6))
    _, st = check(f, lambda: (torch.randn(2, 5, 8, 12),))
    if not EAGER:
        assert not st["fallbacks"], st


def test_adaptive_avg_pool2d_training_and_uneven_sizes():
    x = torch.randn(2, 3, 8, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: (F.adaptive_avg_pool2d(x * 3, (2, 3)).exp().sum() + F.adaptive_avg_pool2d(x, (3, 4)).sum())
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)
