"""Reductions over short rows (issue 29, cause C), ember against eager and
Inductor on the GPU: the sweep's shapes (Swin's LayerNorm over 96 channels,
a window softmax over rows of 49, swinv2's cosine-attention norm over rows
of 32), a long-row control (a LayerNorm over 1024), mixer_b16's
LayerNorm over the channels of [B, C, T] data (a column reduction) and a
squeeze-and-excitation gate's mean over H*W of NHWC data (efficientnet_b0's
[32, 144, 56, 56]: columns too), all bfloat16.  Each function is timed as the median of --calls calls, each
between two CUDA events queued behind a GPU sleep (so the host's launch
cost is not counted), after warm-up; GB/s counts the bytes a kernel must
move (its inputs read and its result written once).  Also prints ember's
schedule for each (the kernel header in its debug dump).

    PYTHONPATH=. python3 tools/gpu/short_rows_bench.py [--calls 200] [--no-inductor]
"""
import argparse
import glob
import os
import re
import statistics
import tempfile

import torch
import torch.nn.functional as F

import ember

BF16 = torch.bfloat16
SLEEP_CYCLES = 1_000_000  # about 0.5 ms at the H100's clock: longer than a compiled call's host time


def cases():
    """name, function, inputs, bytes moved."""
    def ln(x, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b)

    def softmax(x):
        return torch.softmax(x, -1)

    def norm(x):
        return F.normalize(x, dim=-1)

    def mk(*shape):
        return torch.randn(*shape, device="cuda", dtype=BF16)

    out = []
    for rows, n, name in ((32 * 56 * 56, 96, "LN swin [100352, 96]"), (65536, 1024, "LN long [65536, 1024]")):
        args = (mk(rows, n), mk(n), mk(n))
        out.append((name, ln, args, 2 * rows * n * 2 + 2 * n * 2))
    x = mk(32 * 64 * 3, 49, 49)
    out.append(("softmax [6144, 49, 49]", softmax, (x,), 2 * x.numel() * 2))
    x = mk(2048 * 3 * 49, 32)
    out.append(("norm [301056, 32]", norm, (x,), 2 * x.numel() * 2))
    x = mk(32, 768, 196)  # mixer_b16: a LayerNorm over C of [B, C, T] data, a column reduction
    out.append(("LN cols [32, 196, 768]", lambda x, w, b: ln(x.transpose(1, 2), w, b), (x, mk(768), mk(768)),
                2 * x.numel() * 2 + 2 * 768 * 2))
    x = mk(32, 144, 56, 56).contiguous(memory_format=torch.channels_last)  # NHWC: [32, 56*56, 144] in memory
    out.append(("SE mean [32, 3136, 144]", lambda x: x.mean((2, 3), keepdim=True), (x,), (x.numel() + 32 * 144) * 2))
    return out


def time_us(fn, args, calls):
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    ts = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)  # the GPU busy while the host launches: GPU time, not host time
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def schedules(debug_dir):
    """The non-pointwise kernels' schedules from ember's debug dump."""
    heads = []
    for p in sorted(glob.glob(os.path.join(debug_dir, "run_*", "graph_*", "kernels.cu"))):
        heads += re.findall(r"(?m)^/\* kernel \d+: space (\[[^\]]*\]), (.*?); grid (\d+), block (\S+);", open(p).read())
    return ["%s %s; grid %s, block %s" % h for h in heads if h[1] != "pointwise"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--no-inductor", action="store_true")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    hdr = f"{'case':<26}{'MB':>8}" + "".join(f"{b + ' us':>12}{'GB/s':>8}" for b in ("ember", "eager", "inductor"))
    rows, notes = [hdr], []
    for name, fn, args, nbytes in cases():
        ember.reset()
        with tempfile.TemporaryDirectory() as d:  # the dump costs nothing at run time
            ef = ember.compile(fn, dynamic=False, options={"debug": True, "debug_dir": d})
            torch.testing.assert_close(ef(*args), fn(*args), rtol=2e-2, atol=2e-2)
            notes += [f"{name}: {s}" for s in schedules(d)]
        line = f"{name:<26}{nbytes / 1e6:>8.1f}"
        for which in ("ember", "eager", "inductor"):
            if which == "inductor":
                if a.no_inductor:
                    break
                torch._dynamo.reset()  # after ember's timing: its function would compile again
                f = torch.compile(fn, dynamic=False)
            else:
                f = ef if which == "ember" else fn
            us = time_us(f, args, a.calls)
            line += f"{us:>12.1f}{nbytes / us / 1e3:>8.0f}"
        rows.append(line)
    print("\n".join(rows))
    print("\nember's schedules:")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
