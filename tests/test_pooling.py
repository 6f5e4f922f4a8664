"""Pooling through ember (ember/pooling.py: reductions over unfolded, padded
windows): avg_pool2d and its backward for every combination of kernel,
stride, padding, ceil_mode, count_include_pad and divisor_override, batched
and unbatched inputs, channels_last and transposed layouts, float and int64
dtypes; adaptive_avg_pool2d where it is average pooling (sizes that divide),
and where it is not (torch runs it; results still equal eager's);
max_pool2d with indices (dilation, ties, NaN, windows of -inf, int64) and its
backward.  Results are compared with eager; training compares input
gradients.  Backward passes are ember's where the windows tile the input
(kernel = stride, no padding): overlapping windows go to torch's kernels,
which scatter faster than ember's sum over covering windows did."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check, compile_fn, ember_stats

# On a GPU the pooling decompositions stand aside (ember/pooling.py): torch's
# kernels run, so only results are compared there.
ON_CPU = DEVICE == "cpu"


def pcheck(*args, **kw):
    return check(*args, strict=ON_CPU, **kw)

CONFIGS = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None), (3, 2, 1, False, True, None), (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None), ((2, 3), (1, 2), (1, 1), False, False, None), (3, 3, 1, True, True, 5),
    ((3, 1), (2, 1), (1, 0), True, False, None), (4, 3, 2, True, True, None), (1, 1, 0, False, True, None),
]


def _tiles(k, s, p, d=1):
    """Windows that tile the input (its backward is ember's), for ceil_mode False."""
    return (s is None or s == k) and p == 0 and d == 1


def _backward_fallbacks(tiled, op):
    """The fallbacks a pooling training graph may have: none, or the backward op."""
    return {} if tiled else {op: 1}


def _pool(cfg):
    k, s, p, cm, cip, div = cfg
    return lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=cm, count_include_pad=cip, divisor_override=div)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_avg_pool2d_configs(cfg):
    _, st = pcheck(_pool(cfg), lambda: (torch.randn(2, 3, 11, 8),))
    if not EAGER and ON_CPU:
        assert not st["fallbacks"], st


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int64])
def test_avg_pool2d_dtypes_and_unbatched(dtype):
    if dtype == torch.int64 and not ON_CPU:
        pytest.skip("eager has no int64 pooling on CUDA")
    def make():
        x = torch.randn(3, 9, 10) * 20
        return (x.to(dtype),)
    pcheck(lambda x: (_pool(CONFIGS[2])(x), _pool(CONFIGS[3])(x), _pool(CONFIGS[5])(x)), make)


def test_avg_pool2d_layouts_and_fusion():
    # channels_last and a transposed input; the relu before and the scaling after fuse
    def f(x, y):
        return F.avg_pool2d(torch.relu(x), 3, 2, 1) * 2, F.avg_pool2d(y.transpose(-1, -2), 2)
    _, st = pcheck(f, lambda: (torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last),
                              torch.randn(2, 3, 8, 6)))
    if not EAGER and ON_CPU:
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
    if not EAGER and ON_CPU:
        k, s, p, cm, _, _ = cfg
        want = _backward_fallbacks(_tiles(k, s, p) and not cm, "aten.avg_pool2d_backward.default")
        assert ember_stats()["fallbacks"] == want, ember_stats()


def test_adaptive_avg_pool2d():
    def f(x):
        return F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (4, 3)), F.adaptive_avg_pool2d(x[0], (2, 6))
    _, st = pcheck(f, lambda: (torch.randn(2, 5, 8, 12),))
    if not EAGER and ON_CPU:
        assert not st["fallbacks"], st


def test_adaptive_avg_pool2d_training_and_uneven_sizes():
    x = torch.randn(2, 3, 8, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: (F.adaptive_avg_pool2d(x * 3, (2, 3)).exp().sum() + F.adaptive_avg_pool2d(x, (3, 4)).sum())
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)


MAX_CONFIGS = [  # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True), ((2, 3), (1, 2), (1, 1), 1, True),
    (3, 1, 1, 2, False), ((3, 2), 2, (1, 0), (2, 3), True), (1, 1, 0, 1, False), (4, 3, 2, 1, True),
]


def _max_pool(cfg):
    k, s, p, d, cm = cfg
    return lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=cm, return_indices=True)


def _special(shape, dtype=torch.float32):
    """Random values with ties, NaNs, and windows of -inf."""
    x = torch.randint(-3, 4, shape).to(torch.float64)
    x[..., 0, :] = -float("inf")
    x[..., 1, 1::3] = float("nan")
    x[..., 3, ::2] = float("nan")
    x[..., -2:, :3] = -float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("cfg", MAX_CONFIGS, ids=str)
def test_max_pool2d_with_indices_configs(cfg):
    _, st = pcheck(_max_pool(cfg), lambda: (torch.randn(2, 3, 11, 8),), exact=True)
    if not EAGER and ON_CPU:
        assert not st["fallbacks"], st


@pytest.mark.parametrize("cfg", MAX_CONFIGS[:6], ids=str)
def test_max_pool2d_ties_nan_and_lowest(cfg):
    pcheck(_max_pool(cfg), lambda: (_special((2, 11, 9)),), exact=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int64])
def test_max_pool2d_dtypes(dtype):
    if dtype == torch.int64 and not ON_CPU:
        pytest.skip("eager has no int64 pooling on CUDA")
    def make():
        if dtype == torch.int64:
            x = torch.randint(-5, 5, (2, 3, 9, 10))
            x[..., :2, :] = torch.iinfo(torch.int64).min  # windows holding only the lowest value
            return (x,)
        return (_special((2, 3, 9, 10), dtype),)
    pcheck(lambda x: (_max_pool(MAX_CONFIGS[2])(x), _max_pool(MAX_CONFIGS[5])(x)), make, exact=True)


def test_max_pool2d_layouts_and_fusion():
    def f(x, y):
        return F.max_pool2d(torch.relu(x) * 2, 3, 2, 1), F.max_pool2d(y.transpose(-1, -2), 2)
    _, st = pcheck(f, lambda: (torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last),
                              torch.randn(2, 3, 8, 6)), exact=True)
    if not EAGER and ON_CPU:
        assert st["kernels"] == 2 and not st["fallbacks"], st


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_pool_results_keep_eager_memory_format(dynamic):
    # eager's pools return channels_last for a channels_last input: so do ember's (graph outputs
    # whose layout the caller sees), the max pool's indices too; an NCHW input stays NCHW
    def f(x, y):
        m, i = F.max_pool2d(torch.relu(x), 3, 2, 1, return_indices=True)
        return m, i, F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 3), F.max_pool2d(y, 2)
    x = torch.randn(2, 8, 9, 9, device=DEVICE).to(memory_format=torch.channels_last)
    y = torch.randn(2, 8, 9, 9, device=DEVICE)
    fn = compile_fn(f, dynamic=dynamic)
    if dynamic:
        fn(torch.randn(3, 8, 7, 7, device=DEVICE).to(memory_format=torch.channels_last), torch.randn(3, 8, 7, 7, device=DEVICE))
    for g, e in zip(fn(x, y), f(x, y)):
        assert g.shape == e.shape and g.stride() == e.stride(), (g.stride(), e.stride())
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("cfg", MAX_CONFIGS, ids=str)
def test_max_pool2d_training(cfg):
    # integer-valued inputs: overlapping windows pick the same maxima, ties pick the first
    x = torch.randint(-4, 5, (2, 3, 11, 8)).float().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    k, s, p, d, cm = cfg
    fn = lambda x: (F.max_pool2d(x * 1.5, k, s, p, d, ceil_mode=cm).sin() ** 2).sum()
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)
    if not EAGER and ON_CPU:
        want = _backward_fallbacks(_tiles(k, s, p, d) and not cm, "aten.max_pool2d_with_indices_backward.default")
        assert ember_stats()["fallbacks"] == want, ember_stats()


# Symbolic image sizes cost 4 to 11 s a config: CI runs padding with and without the padded
# elements counted, outside ceil_mode (a rectangular window among them) and in it; the other
# configs (windows that tile, 1x1, a divisor_override, ...) with --runslow
SYMBOLIC_CI = [(3, 2, 1, False, True, None), ((2, 3), (1, 2), (1, 1), False, False, None),
               (3, 2, 1, True, False, None)]


@pytest.mark.skipif(EAGER or not ON_CPU, reason="ember's CPU decompositions")
@pytest.mark.parametrize("cfg", [pytest.param(c, id=str(c), marks=() if c in SYMBOLIC_CI else pytest.mark.slow)
                                 for c in CONFIGS])
def test_pools_over_symbolic_image_sizes(cfg):
    # dynamic=True: one graph for odd and even image sizes; outside ceil_mode the right padding is
    # the left one (constant pads ember lowers), and the divisor of windows that differ is
    # computed per call, never by counting windows in Python (which specialized their number); the
    # windows of a pool over a pool's result are views ember proves inside their input
    import ember
    k, s, p, ceil, cip, div = cfg

    def f(x):
        a = F.avg_pool2d(x, k, s, p, ceil, cip, div)
        # a pool of a pool: its windows over sizes that are divisions (lower.c, inside_by_op)
        return a, F.max_pool2d(x, k, s, p, ceil_mode=ceil), F.max_pool2d(a, 3, 2, 1)

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(f, dynamic=True)
    for n, h, w in [(2, 9, 8), (3, 12, 11), (4, 16, 16), (2, 7, 10)]:
        x = torch.randn(n, 3, h, w)
        got, want = cf(x), f(x)
        torch.testing.assert_close(got, want, msg=lambda m: f"{n}x{h}x{w}: {m}")
    st = ember.stats()
    assert st["compiles"] == st["symbolic_compiles"] <= 2, st
    if not ceil:
        assert not st["fallbacks"], st["fallbacks"]
