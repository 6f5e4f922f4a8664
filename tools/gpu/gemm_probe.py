"""The GEMMs of the GPU issue's transformer models, one at a time: eager
against ember (mm / linear / bmm compiled alone), CUDA-event time per call,
median of rounds.  The EMBER_* settings are the process's: run once per
setting (blas.c keeps one plan per shape for the process's life).

    python3 tools/gpu/gemm_probe.py [--only NAME]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

import ember

f32, bf16 = torch.float32, torch.bfloat16


def lin(m, k, n, dt, bias=True):
    return (lambda x, w, *b: F.linear(x, w, *b)), [(m, k), (n, k)] + ([(n,)] if bias else []), dt


def bmm(b, m, k, n, dt):
    return (lambda x, y: torch.bmm(x, y)), [(b, m, k), (b, k, n)], dt


CASES = {
    "gpt2 lm head bf16 2048x768 -> 50257": lin(2048, 768, 50257, bf16, bias=False),
    "gpt2 mlp up bf16 2048x768 -> 3072": lin(2048, 768, 3072, bf16),
    "bert lm head fp32 512x768 -> 30522": lin(512, 768, 30522, f32),
    "bert ffn up fp32 512x768 -> 3072": lin(512, 768, 3072, f32),
    "bert ffn down fp32 512x3072 -> 768": lin(512, 3072, 768, f32),
    "bert qkv fp32 512x768 -> 768": lin(512, 768, 768, f32),
    "bert scores fp32 12x512x64 @ 64x512": bmm(12, 512, 64, 512, f32),
    "bert context fp32 12x512x512 @ 512x64": bmm(12, 512, 512, 64, f32),
}


def time_ms(fn, args, iters=20, rounds=7):
    for _ in range(3):
        fn(*args)
    ts = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn(*args)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / iters)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    for name, (fn, shapes, dt) in CASES.items():
        if a.only and a.only not in name:
            continue
        args = [torch.randn(s, device="cuda").to(dt) * 0.1 for s in shapes]
        ref = fn(*args)
        cf = ember.compile(fn)
        out = cf(*args)
        err = (out.float() - ref.float()).abs().max().item()
        te, tc = time_ms(fn, args), time_ms(cf, args)
        print(f"{name:40s} eager {te:7.3f} ms  ember {tc:7.3f} ms  ({te / tc:.2f}x)  max|diff| {err:.2g}",
              flush=True)


if __name__ == "__main__":
    main()
