"""torch's own debugging tools see ember (issue 26): TORCH_LOGS=output_code
prints each graph's kernels, TORCH_TRACE (tlparse) records them with the
graph dump and the report as compile artifacts, TORCH_COMPILE_DEBUG=1 puts
ember's dumps in torch's run folder; and the debug option writes one folder
per run, graphs named by Dynamo's compile id, each kernels.c opening on the
model's code (the runtime header is #included from beside it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import EAGER

pytestmark = pytest.mark.skipif(EAGER, reason="ember's own output")

_SCRIPT = textwrap.dedent("""
    import sys, torch
    import ember
    def f(x, y):
        return torch.softmax(x * y + 1, -1).sum(0)
    x = torch.randn(8, 16, requires_grad=True)
    ember.compile(f)(x, torch.randn(8, 16)).sum().backward()
    print("ok")
""")


def _ember_root() -> str:
    import ember
    return str(Path(ember.__file__).resolve().parents[1])


def _run(tmp_path: Path, env: dict, args=()) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "TORCH_TRACE", "EMBER_DEBUG",
                                                                         "TORCH_COMPILE_DEBUG"))}
    full.update(env, PYTHONPATH=_ember_root(), EMBER_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                         env=full, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
    return out


def test_torch_logs_output_code_shows_the_kernels(tmp_path):
    out = _run(tmp_path, {"TORCH_LOGS": "output_code"})
    assert "ember: output code of 0-0_forward" in out.stderr, out.stderr[-3000:]
    assert "ember: output code of 0-0_backward" in out.stderr
    assert "void ember_k0(" in out.stderr and "exp = aten.exp.default" in out.stderr
    assert "em_exp" not in out.stderr.split("ember: output code of")[1].split("void ember_k0(")[0]


def test_torch_trace_holds_ember_artifacts(tmp_path):
    trace = tmp_path / "trace"
    _run(tmp_path, {"TORCH_TRACE": str(trace)})
    names = []
    for f in trace.iterdir():
        for line in f.read_text().splitlines():
            head = line[line.find("{"):] if "{" in line else ""
            try:
                rec = json.loads(head)
            except json.JSONDecodeError:
                continue
            if "artifact" in rec:
                names.append((rec["artifact"]["name"], rec.get("frame_id"), rec.get("frame_compile_id")))
    ember_names = {n for n, _, _ in names if n.startswith("ember_")}
    assert {"ember_0-0_forward_kernels.c", "ember_0-0_forward_report", "ember_0-0_backward_kernels.c"} \
        <= ember_names, names
    # attached to Dynamo's compile (frame 0, compile 0) for tlparse
    assert any(n == "ember_0-0_forward_kernels.c" and fid == 0 for n, fid, _ in names), names


def test_torch_compile_debug_folder(tmp_path):
    _run(tmp_path, {"TORCH_COMPILE_DEBUG": "1"})
    dumps = list(tmp_path.glob("torch_compile_debug/run_*/ember/graph_*_0-0_forward/kernels.c"))
    assert dumps, sorted(str(p) for p in tmp_path.rglob("*") if "ember" in str(p))[:20]


def test_debug_runs_apart_and_graphs_named_by_compile_id(tmp_path):
    env = {"EMBER_DEBUG": "1", "EMBER_DEBUG_DIR": str(tmp_path / "dbg")}
    _run(tmp_path, env)
    _run(tmp_path, env)
    runs = sorted((tmp_path / "dbg").glob("run_*_pid*"))
    assert len(runs) == 2, runs
    for run in runs:
        names = sorted(p.name for p in run.iterdir())
        assert names == ["graph_001_0-0_forward", "graph_002_0-0_backward"], names
        src = (run / names[0] / "kernels.c").read_text()
        assert '#include "prelude.h"' in "\n".join(src.splitlines()[:4]), src[:400]
        assert (run / names[0] / "prelude.h").read_text().count("em_") > 100
        assert (run / names[0] / "after_lower.txt").exists() and (run / names[0] / "graph.txt").exists()
