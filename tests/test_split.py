"""Two-stage reductions (src/split.c): a reduction with few results and long
rows is computed as partials over a split of one reduced dim, then the
partials reduced.  On CUDA ember splits by a cost model; the test option
split_reductions="all" splits every reduction it can, on any device, which is
how these tests check the rewrite's results against eager on the CPU (and on
the GPU under EMBER_TEST_DEVICE=cuda); "off" splits none."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check, ember_stats

pytestmark = pytest.mark.skipif(EAGER, reason="the split is ember's")


@pytest.fixture
def split_all(ember_options):
    ember_options(split_reductions="all")


def _kernels(fn, make, **kw):
    check(fn, make, **kw)
    return ember_stats()["kernels"]


def test_split_reductions_match_eager(ember_options):
    def fn(x):
        return (x.sum(), x.sum(1), x.mean((0, 2), keepdim=True), x.amax(-1), x.amin(0), x.prod(1),
                x.sum(-1, keepdim=True), (x > 0).any(1), (x > -3).all())
    make = lambda: (torch.randn(6, 10, 12),)
    ember_options(split_reductions="off")
    one = _kernels(fn, make)
    ember_options(split_reductions="all")
    two = _kernels(fn, make)
    # every reduction becomes a partial and a final one (finals of one
    # shape may share a kernel)
    assert two >= one + 5, (one, two)


def test_split_off_by_default_on_cpu():
    if DEVICE != "cpu":
        pytest.skip("the default splits on CUDA")
    assert _kernels(lambda x: x.sum(), lambda: (torch.randn(1 << 16),)) == 1


def test_split_can_be_turned_off(ember_options):
    ember_options(split_reductions="off")
    assert _kernels(lambda x: x.sum(), lambda: (torch.randn(1 << 16),)) == 1


def test_split_nan_and_inf_propagate(split_all):
    def make():
        x = torch.randn(8, 16)
        x[2, 3] = float("nan")
        x[5, 7] = float("inf")
        x[6, :] = float("-inf")
        return (x,)
    check(lambda x: (x.amax(1), x.amin(0), x.sum(0), x.amax(), x.sum()), make)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.int64])
def test_split_dtypes(split_all, dtype):
    def make():
        if dtype.is_floating_point:
            return (torch.randn(16, 64).to(dtype),)
        return (torch.randint(-4, 5, (16, 64), dtype=dtype),)
    check(lambda x: (x.sum(0), x.sum(), x.amax(1), x.sum(1, dtype=torch.float32) if dtype.is_floating_point
                     else x.prod(0)), make)


def test_split_half_partials_stay_float(split_all):
    # the split of 4 elements is 2 partials of 2; rounded to bfloat16 they
    # would sum to -1.40625, eager's (float) sum rounds to -1.421875
    x = torch.tensor([6.15625, -1.171875, -8.6875, 2.28125], dtype=torch.bfloat16)
    got, _ = check(lambda x: x.sum(), (x,), exact=True)
    assert got.item() == -1.421875


def test_split_pointwise_around_it(split_all):
    # an inlined producer read through the split view, and a pointwise
    # consumer at the reduced shape joining the final reduction
    def fn(x, y):
        s = (x * y + 1).sum(0)
        return torch.sqrt(s.abs()) + 1, F.softmax(x, -1), F.layer_norm(x, (x.shape[-1],))
    check(fn, lambda: (torch.randn(32, 24), torch.randn(32, 24)))


def test_split_views_and_strides(split_all):
    # a transposed input: the split dim is not the contiguous one
    check(lambda x: (x.t().sum(1), x.t().amax(0), x[:, ::2].sum(0)), lambda: (torch.randn(12, 20),))


def test_split_training_step(split_all):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                            torch.nn.Linear(32, 4)).to(DEVICE)

    def step(x):
        out = m(x)
        loss = out.square().mean()
        loss.backward()
        return loss

    check(step, lambda: (torch.randn(64, 16),), strict=False)


def _split_views(tmp_path):
    """The graph.txt of every graph the test's compile dumped (the debug option), joined."""
    import glob
    return "".join(open(p).read() for p in sorted(glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt"))))


def test_split_follows_channels_last(ember_options, tmp_path):
    # split.c runs after layout.c and reads the strides values are stored with.  A mean over H and W
    # of NHWC data is a column reduction: H (the reduced dim outermost in memory) is split, its S
    # placed before C so that the partials are columns too.  GroupNorm(1, C)'s statistics over a
    # [N, 1, C, H*W] view of NHWC data split H*W, not C (each partial a contiguous slab), for the
    # mean and for the squared deviations, a row-major value computed from the view
    ember_options(split_reductions="all", debug=True, debug_dir=str(tmp_path))
    gn = torch.nn.GroupNorm(1, 16).to(DEVICE)

    def fn(x):
        return x.mean((2, 3), keepdim=True), x.amax((2, 3)), gn(x)
    check(fn, lambda: (torch.randn(4, 16, 6, 10).contiguous(memory_format=torch.channels_last),))
    if DEVICE != "cpu":
        return  # torch's CUDA group norm reads an NCHW copy: results checked, not the views
    graph = _split_views(tmp_path)
    assert graph.count("[4, 2, 16, 3, 10] strides (960, 480, 1, 160, 16) +0  view of") == 2, graph
    assert len(re.findall(r"\[4, 1, 16, 2, 30\] strides \(960, \d+, 1, 480, 16\) \+0  view of", graph)) == 2, graph
