"""Eager's semantics at the edges, through fused kernels: NaN and Inf
propagate as in eager, integers wrap, division by zero behaves as eager's
(floats give inf/NaN, integers raise), and a function that mutates its inputs
in place, returns views of its inputs, or returns one tensor twice gives what
eager gives, aliasing included.  AOTAutograd tells the backend about the
mutations and aliases; these tests check that ember's graphs respect them."""
from __future__ import annotations

from typing import Tuple

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, assert_same, check, compile_fn


# ------------------------------------------------------------ NaN and Inf
def _with_specials(shape, dtype=torch.float32):
    x = torch.randn(shape, dtype=dtype)
    flat = x.view(-1)
    flat[::7] = float("nan")
    flat[3::11] = float("inf")
    flat[5::13] = float("-inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nan_inf_through_fused_pointwise_and_reductions(dtype):
    def fn(x, y):
        h = torch.relu(x) * 2 + torch.tanh(y) - torch.exp(-x.abs())
        return h, h.sum(-1), h.amax(-1), h.amin(0), F.softmax(h, -1), h.mean(0), h.argmax(-1)

    check(fn, lambda: (_with_specials((6, 17), dtype), _with_specials((6, 17), dtype)))


def test_nan_in_max_min_and_clamp():
    def fn(x, y):
        return torch.maximum(x, y), torch.minimum(x, y), torch.fmax(x, y), x.clamp(-1, 1), torch.clamp(x, min=y)

    check(fn, lambda: (_with_specials((5, 9)), _with_specials((5, 9))))


# ---------------------------------------------------------- integer overflow
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_overflow_wraps_like_eager(dtype):
    info = torch.iinfo(dtype)

    def fn(a, b):
        return a + b, a * b, a - b, (a * 3).sum(0, dtype=dtype), -a

    def make():
        a = torch.randint(info.min, info.max, (4, 6), dtype=dtype)
        a[0, 0], a[1, 1] = info.max, info.min
        b = torch.randint(info.min, info.max, (4, 6), dtype=dtype)
        b[0, 0], b[1, 1] = 1, -1 if info.min < 0 else 1
        return a, b

    check(fn, make, exact=True)


# ---------------------------------------------------------- division by zero
def test_float_division_by_zero_like_eager():
    def fn(a, b):
        return a / b, torch.remainder(a, b), torch.fmod(a, b), torch.div(a, b, rounding_mode="floor"), \
            torch.div(a, b, rounding_mode="trunc")

    def make():
        a = torch.tensor([1.0, -1.0, 0.0, float("nan"), 2.5, -0.0])
        b = torch.tensor([0.0, 0.0, 0.0, 0.0, -0.0, 0.0])
        return a, b

    check(fn, make)


def test_integer_division_by_zero_raises_and_recovers():
    def fn(a, b):
        return (a + 1) // b

    cf = compile_fn(fn, dynamic=False)
    a, zero, ok = torch.tensor([4, -7, 9]), torch.tensor([2, 0, 3]), torch.tensor([2, -3, 3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, zero)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cf(a, zero)
    assert_same(cf(a, ok), fn(a, ok), exact=True)


# ------------------------------------------------------ mutation of inputs
def test_inputs_mutated_in_place():
    """Eager mutates the caller's tensors; so must the compiled function (the
    mutation comes back from AOTAutograd as a copy_ into the input)."""
    def fn(x, y):
        x.add_(1)
        y.mul_(x.sum())
        return x * 2

    def run(f):
        torch.manual_seed(1)
        x, y = torch.randn(4, 5), torch.randn(5)
        out = f(x, y)
        return out, x, y

    cf = compile_fn(fn, dynamic=False)
    for _ in range(2):
        assert_same(run(cf), run(fn))


def test_input_mutated_through_a_view():
    def fn(x):
        x[1:].relu_()
        x[:, 0].zero_()
        return x.sum(1)

    def run(f):
        torch.manual_seed(2)
        x = torch.randn(4, 6)
        return f(x), x

    cf = compile_fn(fn, dynamic=False)
    assert_same(run(cf), run(fn))


def test_buffer_mutated_by_module():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.total += x.sum(0)
            return x * self.total

    m_ref, m = Counter(), Counter()
    cm = compile_fn(m, dynamic=False)
    for i in range(3):
        x = torch.randn(5, 3)
        assert_same(cm(x), m_ref(x), msg=f"step {i}")
        assert_same(m.total, m_ref.total, msg=f"buffer after step {i}")


def _mutation_fallbacks():
    if EAGER:
        return {}
    from conftest import get_ember
    return {k: v for k, v in get_ember().stats()["fallbacks"].items() if "copy_" in k}


def test_input_mutations_stored_in_place_by_kernels():
    """A mutation AOTAutograd keeps in the graph (a copy_ into the input, as
    BatchNorm's running statistics) is a kernel's store into the input's
    memory, fused with what computes the new value: no torch copy_."""
    from conftest import reset

    def fn(x, mean, count):
        mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
        count.add_(1)
        return x * 2

    reset()
    cf = compile_fn(fn, dynamic=False)
    for i in range(3):
        torch.manual_seed(i)
        x = torch.randn(6, 5)
        m1 = torch.randn(5)
        m2 = m1.clone()
        c1, c2 = torch.tensor(3), torch.tensor(3)
        assert_same(cf(x, m1, c1), fn(x, m2, c2), msg=f"call {i}")
        assert_same((m1, c1), (m2, c2), msg=f"inputs after call {i}")
    assert _mutation_fallbacks() == {}


def test_input_mutation_reading_itself_elsewhere():
    """The new value reads the input at other elements (its transpose): it is
    computed into memory of its own first, then stored, as eager's copy."""
    def fn(a, b):
        a.copy_(a.t() * 2 + b)
        return a.sum(1)

    def run(f):
        torch.manual_seed(3)
        a, b = torch.randn(5, 5), torch.randn(5)
        return f(a, b), a

    cf = compile_fn(fn, dynamic=False)
    assert_same(run(cf), run(fn))


def test_inputs_copied_into_each_other():
    """One input copied from another that is then mutated: torch's copy_ (a
    reported fallback), in the graph's order."""
    def fn(a, b):
        a.copy_(b)
        b.add_(1)
        return a + b

    def run(f):
        torch.manual_seed(4)
        a, b = torch.randn(3, 4), torch.randn(3, 4)
        return f(a, b), a, b

    cf = compile_fn(fn, dynamic=False)
    for _ in range(2):
        assert_same(run(cf), run(fn))


def test_input_mutated_under_reduce_overhead():
    """mode="reduce-overhead": an input that is new at every call and mutated
    in place (copied into the CUDA graph's buffer on a GPU) is updated in the
    caller's tensor, call after call."""
    def fn(x, acc):
        acc.add_(x.square())
        return acc * 2

    cf = compile_fn(fn, mode="reduce-overhead", dynamic=False)
    for i in range(4):
        torch.manual_seed(10 + i)
        x, acc = torch.randn(8, device=DEVICE), torch.randn(8, device=DEVICE)
        acc2 = acc.clone()
        assert_same(cf(x, acc), fn(x, acc2), msg=f"call {i}")
        assert_same(acc, acc2, msg=f"input after call {i}")


# ------------------------------------------------------------------ aliases
def test_returns_views_of_inputs_that_alias():
    """Returned views share storage with the inputs, as in eager: writing
    through one is seen by the other."""
    def fn(x):
        return x.view(-1), x.t(), x[1], x.sin()

    cf = compile_fn(fn, dynamic=False)
    x = torch.randn(3, 4)
    got, exp = cf(x), fn(x)
    assert_same(got, exp)
    for i in range(3):
        assert got[i].data_ptr() == exp[i].data_ptr(), f"output {i} does not alias the input"
    got[0][0] = 123.0
    assert x[0, 0].item() == 123.0


def test_returns_one_tensor_twice():
    def fn(x):
        y = torch.relu(x) + 1
        return y, y, x

    cf = compile_fn(fn, dynamic=False)
    x = torch.randn(4, 4)
    a, b, c = cf(x)
    assert_same((a, b, c), fn(x))
    if not EAGER:
        # one tensor, as in eager: a write through one result shows in the other
        a[0, 0] = -5.0
        assert b[0, 0].item() == -5.0
    assert c.data_ptr() == x.data_ptr()


def test_returns_intermediate_and_its_view():
    def fn(x):
        y = x * 3
        return y, y[:, 1:], y.transpose(0, 1)

    cf = compile_fn(fn, dynamic=False)
    x = torch.randn(5, 6)
    got = cf(x)
    assert_same(got, fn(x))
    got[0][0, 1] = 7.0
    assert got[1][0, 0].item() == 7.0 and got[2][1, 0].item() == 7.0


def test_outputs_are_not_overwritten_by_later_calls():
    def fn(x):
        return (x * 2).relu() + 1

    cf = compile_fn(fn, dynamic=False)
    x1, x2 = torch.randn(8, 8), torch.randn(8, 8)
    out1 = cf(x1)
    keep = out1.clone()
    cf(x2)
    assert_same(out1, keep)


# --------------------------------------------- large outputs (block cache)
@pytest.mark.ember_only
def test_large_outputs_from_the_block_cache_behave_as_tensors():
    """CPU outputs of 2 MiB and more come from ember's cache of large blocks
    (src/hostmem.c).  They are ordinary tensors: kept ones are never written
    by later calls, a dead one's block serves the next call, strides are the
    graph's, and they work with numpy, autograd and in-place ops."""
    import ember._ext as ext

    def fn(x, y):
        return torch.relu(x) * y + 1, (x * 2).t(), x.sum(1)

    cf = compile_fn(fn, dynamic=False)
    x, y = torch.randn(1024, 768), torch.randn(1024, 768)
    exp = fn(x, y)
    a, at, s = cf(x, y)
    assert_same((a, at, s), exp)
    assert at.stride() == exp[1].stride() and a.is_contiguous()
    keep = a.clone()
    b = cf(torch.randn(1024, 768), y)[0]   # a is alive: b has a block of its own
    assert b.data_ptr() != a.data_ptr()
    assert_same(a, keep)
    dead = {a.data_ptr(), at.data_ptr()}    # blocks of one rounded size (4 MiB)
    del a, at, keep
    assert ext.host_cache() >= 8 << 20
    c = cf(x, y)[0]                         # a dead block, reused and fully rewritten
    assert_same(c, exp[0])
    assert c.data_ptr() in dead
    c.add_(1)
    assert_same(c, exp[0] + 1)
    assert c.numpy().shape == (1024, 768)
    w = c.clone().requires_grad_(True)
    (w * 2).sum().backward()
    assert_same(w.grad, torch.full_like(w, 2.0))


@pytest.mark.ember_only
def test_block_cache_limit_releases_memory():
    import ember._ext as ext
    cf = compile_fn(lambda x: x * 2, dynamic=False)
    for n in (600, 700, 800):
        cf(torch.randn(n, 1024))
    assert ext.host_cache() > 0
    ember = pytest.importorskip("ember")
    ember.reset()
    assert ext.host_cache() == 0
    cf = compile_fn(lambda x: x * 2, dynamic=False)
    cf(torch.randn(600, 1024))
    assert ext.host_cache() > 0            # the limit is back after the release


# A fallback that returns numbers beside tensors (as cudnn attention returns its
# max sequence lengths): the numbers are kept at run time for later fallbacks
# and outputs instead of the whole graph running through torch.
@torch.library.custom_op("embertest::scaled_and_count", mutates_args=())
def _scaled_and_count(x: torch.Tensor) -> Tuple[torch.Tensor, int]:
    return x * 2, x.dim() + 5


@_scaled_and_count.register_fake
def _(x):
    return torch.empty_like(x), x.dim() + 5


@torch.library.custom_op("embertest::repeat_n", mutates_args=())
def _repeat_n(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.repeat(n)


@_repeat_n.register_fake
def _(x, n):
    return x.new_empty(x.shape[0] * n)


def test_fallback_returning_numbers():
    def f(x):
        y, n = torch.ops.embertest.scaled_and_count(x)
        return torch.ops.embertest.repeat_n(y.sin() + 1, n) * 3, n

    _, st = check(f, lambda: (torch.randn(5),), exact=True)
    if not EAGER:
        assert st["whole_graph_fallbacks"] == 0 and st["kernels"] >= 1, st
