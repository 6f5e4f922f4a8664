"""ember on a CUDA GPU, with plain pytest (no EMBER_TEST_DEVICE needed): the
lowered ops and fused patterns of the memory-bound kernel set against eager on
the same device, one kernel where the pattern must fuse; the pointwise lanes
(4 consecutive elements per thread, 16-byte accesses where aligned) on aligned
and misaligned views; training gradients; mode="reduce-overhead" (CUDA graphs)
for inference and training; and the asynchronous index check.  Every test
skips without a GPU.  The other suites run on the GPU too with
EMBER_TEST_DEVICE=cuda (tools/gpu/suites.sh)."""
import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [requires_cuda, pytest.mark.ember_only]

ROOT = Path(__file__).resolve().parents[1]
DEV = "cuda"
f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16


def _r(*shape, dt=f32):
    return torch.randn(*shape, device=DEV).to(dt)


def _nhwc(*shape, dt=f32):
    return _r(*shape, dt=dt).to(memory_format=torch.channels_last)


def _ints(lo, hi, shape):
    return torch.randint(lo, hi, shape, device=DEV)


# name, function, inputs (made on the GPU when the test runs), tolerances, most kernels
CASES = [
    ("sin+cos", lambda a, b: torch.sin(a) + torch.cos(b), lambda: (_r(1000, 37), _r(1000, 37)), {}, 1),
    ("gelu(x*w+b)", lambda a, w, b: F.gelu(a * w + b), lambda: (_r(1000, 37), _r(1000, 37), _r(37)), {}, 1),
    ("softmax", lambda a: torch.softmax(a, -1), lambda: (_r(64, 1000),), {}, 1),
    ("log_softmax", lambda a: torch.log_softmax(a, -1), lambda: (_r(64, 333),), {}, 1),
    ("layer_norm", lambda a, w, b: F.layer_norm(a, (768,), w, b), lambda: (_r(128, 768), _r(768), _r(768)),
     dict(rtol=1e-4, atol=1e-4), 1),
    ("sum inner", lambda a: a.sum(-1), lambda: (_r(256, 4096),), dict(rtol=1e-4, atol=1e-3), None),
    ("sum outer", lambda a: a.sum(0), lambda: (_r(4096, 256),), dict(rtol=1e-4, atol=1e-3), None),
    ("sum all", lambda a: a.sum(), lambda: (_r(1 << 20),), dict(rtol=1e-4, atol=1e-2), None),
    ("amax nan", lambda a: a.amax(1), lambda: (torch.where(_r(64, 64) > 2, float("nan"), _r(64, 64)),), {}, None),
    ("argmax", lambda a: a.argmax(1), lambda: (_r(64, 1000),), {}, None),
    ("argmin all", lambda a: a.argmin(), lambda: (_r(12345),), {}, None),
    ("mean keepdim", lambda a: a - a.mean((0, 2), keepdim=True), lambda: (_r(8, 16, 33),),
     dict(rtol=1e-5, atol=1e-5), None),
    ("var", lambda a: a.var(-1), lambda: (_r(64, 100),), dict(rtol=1e-4, atol=1e-5), None),
    ("permute view", lambda a: (a * 2).permute(0, 2, 1).reshape(8, -1) + 1, lambda: (_r(8, 16, 5),), {}, None),
    ("cat", lambda a, b: torch.cat([a, b * 2], 1), lambda: (_r(8, 3, 5), _r(8, 4, 5)), {}, None),
    ("pad", lambda a: F.pad(a, (1, 2, 0, 3)) * 2, lambda: (_r(4, 5, 6),), {}, None),
    ("where int", lambda a, b: torch.where(a > 0, a, b) * 3, lambda: (_r(33, 7), _ints(-5, 5, (33, 7))), {}, None),
    ("bf16", lambda a, b: F.gelu(a * b).sum(-1), lambda: (_r(64, 256, dt=bf16), _r(64, 256, dt=bf16)),
     dict(rtol=2e-2, atol=2e-2), None),
    ("fp16", lambda a: torch.sigmoid(a) * 2, lambda: (_r(64, 256, dt=f16),), dict(rtol=1e-3, atol=1e-3), None),
    ("int ops", lambda a: (a * 3 + 7) // 2 % 5, lambda: (_ints(-100, 100, (1000,)),), {}, None),
    ("bool", lambda a, b: (a > 0) & (b < 0) | (a == b), lambda: (_r(100), _r(100)), {}, None),
    ("empty", lambda a: a * 2, lambda: (_r(0, 5),), {}, None),
    ("arange", lambda a: a + torch.arange(37, device=DEV), lambda: (_r(1000, 37),), {}, None),
    # the pointwise lanes
    ("lanes: aligned 2-d broadcast", lambda a, w, b: F.gelu(a * w + b),
     lambda: (_r(512, 1024), _r(1024), _r(1024)), {}, 1),
    ("lanes: misaligned slice", lambda a: a[:, 1:1025] * 2 + 1, lambda: (_r(512, 1028),), {}, None),
    ("lanes: aligned slice", lambda a: a[:, 4:1028] * 2 + 1, lambda: (_r(512, 1028),), {}, None),
    ("lanes: tail (n % 4 = 3)", lambda a, b: a * b - 1, lambda: (_r(100003), _r(100003)), {}, None),
    ("lanes: bf16 out", lambda a: torch.tanh(a).to(bf16), lambda: (_r(4096, 256),), {}, None),
    ("lanes: bf16 in, f32 out", lambda a: a.float() * 3, lambda: (_r(4096, 256, dt=bf16),), {}, None),
    ("lanes: int64 and bool", lambda a, b: ((a * 3) > b) & (a != 0),
     lambda: (_ints(-9, 9, (65536,)), _ints(-9, 9, (65536,))), {}, None),
    ("lanes: x[i] + x[i+1]", lambda a: a[:-1] + a[1:], lambda: (_r(65537),), {}, None),
    ("lanes: transposed", lambda a: a.t() * 2, lambda: (_r(1024, 512),), {}, None),
    ("lanes: step 5", lambda a: a[::5] * 2 + 1, lambda: (_r(5 * 65536),), {}, None),
    ("lanes: 2-d, step 5 inner", lambda a: a[:, ::5] * 2, lambda: (_r(256, 5 * 1024),), {}, None),
    # NHWC data to an NCHW result, h and w one loop: tiled through shared memory
    ("tile: NHWC to NCHW, merged h and w", lambda x, y: (x * 2 + y).contiguous(),
     lambda: (_nhwc(8, 48, 56, 56), _nhwc(8, 48, 56, 56)), {}, 1),
    # lanes that walk an outer loop (codegen_cuda.c pw_walk): a BatchNorm's per-channel scale, a
    # gate's sigmoid computed once for 4 steps of the walked loop
    ("walk: batch norm + silu, NHWC", lambda x, m, v, w, b: F.silu(F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5)),
     lambda: (_nhwc(16, 256, 32, 32), _r(256), _r(256).abs() + 0.5, _r(256), _r(256)), {}, 1),
    ("walk: gated batch norm, bf16 NHWC",
     lambda x, g, m, v, w, b: F.silu(F.batch_norm(x * torch.sigmoid(g), m, v, w, b, False, 0.1, 1e-5)),
     lambda: (_nhwc(32, 384, 28, 28, dt=bf16), _r(32, 384, 1, 1, dt=bf16), _r(384), _r(384).abs() + 0.5, _r(384),
              _r(384)), dict(rtol=2e-2, atol=2e-2), 1),
]


@pytest.mark.parametrize("name,fn,make,tol,most_kernels", CASES, ids=[c[0] for c in CASES])
def test_op_on_gpu(ember, name, fn, make, tol, most_kernels):
    args = make()
    got = ember.compile(fn, dynamic=False)(*args)
    want = fn(*args)
    assert got.device == want.device and got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, **(tol or dict(rtol=1.3e-5, atol=1.5e-5)))
    if most_kernels is not None:   # the pattern fuses: compiled by ember, into one kernel
        st = ember.stats()
        assert 1 <= st["kernels"] <= most_kernels, f"{name}: {st['kernels']} kernels, expected one ({st})"


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
def test_mixconv_chunks_against_eager(ember, dt):
    """timm's MixedConv2d: a value split by channels for depthwise
    convolutions of two kernel sizes, then cat (layout.c restride_chunks:
    the value NHWC, each chunk copied dense for cuDNN), on channels-last
    and contiguous images."""
    def f(x, k1, k3, k5, k2):
        y = torch.relu(F.conv2d(x, k1))
        a, b = torch.split(y, [48, 16], 1)
        z = torch.cat([F.conv2d(a, k3, padding=1, groups=48), F.conv2d(b, k5, padding=2, groups=16)], 1)
        return F.conv2d(torch.relu(z * 0.5 + 1), k2)

    ws = (_r(64, 24, 1, 1, dt=dt), _r(48, 1, 3, 3, dt=dt), _r(16, 1, 5, 5, dt=dt), _r(32, 64, 1, 1, dt=dt))
    tol = dict(rtol=2e-2, atol=5e-2) if dt == bf16 else dict(rtol=1e-4, atol=1e-4)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False), torch.no_grad():
        for x in (_nhwc(8, 24, 28, 28, dt=dt), _r(8, 24, 28, 28, dt=dt)):
            torch.testing.assert_close(ember.compile(f, dynamic=False)(x, *ws), f(x, *ws), **tol)
            ember.reset()


@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "bf16-autocast"])
def test_transposed_matmul_results_against_eager(ember, autocast):
    """gMLP's spatial gate (a Linear over the tokens between two transposes)
    and MLP-Mixer's token MLP: layout.c transpose_results stores the matmul's
    result with a unit stride along its rows (the call computes W v[b], its
    operands swapped), inference with frozen weights (a bmm) and a training
    step (an mm of the copied rows, and the backward's matmuls)."""
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj = torch.nn.LayerNorm(384), torch.nn.Linear(196, 196)

        def forward(self, x):
            u, v = x.chunk(2, dim=-1)
            return u * self.proj(self.norm(v).transpose(-1, -2)).transpose(-1, -2)

    class Mixer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc1, self.fc2 = torch.nn.LayerNorm(768), torch.nn.Linear(196, 384), torch.nn.Linear(384, 196)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.norm(x).transpose(1, 2)))).transpose(1, 2)

    tol = dict(rtol=2e-2, atol=5e-2) if autocast else dict(rtol=1e-4, atol=1e-4)
    torch.manual_seed(0)
    for cls in (Gate, Mixer):
        m = cls().to(DEV)
        x = _r(8, 196, 768)
        with torch.autocast("cuda", dtype=bf16, enabled=autocast):
            frozen = copy.deepcopy(m).requires_grad_(False)
            with torch.no_grad():
                torch.testing.assert_close(ember.compile(frozen, dynamic=False)(x), frozen(x), **tol)
            ember.reset()
            mc = copy.deepcopy(m)
            ember.compile(mc, dynamic=False)(x).square().mean().backward()
            m(x).square().mean().backward()
        for p, q in zip(mc.parameters(), m.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol)
        ember.reset()


def test_strided_attention_mask_runs_fused_attention(ember):
    """A mask broadcast from the query dim (Hugging Face's under
    torch.compile) made the traced graph torch's math attention; made
    contiguous before AOTAutograd, it runs a fused kernel (a fallback to
    torch's op), with eager's answers."""
    q, k, v = (_r(4, 8, 256, 64, dt=bf16) for _ in range(3))
    keep = torch.ones(256, dtype=torch.bool, device=DEV)

    def f(q, k, v, keep):
        mask = keep[None, None, :, None].expand(q.shape[0], 1, q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    got = ember.compile(f, dynamic=False)(q, k, v, keep)
    torch.testing.assert_close(got, f(q, k, v, keep), rtol=2e-2, atol=2e-2)
    fused = [op for op in ember.stats()["fallbacks"] if "attention" in op and "math" not in op]
    assert fused, f"no fused attention op ran: {ember.stats()['fallbacks']}"


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.GELU(),
                               torch.nn.Linear(128, 10)).to(DEV)


def test_mlp_training_gradients(ember):
    m = _mlp()
    m2 = copy.deepcopy(m)
    cm = ember.compile(m2)
    x = _r(32, 64)
    cm(x).square().mean().backward()
    m(x).square().mean().backward()
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


def test_reduce_overhead_inference_keeps_earlier_outputs(ember):
    """Replays give fresh results for new inputs, and tensors returned by
    earlier calls are not overwritten by later replays."""
    m = _mlp().eval()
    cm = ember.compile(copy.deepcopy(m), mode="reduce-overhead")
    outs, wants = [], []
    with torch.no_grad():
        for _ in range(5):
            x = _r(32, 64)
            outs.append(cm(x))
            wants.append(m(x))
    for o, w in zip(outs, wants):
        torch.testing.assert_close(o, w, rtol=1e-4, atol=1e-5)


def test_reduce_overhead_training_matches_eager(ember):
    m1 = _mlp()
    m2 = copy.deepcopy(m1)
    cm = ember.compile(m2, mode="reduce-overhead")
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-3)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-3)
    for _ in range(4):
        x = _r(32, 64)
        for mod, opt in ((m1, o1), (cm, o2)):
            opt.zero_grad(True)
            mod(x).square().mean().backward()
            opt.step()
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)


_INDEX_CHILD = textwrap.dedent("""
    import sys, torch, torch.nn.functional as F, ember
    w = torch.randn(100, 16, device="cuda")
    def f(ids, w):
        return F.embedding(ids, w) * 2
    cf = ember.compile(f)
    ids = torch.randint(0, 100, (4, 8), device="cuda")
    torch.testing.assert_close(cf(ids, w), f(ids, w))
    bad = ids.clone()
    bad[2, 3] = 1234
    cf(bad, w)                      # no wait: returns at once
    try:
        torch.cuda.synchronize()
        sys.exit("no CUDA error after the kernel's trap")
    except Exception:               # torch.AcceleratorError / RuntimeError
        pass
    try:
        cf(ids, w)
    except Exception as e:
        print("RAISED", type(e).__name__, str(e).replace(chr(10), " "))
        sys.exit(0)
    sys.exit("the call after the trap raised nothing")
""")


def test_out_of_range_index_raises_on_the_next_call():
    """The asynchronous index check (the default, src/run.c): an index out of
    range makes the kernel trap, torch's next synchronizing call raises a CUDA
    error, and the compiled function's next call raises an error naming the
    op and the index.  In a child process: the trap ends its CUDA
    context."""
    env = {k: v for k, v in os.environ.items() if k != "EMBER_CUDA_INDEX_WAIT"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _INDEX_CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RAISED"))
    assert "1234" in line and "embedding" in line, line
