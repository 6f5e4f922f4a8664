"""Which cuBLAS entry point picks which kernel: bert-base b1's float32 GEMMs
timed through each of torch's entry points (mm with the weight transposed,
as Inductor's extern mm calls it; addmm, as eager's linear calls it; bmm)
and through ember (the same expression compiled alone), with the kernel the
profiler saw for each.  CUDA-event time per call, median of rounds, loops of
50 calls so that the GPU, not the host, sets the time (every kernel here
runs 20 us or more).

    python3 tools/gpu/gemm_api.py [--only NAME]
"""
import argparse

import torch

import ember
from gemm_probe import time_ms  # this folder: python3 tools/gpu/gemm_api.py puts it on sys.path


def kernels(fn, args):
    """The CUDA kernels one call launches, slowest first, with their times."""
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
    ev = [e for e in p.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
    ev.sort(key=lambda e: -e.self_device_time_total)
    return [f"{e.self_device_time_total / 5:7.1f} us {e.key[:110]}" for e in ev[:3]]


def linear_cases(m, k, n, dt=torch.float32, w_kn=False):
    """w [n, k] read transposed (nn.Linear), or with w_kn [k, n] read as it is
    (gpt2's Conv1D: addmm(b, x, w))."""
    def mk():
        x = torch.randn(m, k, device="cuda").to(dt)
        w = (torch.randn(n, k, device="cuda") * k ** -0.5).to(dt)
        if w_kn:
            w = w.t().contiguous().t()  # [n, k] view of a [k, n] matrix: w.t() is [k, n] contiguous
        b = torch.randn(n, device="cuda").to(dt)
        return x, w, b
    return {
        "torch.mm(x, w.t())": (lambda x, w, b: torch.mm(x, w.t()), mk),
        "torch.addmm(b, x, w.t())": (lambda x, w, b: torch.addmm(b, x, w.t()), mk),
        "ember x @ w.t()": ("ember", lambda x, w, b: x @ w.t(), mk),
        "ember x @ w.t() + b": ("ember", lambda x, w, b: x @ w.t() + b, mk),
    }


def bmm_cases(bs, m, k, n, trans_b):
    def mk():
        x = torch.randn(bs, m, k, device="cuda")
        y = torch.randn(bs, n, k, device="cuda").transpose(1, 2) if trans_b else torch.randn(bs, k, n, device="cuda")
        return x, y
    return {
        "torch.bmm": (lambda x, y: torch.bmm(x, y), mk),
        "ember bmm": ("ember", lambda x, y: torch.bmm(x, y), mk),
    }


SHAPES = {
    "ffn up 512x768 -> 3072": linear_cases(512, 768, 3072),
    "ffn down 512x3072 -> 768": linear_cases(512, 3072, 768),
    "qkv / out 512x768 -> 768": linear_cases(512, 768, 768),
    "lm head 512x768 -> 30522": linear_cases(512, 768, 30522),
    "scores 12x512x64 @ (12x512x64)^T": bmm_cases(12, 512, 64, 512, True),
    "context 12x512x512 @ 12x512x64": bmm_cases(12, 512, 512, 64, False),
    "gpt2 bf16 qkv 2048x768 -> 2304 (Conv1D)": linear_cases(2048, 768, 2304, torch.bfloat16, True),
    "gpt2 bf16 proj 2048x768 -> 768 (Conv1D)": linear_cases(2048, 768, 768, torch.bfloat16, True),
    "gpt2 bf16 mlp up 2048x768 -> 3072 (Conv1D)": linear_cases(2048, 768, 3072, torch.bfloat16, True),
    "gpt2 bf16 mlp down 2048x3072 -> 768 (Conv1D)": linear_cases(2048, 3072, 768, torch.bfloat16, True),
    "vit bf16 qkv 6304x768 -> 2304": linear_cases(6304, 768, 2304, torch.bfloat16),
    "vit bf16 mlp down 6304x3072 -> 768": linear_cases(6304, 3072, 768, torch.bfloat16),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="comma-separated parts of the shapes' names")
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"blas backend {torch.backends.cuda.preferred_blas_library()}, "
          f"tf32 {torch.backends.cuda.matmul.allow_tf32}")
    for shape, cases in SHAPES.items():
        if a.only and not any(o in shape for o in a.only.split(",")):
            continue
        print(f"== {shape}")
        for label, case in cases.items():
            torch.manual_seed(1)
            if case[0] == "ember":
                _, fn, mk = case
                args = mk()
                ref = fn(*args)
                fn = ember.compile(fn)
                err = f"  max|diff| vs eager {(fn(*args) - ref).abs().max().item():.2g}"
            else:
                fn, mk = case
                args = mk()
                err = ""
            print(f"  {label:28s} {time_ms(fn, args, iters=50) * 1e3:8.1f} us{err}")
            for line in kernels(fn, args):
                print(f"      {line}")
        if "lm head" in shape or "torch.mm(x, w.t())" not in cases:
            continue
        # the same mm under torch's other BLAS backend
        fn, mk = cases["torch.mm(x, w.t())"]
        torch.manual_seed(1)
        args = mk()
        prev = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library("cublaslt")
        try:
            print(f"  {'torch.mm, cublaslt backend':28s} {time_ms(fn, args, iters=50) * 1e3:8.1f} us")
            for line in kernels(fn, args):
                print(f"      {line}")
        finally:
            torch.backends.cuda.preferred_blas_library(prev)


if __name__ == "__main__":
    main()
