"""Merge the per-model `ember bench` runs of tools/gpu/sweep.sh into one
table: per model, eager, Inductor and ember step times (median) and GPU
times (kernels summed by the profiler), ember/Inductor ratios, accuracy, and
the geometric means.  A later run folder overrides an earlier one for the same
model when it holds a different run (its date differs), so that sequential
re-runs replace rows timed beside other lanes.

    python3 tools/gpu/sweep_report.py --out DIR  RUNS_DIR[:LABEL] [RUNS_DIR[:LABEL] ...]
        [--inductor inductor:reduce-overhead] [--ember ember:reduce-overhead]

Writes DIR/results.json (the merged rows, each backend's kernels kept) and
DIR/table.md (the table and the geomeans), and prints them.
"""
import argparse
import glob
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from ember.tools import zoo  # noqa: E402


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def load(dirs):
    runs = {}
    for spec in dirs:
        d, _, label = spec.partition(":")
        for f in sorted(glob.glob(os.path.join(d, "*", "results.json"))):
            data = json.load(open(f))
            for m in data["meta"]["models"]:
                old = runs.get(m)
                if old and old["meta"]["date"] == data["meta"]["date"]:
                    continue
                runs[m] = dict(data, label=label or d)
    return runs


def row_of(model, data, ind_label, emb_label):
    by = {r["backend"]: r for r in data["results"]}
    e0, i, e = by.get("eager", {}), by.get(ind_label, {}), by.get(emb_label, {})
    ok = lambda r: r.get("status") == "ok"
    acc = lambda r: (r.get("accuracy") or {}).get("verdict") if ok(r) else ("error: " + str(r.get("error", ""))[:120])
    row = {"model": model, "family": zoo.family(model), "run": data["label"],
           "eager_ms": e0.get("step_ms"), "eager_gpu_ms": e0.get("gpu_ms"),
           "inductor_ms": i.get("step_ms") if ok(i) else None,
           "inductor_gpu_ms": i.get("gpu_ms") if ok(i) else None,
           "ember_ms": e.get("step_ms") if ok(e) else None,
           "ember_gpu_ms": e.get("gpu_ms") if ok(e) else None,
           "inductor_first_s": i.get("first_call_s"), "ember_first_s": e.get("first_call_s"),
           "inductor_accuracy": acc(i), "ember_accuracy": acc(e),
           "ember_fallbacks": ((e.get("ember") or {}).get("fallbacks")) if ok(e) else None}
    # the GPU time of a step cannot exceed its step time on one stream: where
    # it does, other processes shared the GPU while profiling
    row["gpu_suspect"] = any(row[g] and row[s] and row[g] > 1.02 * row[s] for g, s in (
        ("inductor_gpu_ms", "inductor_ms"), ("ember_gpu_ms", "ember_ms")))
    if row["inductor_ms"] and row["ember_ms"]:
        row["ember_over_inductor"] = row["ember_ms"] / row["inductor_ms"]
    if row["inductor_gpu_ms"] and row["ember_gpu_ms"]:
        row["ember_over_inductor_gpu"] = row["ember_gpu_ms"] / row["inductor_gpu_ms"]
    row["kernels"] = {b: [dict(k, name=k["name"][:160]) for k in r.get("gpu_kernels", [])]
                      for b, r in (("eager", e0), ("inductor", i), ("ember", e)) if ok(r)}
    return row


def fmt(x, f="{:.2f}"):
    return "-" if x is None else f.format(x)


def table(rows):
    head = ["model", "family", "eager ms", "Inductor ms", "ember ms", "ember/Ind", "eager GPU",
            "Inductor GPU", "ember GPU", "ember/Ind GPU", "accuracy I / e", "run"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join([
            r["model"].replace("timm:", ""), r["family"] or "-", fmt(r["eager_ms"]), fmt(r["inductor_ms"]),
            fmt(r["ember_ms"]), fmt(r.get("ember_over_inductor")), fmt(r["eager_gpu_ms"]),
            fmt(r["inductor_gpu_ms"]), fmt(r["ember_gpu_ms"]),
            fmt(r.get("ember_over_inductor_gpu")) + (" *" if r["gpu_suspect"] else ""),
            f"{r['inductor_accuracy']} / {r['ember_accuracy']}", r["run"]]) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--inductor", default="inductor:reduce-overhead")
    ap.add_argument("--ember", default="ember:reduce-overhead")
    a = ap.parse_args()
    runs = load(a.dirs)
    rows = [row_of(m, d, a.inductor, a.ember) for m, d in runs.items()]
    rows.sort(key=lambda r: -(r.get("ember_over_inductor_gpu") or 0))
    both = [r for r in rows if r.get("ember_over_inductor") and r.get("ember_over_inductor_gpu")
            and not r["gpu_suspect"]]
    summary = {
        "models": len(rows), "models_in_geomean": len(both),
        "geomean_ember_over_inductor_step": geomean([r["ember_over_inductor"] for r in both]),
        "geomean_ember_over_inductor_gpu": geomean([r["ember_over_inductor_gpu"] for r in both]),
        "ember_slower_step": sum(1 for r in both if r["ember_over_inductor"] > 1.0),
        "ember_slower_gpu": sum(1 for r in both if r["ember_over_inductor_gpu"] > 1.0),
        "geomean_ember_speedup_over_eager": geomean([r["eager_ms"] / r["ember_ms"] for r in both]),
        "geomean_inductor_speedup_over_eager": geomean([r["eager_ms"] / r["inductor_ms"] for r in both]),
    }
    summary["by_run"] = {
        lab: {"models": len(rs),
              "geomean_ember_over_inductor_step": geomean([r["ember_over_inductor"] for r in rs]),
              "geomean_ember_over_inductor_gpu": geomean([r["ember_over_inductor_gpu"] for r in rs])}
        for lab in sorted({r["run"] for r in both})
        for rs in [[r for r in both if r["run"] == lab]]}
    meta = next(iter(runs.values()))["meta"] if runs else {}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"summary": summary, "machine": meta.get("machine"), "command_example": meta.get("command"),
                   "rows": rows}, f, indent=1)
    text = table(rows)
    s = summary
    lines = [f"{s['models']} models; in the geomean (both ran, GPU time not shared): {s['models_in_geomean']}",
             f"ember / Inductor, step time: {fmt(s['geomean_ember_over_inductor_step'])} (geomean), "
             f"ember slower on {s['ember_slower_step']} of {s['models_in_geomean']}",
             f"ember / Inductor, GPU time: {fmt(s['geomean_ember_over_inductor_gpu'])} (geomean), "
             f"ember slower on {s['ember_slower_gpu']} of {s['models_in_geomean']}",
             ] + [f"runs '{lab}' alone ({b['models']} models): ember / Inductor step "
                  f"{fmt(b['geomean_ember_over_inductor_step'])}, GPU {fmt(b['geomean_ember_over_inductor_gpu'])}"
                  for lab, b in s["by_run"].items()] + [
             f"speedup over eager (geomean): Inductor {fmt(s['geomean_inductor_speedup_over_eager'])}, "
             f"ember {fmt(s['geomean_ember_speedup_over_eager'])}"]
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n\n" + "\n".join(f"- {x}" for x in lines) + "\n")
    print(text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
