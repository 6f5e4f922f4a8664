"""Matrices whose leading dim is not a multiple of 16 bytes go to cuBLASLt
through padded copies (src/lower.c matmul_pad, run.c run_matmul): cuBLASLt's
fast kernels move 16 bytes at a time, and gpt2's LM head result ([2048,
50257] bf16) otherwise ran in an align1 kernel 7x slower than an aligned one.

The plan is checked without a GPU (CUDA generated through NVRTC only, the
EMBER_DEBUG dump names each padded matrix); the numbers against eager on
EMBER_TEST_DEVICE, with every misaligned matrix padded (the test option gemm_pad="all")
so that small shapes take the path (16-bit only): on the CPU torch runs the matmuls, on the
GPU machine the copies and calls run.
"""
from __future__ import annotations

import re

import pytest
import torch

from conftest import DEVICE, EAGER, check, cuda_plan_steps, have_nvrtc

needs_nvrtc = pytest.mark.skipif(EAGER or not have_nvrtc(),
                                 reason="needs ember and NVRTC (nvidia-cuda-nvrtc)")


def _lib_steps(fn, *args, tmp_path, monkeypatch):
    sections, _ = cuda_plan_steps(fn, *args, tmp_path=tmp_path, monkeypatch=monkeypatch)
    return [s for steps in sections for s in re.findall(r"(?:cuBLASLt matmul|cuBLAS sgemm)[^\n]*", steps)]


@needs_nvrtc
def test_large_misaligned_result_is_padded(tmp_path, monkeypatch):
    # [256, 4097] bf16 is 2 MB: computed over 4104 columns, so the [4097,
    # 768] weight (read transposed, rows aligned) is copied with 4104 rows
    def fn(x, w):
        return torch.nn.functional.linear(x, w).float()
    steps = _lib_steps(fn, torch.randn(256, 768).bfloat16(), torch.randn(4097, 768).bfloat16(),
                       tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert len(steps) == 1 and steps[0].endswith(
        "; B through a copy padded to ld 768; result through a copy padded to ld 4104, 4104 columns computed"), steps


@needs_nvrtc
def test_batch_of_small_matrices_is_not_padded(tmp_path, monkeypatch):
    # window attention: 512 products of 49 x 49 bf16 (2.4 MB in all, 4.8 KB each) run on the
    # library's align-1 kernels; padding copied every batch with odd pitches (DIAGNOSIS.md, cause B)
    def fn(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    args = [torch.randn(512, 49, 32).bfloat16() for _ in range(3)]
    steps = _lib_steps(fn, *args, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert len(steps) == 2 and not any("padded" in s for s in steps), steps


@needs_nvrtc
def test_small_float32_or_aligned_matrices_are_not_padded(tmp_path, monkeypatch, ember_options):
    def fn(a, b, c, d):
        return a @ b, c @ c, d @ d[:16, :17]
    args = (torch.randn(8, 16).bfloat16(), torch.randn(16, 33).bfloat16(), torch.randn(64, 64).bfloat16(),
            torch.randn(300, 16))
    steps = _lib_steps(fn, *args, tmp_path=tmp_path / "default", monkeypatch=monkeypatch)
    assert len(steps) == 3 and not any("padded" in s for s in steps), steps
    ember_options(gemm_pad="all")
    steps = _lib_steps(fn, *args, tmp_path=tmp_path / "all", monkeypatch=monkeypatch)
    # every misaligned 16-bit matrix, whatever its size; float32 never
    assert sum("B through a copy padded to ld 40; result through a copy padded to ld 40, 40 columns computed" in s
               for s in steps) == 1, steps
    assert sum("padded" not in s for s in steps) == 2, steps


def gen(shape, dtype):
    return torch.randn(shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_padded_matmuls_match_eager(dtype, ember_options):
    ember_options(gemm_pad="all")

    def fn(a, b, c, d, w, bias):
        return {
            "mm_odd_n": (a @ b) * 2,                     # result and B rows misaligned
            "mm_odd_k": a[:, :13] @ b[:13, :8],          # A and B read through views
            "mm_t_a": a.t().contiguous().t() @ b,        # A stored transposed, ld 9
            "mm_t_b": a @ c.t(),                         # B stored transposed
            "bmm": torch.bmm(d, d.transpose(1, 2) + 0),  # batches one after another
            "bmm_broadcast": torch.matmul(d, b[:, :5]),  # one matrix for every batch
            "linear": torch.nn.functional.linear(a, w, bias),
            "linear_t": torch.nn.functional.linear(a, w),          # B stored transposed, 13 -> 16 rows
            "bmm_t": torch.bmm(d, d[:, :3].transpose(1, 2)),       # ... per batch
        }
    tol = dict(atol=5e-2, rtol=2e-2)
    check(fn, lambda: (gen((9, 15), dtype), gen((15, 11), dtype), gen((7, 15), dtype), gen((3, 5, 15), dtype),
                       gen((13, 15), dtype), gen((13,), dtype)), **tol)
