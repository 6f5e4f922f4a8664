"""What a fork costs the parent in a process like ember's at its first call
(torch, a CUDA context, a model on the GPU), against a bare Python process:
the CUDA build forks a child per NVRTC chunk (src/build_cuda.c).

    python3 tools/gpu/fork_cost.py [densenet121]
"""
import os
import sys
import time


def fork_ms(n=8):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        out.append((time.perf_counter() - t) * 1e3)
        os.waitpid(pid, 0)
    return sorted(out)[len(out) // 2]


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS"))


print(f"bare python: fork {fork_ms():.2f} ms (RSS {rss_mb()} MB)")
import torch  # noqa: E402
print(f"torch imported: fork {fork_ms():.2f} ms (RSS {rss_mb()} MB)")
torch.zeros(1, device="cuda")
print(f"CUDA context: fork {fork_ms():.2f} ms (RSS {rss_mb()} MB)")
import torchvision  # noqa: E402
m = getattr(torchvision.models, sys.argv[1] if len(sys.argv) > 1 else "densenet121")().cuda()
x = torch.randn(16, 3, 128, 128, device="cuda")
m(x).sum().backward()
torch.cuda.synchronize()
print(f"model trained a step: fork {fork_ms():.2f} ms (RSS {rss_mb()} MB)")
