"""A matmul's bias add, and a relu or tanh GELU after it, done by the cuBLASLt
call itself (its epilogue: lower.c's fold_epilogues, blas.c).

Two halves.  The plans are checked without a GPU: each graph is generated
as CUDA (ember.backend.cuda_codegen_check, NVRTC only) and its EMBER_DEBUG
dump says what each library step does ("cuBLASLt matmul + bias + relu").
The numbers are checked against eager through conftest's check(), which
runs on EMBER_TEST_DEVICE: on the CPU torch runs the matmuls (nothing is
folded there), on the GPU machine (tools/gpu/suites.sh) the fused calls run.
"""
from __future__ import annotations

import copy
import glob
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, EAGER, assert_same, check, compile_fn, cuda_plan_steps, ember_stats, have_nvrtc


needs_nvrtc = pytest.mark.skipif(EAGER or not have_nvrtc(),
                                 reason="needs ember and NVRTC (nvidia-cuda-nvrtc)")


@pytest.fixture(autouse=True)
def _epilogues_on(ember_options):
    # the fold is off by default until it has run on a GPU (src/lower.c)
    ember_options(cuda_epilogue=True)


def _mlp(act, d=(16, 32, 8)):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d[0], d[1]), act, nn.Linear(d[1], d[2]))


# ------------------------------------------------------------------ the plans
def _plans(fn, *args, tmp_path, monkeypatch):
    """Generate fn's graphs (and its backward's, when it returns a tensor
    that needs a gradient) as CUDA on this machine.  Returns, per graph, its
    library steps as the debug dump writes them and its other kernels' steps;
    then ember's stats."""
    sections, st = cuda_plan_steps(fn, *args, tmp_path=tmp_path, monkeypatch=monkeypatch)
    libs = [re.findall(r"(?:cuBLASLt matmul|cuBLAS sgemm)[^\n]*?(?= ember_k)", steps) for steps in sections]
    kernels = [re.findall(r"kernel ember_k\d+: ([^\n]*)", steps) for steps in sections]
    assert st["whole_graph_fallbacks"] == 0, st["whole_graph_reasons"]
    return libs, kernels, st


@needs_nvrtc
def test_linear_relu_mlp_is_two_library_calls(tmp_path, monkeypatch):
    m = _mlp(nn.ReLU())
    with torch.no_grad():
        libs, kernels, st = _plans(m, torch.randn(5, 16), tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul + bias + relu", "cuBLASLt matmul + bias"]], libs
    assert kernels == [[]], f"no add or relu kernel should be left: {kernels}"
    assert st["epilogue_ops"] == 3 and st["library_calls"] == 2 and st["kernels"] == 0, st


@needs_nvrtc
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tanh_gelu_is_folded_erf_gelu_is_not(dtype, tmp_path, monkeypatch):
    x = torch.randn(5, 16).to(dtype)
    with torch.no_grad():
        libs, kernels, _ = _plans(_mlp(nn.GELU(approximate="tanh")).to(dtype), x,
                                  tmp_path=tmp_path / "tanh", monkeypatch=monkeypatch)
        assert libs == [["cuBLASLt matmul + bias + gelu(tanh)", "cuBLASLt matmul + bias"]], libs
        assert kernels == [[]], kernels
        # cuBLASLt's GELU is the tanh approximation: the exact one stays a kernel
        libs, kernels, st = _plans(_mlp(nn.GELU()).to(dtype), x, tmp_path=tmp_path / "erf", monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul + bias", "cuBLASLt matmul + bias"]], libs
    assert len(kernels[0]) == 1 and "gelu" in kernels[0][0], kernels
    assert st["epilogue_ops"] == 2, st


@needs_nvrtc
def test_float32_tanh_gelu_stays_a_kernel(tmp_path, monkeypatch):
    # cuBLASLt's tanh is likely the hardware's approximation (lower.c says
    # why): within a 16-bit result's rounding, not within float32's
    with torch.no_grad():
        libs, kernels, _ = _plans(_mlp(nn.GELU(approximate="tanh")), torch.randn(5, 16),
                                  tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul + bias", "cuBLASLt matmul + bias"]], libs
    assert len(kernels[0]) == 1 and "gelu" in kernels[0][0], kernels


@needs_nvrtc
def test_training_keeps_gelu_out_of_the_epilogue(tmp_path, monkeypatch):
    # gelu's backward reads the pre-activation: the forward graph saves the
    # sum, so only the bias add is folded; relu's backward reads relu's own
    # result, so relu still is.  Under AOTAutograd's default partition: the
    # min-cut one (ember's default) saves the first product before its bias
    # and recomputes bias + gelu in the backward graph, so that bias is not
    # folded at all (test below)
    monkeypatch.setenv("EMBER_PARTITION", "default")
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 24), nn.ReLU(),
                      nn.Linear(24, 8)).bfloat16()
    x = torch.randn(5, 16, dtype=torch.bfloat16, requires_grad=True)
    libs, kernels, _ = _plans(m, x, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert len(libs) == 2, f"expected a forward and a backward graph: {libs}"
    fw = libs[0]
    assert fw == ["cuBLASLt matmul + bias", "cuBLASLt matmul + bias + relu", "cuBLASLt matmul + bias"], fw
    assert any("gelu" in k for k in kernels[0]), kernels[0]
    assert not any("+" in call for call in libs[1]), f"the backward has no bias to fold: {libs[1]}"


@needs_nvrtc
def test_min_cut_training_epilogues(tmp_path, monkeypatch):
    # the min-cut partition saves the first product (before its bias) for the
    # backward graph, which recomputes bias + gelu from it: that call folds
    # nothing; the later ones fold as under the default partition
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 24), nn.ReLU(),
                      nn.Linear(24, 8)).bfloat16()
    x = torch.randn(5, 16, dtype=torch.bfloat16, requires_grad=True)
    libs, kernels, _ = _plans(m, x, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert len(libs) == 2, f"expected a forward and a backward graph: {libs}"
    assert libs[0] == ["cuBLASLt matmul", "cuBLASLt matmul + bias + relu", "cuBLASLt matmul + bias"], libs[0]
    assert any("gelu" in k for k in kernels[0]), kernels[0]


@needs_nvrtc
def test_bias_of_another_dtype_or_2d_is_not_folded(tmp_path, monkeypatch):
    def f(x, w, b1, b2):
        # b1 is float32 while the product is bfloat16 (the sum is float32);
        # b2 is [m, n]: one value per element, not per column
        return torch.relu(x @ w + b1), torch.relu(x.float() @ w.float() + b2)
    libs, kernels, st = _plans(f, torch.randn(6, 16).bfloat16(), torch.randn(16, 8).bfloat16(), torch.randn(8),
                               torch.randn(6, 8), tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul", "cuBLAS sgemm"]], libs
    assert st["epilogue_ops"] == 0, st


@needs_nvrtc
def test_which_library_runs_a_product(tmp_path, monkeypatch, ember_options):
    # a float32 product of one matrix with nothing folded goes to cuBLAS's
    # sgemm (blas.c says why); a batch, a 16-bit dtype, or a bias folded
    # into the call keep cuBLASLt
    def f(x, w, y, b):
        return x @ w, torch.bmm(y, y), (x.bfloat16() @ w.bfloat16()).float(), torch.relu(x @ w + b)

    def libs_of(sub):
        (tmp_path / sub).mkdir()
        libs, _, _ = _plans(f, torch.randn(6, 16), torch.randn(16, 8), torch.randn(3, 8, 8), torch.randn(8),
                            tmp_path=tmp_path / sub, monkeypatch=monkeypatch)
        assert len(libs) == 1, libs
        return sorted(libs[0])
    ember_options(cuda_epilogue=False)  # the default: nothing folded
    assert libs_of("default") == ["cuBLAS sgemm", "cuBLAS sgemm", "cuBLASLt matmul", "cuBLASLt matmul"]
    ember_options(cuda_epilogue=True)
    assert libs_of("folded") == ["cuBLAS sgemm", "cuBLASLt matmul", "cuBLASLt matmul", "cuBLASLt matmul + bias + relu"]


@needs_nvrtc
def test_autocast_bias_cast_runs_before_the_call(tmp_path, monkeypatch):
    # under bf16 autocast the bias is cast by a kernel of ember's: its step
    # comes before the call that reads it
    m = _mlp(nn.ReLU())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        libs, _, _ = _plans(m, torch.randn(5, 16), tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul + bias + relu", "cuBLASLt matmul + bias"]], libs
    with open(glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt"))[0]) as f:
        steps = f.read().split("## steps")[1]
    first_call = steps.index("cuBLASLt")
    casts = re.findall(r"_to_copy\w*", steps[:first_call])
    assert len(casts) >= 2, f"the casts of the first layer's operands should come first:\n{steps}"


@needs_nvrtc
def test_bmm_bias_relu(tmp_path, monkeypatch):
    def f(a, b, c):
        return torch.relu(torch.bmm(a, b) + c)
    libs, kernels, _ = _plans(f, torch.randn(3, 5, 7), torch.randn(3, 7, 6), torch.randn(6),
                              tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert libs == [["cuBLASLt matmul + bias + relu"]] and kernels == [[]], (libs, kernels)


# ------------------------------------------------------------------ the numbers
def _epilogues(expected):
    """On the GPU, the number of nodes folded into calls; nothing on the CPU."""
    if DEVICE == "cuda" and not EAGER:
        st = ember_stats()
        assert st["epilogue_ops"] == expected, st


# float32's tanh GELU stays a kernel (lower.c says why): 2 bias adds folded
@pytest.mark.parametrize("act,folded", [(nn.ReLU(), 3), (nn.GELU(approximate="tanh"), 2), (nn.GELU(), 2)],
                         ids=["relu", "gelu_tanh", "gelu_erf"])
def test_linear_activation_matches_eager(act, folded):
    m = _mlp(act, (64, 96, 40)).eval()
    with torch.no_grad():
        check(m, lambda: (torch.randn(33, 64),))
    _epilogues(folded)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_tanh_gelu_16bit_matches_eager(dtype):
    m = _mlp(nn.GELU(approximate="tanh"), (64, 96, 40)).to(dtype).eval()
    with torch.no_grad():
        check(m, lambda: (torch.randn(33, 64).to(dtype),))
    _epilogues(3)


class _Autocast(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            return self.inner(x)


@pytest.mark.parametrize("act", [nn.ReLU(), nn.GELU(approximate="tanh")], ids=["relu", "gelu_tanh"])
def test_addmm_bf16_autocast_matches_eager(act):
    # eager's addmm adds the bias in fp32 inside the GEMM and rounds once, as
    # the fused call does (mm then add would round twice)
    m = _Autocast(_mlp(act, (64, 128, 48))).eval()
    with torch.no_grad():
        check(m, lambda: (torch.randn(40, 64),))
    _epilogues(3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_misaligned_bias_matches_eager(dtype):
    # a bias that starts one element into its buffer (as a slice of a fused
    # qkv bias can): cuBLASLt must not load it 16 bytes at a time
    def f(x, w, big):
        return torch.relu(x @ w + big[1:])
    check(f, lambda: (torch.randn(24, 32).to(dtype), torch.randn(32, 40).to(dtype), torch.randn(41).to(dtype)))
    _epilogues(2)


def test_relu_epilogue_keeps_nan():
    # eager's relu keeps a NaN (NaN and Inf propagate, as the README says):
    # the fused call must too, not clamp it to 0
    def make():
        x = torch.randn(16, 32)
        x[3, 5] = float("nan")
        return x, torch.randn(32, 24), torch.randn(24)
    check(lambda x, w, b: torch.relu(x @ w + b), make)
    _epilogues(2)


def test_bmm_bias_relu_matches_eager():
    check(lambda a, b, c: torch.relu(torch.bmm(a, b) + c),
          lambda: (torch.randn(3, 17, 24), torch.randn(3, 24, 20), torch.randn(20)))
    _epilogues(2)


def test_linear_relu_training_matches_eager():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 32), nn.GELU(approximate="tanh"),
                          nn.Linear(32, 8)).to(DEVICE)
    ref, cmp_mod = model, copy.deepcopy(model)
    cmod = compile_fn(cmp_mod)
    x = torch.randn(16, 24, device=DEVICE)
    out_ref, out_cmp = ref(x), cmod(x)
    assert_same(out_cmp, out_ref, msg="forward:")
    out_ref.pow(2).mean().backward()
    out_cmp.pow(2).mean().backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), cmp_mod.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m, n=n: f"grad of {n}: {m}")
    # the first and last bias adds and the relu: the min-cut partition saves
    # the second product before its bias and recomputes bias + gelu in the
    # backward graph (4 under AOTAutograd's default partition, whose forward
    # graph saves the gelu's input after the bias)
    _epilogues(3)
