"""Host and GPU time per call of torch's fused attention kernels at gpt2's
shape (bf16, [8, 12, 256, 64], causal): the cuDNN kernel AOTAutograd's
graph names on an H100 (ember runs it as a fallback, 13 a step) against
flash and memory-efficient attention.  Host: the call's return, no waiting,
the queue empty before each; GPU: CUDA events over 200 calls.

    python3 tools/gpu/sdpa_cost.py [--b 8 --h 12 --s 256 --d 64]
"""
import argparse
import statistics
import time

import torch

aten = torch.ops.aten


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("b", 8), ("h", 12), ("s", 256), ("d", 64)):
        ap.add_argument(f"--{k}", type=int, default=v)
    a = ap.parse_args()
    q, k, v = (torch.randn(a.b, a.h, a.s, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ops = {
        "cudnn": lambda: aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, True)[0],
        "flash": lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0],
        "efficient": lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, False, 0.0, True)[0],
    }
    ref = ops["cudnn"]()
    for name, f in ops.items():
        try:
            out = f()
        except RuntimeError as e:
            print(f"{name:10s} unavailable: {str(e)[:100]}")
            continue
        for _ in range(20):
            f()
        host = []
        for _ in range(200):
            torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            host.append(time.perf_counter() - t)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(200):
            f()
        e1.record()
        torch.cuda.synchronize()
        print(f"{name:10s} host {statistics.median(host) * 1e6:7.1f} us   GPU {e0.elapsed_time(e1) / 200 * 1e3:7.1f} us"
              f"   max |diff| vs cudnn {(out.float() - ref.float()).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
