"""Dump the generated C and CUDA source of a fixed set of graphs, to compare
the code generators' output before and after a change to them.

    python tools/codegen_dump.py OUT_DIR [--quick]
    python tools/codegen_dump.py --compare DIR_A DIR_B [--normalize]

For each case (the zoo's builtin models, forward and backward, at their
small size; the zoo's kernel set; a few graphs from the tests) it writes
OUT_DIR/<case>/<n>.c and <n>.cu (one file per graph: the kernels after the
prelude) and OUT_DIR/counts.json: per case, kernels and distinct CUDA
kernels.  CUDA is generated as the tests do without a GPU (NVRTC, sm_90:
set EMBER_CUDA_LIB_DIRS and LD_LIBRARY_PATH as docs say).

--compare prints the cases whose text differs; --normalize first names
parameters by the values they are, sorts their declarations, renumbers
accumulators and drops comments, so that a change of naming alone (by
value id or by position in the kernel) compares equal."""
import glob
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cases(quick):
    import torch
    import torch.nn.functional as F
    from ember.tools import zoo

    def r(*shape, dtype=torch.float32):
        g = torch.Generator().manual_seed(0)
        return torch.randn(*shape, generator=g).to(dtype)

    out = []
    for name, k in zoo.KERNELS.items():
        args = k.make(False, True, torch.float32, "cpu")
        out.append(("k_" + re.sub(r"\W+", "_", name).strip("_"), k.fn, args, False))
    out += [
        ("vecrows", lambda x: torch.softmax(x, -1) * x.sum(-1, keepdim=True), (r(8, 1024),), False),
        ("vecrows_odd", lambda x: torch.softmax(x, -1), (r(2, 20000),), False),
        ("argmax_rows", lambda x: (x.argmax(-1), x.amax(-1), x.var(-1)), (r(64, 512),), False),
        ("cat_many", lambda *xs: torch.relu(torch.cat(xs, 1) * 2).sum((0, 2, 3)),
         tuple(r(2, 4, 8, 8) for _ in range(6)), False),
        ("pointwise_lanes", lambda x, y: torch.sin(x) * y + 1, (r(64, 4096), r(64, 4096)), False),
        ("unaligned_view", lambda x: torch.sin(x[1:]) + 1, (r(4097 * 4),), False),
        ("reductions", lambda x: (x.sum(-1), x.mean(0), x.amax((0, 2)), x.prod(2), x.argmin(),
                                  x.std(0), (x > 0).any(1)), (r(8, 37, 12),), False),
        ("bf16_ln", lambda x, w, b: F.layer_norm(x, (768,), w, b), (r(64, 768, dtype=torch.bfloat16),
                                                                      r(768, dtype=torch.bfloat16),
                                                                      r(768, dtype=torch.bfloat16)), False),
        ("repeat_layers", lambda x: torch.tanh(torch.tanh(torch.tanh(x * 2) * 3) * 4).sum(-1),
         (r(32, 256),), False),
    ]
    ctx = zoo.Ctx(small=True)
    names = ["mlp", "small_resnet"] if quick else ["mlp", "transformer_block", "small_resnet", "small_vit", "resnet50_ours"]
    for name in names:
        e = zoo.get(name)
        torch.manual_seed(0)
        model = e.make_model(ctx)
        ex = e.inputs(ctx, 2, torch.Generator().manual_seed(0))

        def step(*args, model=model, ex=ex, e=e):
            loss = e.loss(model(*args, **ex.kwargs), ex.target)
            loss.backward()
            return loss
        out.append(("zoo_" + name, step, ex.args, True))
    return out


def run_case(fn, args, cuda, dump):
    import torch._dynamo as dynamo
    import ember
    from ember.backend import cuda_codegen_check
    opts = {"debug": True, "debug_dir": dump}
    ember.reset()
    dynamo.reset()
    if cuda:
        cuda_codegen_check(fn, *args, options=opts)
    else:
        import torch
        torch.compile(fn, backend=ember.backend.make_backend(opts), dynamic=False)(*args)
    return ember.stats()


def dump(out_dir, quick):
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for name, fn, args, _train in cases(quick):
        counts[name] = {}
        for cuda in (False, True):
            tmp = tempfile.mkdtemp()
            try:
                s = run_case(fn, args, cuda, tmp)
                files = sorted(glob.glob(os.path.join(tmp, "**", "kernels.cu" if cuda else "kernels.c"),
                                         recursive=True))
                os.makedirs(os.path.join(out_dir, name), exist_ok=True)
                for i, f in enumerate(files):
                    shutil.copy(f, os.path.join(out_dir, name, f"{i}.{'cu' if cuda else 'c'}"))
                counts[name]["cuda" if cuda else "c"] = {"graphs": len(files), "kernels": s.get("kernels"),
                                                         "distinct_kernels": s.get("distinct_kernels")}
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        print(name, counts[name], flush=True)
    with open(os.path.join(out_dir, "counts.json"), "w") as f:
        json.dump(counts, f, indent=1, sort_keys=True)


def normalize(text):
    """The text with every parameter named by the value it is (V<id>: b<id>
    before kernels named them by position, p<n> after), the declarations of
    parameters sorted, accumulators renumbered by first appearance in their
    kernel, comments dropped."""
    parts = re.split(r"(?=\n/\* kernel \d+)", text)
    maps = {}
    for part in parts:
        m = re.match(r"\n/\* kernel (\d+):", part)
        if m:
            kmap = {f"p{i}": v for i, v in re.findall(r"\bp(\d+) = b(\d+)", part)}
            kmap.update({f"p{i}": v for i, v in re.findall(r"\bp(\d+) = \((?:const )?[\w ]+\*\)p\[(\d+)\]", part)})
            q = re.search(r"void \*const q\[\] = \{(.*?)\};", part)  # C: the entry point hands p[id] to the body
            if q:
                kmap.update({f"p{i}": v for i, v in enumerate(re.findall(r"p\[(\d+)\]", q.group(1)))})
            maps[m.group(1)] = kmap
    out = []
    for part in parts:
        m = re.match(r"\n/\* kernel (\d+)", part)
        kmap = maps.get(m.group(1), {}) if m else {}
        part = re.sub(r"/\*.*?\*/", "", part, flags=re.S)
        part = re.sub(r"\bp(\d+)\b", lambda x: "V" + kmap.get(x.group(0), "?" + x.group(1)), part)
        part = re.sub(r"\bb(\d+)\b", r"V\1", part)
        part = re.sub(r"(ember_k\d+(?:_u)?(?:_b\d+)?)\((.*?)\) \{", lambda x: x.group(1) + "(" + ", ".join(sorted(x.group(2).split(", "))) + ") {", part)
        lines = part.split("\n")
        decl = sorted(l for l in lines if re.search(r"= \((?:const )?[\w ]+\*\)p\[\d+\];", l))
        lines = [l for l in lines if l not in decl]
        part = "\n".join(decl + lines)
        seen = {}
        part = re.sub(r"\b(Aa|An|Aj|a|n|j)(\d+)\b", lambda x: x.group(1) + "#" + str(seen.setdefault(x.group(2), len(seen))), part)
        out.append(part)
    return re.sub(r"\n(?:[ \t]*\n)+", "\n", re.sub(r"[ \t]+", " ", "".join(out)))


def compare(a, b, norm):
    diff = 0
    for fa in sorted(glob.glob(os.path.join(a, "*", "*.c*"))):
        rel = os.path.relpath(fa, a)
        fb = os.path.join(b, rel)
        if not os.path.exists(fb):
            print("missing", rel)
            diff += 1
            continue
        ta, tb = open(fa).read(), open(fb).read()
        if norm:
            ta, tb = normalize(ta), normalize(tb)
        if ta != tb:
            print("differs", rel)
            diff += 1
    ca = json.load(open(os.path.join(a, "counts.json")))
    cb = json.load(open(os.path.join(b, "counts.json")))
    for k in ca:
        if ca[k] != cb.get(k):
            print("counts", k, ca[k], "->", cb.get(k))
    print("files differing:", diff)
    return diff


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    if sys.argv[1] == "--compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3], "--normalize" in sys.argv) else 0)
    dump(sys.argv[1], "--quick" in sys.argv)
