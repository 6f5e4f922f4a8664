"""mode="max-autotune" against "reduce-overhead" on GEMM-heavy models (issue 29).

Runs `ember bench` (each model and backend in its own process, accuracy
checked against eager) with ember:reduce-overhead, ember:max-autotune and
inductor:max-autotune on timm's vit_base_patch16_224 and mixer_b16_224 and
Hugging Face's bert-base and gpt2 (bf16 inference by default), then prints
per model the step and GPU times side by side, max-autotune's speedup over
reduce-overhead, and what the tuning chose (ember.stats()["gemm_tuning"],
kept in results.json): products tuned, how many got another algorithm than
the default, the sum over products of the default's and the chosen
algorithm's time per call, and the tuning's wall time.  The table also goes
to autotune.md in the run's folder.

    python3 tools/gpu/autotune_bench.py [--models M1,M2] [--dtype bf16] [--out DIR] [--warm-cache]
    python3 tools/gpu/autotune_bench.py --report DIR/results.json    # only the table, from a run

--warm-cache makes ember bench run each compiled backend a second time with
the same cache folders: max-autotune's second first call then reads every
choice from the disk cache (the table's "warm first call" column).
"""
import argparse
import json
import os
import subprocess
import sys

MODELS = "timm:vit_base_patch16_224,timm:mixer_b16_224,bert-base,gpt2"
BACKENDS = "ember:reduce-overhead,ember:max-autotune,inductor:max-autotune"


def _f(x, fmt=".3f"):
    return "-" if x is None else format(x, fmt)


def report(path):
    with open(path) as f:
        res = json.load(f)["results"]
    by = {}
    for r in res:
        by.setdefault(r.get("model"), {})[r.get("backend")] = r
    head = ["model", "ember:RO step ms", "ember:MA step ms", "MA/RO speedup", "inductor:MA step ms",
            "ember:RO GPU ms", "ember:MA GPU ms", "GEMMs tuned", "changed", "default ms", "chosen ms",
            "tuning s", "MA first call s", "MA warm first call s"]
    rows = []
    for model, bes in by.items():
        ro, ma, ind = (bes.get(k) or {} for k in ("ember:reduce-overhead", "ember:max-autotune",
                                                  "inductor:max-autotune"))
        ok = lambda r: r.get("status") == "ok"  # noqa: E731
        sp = ro["step_ms"] / ma["step_ms"] if ok(ro) and ok(ma) and ma.get("step_ms") else None
        tuned = (ma.get("ember") or {}).get("gemm_tuning") or []
        changed = [c for c in tuned if c["chosen"] != c["default"]]
        rows.append([model, _f(ro.get("step_ms")), _f(ma.get("step_ms")), _f(sp, ".3f") + ("x" if sp else ""),
                     _f(ind.get("step_ms")), _f(ro.get("gpu_ms")), _f(ma.get("gpu_ms")), str(len(tuned)),
                     str(len(changed)), _f(sum(c["default_ms"] for c in tuned)),
                     _f(sum(c["chosen_ms"] for c in tuned)), _f(sum(c["tune_ms"] for c in tuned) / 1e3, ".1f"),
                     _f(ma.get("first_call_s"), ".1f"), _f(ma.get("warm_first_call_s"), ".1f")])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Per tuned product (max-autotune runs):", ""]
    for model, bes in by.items():
        for c in ((bes.get("ember:max-autotune") or {}).get("ember") or {}).get("gemm_tuning") or []:
            gain = c["default_ms"] / c["chosen_ms"] if c["chosen_ms"] else 0.0
            lines.append(f"- {model}: {c['problem']}: {c['default']} {c['default_ms'] * 1e3:.1f} us -> "
                         f"{c['chosen']} {c['chosen_ms'] * 1e3:.1f} us ({gain:.2f}x, {c['candidates']} timed"
                         f"{', from disk' if c['from_disk'] else ''}{'; ' + c['note'] if c['note'] else ''})")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(os.path.dirname(path), "autotune.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--backends", default=BACKENDS)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--out", default=None, help="the run's folder (default: bench/results/autotune-<time>)")
    ap.add_argument("--warm-cache", action="store_true")
    ap.add_argument("--report", default=None, metavar="RESULTS_JSON", help="only print the table of a run")
    a, extra = ap.parse_known_args()
    if a.report:
        report(a.report)
        return 0
    if a.out is None:
        import time
        a.out = os.path.join("bench", "results", time.strftime("autotune-%Y%m%d-%H%M%S"))
    cmd = [sys.executable, "-m", "ember", "bench", "--models", a.models, "--backends", a.backends,
           "--dtype", a.dtype, "--out", a.out] + (["--warm-cache"] if a.warm_cache else []) + extra
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    path = os.path.join(a.out, "results.json")
    if os.path.exists(path):
        report(path)
    return rc


if __name__ == "__main__":
    sys.exit(main())
