"""Views at an odd offset: on CUDA a kernel reads them through its unaligned
path (the vector accesses need 16-byte aligned pointers), which is rolled and,
in rows, reads the row again in each stage (src/codegen_cuda.c, pw_loop and
row_vec).  The same results as eager on every device; the generated CUDA has
the rolled paths (NVRTC, no GPU needed)."""
import glob

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check, have_nvrtc


def odd_view_fns(x, w, b):
    v = x[:, 1:1025]  # starts one element into each row: not 16-byte aligned
    return (F.gelu(v * 2 + 1), torch.softmax(0.125 * v, -1), F.layer_norm(v, (1024,), w, b),
            v.sum(-1), v.amax(0), v.var(-1))


def test_odd_offset_views_match_eager():
    check(odd_view_fns, lambda: (torch.randn(64, 1026), torch.randn(1024), torch.randn(1024)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_odd_offset_views_16bit(dtype):
    check(odd_view_fns, lambda: (torch.randn(16, 1026).to(dtype), torch.randn(1024).to(dtype),
                                 torch.randn(1024).to(dtype)))


@pytest.mark.skipif(EAGER or not have_nvrtc(), reason="ember's CUDA code, through NVRTC")
def test_unaligned_paths_rolled_in_cuda_code(monkeypatch, tmp_path):
    from conftest import get_ember
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    get_ember().reset()
    cuda_codegen_check(odd_view_fns, torch.randn(64, 1026), torch.randn(1024), torch.randn(1024))
    cuda_codegen_check(lambda x: F.gelu(x[:, 1:1025] * 2 + 1), torch.randn(64, 1026))
    src = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu")))
    # a pointwise kernel's fallback
    assert "#pragma unroll 1\n      for (int u = 0; u < 4; u++)" in src
    # the rows' fallback: each stage's loop rolled, the row read from memory again
    rolled_rows = src.count("#pragma unroll 1\n      for (int r = threadIdx.x; r < 1024; r += 128)")
    assert rolled_rows >= 3


def aligned_input_fns(x, w, b):
    return F.gelu(x * 2 + 1), torch.softmax(0.125 * x, -1), F.layer_norm(x, (1024,), w, b), x.sum(-1)


@pytest.mark.skipif(EAGER or not have_nvrtc(), reason="ember's CUDA code, through NVRTC")
def test_unaligned_variants_apart_in_cuda_code(monkeypatch, tmp_path):
    """A kernel whose vector accesses start aligned (an input's own pointer)
    keeps its aligned path alone; its unaligned variant follows all kernels,
    and the check compiles both (NVRTC)."""
    from conftest import get_ember
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    get_ember().reset()
    cuda_codegen_check(aligned_input_fns, torch.randn(64, 1024), torch.randn(1024), torch.randn(1024))
    (path,) = glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu"))
    kernels, _, variants = open(path).read().partition("The kernels' variants")
    assert variants, "no unaligned variants"
    assert kernels.count("checked by the launch") >= 1  # (all four fuse into one row kernel)
    assert "} else {" not in kernels.split("/* kernel 0:")[1]
    assert variants.count("_u(") == kernels.count("checked by the launch")
    assert variants.count("} else {") >= variants.count("_u(")


@pytest.mark.skipif(EAGER or DEVICE == "cpu", reason="runs on the GPU (EMBER_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_unaligned_inputs_run_the_variant(mode):
    """An input at an odd address (a view one element into its storage) runs
    the kernels' unaligned variants, built at the first such launch; aligned
    inputs keep the aligned kernels."""
    from conftest import assert_same, compile_fn, get_ember
    ember = get_ember()
    w, b = torch.randn(1024, device=DEVICE), torch.randn(1024, device=DEVICE)
    cf = compile_fn(aligned_input_fns, **({"mode": mode} if mode else {}))
    aligned = torch.randn(64, 1024, device=DEVICE)
    odd = torch.randn(64 * 1024 + 1, device=DEVICE)[1:].view(64, 1024)
    assert odd.data_ptr() % 16
    for i, x in enumerate((aligned, aligned, odd, odd, aligned)):
        assert_same(cf(x, w, b), aligned_input_fns(x, w, b), msg=f"call {i}:")
        if i == 1:
            assert ember.stats().get("unaligned_variants", 0) == 0
    if mode is None:  # (reduce-overhead copies an input that moves into a buffer of its own)
        assert ember.stats()["unaligned_variants"] >= 1
