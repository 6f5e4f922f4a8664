"""The CUDA target for graphs with symbolic sizes (docs/DYNAMIC_SHAPES.md,
stage 5), checked without a GPU: functions compiled with dynamic=True are
generated as CUDA C once for every size, as if their tensors were on a GPU,
and compiled by NVRTC for sm_90 (ember.backend.cuda_codegen_check's path).
Each is called at two or more sizes: one graph, one compile, kernels that
take the size variables as arguments and a grid that is an expression over
them.  Results come from torch; running the kernels needs the GPU machine
(tests/test_gpu_dynamic.py)."""
import glob
import os
import re

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import assert_same, have_nvrtc
from test_dynamic import (_Encoder, broadcast, cat_last, cat_many, cat_rows, elementwise, embedding_lookup,
                          factories, more_views, norm_and_means, pad_crop, pad_two_dims, reshape, softmax_rows,
                          transpose)

pytestmark = pytest.mark.skipif(not have_nvrtc(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")


def _sources(tmp_path):
    return [open(f).read() for f in sorted(glob.glob(os.path.join(str(tmp_path), "run_*", "graph_*", "kernels.cu")))]


def _heads(src):
    return [ln for ln in src.splitlines() if ln.startswith("/* kernel ")]


def dyn_check(monkeypatch, tmp_path, fn, *argsets, graphs=1, batch_only=False):
    """fn compiled once with dynamic=True (batch_only: dim 0 of each tensor
    argument marked dynamic, the other sizes constant) for the CUDA check and
    called with each argument tuple: `graphs` graphs from Dynamo, each
    generated once with symbolic sizes and compiled by NVRTC; returns the
    kernels' sources."""
    from ember.backend import make_backend
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    torch._dynamo.reset()
    cf = torch.compile(fn, backend=make_backend(None, _cuda_check=90), dynamic=None if batch_only else True)
    for args in argsets:
        if batch_only:
            for a in args:
                if a.dim() > 1:
                    torch._dynamo.mark_dynamic(a, 0)
        assert_same(cf(*args), fn(*args))
    s = ember.stats()
    assert s["whole_graph_fallbacks"] == 0, s["whole_graph_reasons"]
    assert not s["symbolic_refused"], s["symbolic_refused"]
    assert s["graphs"] == graphs and s.get("cuda_checked_symbolic") == graphs, s
    srcs = _sources(tmp_path)
    assert len(srcs) == graphs, srcs
    for src in srcs:
        sigs = [ln for ln in src.splitlines() if ln.startswith('extern "C" __global__')]
        assert sigs, src
        for sig in sigs:  # every kernel takes the call's size variables after its pointers
            assert sig.rstrip(" {").endswith("const int64_t s0_arg)") or ", const int64_t s1_arg" in sig, sig
        index_widths(src)
    return srcs


def index_widths(src):
    """A symbolic graph's kernels index with 32-bit ints: each entry point makes the call's sizes
    ints; a kernel whose indices may pass 32 bits at some sizes says so in its comment and has a
    wide variant (ember_k<id>_w, compiled by the check with the others) that makes them int64_t;
    a kernel that checks gathered indices is 64-bit itself.  Returns the wide variants' kernels."""
    main, _, variants = src.partition("/* ---- The kernels' variants")
    entry = re.compile(r'__global__ void __launch_bounds__\([^)]*\) ember_k(\d+)(_u|_w)?(?:_b\d)?\(.*\n  const (\w+) s0 = ')
    found = entry.findall(src)
    assert found, src
    wide = set(re.findall(r"it runs ember_k(\d+)_w, its indices 64-bit, where .* >= 1610612736", main))
    for k, variant, itype in found:
        if variant == "_w":
            assert k in wide and itype == "int64_t", (k, src)
        else:
            assert itype == "int" or (k not in wide and "em_index" in main), (k, itype, src)
    assert {k for k, variant, _ in found if variant == "_w"} == wide, src
    return wide


def test_pointwise_and_rows_compile_once_for_two_sizes(monkeypatch, tmp_path):
    def f(x, y):
        return torch.sin(x) + y * 2, x.sum(-1), torch.softmax(x, -1), x.mean(0)

    [src] = dyn_check(monkeypatch, tmp_path, f, (torch.randn(5, 15), torch.randn(5, 15)),
                      (torch.randn(9, 27), torch.randn(9, 27)))
    heads = _heads(src)
    # rows of symbolic length: the block by the call's length, two bodies (the row in registers
    # or read again), vector rows where the launch finds 4 divides s1; x.mean(0): columns
    assert any("space [s0, s1], a warp per row, 8 rows a block where s1 <= 256, else a block per row, 64 to 1024 "
               "threads by the call's row length (8 elements a thread), the row in registers where s1 <= 2048, 4 "
               "consecutive elements per thread where aligned and 4 divides s1 (symbolic sizes); grid em_imin("
               in h for h in heads), heads
    assert any("a thread column per output point (symbolic sizes); grid em_imin((s1 + 15) / 16, 1048576), "
               "block 16x32; computes mean" in h for h in heads), heads
    # the loops' bounds are the size variables, not the first call's sizes
    assert "r < s1; r += blockDim.x)" in src and "o < s0;" in src, src
    assert "< 5;" not in src and "< 15;" not in src, src


def test_pointwise_grid_is_an_expression(monkeypatch, tmp_path):
    [src] = dyn_check(monkeypatch, tmp_path, elementwise, (torch.randn(3, 7), torch.randn(3, 7)),
                      (torch.randn(11, 7), torch.randn(11, 7)))
    [h] = [h for h in _heads(src) if "pointwise" in h]
    assert "(symbolic sizes); grid em_imin(" in h and "1023" in h and "/ 1024" in h, h
    assert "lin < s0*s1" in src, src


def test_pointwise_lanes_with_a_tail(monkeypatch, tmp_path):
    # contiguous [s0, s1] (one merged loop): 4 consecutive elements per thread, 16-byte loads
    # where the launch finds the pointers aligned (else the unaligned variant, which takes the
    # sizes too); the last (s0*s1) % 4 elements in a scalar tail
    def f(x, y):
        return (x * 2 + y).to(torch.bfloat16)

    [src] = dyn_check(monkeypatch, tmp_path, f, (torch.randn(5, 6), torch.randn(5, 6)),
                      (torch.randn(9, 7), torch.randn(9, 7)))
    assert "pointwise, 4 consecutive elements per thread where aligned (symbolic sizes)" in src, src
    assert "q < (s0*s1) / 4; q += step" in src and "em_vec4<float>" in src, src
    assert "base = ((s0*s1) / 4) * 4 + " in src, src
    assert "ember_k0_u(" in src, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_groups_and_long_rows_of_constant_length(monkeypatch, tmp_path, dtype):
    # a LayerNorm over 96 channels, the batch symbolic: a row group (16 lanes, 16 rows a block)
    # whose row is in registers; a softmax over rows of 1000: a block per row, in registers;
    # both read 4 consecutive elements a thread where aligned (vector rows, as in static kernels);
    # a softmax over rows of 30 (4 does not divide it): scalar row groups
    def f(x, w, b, y, z):
        return F.layer_norm(x, (96,), w, b), torch.softmax(y, -1), torch.softmax(z, -1)

    w, b = torch.randn(96).to(dtype), torch.randn(96).to(dtype)
    [src] = dyn_check(monkeypatch, tmp_path, f,
                      *[(torch.randn(n, 96).to(dtype), w, b, torch.randn(n, 1000).to(dtype),
                         torch.randn(n, 30).to(dtype)) for n in (4, 13)], batch_only=True)
    heads = _heads(src)
    vec = "4 consecutive elements per lane where aligned"
    assert any(f"16 lanes per row, 16 rows per block, the row in registers, {vec} (symbolic sizes); "
               "grid em_imin(" in h for h in heads), heads
    assert any(re.search(r"a block per row, the row in registers, 4 consecutive elements per thread where aligned "
                         r"\(symbolic sizes\); grid em_imin\(s\d, 1048576\), block 128x1", h) for h in heads), heads
    assert any("4 lanes per row, 64 rows per block, the row in registers (symbolic sizes)" in h for h in heads), heads
    assert "ember_k0_u(" in src, src  # the unaligned variants take the sizes too (dyn_check's signatures)


def test_full_reduction_gets_a_wide_block(monkeypatch, tmp_path):
    # a sum of everything (one row of symbolic length: no split in a symbolic graph) takes a
    # block of 1024 threads, 4 elements a thread where the launch finds 4 divides the count;
    # rows of symbolic length, many of them, the launch's block by their length (sym_rows)
    def f(x):
        return x.sum(), (x * x).mean(-1)

    [src] = dyn_check(monkeypatch, tmp_path, f, (torch.randn(4, 7),), (torch.randn(9, 12),))
    heads = _heads(src)
    assert any("a block per row, 4 consecutive elements per thread where aligned and 4 divides s0*s1 (symbolic "
               "sizes); grid 1, block 1024x1; computes sum" in h for h in heads), heads
    assert any("by the call's row length" in h and "computes mean" in h for h in heads), heads


def test_columns_over_a_symbolic_length(monkeypatch, tmp_path):
    # sums, a variance and a max over a symbolic batch of 64 columns: the column schedule (its
    # threads down each column stride over s0), not a block per column reading with a stride
    def f(x):
        return (x * 2).sum(0), x.var(0), x.amax(0)

    [src] = dyn_check(monkeypatch, tmp_path, f, (torch.randn(4, 64),), (torch.randn(9, 64),), batch_only=True)
    assert "a thread column per output point (symbolic sizes); grid 4, block 16x32" in src, src
    assert "for (int64_t r = threadIdx.y; r < s0; r += 32)" in src and "em_col_sum" in src, src


def _zoo_kernel(name):
    from ember.tools import zoo
    return zoo.KERNELS[name].fn


_VEC_ROWS = "4 consecutive elements per thread where aligned and 4 divides s1 (symbolic sizes)"
_ROWS_BY_LENGTH = ("a warp per row, 8 rows a block where s1 <= 256, else a block per row, 64 to 1024 threads by the "
                   "call's row length (8 elements a thread)")


@pytest.mark.parametrize("name, args, expect", [
    # the broadcast w, b (length s1) read 4-wide where the launch finds 4 divides s1
    ("gelu(x*w+b)", lambda n, m: (torch.randn(n, m), torch.randn(m), torch.randn(m)),
     ["pointwise, " + _VEC_ROWS, "the launch runs ember_k0_u where a pointer is not aligned or 4 does not divide s1",
      "*(const em_vec4<float> *)&p1[i1]", "*(const em_vec4<float> *)&p2[i1]", "q < (s0*s1) / 4; q += step"]),
    # the row in registers up to 2048 (one tensor), vector rows, the block the launch's; each
    # body an entry point the launch chooses by s1, with its own bound
    ("gelu(layer_norm(x))", lambda n, m: (torch.randn(n, m), torch.randn(m), torch.randn(m)),
     [_ROWS_BY_LENGTH + ", the row in registers where s1 <= 2048, " + _VEC_ROWS,
      "; the launch runs ember_k0 where s1 <= 256, ember_k0_b1 where s1 <= 2048, ember_k0_b2 where s1 > 2048;",
      "/* ember_k0_b1 where s1 <= 2048: a block per row, the row in registers, at most 8 elements a thread */\n"
      'extern "C" __global__ void __launch_bounds__(256) ember_k0_b1(',
      "float C0[2][4];", "const int64_t r = (threadIdx.x + u * blockDim.x) * 4;",
      "/* ember_k0_b2 where s1 > 2048: a block per row, a longer row: each stage reads it again */\n"
      'extern "C" __global__ void __launch_bounds__(1024, 2) ember_k0_b2(']),
    ("softmax(0.125*x)", lambda n, m: (torch.randn(n, m),),
     [_ROWS_BY_LENGTH + ", the row in registers where s1 <= 2048, " + _VEC_ROWS,
      "for (int64_t r = threadIdx.x * 4; r < s1; r += blockDim.x * 4) {",
      "for (int64_t r = threadIdx.x; r < s1; r += blockDim.x) {"]),
    # one stage: the row is read once, nothing to keep
    ("sum(x, inner dim)", lambda n, m: (torch.randn(n, m),),
     [_ROWS_BY_LENGTH + ", " + _VEC_ROWS,
      "/* ember_k0_b1 where s1 > 256: a block per row, a longer row, read once */"]),
    # a symbolic number of columns: the column schedule, a constant block, the grid by the call
    ("sum(x, outer dim)", lambda n, m: (torch.randn(n, m),),
     ["a thread column per output point (symbolic sizes); grid em_imin((s1 + 15) / 16, 1048576), block 16x32",
      "ob < s1; ob += (int64_t)gridDim.x * 16", "const int64_t o = live ? ob + threadIdx.x : (s1) - 1;",
      "r < s0; r += 32"]),
    ("sin(x)+cos(y)", lambda n, m: (torch.randn(n * m), torch.randn(n * m)),
     ["pointwise, 4 consecutive elements per thread where aligned (symbolic sizes)"]),
], ids=["gelu_affine", "gelu_ln", "softmax", "sum_inner", "sum_outer", "sin_cos"])
def test_kernel_set_schedules(monkeypatch, tmp_path, name, args, expect):
    # the memory-bound kernel set with dynamic=True (every size symbolic, the row length too):
    # the static kernels' schedules, chosen at the call where they depend on a size
    [src] = dyn_check(monkeypatch, tmp_path, _zoo_kernel(name), args(6, 40), args(11, 72))
    heads = _heads(src)
    assert len([h for h in heads if not h.startswith("/* kernel 0 with")]) == 1, heads
    for e in expect:
        assert e in src, (e, heads)
    if name != "sum(x, inner dim)":
        assert "row in registers where s1 <= 2048" in src or "row in registers" not in src, heads
    else:
        assert "in registers" not in heads[0], heads


@pytest.mark.parametrize("name", ["softmax(0.125*x)", "gelu(x*w+b)"])
def test_unaligned_variant_of_symbolic_kernels_is_the_scalar_kernel(monkeypatch, tmp_path, name):
    # the variant for sizes 4 does not divide (a common case, not a rare pointer): the scalar
    # paths alone, as they would be without vector paths (the launch runs it only where the
    # vector paths' test would fail): rows in registers (8 elements a thread), unrolled
    f = _zoo_kernel(name)
    make = (lambda n, m: (torch.randn(n, m),)) if name.startswith("softmax") else \
        (lambda n, m: (torch.randn(n, m), torch.randn(m), torch.randn(m)))
    [src] = dyn_check(monkeypatch, tmp_path, f, make(6, 40), make(11, 73))
    head = "/* kernel 0 with its scalar paths alone, for a launch where a vector access's pointer is not aligned " \
           "or 4 does not divide s1 */"
    assert head in src, _heads(src)
    wide = "/* kernel 0 with 64-bit indices, for a launch where an index passes 32 bits */"
    alt = src[src.index(head):src.index(wide)]
    assert "em_vec4" not in alt and "#pragma unroll 1" not in alt and "% 16 == 0" not in alt, alt
    if name.startswith("softmax"):
        assert re.search(r"float C\d+\[8\];", alt), alt
        assert "const int r = threadIdx.x + u * blockDim.x;" in alt and "const int r = gl + u * 32;" in alt, alt
    # the wide variant: the kernel's first generation (vector paths that check their pointers in
    # the kernel and their scalar fallback), with 64-bit indices
    wide = src[src.index(wide):]
    assert "em_vec4" in wide and "const int64_t s1 = (int64_t)s1_arg;" in wide, wide
    if name.startswith("softmax"):
        assert "const int64_t r = gl + u * 32;" in wide, wide


def _block_rule(n):
    if n <= 256:  # a warp per row, 8 rows a block
        return 256
    b = 64
    while b < 1024 and b * 8 < n:
        b *= 2
    return b


def _c_expr(e, **sizes):
    """A size expression of a kernel's comment (ex_print) evaluated at these sizes."""
    return eval(e.replace("em_imin", "min").replace("em_imax", "max").replace("/", "//"), dict(sizes))


def test_row_block_is_the_static_rule_at_the_call(monkeypatch, tmp_path):
    # the launch's block (Kernel.sblock, evaluated by run.c per call): 256 threads (8 warps, a
    # row each) for rows of at most 256, else row_block of the call's length: a multiple of 32
    # from 64 to 1024, 8 elements a thread where the row is kept (at most 8192 elements); the
    # grid a block per row, or per 8 rows
    [src] = dyn_check(monkeypatch, tmp_path, _zoo_kernel("softmax(0.125*x)"), (torch.randn(6, 40),),
                      (torch.randn(11, 72),))
    [(grid, block)] = re.findall(r"; grid (em_imin\(.*?\)), block \((.*?)\)x1;", src)
    for n in (0, 1, 2, 3, 7, 64, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025, 2048, 2049, 4096, 4097, 6000, 8192,
              8193, 10 ** 6):
        b = _c_expr(block, s1=n)
        assert b == _block_rule(n) and b % 32 == 0, (n, b, block)
        assert n > 8192 or 8 * b >= n, (n, b)
        for rows in (1, 7, 8, 9, 1000, 10 ** 7):
            g = _c_expr(grid, s0=rows, s1=n)
            assert g == min(-(-rows // 8) if n <= 256 else rows, 1 << 20), (rows, n, g, grid)


def test_symbolic_columns_keep_the_column_where_short(monkeypatch, tmp_path):
    # a variance and a max over dim 0 of a symbolic number of columns: two bodies, the column in
    # registers (32 elements a thread) where s0 <= 1024, else read again; a LayerNorm over the
    # channels of [B, C, T] (stores along the column): vector columns where 4 divides C
    [src] = dyn_check(monkeypatch, tmp_path, lambda x: (x.var(0), x.amax(0)), (torch.randn(6, 40),),
                      (torch.randn(11, 72),))
    [h] = [h for h in _heads(src) if "64-bit indices, for a launch" not in h]
    assert ("a thread column per output point, the column in registers where s0 <= 1024 (symbolic sizes); "
            "grid em_imin((s1 + 15) / 16, 1048576), block 16x32") in h, h
    # the two bodies are entry points the launch chooses by s0; the one that keeps the column is
    # bounded for one block an SM
    assert "; the launch runs ember_k0 where s0 <= 1024, ember_k0_b1 where s0 > 1024; " in h, h
    assert ("/* ember_k0 where s0 <= 1024: the column in registers, at most 32 elements a thread */\n"
            'extern "C" __global__ void __launch_bounds__(512, 1) ember_k0(') in src, src
    assert ("/* ember_k0_b1 where s0 > 1024: a longer column: each stage reads it again */\n"
            'extern "C" __global__ void __launch_bounds__(512) ember_k0_b1(') in src, src
    assert re.search(r"float C\d+\[32\];", src), src


def test_symbolic_channel_norm_vector_columns(monkeypatch, tmp_path):
    def f(x):
        return F.layer_norm(x.transpose(1, 2), (x.shape[1],))

    [src] = dyn_check(monkeypatch, tmp_path, f, (torch.randn(2, 8, 5),), (torch.randn(3, 12, 7),))
    heads = _heads(src)
    assert any("a thread column per output point, the column in registers where s1 <= 1024, 4 consecutive "
               "elements per thread where aligned and 4 divides s1" in h for h in heads), heads
    assert "if (live) *(em_vec4<float> *)&p1[" in src, src


def test_rows_from_two_tensors_are_kept_up_to_8192(monkeypatch, tmp_path):
    # a softmax over x + y reads its rows from two tensors: kept in registers up to 1024 threads x 8
    [src] = dyn_check(monkeypatch, tmp_path, lambda x, y: torch.softmax(x + y, -1),
                      (torch.randn(6, 40), torch.randn(6, 40)), (torch.randn(11, 72), torch.randn(11, 72)))
    assert "the row in registers where s1 <= 8192, " + _VEC_ROWS in src, _heads(src)
    assert "/* ember_k0_b1 where s1 <= 8192: a block per row, the row in registers" in src, src
    # its cache over two tensors, in blocks of up to 1024, gets the registers of one block an SM, as
    # does the body that reads a longer row again; a row from one tensor (test_kernel_set_schedules)
    # those of two there
    assert "__launch_bounds__(1024) ember_k0_b1(" in src and "__launch_bounds__(1024, 1) ember_k0_b2(" in src, src


def _ptxas(tmp_path):
    """ptxas's registers and spill stores per entry point of the one kernels.cu
    under tmp_path (its debug dump, with prelude.cuh beside it), compiled by
    NVRTC for sm_90 with ember's options (src/cuda.c) and -v: {name: (registers,
    bytes of spill stores)}."""
    import ctypes
    import nvidia
    [path] = glob.glob(os.path.join(str(tmp_path), "run_*", "graph_*", "kernels.cu"))
    libs = [f for p in nvidia.__path__ for f in glob.glob(os.path.join(p, "*", "lib", "libnvrtc.so*"))]
    lib = ctypes.CDLL(sorted(libs)[0])
    head = open(os.path.join(os.path.dirname(path), "prelude.cuh")).read().encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), open(path).read().encode(), b"kernels.cu", 1,
                                  (ctypes.c_char_p * 1)(head), (ctypes.c_char_p * 1)(b"prelude.cuh")) == 0
    opts = [b"-default-device", b"--std=c++17", b"-ftz=false", b"-prec-div=true", b"-prec-sqrt=true",
            b"--gpu-architecture=sm_90", b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    text = log.value.decode(errors="replace")
    assert rc == 0, text
    found = re.findall(r"entry function '(\w+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers", text, flags=re.S)
    return {name: (int(regs), int(spill)) for name, spill, regs in found}


@pytest.mark.parametrize("name", ["softmax(0.125*x)", "gelu(layer_norm(x))", "softmax(x+y)"])
def test_symbolic_row_bodies_are_entry_points_that_do_not_spill(monkeypatch, tmp_path, name):
    # rows of symbolic length: each body its own entry point (a warp per row; the row in
    # registers; read again), bounded by its own block (256 threads; the block of the longest
    # row kept: 256 for one tensor, 1024 for two; 1024, two blocks an SM where the row is read
    # from one tensor), the unaligned variant's alike.  In one function ptxas gave every body
    # what the hungriest took, and the body that reads a long row again spilled under its bound
    # of 32 registers.  Now no entry spills, and that body takes no more registers than the
    # static kernel over rows of 4096 (which reads the row again as well)
    if name == "softmax(x+y)":
        f, make = (lambda x, y: torch.softmax(x + y, -1)), (lambda n, m: (torch.randn(n, m), torch.randn(n, m)))
    else:
        f = _zoo_kernel(name)
        make = (lambda n, m: (torch.randn(n, m),)) if name.startswith("softmax") else \
            (lambda n, m: (torch.randn(n, m), torch.randn(m), torch.randn(m)))
    [src] = dyn_check(monkeypatch, tmp_path / "dyn", f, make(6, 40), make(11, 72))
    kept, long = ("1024", "1024, 1") if name == "softmax(x+y)" else ("256", "1024, 2")
    bounds = [("256", ""), (kept, "_b1"), (long, "_b2")]
    assert re.findall(r"__launch_bounds__\(([^)]*)\) ember_k0(\w*)\(", src) == bounds + \
        [(b, u + e) for u in ("_u", "_w") for b, e in bounds], _heads(src)
    dyn = _ptxas(tmp_path / "dyn")
    assert set(dyn) == {"ember_k0" + u + e for u in ("", "_u", "_w") for _, e in bounds}, dyn
    assert all(spill == 0 for _, spill in dyn.values()), dyn
    from ember.backend import make_backend
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path / "static"))
    ember.reset()
    torch._dynamo.reset()
    args = make(16, 4096)
    assert_same(torch.compile(f, backend=make_backend(None, _cuda_check=90), dynamic=False)(*args), f(*args))
    static = _ptxas(tmp_path / "static")
    assert dyn["ember_k0_b2"][0] <= static["ember_k0"][0], (dyn, static)


@pytest.mark.parametrize("fn, make", [
    (reshape, lambda n: (torch.randn(n, 8),)),
    (transpose, lambda n: (torch.randn(n, 6), torch.randn(6, n))),
    (broadcast, lambda n: (torch.randn(n, 5), torch.randn(5), torch.randn(n))),
    (more_views, lambda n: (torch.randn(n, 8),)),
    (cat_rows, lambda n: (torch.randn(n, 4),)),
    (cat_last, lambda n: (torch.randn(3, n), torch.randn(3, 5))),
    (cat_many, lambda n: (torch.randn(n, 3),)),
    (pad_two_dims, lambda n: (torch.randn(n, n + 1),)),
    (pad_crop, lambda n: (torch.randn(n, 4),)),
    (factories, lambda n: (torch.randn(n, 4),)),
    (softmax_rows, lambda n: (torch.randn(n, 33),)),
    (norm_and_means, lambda n: (torch.randn(n, 24), torch.randn(24))),
], ids=["reshape", "transpose", "broadcast", "more_views", "cat_rows", "cat_last", "cat_many", "pad_two_dims",
        "pad_crop", "factories", "softmax", "norm_and_means"])
def test_views_cat_pad_reductions(monkeypatch, tmp_path, fn, make):
    dyn_check(monkeypatch, tmp_path, fn, make(7), make(13))  # sizes no constant of the graph equals


def test_embedding_checks_indices(monkeypatch, tmp_path):
    w = torch.randn(50, 6)
    [src] = dyn_check(monkeypatch, tmp_path, embedding_lookup,
                      (w, torch.randint(0, 50, (2, 3)), torch.randn(2, 3)),
                      (w, torch.randint(0, 50, (2, 9)), torch.randn(2, 9)))
    assert "em_index" in src or "ember_index_error" in src, src


def _graphs(tmp_path):
    return [open(f).read() for f in sorted(glob.glob(os.path.join(str(tmp_path), "run_*", "graph_*", "graph.txt")))]


def _calls(text):
    """The library steps of a graph.txt (src/ember.c, dump_graph)."""
    return [ln for ln in text.splitlines() if re.match(r"\s*\d+  cuBLAS", ln)]


def _no_matmul_fallbacks(s):
    assert not [k for k in s["fallbacks"] if re.match(r"aten\.(mm|bmm|addmm|baddbmm|matmul)\.", k)], s["fallbacks"]


def test_bert_encoder_matmuls_are_library_calls(monkeypatch, tmp_path):
    # the encoder of tests/test_dynamic.py: its matmuls are library calls whose sizes are the
    # sequence's expressions (stage 6), everything between them ember's kernels
    torch.manual_seed(0)
    m = _Encoder().eval()
    with torch.no_grad():
        [src] = dyn_check(monkeypatch, tmp_path, m, (torch.randint(0, 97, (2, 8)),),
                          (torch.randint(0, 97, (2, 57)),))
    s = ember.stats()
    _no_matmul_fallbacks(s)
    assert s["library_calls"] == 12 and not s["fallbacks"], s  # per layer qkv, 2 bmm, out, up, down
    assert len(_heads(src)) >= 6, _heads(src)
    [g] = _graphs(tmp_path)
    calls = _calls(g)
    assert len(calls) == 12 and all("; per call m=" in c for c in calls), calls
    # the projections over s0*s1 rows (batch times sequence), attention's products batched over
    # the heads with the sequence as a leading dim
    assert sum("m=s0*s1 n=96 k=32 batch=1" in c for c in calls) == 2, calls
    assert sum(re.search(r"bmm\S* -> v\d+; per call m=s1 n=s1 k=8 batch=4\*s0 .*ldc=s1 .*sc=s1\*s1", c) is not None
               for c in calls) == 2, calls


def _projections(x, w, b, y, z, q):
    # linear (a view to 2 dims, mm with the weight transposed, the bias added), bmm, a product
    # with a transposed operand
    return F.linear(x, w, b), torch.bmm(y, z), q @ y[0].t()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matmuls_are_library_calls(monkeypatch, tmp_path, dtype):
    def make(n):
        r = lambda *s: torch.randn(*s).to(dtype)
        # no size equal to another where they are not the same symbol (Dynamo's duck sizing)
        return r(n, 5, 16), r(24, 16), r(24), r(n, n + 1, 8), r(n, 8, 7), r(6, 8)

    dyn_check(monkeypatch, tmp_path, _projections, make(3), make(9))
    s = ember.stats()
    _no_matmul_fallbacks(s)
    assert s["library_calls"] == 3, s
    [g] = _graphs(tmp_path)
    calls = _calls(g)
    assert len(calls) == 3 and all("; per call" in c for c in calls), calls
    # float32 products of one matrix are cuBLAS's sgemm, the rest cuBLASLt's (as in static graphs)
    lt = "cuBLAS sgemm" if dtype == torch.float32 else "cuBLASLt matmul"
    assert sum(lt in c for c in calls) == (2 if dtype == torch.float32 else 3), calls
    assert "size variables" in g and "padded" not in g and "EPILOGUE" not in g, g


def test_matmul_whose_inner_size_may_be_zero_runs_in_torch(monkeypatch, tmp_path):
    # k = s1 - 2 may be 0 (the product would be zeros, not a library call): torch's mm per call
    dyn_check(monkeypatch, tmp_path, lambda x, w: (x[:, 2:] @ w[2:]) * 2, (torch.randn(3, 5), torch.randn(5, 7)),
              (torch.randn(3, 9), torch.randn(9, 7)))
    assert ember.stats()["fallbacks"] == {"aten.mm.default": 1}, ember.stats()
    [g] = _graphs(tmp_path)
    assert "FALLBACK (a matmul whose inner size may be 0 (an empty product))" in g and not _calls(g), g


def test_matmul_of_a_batch_marked_dynamic(monkeypatch, tmp_path):
    # mark_dynamic on the batch alone: the weights' sizes stay constants in the call
    w = torch.randn(24, 16)
    dyn_check(monkeypatch, tmp_path, lambda x: F.linear(x, w).relu(), (torch.randn(3, 5, 16),),
              (torch.randn(11, 5, 16),), batch_only=True)
    _no_matmul_fallbacks(ember.stats())
    [g] = _graphs(tmp_path)
    [c] = _calls(g)
    assert "cuBLAS sgemm" in c and "; per call m=5*s0 n=24 k=16 batch=1 lda=16 ldb=16 ldc=24" in c, c


def test_lm_head_of_a_symbolic_batch_is_padded_per_call(monkeypatch, tmp_path):
    # gpt2's LM head over a symbolic batch and sequence: n (the vocabulary) is not a multiple of
    # 16 bytes, so the call computes 4104 columns through padded copies of B and the result
    # where the result takes at least 1 MB at the call's m (lower.c matmul_pad, run.c), else in
    # place; a bias (n elements) or a float32 product is never padded
    w = torch.randn(4097, 64).bfloat16()
    dyn_check(monkeypatch, tmp_path, lambda x: F.linear(x, w).float(), (torch.randn(3, 5, 64).bfloat16(),),
              (torch.randn(7, 5, 64).bfloat16(),), batch_only=True)
    _no_matmul_fallbacks(ember.stats())
    [g] = _graphs(tmp_path)
    [c] = _calls(g)
    assert ("; B through a copy padded to ld 64; result through a copy padded to ld 4104, 4104 columns computed "
            "where the result takes at least 1048576 bytes at the call's m, else in place; per call m=") in c, c


def test_training_graphs(monkeypatch, tmp_path):
    # forward and backward graphs with a symbolic batch
    torch.manual_seed(0)
    w = torch.randn(6, requires_grad=True)

    def f(x):
        return (torch.tanh(x * w) + x.t().t() * 2).sum(-1).softmax(0)

    def step(n):
        x = torch.randn(n, 6, requires_grad=True)
        return (x,)

    from ember.backend import make_backend
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    torch._dynamo.reset()
    cf = torch.compile(f, backend=make_backend(None, _cuda_check=90), dynamic=True)
    for n in (3, 7):
        (x,) = step(n)
        x2 = x.detach().clone().requires_grad_()
        out = cf(x)
        out.backward(torch.ones_like(out))
        ref = f(x2)
        ref.backward(torch.ones_like(ref))
        assert_same(out, ref)
        assert_same(x.grad, x2.grad)
    s = ember.stats()
    # the forward compiled once for every size; the backward too, or (what the CPU target does
    # with it too: docs/DYNAMIC_SHAPES.md, stage 7) per shape for a reason that is not the CUDA target's
    assert s["graphs"] == 2 and s.get("cuda_checked_symbolic", 0) + len(s["symbolic_refused"]) == 2, s
    assert s.get("cuda_checked_symbolic", 0) >= 1, s


def test_static_graphs_take_no_sizes(monkeypatch, tmp_path):
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    cuda_codegen_check(lambda x: (x.sin() * 2, x.sum(-1)), torch.randn(8, 40))
    [src] = _sources(tmp_path)
    assert "int64_t s0" not in src and "em_imin" not in src, src
    assert not ember.stats().get("cuda_checked_symbolic"), ember.stats()


@pytest.mark.parametrize("name", ["bert"])
def test_hf_model_inference_graphs(name):
    # the models suite's tiny BERT (tests/models.py; distilbert and roberta pass too, but each
    # takes half a minute here), inference with dynamic=True: one graph, generated with symbolic
    # sizes and compiled by NVRTC
    import models as M
    from ember.backend import cuda_codegen_check
    if not M.HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    torch.manual_seed(0)
    model = M.build_hf(name, False, "eager").eval()
    batch = M.hf_batch(name, model, False, torch.Generator().manual_seed(7))
    ember.reset()
    with torch.no_grad():
        cuda_codegen_check(lambda: model(**batch).logits, dynamic=True)
    s = ember.stats()
    assert s.get("cuda_checked_symbolic") == 1 and not s["symbolic_refused"], s
    assert s["cuda_checked_kernels"] >= 10, s


def test_roll_over_symbolic_dims(monkeypatch, tmp_path):
    # roll over symbolic dims: (i + k*s - shift) mod s, generated once and compiled by NVRTC
    from test_dynamic import rolls
    dyn_check(monkeypatch, tmp_path, rolls, (torch.randn(4, 7),), (torch.randn(9, 12),))
    assert ember.stats()["fallbacks"] == {}, ember.stats()["fallbacks"]


def test_conv_net_pointwise_and_pool_kernels(monkeypatch, tmp_path):
    # a conv net with dynamic=True (NHWC activations, sizes s0 and the image's): a pointwise
    # kernel's loops merge in memory order (N with H*W, C innermost), so its index takes no
    # division by a size; the max pool's 3x3 windows are short rows, a thread each, over a
    # stored padded activation
    from test_layout import _sym_model
    from ember.backend import make_backend
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    torch._dynamo.reset()
    m = _sym_model()
    cf = torch.compile(m, backend=make_backend(None, _cuda_check=90), dynamic=True)
    with torch.no_grad():
        for n, hw in [(2, 32), (3, 24)]:
            x = torch.randn(n, 3, hw, hw)
            for g, w in zip(cf(x), m(x)):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert ember.stats().get("cuda_checked_symbolic") == 1, ember.stats()
    [src] = _sources(tmp_path)
    kernels = src.split("/* kernel ")[1:]
    pool = [k for k in kernels if "computes amax" in k.split("\n")[0]]
    assert pool and all("a thread per output point (short rows, symbolic sizes)" in k for k in pool), pool
    # the padded activation is stored NHWC (layout.c restrides its windows, fuse.c stores it):
    # the windows read it by their strides, with no division, where a fused pad's index through
    # them divided by the padded width
    # them divided by the padded width; 4 channels a thread (point lanes: the channels' count, 16,
    # is a constant 4 divides), the windows' elements read as vectors
    assert all("4 consecutive points per thread where aligned" in k.split("\n")[0] for k in pool), pool
    for k in pool:
        loads = [ln for ln in k.splitlines() if re.search(r"(= |\*\)&)p\d+\[", ln) and "= S" not in ln]
        assert loads and not any("/" in ln.split("p", 1)[1] or "%" in ln.split("p", 1)[1] for ln in loads), k
    relu = [k.split("\n/* ---- ")[0] for k in kernels
            if re.match(r"\d+: space \[s0, \d+, [^\]]*\], pointwise", k) and "computes relu" in k.split("\n")[0]]
    assert relu, [k.split("\n")[0] for k in kernels]
    for k in relu:
        idx = [ln for ln in k.splitlines() if re.match(r"\s+const int (i\d|lin) = ", ln)]
        assert idx and not any(re.search(r"[/%] \(*s\d", ln) for ln in idx), k
