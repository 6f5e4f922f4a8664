"""Views at an odd offset: on CUDA a kernel reads them through its unaligned
path (the vector accesses need 16-byte aligned pointers), which is rolled and,
in rows, reads the row again in each stage (src/codegen_cuda.c, pw_loop and
row_vec).  The same results as eager on every device; the generated CUDA has
the rolled paths (NVRTC, no GPU needed)."""
import glob

import pytest
import torch
import torch.nn.functional as F

from conftest import EAGER, check, have_nvrtc


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
@pytest.mark.parametrize("roll", ["1", "0"])
def test_unaligned_paths_rolled_in_cuda_code(monkeypatch, tmp_path, roll):
    from conftest import get_ember
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_CUDA_ROLL_FALLBACK", roll)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    get_ember().reset()
    cuda_codegen_check(odd_view_fns, torch.randn(64, 1026), torch.randn(1024), torch.randn(1024))
    cuda_codegen_check(lambda x: F.gelu(x[:, 1:1025] * 2 + 1), torch.randn(64, 1026))
    src = "".join(open(p).read() for p in glob.glob(str(tmp_path / "graph_*" / "kernels.cu")))
    # a pointwise kernel's fallback
    assert ("#pragma unroll 1\n      for (int u = 0; u < 4; u++)" in src) == (roll == "1")
    # the rows' fallback: each stage's loop rolled, the row read from memory again
    rolled_rows = src.count("#pragma unroll 1\n      for (int r = threadIdx.x; r < 1024; r += 128)")
    assert rolled_rows >= 3 if roll == "1" else rolled_rows == 0
