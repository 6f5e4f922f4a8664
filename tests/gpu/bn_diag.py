"""On the GPU machine: BatchNorm3d training with bfloat16 activations and
float32 parameters (tests/test_ops.py::test_batch_norm_train's failing case on
cuda): the bias and weight gradients of eager and ember against float64 sums,
per channel, so the run says which side is off.  Usage: python3 tests/gpu/bn_diag.py"""
import copy
import sys

import torch

import ember

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
for shape in [(2, 6, 3, 4, 5), (4, 6, 5, 7), (2, 6, 3, 4, 5)]:
    torch.manual_seed(0)
    bn = {4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)]
    ref = bn(6).to(dev).train()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    m = copy.deepcopy(ref)
    cm = ember.compile(m)
    x = ((torch.randn(shape, device=dev) * 2 + 0.5)).bfloat16()
    g = torch.randn(shape, device=dev).bfloat16()
    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref(xr).backward(g)
    cm(xc).backward(g)
    dims = [0] + list(range(2, len(shape)))
    truth_b = g.double().sum(dims)
    xd = x.double()
    mean = xd.mean(dims, keepdim=True)
    invstd = (xd.var(dims, keepdim=True, unbiased=False) + ref.eps).rsqrt()
    truth_w = (g.double() * (xd - mean) * invstd).sum(dims)
    torch.set_printoptions(precision=6, linewidth=200)
    print(f"== {shape} on {dev}")
    print("bias  fp64 ", truth_b.cpu())
    print("bias  eager", ref.bias.grad.double().cpu(), "max err", (ref.bias.grad.double() - truth_b).abs().max().item())
    print("bias  ember", m.bias.grad.double().cpu(), "max err", (m.bias.grad.double() - truth_b).abs().max().item())
    print("weight eager max err", (ref.weight.grad.double() - truth_w).abs().max().item(),
          " ember max err", (m.weight.grad.double() - truth_w).abs().max().item())
    print("x.grad max |eager - ember|", (xr.grad.float() - xc.grad.float()).abs().max().item())
    print("stats", ember.stats()["kernels"], "kernels, fallbacks", dict(ember.stats()["fallbacks"]))
