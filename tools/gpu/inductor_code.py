"""Inductor's generated Triton kernels for the memory-bound cases of the GPU
issue, to read its schedule (block sizes, warps, looped or persistent
reductions, cache hints) beside ember's (EMBER_DEBUG=1).  On a GPU machine:

    python3 tools/gpu/inductor_code.py [softmax|gelu_ln|log_softmax|sum_outer]...
"""
import sys

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

CASES = {
    "softmax": (lambda a: torch.softmax(0.125 * a, -1), (16384, 4096)),
    "gelu_ln": (lambda a: F.gelu(F.layer_norm(a, (1024,))), (65536, 1024)),
    "log_softmax": (lambda a: torch.log_softmax(a, -1), (65536, 768)),
    "sum_outer": (lambda a: a.sum(0), (8192, 8192)),
}


def main():
    for name in sys.argv[1:] or ["softmax"]:
        fn, shape = CASES[name]
        torch._dynamo.reset()
        x = torch.randn(*shape, device="cuda")
        _, codes = run_and_get_code(torch.compile(fn), x)
        print(f"===== {name} {shape}")
        for code in codes:
            # the kernels' source, from their decorator to the launch wrapper
            keep = False
            for line in code.splitlines():
                if line.startswith("@triton_heuristics") or line.startswith("@triton.jit"):
                    keep = True
                if keep:
                    print(line)
                if keep and line.startswith("''', device_str="):
                    keep = False
                    print()


if __name__ == "__main__":
    main()
