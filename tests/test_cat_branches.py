"""Cats of many inputs (more than codegen.c's CAT_BRANCHES = 4): on the CPU
each element reads only its own input, through an if / else-if chain over
the cat dim's index (densenet's concatenations of up to 32 feature maps).
Against eager: every input's range, the first and last elements of each,
empty inputs among them, mixed dtypes, a cat along a middle and the last
dim, and a fused consumer (BatchNorm-like scale and shift + ReLU)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import check


@pytest.mark.parametrize("dim", [0, 1, 3])
def test_many_inputs_with_an_empty_one(dim):
    def f(*xs):
        return torch.cat(xs, dim) * 2 + 1

    def inputs():
        xs = []
        for i in range(7):
            shape = [2, 3, 4, 5]
            shape[dim] = 0 if i == 3 else 1 + i % 3
            xs.append(torch.randn(shape))
        return tuple(xs)
    check(f, inputs)


def test_dense_block_like():
    def f(w, b, *xs):
        y = torch.cat(xs, 1)
        return F.relu(y * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1))

    def inputs():
        xs = [torch.randn(2, 8, 6, 6)] + [torch.randn(2, 4, 6, 6) for _ in range(9)]
        c = sum(x.shape[1] for x in xs)
        return (torch.randn(c), torch.randn(c), *xs)
    check(f, inputs)


def test_mixed_dtypes_promote():
    def f(*xs):
        return torch.cat(xs, 1).sum(0)

    def inputs():
        return tuple(torch.randn(3, 2 + i).to(torch.float64 if i == 2 else torch.float32) for i in range(6))
    check(f, inputs)
