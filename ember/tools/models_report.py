"""A table of the real-model tests: ``python -m ember.tools.models_report [pytest args]``.

Runs tests/test_models.py (in a source checkout) with pytest, collects the
per-model records it writes (EMBER_MODELS_REPORT), and prints one row per
model: Dynamo graphs and graph breaks, ember graphs, kernels, fused ops,
fallbacks by op, ember's compile time, and the test's outcome.  Extra
arguments go to pytest, e.g. ``--runslow -k large`` for the real-size
models, ``-k bert``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _short(op: str) -> str:
    parts = op.split(".")
    if len(parts) < 2:
        return op
    name = parts[1] if parts[0] == "aten" else f"{parts[0]}.{parts[1]}"
    return name if len(parts) < 3 or parts[2] == "default" else f"{name}.{parts[2]}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    root = Path(__file__).resolve().parents[2]
    test = root / "tests" / "test_models.py"
    if not test.exists():
        print(f"ember.tools.models_report: {test} not found (needs a source checkout)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ember-models-") as tmp:
        out = os.path.join(tmp, "report.json")
        env = dict(os.environ, EMBER_MODELS_REPORT=out)
        cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(test)] + argv
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        outcomes = {}
        for line in proc.stdout.splitlines():
            for word in ("PASSED", "FAILED", "XFAIL", "XPASS", "ERROR"):
                if line.startswith(word + " "):
                    outcomes[line.split()[1]] = word
        tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
        if not os.path.exists(out):
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
            return proc.returncode or 1
        records = json.load(open(out))
    head = f"{'model':<28} {'graphs':>6} {'breaks':>6} {'ember':>5} {'kernels':>7} {'fused':>6} " \
           f"{'compile s':>9} {'test s':>6}  fallbacks"
    print(head)
    print("-" * len(head))
    for r in records:
        fb = r.get("fallbacks", {})
        fbs = ", ".join(f"{_short(k)} {n}" for k, n in fb.items())
        print(f"{r['model']:<28} {r['dynamo_graphs']:>6} {r['graph_breaks']:>6} "
              f"{r.get('ember_graphs', '-'):>5} {r.get('kernels', '-'):>7} {r.get('fused_ops', '-'):>6} "
              f"{r.get('compile_ms', 0) / 1000:>9.1f} {r['seconds']:>6.1f}  "
              f"{sum(fb.values())}" + (f" ({fbs})" if fbs else ""))
    print()
    for k, v in sorted(outcomes.items()):
        if v != "PASSED":
            print(f"{v:<8} {k}")
    if tail:
        print(tail[0])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
