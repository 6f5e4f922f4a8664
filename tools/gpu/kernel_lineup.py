"""Line up one model's GPU kernels, ember against Inductor, from a sweep run
(tools/gpu/sweep.sh with DEBUG=1): the profiler's kernels per step from
each backend's results.json row (gpu_kernels), and, for ember's own kernels,
what its debug dump (EMBER_DEBUG: graph.txt, kernels.cu) says each one
computes: its iteration space and schedule, the values it reads and stores
with their dtype, layout (NCHW, NHWC, other) and bytes, and whether a stored
value is dead (nothing reads it after the kernel that writes it).

    python3 tools/gpu/kernel_lineup.py RUN_DIR/results.json DEBUG_DIR/run_*/graph_001_* [--top 30]
        [--bw 3000]

Prints: time by kind of kernel for each backend (generated elementwise and
reductions, convolutions, GEMMs, layout copies, ATen kernels, copies and
memsets); then ember's generated kernels by time, each with the bytes it
must move (every operand once) and the floor at --bw GB/s, its achieved
GB/s, and the flags: DEAD (a stored value no one reads), MIX (NHWC and NCHW
operands of over 1 MB in one kernel: one side is read or written strided), F32 (a float32 value of activation size stored under
autocast).  The totals per flag say how much of ember's GPU time each
cause touches.
"""
import argparse
import json
import re
from collections import defaultdict

DT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "bool": 1,
            "uint8": 1, "int8": 1, "float64": 8}
VALUE = re.compile(r"^v(\d+)\s+(\w+)\s+\[([^\]]*)\] strides \(([^)]*)\) \+(\d+)\s+(.*?)\s+<- (\S+)")
STEP = re.compile(r"^\s*(\d+)\s+kernel (ember_k\d+): (.*)$")
HEAD = re.compile(r"(?m)^/\* kernel (\d+): space \[([^\]]*)\], (.*?); grid (\d+)[^;]*; computes (.*?) \*/")
SIG = re.compile(r"ember_k(\d+)\((.*?)\) \{")
PARAMS = re.compile(r"(?m)^/\* kernel (\d+): [^\n]*\n/\* parameters: (.*?) \*/")


def kind_of(name: str) -> str:
    n = name
    if n.startswith("ember_k") or n.startswith("triton_"):
        return "generated"
    if "Memcpy" in n or "Memset" in n:
        return "copy/memset"
    if "nchwToNhwc" in n or "nhwcToNchw" in n:
        return "layout copy (cuDNN)"
    if "conv" in n.lower() or "fprop" in n or "implicit_" in n or "xmma_fprop" in n:
        return "convolution"
    if "nvjet" in n or "gemm" in n.lower() or "cutlass" in n or "sm90_xmma" in n:
        return "GEMM"
    if "flash" in n.lower() or "fmha" in n.lower() or "attention" in n.lower():
        return "attention"
    if n.startswith("void at::native") or "at::native" in n:
        return "ATen kernel"
    return "other"


def layout(shape, strides):
    if len(shape) != 4 or min(shape) <= 0:
        return "-"
    n, c, h, w = shape
    if strides == contiguous(shape):
        return "NCHW"
    if strides[1] == 1 and strides[3] == c and strides[2] == c * w:
        return "NHWC"
    return "other"


def contiguous(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def parse_graph(gdir):
    values, steps = {}, {}
    with open(f"{gdir}/graph.txt") as f:
        for line in f:
            m = VALUE.match(line)
            if m:
                vid, dt, shp, strd, _, where, name = m.groups()
                shape = [int(x) for x in shp.split(",") if x.strip()]
                strides = [int(x) for x in strd.split(",") if x.strip()]
                numel = 1
                for s in shape:
                    numel *= s
                life = re.search(r"steps (\d+)\.\.(\d+)", where)
                values[int(vid)] = dict(dtype=dt, shape=shape, strides=strides, name=name,
                                        bytes=numel * DT_BYTES.get(dt, 4), where=where.split()[0],
                                        life=(int(life.group(1)), int(life.group(2))) if life else None,
                                        layout=layout(shape, strides))
                continue
            m = STEP.match(line)
            if m:
                steps[m.group(2)] = int(m.group(1))
    kernels = {}
    with open(f"{gdir}/kernels.cu") as f:
        text = f.read()
    for m in HEAD.finditer(text):
        kernels[f"ember_k{m.group(1)}"] = dict(space=[int(x) for x in m.group(2).split(",")],
                                               sched=m.group(3), computes=m.group(5))
    # each kernel's parameters: `pN` in the signature, named by the comment above it
    # (`/* parameters: p0 = b480, p1 = b45 */`); older dumps named them bN in the signature
    names = {}
    for m in PARAMS.finditer(text):
        names[m.group(1)] = dict(re.findall(r"(p\d+) = b(\d+)", m.group(2)))
    for m in SIG.finditer(text):
        k = kernels.get(f"ember_k{m.group(1)}")
        if k is None or "params" in k:
            continue
        ps = []
        for p in m.group(2).split(","):
            p = p.strip()
            b = re.search(r"\bb(\d+)$", p) or re.search(r"\b(p\d+)$", p)
            if not b:
                continue
            vid = b.group(1) if not b.group(1).startswith("p") else names.get(m.group(1), {}).get(b.group(1))
            if vid is not None:
                ps.append((int(vid), p.startswith("const")))
        k["params"] = ps
    return values, steps, kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("graph_dir", nargs="?")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--bw", type=float, default=3000.0, help="copy bandwidth, GB/s")
    ap.add_argument("--rate", type=float, default=2000.0,
                    help="GB/s a fixed DEAD/MIX kernel is projected to reach (default: %(default)s, "
                         "about what Inductor's bf16 NHWC pointwise kernels reach on the H100)")
    a = ap.parse_args()
    rows = {r["backend"]: r for r in json.load(open(a.results))["results"]}
    print(f"{'backend':26s} {'step ms':>8s} {'GPU ms':>7s} {'launches':>8s}  by kind (ms per step)")
    for be, r in rows.items():
        if r.get("status") != "ok" or "gpu_kernels" not in r:
            continue
        kinds = defaultdict(float)
        for k in r["gpu_kernels"]:
            kinds[kind_of(k["name"])] += k["us"] / 1e3
        print(f"{be:26s} {r['step_ms']:8.2f} {r['gpu_ms']:7.2f} {r['gpu_launches']:8.0f}  "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
    if not a.graph_dir:
        return
    ember = next(r for be, r in rows.items() if be.startswith("ember"))
    values, steps, kernels = parse_graph(a.graph_dir)
    flags_ms = defaultdict(float)
    total_gen = 0.0
    saved_ms = 0.0
    print(f"\nember's generated kernels (floor: every operand moved once at {a.bw:.0f} GB/s)")
    print(f"{'kernel':11s} {'us/step':>8s} {'calls':>5s} {'MB':>7s} {'floor us':>8s} {'GB/s':>6s}  "
          f"{'flags':14s} space, schedule: computes; stores")
    shown = 0
    for k in ember["gpu_kernels"]:
        name = k["name"]
        if not name.startswith("ember_k"):
            continue
        base = re.sub(r"(_u)?(_b\d+)?$", "", name)  # a kernel's unaligned variant and bodies: its entry points
        info = kernels.get(base)
        total_gen += k["us"]
        if not info:
            continue
        step = steps.get(base)
        moved, flags, stores = 0, set(), []
        # (a value read more than once inside a kernel still counts once)
        lays = set()
        for vid, const in info.get("params", []):
            v = values.get(vid)
            if not v:
                continue
            moved += v["bytes"]
            if v["layout"] in ("NCHW", "NHWC") and v["bytes"] > 1 << 20:
                lays.add(v["layout"])
            if not const:
                dead = (v["life"] is not None and step is not None and v["life"][1] <= step)
                if dead:
                    flags.add("DEAD")
                if v["dtype"] == "float32" and v["bytes"] > 1 << 20:
                    flags.add("F32")
                stores.append(f"{v['name']} {v['dtype']} {v['layout']} {v['bytes'] / 2**20:.1f}MB"
                              + (" dead" if dead else ""))
        # loops follow a stored value's layout (codegen.c), so a kernel mixes layouts where its
        # large operands disagree
        if "NHWC" in lays and "NCHW" in lays:
            flags.add("MIX")
        per_call = k["us"] / max(k["calls"], 1e-9)
        floor = moved / (a.bw * 1e3)
        for f in flags:
            flags_ms[f] += k["us"] / 1e3
        if "DEAD" in flags or "MIX" in flags:
            # the same kernel without its dead stores, at the rate Inductor's
            # bf16 pointwise kernels reach (--rate)
            live = moved - sum(values[v]["bytes"] for v, c in info.get("params", [])
                               if not c and v in values and values[v]["life"] is not None
                               and step is not None and values[v]["life"][1] <= step)
            fixed = live / (a.rate * 1e3) * k["calls"]
            saved_ms += max(0.0, k["us"] - fixed) / 1e3
        if shown < a.top:
            shown += 1
            print(f"{name:11s} {k['us']:8.1f} {k['calls']:5.0f} {moved / 2**20:7.1f} {floor:8.1f} "
                  f"{moved / (per_call * 1e3):6.0f}  {','.join(sorted(flags)) or '-':14s} "
                  f"{info['space']}, {info['sched'][:40]}: {info['computes'][:60]}; {'; '.join(stores)}")
    print(f"\nember generated kernels: {total_gen / 1e3:.2f} ms per step; touched by "
          + ", ".join(f"{f} {ms:.2f} ms" for f, ms in sorted(flags_ms.items())))
    print(f"projected: without dead stores and at {a.rate:.0f} GB/s, the DEAD/MIX kernels "
          f"would take {saved_ms:.2f} ms less per step")
    dead = [v for v in values.values() if v["where"] == "arena" and v["life"] and v["life"][0] == v["life"][1]
            and any(steps.get(kn) == v["life"][0] for kn in steps)]
    print(f"dead stores: {len(dead)} values, {sum(v['bytes'] for v in dead) / 2**20:.0f} MB per call "
          f"({', '.join(sorted({v['dtype'] for v in dead}))})")


if __name__ == "__main__":
    main()
