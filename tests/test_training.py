"""Training through ember: forward and backward graphs (AOTAutograd) compiled,
gradients and optimizer trajectories equal to eager's."""
from __future__ import annotations

import copy
import gc
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, assert_same, compile_fn, ember_stats


class MLP(nn.Module):
    def __init__(self, d_in=24, d_hid=48, d_out=16):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hid)
        self.fc2 = nn.Linear(d_hid, d_out)
        self.ln = nn.LayerNorm(d_out)

    def forward(self, x):
        return self.ln(self.fc2(F.relu(self.fc1(x))))


def _grads_equal(m_ref, m_cmp, **tol):
    for (n, p), (_, q) in zip(m_ref.named_parameters(), m_cmp.named_parameters()):
        assert q.grad is not None, f"{n}: no gradient through the compiled module"
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"grad of {n}: {m}", **tol)


def _train_step_compare(model, make_input, loss_fn, **tol):
    ref = model
    cmp_mod = copy.deepcopy(model)
    cmod = compile_fn(cmp_mod)
    x = make_input()
    out_ref = ref(x)
    out_cmp = cmod(x)
    assert_same(out_cmp, out_ref, msg="forward:", **tol)
    loss_ref = loss_fn(out_ref)
    loss_cmp = loss_fn(out_cmp)
    loss_ref.backward()
    loss_cmp.backward()
    _grads_equal(ref, cmp_mod, **tol)
    return cmod, cmp_mod


def test_mlp_gradients():
    torch.manual_seed(1)
    model = MLP().to(DEVICE)
    target = torch.randn(32, 16, device=DEVICE)
    _train_step_compare(model, lambda: torch.randn(32, 24, device=DEVICE),
                        lambda out: F.mse_loss(out, target))
    st = ember_stats()
    assert st["graphs"] >= 2, f"forward and backward should both be compiled: {st}"
    assert st["whole_graph_fallbacks"] == 0, st


def test_mlp_input_gradient_and_second_step():
    torch.manual_seed(2)
    model = MLP().to(DEVICE)
    cmp_mod = copy.deepcopy(model)
    cmod = compile_fn(cmp_mod)
    for step in range(2):
        x = torch.randn(8, 24, device=DEVICE)
        x_ref = x.clone().requires_grad_(True)
        x_cmp = x.clone().requires_grad_(True)
        (model(x_ref).sin().sum()).backward()
        (cmod(x_cmp).sin().sum()).backward()
        torch.testing.assert_close(x_cmp.grad, x_ref.grad, msg=lambda m: f"step {step} x.grad: {m}")
        _grads_equal(model, cmp_mod)   # gradients accumulate over the two steps


def test_transformer_block_gradients():
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                       batch_first=True).to(DEVICE)
    layer.train()
    _train_step_compare(layer, lambda: torch.randn(2, 7, 32, device=DEVICE),
                        lambda out: (out * torch.linspace(-1, 1, 32, device=DEVICE)).pow(2).mean(),
                        atol=1e-4, rtol=1e-4)
    st = ember_stats()
    assert st["graphs"] >= 2, f"forward and backward should both be compiled: {st}"
    assert st["kernels"] >= 2, st


def test_adam_three_steps():
    torch.manual_seed(4)
    model = MLP().to(DEVICE)
    cmp_mod = copy.deepcopy(model)
    cmod = compile_fn(cmp_mod)
    opt_ref = torch.optim.Adam(model.parameters(), lr=1e-2)
    opt_cmp = torch.optim.Adam(cmp_mod.parameters(), lr=1e-2)
    data = [(torch.randn(16, 24, device=DEVICE), torch.randn(16, 16, device=DEVICE)) for _ in range(3)]
    for step, (x, y) in enumerate(data):
        for m, o in ((model, opt_ref), (cmod, opt_cmp)):
            o.zero_grad()
        loss_ref = F.mse_loss(model(x), y)
        loss_cmp = F.mse_loss(cmod(x), y)
        torch.testing.assert_close(loss_cmp, loss_ref, rtol=1e-4, atol=1e-6,
                                   msg=lambda m: f"loss at step {step}: {m}")
        loss_ref.backward()
        loss_cmp.backward()
        opt_ref.step()
        opt_cmp.step()
    for (n, p), (_, q) in zip(model.named_parameters(), cmp_mod.named_parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"parameter {n} after 3 Adam steps: {m}")
    st = ember_stats()
    assert st["graphs"] >= 2, st


def test_inference_under_no_grad_after_training():
    torch.manual_seed(5)
    model = MLP().to(DEVICE)
    cmod = compile_fn(model)
    x = torch.randn(4, 24, device=DEVICE)
    cmod(x).sum().backward()
    with torch.no_grad():
        assert_same(cmod(x), model(x))
    model.eval()
    with torch.no_grad():
        assert_same(cmod(x), model(x))


def test_backward_of_fused_pointwise_and_reductions():
    """Backward graphs use *_backward ops (threshold/gelu/sigmoid/tanh)."""
    for approx in ("none", "tanh"):
        x = torch.randn(6, 10, requires_grad=True, device=DEVICE)
        w = torch.randn(6, 10, requires_grad=True, device=DEVICE)
        x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)

        def f(a, b, approx=approx):
            h = F.gelu(a * b, approximate=approx) + torch.sigmoid(a) * torch.tanh(b) + F.relu(a - b)
            return F.log_softmax(h, -1).sum() + h.var(0).sum()

        cf = compile_fn(f)
        f(x, w).backward()
        cf(x2, w2).backward()
        torch.testing.assert_close(x2.grad, x.grad, msg=lambda m: f"{approx} x.grad: {m}")
        torch.testing.assert_close(w2.grad, w.grad, msg=lambda m: f"{approx} w.grad: {m}")


@pytest.mark.slow
def test_transformer_adam_steps():
    """Losses equal (rtol 1e-4) over three Adam steps.  Parameters: Adam
    divides each gradient by its own running RMS, so elements whose gradient is
    rounding noise (e.g. the key-projection bias, whose exact gradient is 0)
    move by up to ~lr per step whatever the noise; they are compared to within
    lr / 5 (2e-4) absolute."""
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                       batch_first=True).to(DEVICE)
    cmp_layer = copy.deepcopy(layer)
    clayer = compile_fn(cmp_layer)
    o1 = torch.optim.Adam(layer.parameters(), lr=1e-3)
    o2 = torch.optim.Adam(cmp_layer.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(3, 5, 32, device=DEVICE)
        o1.zero_grad()
        o2.zero_grad()
        l1 = layer(x).pow(2).mean()
        l2 = clayer(x).pow(2).mean()
        torch.testing.assert_close(l2, l1, rtol=1e-4, atol=1e-6)
        l1.backward()
        l2.backward()
        o1.step()
        o2.step()
    for (n, p), (_, q) in zip(layer.named_parameters(), cmp_layer.named_parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=2e-4, msg=lambda m: f"{n}: {m}")


class _Stem(nn.Module):
    """conv (torch) -> BatchNorm -> ReLU -> conv with stride 2 -> BatchNorm: the
    BatchNorm statistics and their backward are ember's reductions over
    (N, H, W), read across channels-first strides."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * c)

    def forward(self, x):
        return self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))


@pytest.mark.parametrize("shape", [(4, 8, 16, 16), (4, 64, 4, 4), (8, 16, 2, 2), (2, 24, 1, 1), (3, 5, 7, 9)],
                         ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_training_shapes(shape):
    # BatchNorm in train() at the sizes a ResNet's stages reach, on the test
    # device: outputs, every gradient and the running statistics
    n, c, h, w = shape
    torch.manual_seed(0)
    model = _Stem(c).to(DEVICE).train()
    cmp_mod = copy.deepcopy(model)
    cmod = compile_fn(cmp_mod)
    x = torch.randn(n, 3, h, w, device=DEVICE)
    g = torch.randn_like(model(x))
    model.load_state_dict(cmp_mod.state_dict())  # undo the probe's running-statistics update
    out_ref, out_cmp = model(x), cmod(x)
    assert_same(out_cmp, out_ref, msg="forward:", atol=1e-4, rtol=1e-4)
    (out_ref * g).sum().backward()
    (out_cmp * g).sum().backward()
    _grads_equal(model, cmp_mod, atol=1e-3, rtol=1e-3)
    for (name, b), (_, b2) in zip(model.named_buffers(), cmp_mod.named_buffers()):
        torch.testing.assert_close(b2, b, msg=lambda m: f"buffer {name}: {m}", atol=1e-5, rtol=1e-5)


def test_reduce_overhead_training_steps():
    # mode="reduce-overhead" (CUDA graphs on a GPU; the plain path on the CPU):
    # three SGD steps of a conv/BatchNorm stack give eager's losses, parameters
    # and running statistics, and each step's returned output is still its own
    # after later replays (outputs are copied out of the graph's memory)
    torch.manual_seed(0)
    model = _Stem(8).to(DEVICE).train()
    cmp_mod = copy.deepcopy(model)
    cmod = compile_fn(cmp_mod, mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, cmp_mod)]
    kept = []
    for step in range(4):
        x = torch.randn(4, 3, 8, 8, device=DEVICE)
        outs = []
        for m, opt in ((model, opts[0]), (cmod, opts[1])):
            opt.zero_grad(set_to_none=True)
            out = m(x)
            out.square().mean().backward()
            opt.step()
            outs.append(out)
        assert_same(outs[1], outs[0], msg=f"step {step}:", atol=1e-4, rtol=1e-4)
        kept.append((outs[1].detach(), outs[0].detach().clone()))
    for step, (got, want) in enumerate(kept):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m: f"output of step {step}: {m}")
    for (n, p), (_, q) in zip(model.named_parameters(), cmp_mod.named_parameters()):
        torch.testing.assert_close(q, p, atol=1e-4, rtol=1e-4, msg=lambda m: f"{n}: {m}")
    for (n, b), (_, b2) in zip(model.named_buffers(), cmp_mod.named_buffers()):
        torch.testing.assert_close(b2, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"buffer {n}: {m}")


def _ro_pair(seed=0):
    torch.manual_seed(seed)
    model = _Stem(8).to(DEVICE).train()
    cmp_mod = copy.deepcopy(model)
    return model, cmp_mod, compile_fn(cmp_mod, mode="reduce-overhead")


def _grads_and_buffers_equal(model, cmp_mod, what):
    for (n, p), (_, q) in zip(model.named_parameters(), cmp_mod.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{what}: grad of {n}: {m}")
    for (n, b), (_, b2) in zip(model.named_buffers(), cmp_mod.named_buffers()):
        torch.testing.assert_close(b2, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: buffer {n}: {m}")


def _ro_step(model, cmod):
    """One plain step on both, on a new input: gradients dropped, forward, backward."""
    x = torch.randn(4, 3, 8, 8, device=DEVICE)
    for m in (model, cmod):
        for p in m.parameters():
            p.grad = None
        m(x).square().mean().backward()


def test_reduce_overhead_saved_tensors_lent_in_steady_steps():
    # under CUDA graphs the forward graph lends the backward the tensors it saves
    # (no copies): once both graphs are captured, every forward and backward
    # call is a replay, none runs outside the graph
    model, cmp_mod, cmod = _ro_pair(1)
    for step in range(6):
        if step == 3:
            before = ember_stats()
        _ro_step(model, cmod)
        _grads_and_buffers_equal(model, cmp_mod, f"step {step}")
    if DEVICE == "cuda":
        st = ember_stats()
        assert st.get("cudagraph_replays", 0) - before.get("cudagraph_replays", 0) == 6, st
        assert st.get("cudagraph_runs_outside", 0) == before.get("cudagraph_runs_outside", 0), st


@pytest.mark.parametrize("set_to_none", [True, False])
def test_reduce_overhead_gradients_accumulated(set_to_none):
    # gradients accumulated over two backward calls: with set_to_none, the
    # first call's lent gradients become .grad and are still held at the
    # second, so the backward graph is captured again into its own memory (on
    # a GPU); zeroed in place, .grad is the caller's own and the lent
    # gradients are only added to it.  Every call stays a replay and the
    # gradients equal eager's at each step.
    model, cmp_mod, cmod = _ro_pair(3)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, cmp_mod)]
    for step in range(5):
        if step == 2:
            before = ember_stats()
        for m, opt in ((model, opts[0]), (cmod, opts[1])):
            opt.zero_grad(set_to_none=set_to_none)
            for micro in range(2):
                torch.manual_seed(100 * step + micro)
                m(torch.randn(4, 3, 8, 8, device=DEVICE)).square().mean().backward()
        _grads_and_buffers_equal(model, cmp_mod, f"step {step}")
        for opt in opts:
            opt.step()
    if DEVICE == "cuda":
        st = ember_stats()
        assert st.get("cudagraph_runs_outside", 0) == before.get("cudagraph_runs_outside", 0), st
        if set_to_none:
            assert st.get("cudagraph_recaptures", 0) >= 1, st


def test_reduce_overhead_two_forwards_before_backward():
    # two forward calls before one backward of both: the first call's saved
    # tensors are still held when the second runs, so the second must not
    # overwrite them (it runs outside the CUDA graph); gradients equal eager's.
    # Then a forward whose backward never runs, and steps as usual again.
    model, cmp_mod, cmod = _ro_pair(2)
    for step in range(3):  # warm-up and capture
        _ro_step(model, cmod)
    a, b = torch.randn(4, 3, 8, 8, device=DEVICE), torch.randn(4, 3, 8, 8, device=DEVICE)
    for m in (model, cmod):
        for p in m.parameters():
            p.grad = None
        (m(a).square().mean() + m(b).abs().mean()).backward()
    _grads_and_buffers_equal(model, cmp_mod, "two forwards")
    for m in (model, cmod):
        for p in m.parameters():
            p.grad = None
        first = m(a).sin().mean()
        second = m(b).square().mean()  # a forward while the first's saved tensors are held
        first.backward()
        del second
    _grads_and_buffers_equal(model, cmp_mod, "backward of the earlier forward")
    for step in range(2):
        _ro_step(model, cmod)
        _grads_and_buffers_equal(model, cmp_mod, f"after, step {step}")


def test_reduce_overhead_outputs_of_every_kind():
    # outputs of several dtypes, a transposed one and a non-tensor, through
    # CUDA-graph replays: dtypes and strides as eager's, none overwritten later
    def fn(x):
        y = torch.tanh(x) * 2
        return y, torch.argmax(x, -1), x > 0, y.t(), x.shape[0]

    cfn = compile_fn(fn, mode="reduce-overhead")
    got, want = [], []
    for _ in range(5):
        x = torch.randn(6, 10, device=DEVICE)
        got.append(cfn(x))
        want.append(fn(x))
    for g, w in zip(got, want):
        assert g[4] == w[4]
        for a, b in zip(g[:4], w[:4]):
            assert a.dtype == b.dtype and a.stride() == b.stride()
            torch.testing.assert_close(a, b)


class _CosMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(24, 64), nn.Linear(64, 24)

    def forward(self, x):
        return self.fc2(torch.cos(torch.cos(self.fc1(x))))


@pytest.mark.ember_only
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_min_cut_partition(monkeypatch, mode):
    # options={"partition": "min_cut"} (Inductor's partitioner, ember's
    # default): the forward graph saves fewer activations than with
    # AOTAutograd's default partition (fc1's output alone; both cosines are
    # recomputed in the backward graph), and three Adam steps still follow
    # eager's
    from ember import backend
    saved = []  # per forward graph compiled: the activations it saves (not its inputs)
    orig = backend.compile_graph

    def counting(gm, example_inputs, opts):
        if opts.get("_lend_from") not in (None, 0):  # a training step's forward graph
            out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
            saved.append(sum(1 for a in out[opts["_lend_from"]:] if a.op != "placeholder"))
        return orig(gm, example_inputs, opts)
    monkeypatch.setattr(backend, "compile_graph", counting)
    torch.manual_seed(5)
    model = _CosMLP().to(DEVICE)
    data = [(torch.randn(16, 24, device=DEVICE), torch.randn(16, 24, device=DEVICE)) for _ in range(3)]
    for part in ("default", "min_cut"):
        ref, cmp_mod = copy.deepcopy(model), copy.deepcopy(model)
        cmod = compile_fn(cmp_mod, mode=mode, options={"partition": part})
        opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
        opt_cmp = torch.optim.Adam(cmp_mod.parameters(), lr=1e-2)
        for step, (x, y) in enumerate(data):
            for m, o in ((ref, opt_ref), (cmod, opt_cmp)):
                o.zero_grad(set_to_none=True)
                F.mse_loss(m(x), y).backward()
                o.step()
            for (n, p), (_, q) in zip(ref.named_parameters(), cmp_mod.named_parameters()):
                torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-4, msg=lambda m: f"{part} step {step} {n}: {m}")
    assert len(saved) == 2 and saved[1] < saved[0], f"activations saved (default, min_cut): {saved}"


@pytest.mark.ember_only
def test_unknown_partition_is_named():
    # a bad option value raises when the function is compiled, naming the option and its choices
    with pytest.raises(ValueError, match="option partition must be one of min_cut|default, not 'greedy'"):
        compile_fn(_CosMLP().to(DEVICE), options={"partition": "greedy"})


@pytest.mark.ember_only
@pytest.mark.skipif(sys.version_info >= (3, 14), reason="Python 3.14's incremental collector is left alone")
def test_full_collections_paused_while_compiling(monkeypatch):
    # Python's full collections wait while ember compiles a step's graphs (the
    # forward one inside AOTAutograd's tracing, the backward one at the first
    # backward call); young ones still run, and Python's thresholds are back
    # afterwards
    from ember import backend
    seen = []
    orig = backend.compile_graph

    def recording(gm, example_inputs, opts):
        seen.append(gc.get_threshold())
        return orig(gm, example_inputs, opts)
    monkeypatch.setattr(backend, "compile_graph", recording)
    before = gc.get_threshold()
    torch.manual_seed(6)
    model = _CosMLP().to(DEVICE)
    ref = copy.deepcopy(model)
    x = torch.randn(8, 24, device=DEVICE)
    cmod = compile_fn(model)
    cmod(x).sum().backward()
    ref(x).sum().backward()
    assert gc.get_threshold() == before
    assert len(seen) == 2, seen  # the forward graph and the backward graph
    for th in seen:
        assert th[:2] == before[:2]
        assert th[2] >= 1 << 30, (th, before)
    for (n, p), (_, q) in zip(ref.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{n}: {m}")
