"""Compare the runs tools/gpu/same_speed.sh made: ember in tree B (after) against
tree A (before), per model configuration and per kernel, with eager beside
each as the drift reference (eager's time is the same code in both runs).

    python tools/gpu/same_speed_report.py DIR [DIR ...] > report.md

DIR holds <config>.B/results.json and <config>.A/results.json (the folders
of the tarballs same_speed.sh writes).  A row is flagged when B's step is
more than 3% slower than A's.
"""
from __future__ import annotations

import glob
import json
import os
import sys

LIMIT = 1.03


def _rows(path: str):
    with open(path) as f:
        d = json.load(f)
    return d.get("results", []), d.get("kernels", []), d.get("meta", {})


def main(argv=None) -> int:
    dirs = (argv if argv is not None else sys.argv[1:]) or ["."]
    out = ["| configuration | ember A ms | ember B ms | B/A | eager A ms | eager B ms | |",
           "|---|---:|---:|---:|---:|---:|---|"]
    worst = []
    gpu = set()
    for d in dirs:
        for b in sorted(glob.glob(os.path.join(d, "*.B", "results.json"))):
            name = os.path.basename(os.path.dirname(b))[:-2]
            a = os.path.join(os.path.dirname(os.path.dirname(b)), name + ".A", "results.json")
            if not os.path.exists(a):
                out.append(f"| {name} | (A missing) | | | | | |")
                continue
            (rb, kb, mb), (ra, ka, _) = _rows(b), _rows(a)
            gpu.add(str(mb.get("machine", {}).get("gpu") or mb.get("gpu")))
            for key, rows_b, rows_a, label in (
                    ("step_ms", rb, ra, lambda r: f"{name}: {r.get('model')}"),
                    ("ms", kb, ka, lambda r: f"kernel {r.get('kernel')} {r.get('shape')}")):
                idx = {(r.get("model"), r.get("kernel"), r.get("shape"), r["backend"]): r for r in rows_a}
                for r in rows_b:
                    if not r["backend"].startswith("ember") or r.get(key) is None:
                        continue
                    k = (r.get("model"), r.get("kernel"), r.get("shape"))
                    ra_ = idx.get(k + (r["backend"],))
                    eb, ea = (next((x for x in rows if (x.get("model"), x.get("kernel"), x.get("shape")) == k
                                    and x["backend"] == "eager"), {}) for rows in (rows_b, rows_a))
                    if not ra_ or ra_.get(key) is None:
                        out.append(f"| {label(r)} | (no A) | {r[key]:.3f} | | | | |")
                        continue
                    ratio = r[key] / ra_[key]
                    worst.append((ratio, label(r)))
                    flag = "**slower**" if ratio > LIMIT else ""
                    e_a, e_b = ea.get(key), eb.get(key)
                    out.append(f"| {label(r)} | {ra_[key]:.3f} | {r[key]:.3f} | {ratio:.3f} | "
                               f"{'' if e_a is None else f'{e_a:.3f}'} | {'' if e_b is None else f'{e_b:.3f}'} "
                               f"| {flag} |")
    print(f"# Same speed: ember B (after) against A (before) on {', '.join(sorted(gpu))}\n")
    print("\n".join(out))
    if worst:
        worst.sort(reverse=True)
        over = [w for w in worst if w[0] > LIMIT]
        print(f"\n{len(worst)} rows; B/A from {min(w[0] for w in worst):.3f} to {worst[0][0]:.3f}; "
              f"{len(over)} more than {100 * (LIMIT - 1):.0f}% slower"
              + (": " + ", ".join(f"{n} {r:.3f}" for r, n in over) if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
