"""The asynchronous index check (the default; src/run.c) on a GPU,
in a process of its own (the check stops the CUDA context on purpose):

1. a compiled embedding lookup with indices in range matches eager;
2. with an index out of range, the kernel traps: the next synchronizing torch
   call raises a CUDA error (as after torch's own device-side assert);
3. the compiled function's next call raises ember's IndexError naming the op,
   the node and the index, read from host memory.

    python3 tests/gpu/index_async.py
"""
import os
import sys

import torch
import torch.nn.functional as F

import ember


def main():
    if os.environ.get("EMBER_CUDA_INDEX_WAIT") == "1":
        sys.exit("run without EMBER_CUDA_INDEX_WAIT=1 (the waiting check)")
    w = torch.randn(100, 16, device="cuda")

    def f(ids, w):
        return F.embedding(ids, w) * 2

    cf = ember.compile(f)
    ids = torch.randint(0, 100, (4, 8), device="cuda")
    out = cf(ids, w)
    torch.testing.assert_close(out, f(ids, w))
    print("1. in range: matches eager")
    bad = ids.clone()
    bad[2, 3] = 1234
    cf(bad, w)  # no wait: returns at once
    try:
        torch.cuda.synchronize()
        print("2. FAILED: no CUDA error after the trap")
        sys.exit(1)
    except Exception as e:  # torch.AcceleratorError / RuntimeError
        print(f"2. torch's next synchronize: {type(e).__name__}: {str(e).splitlines()[0]}")
    try:
        cf(ids, w)
        print("3. FAILED: the next call raised nothing")
        sys.exit(1)
    except Exception as e:
        msg = str(e)
        ok = "1234" in msg and "embedding" in msg
        print(f"3. {'ok' if ok else 'FAILED'}: {type(e).__name__}: {msg[:300]}")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
