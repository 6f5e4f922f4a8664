"""torch's own debugging tools see ember (issue 26): TORCH_LOGS=output_code
prints each graph's kernels, TORCH_TRACE (tlparse) records them with the
graph dump and the report as compile artifacts, TORCH_COMPILE_DEBUG=1 puts
ember's dumps in torch's run folder; and the debug option writes one folder
per run, graphs named by Dynamo's compile id, each kernels.c opening on the
model's code (the runtime header is #included from beside it).

Each check is a run of one script in a new process (seconds each: importing
torch, Dynamo's first compile); they start side by side from one module
fixture, and each test asserts on the outcome of its own run."""
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


class _Run:
    """The script started in a new process in folder tmp_path (its cwd, its
    cache's parent, its output's files) with env added to ours."""

    def __init__(self, tmp_path: Path, env: dict, n: int = 0):
        tmp_path.mkdir(parents=True, exist_ok=True)
        script = tmp_path / "script.py"
        script.write_text(_SCRIPT)
        full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "TORCH_TRACE", "EMBER_DEBUG",
                                                                             "TORCH_COMPILE_DEBUG"))}
        full.update(env, PYTHONPATH=_ember_root(), EMBER_CACHE_DIR=str(tmp_path / "cache"))
        self.tmp_path = tmp_path
        self.files = [tmp_path / f"stdout{n}.txt", tmp_path / f"stderr{n}.txt"]
        with open(self.files[0], "w") as out, open(self.files[1], "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=err, text=True,
                                         cwd=tmp_path, env=full)

    def wait(self) -> subprocess.CompletedProcess:
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        stdout, stderr = (f.read_text() for f in self.files)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, stdout, stderr)

    def result(self) -> subprocess.CompletedProcess:
        out = self.wait()
        assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
        return out


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Every test's run, started side by side; the two EMBER_DEBUG runs one after
    the other (in one folder: the second's kernels come from the first's cache)."""
    base = tmp_path_factory.mktemp("torch_tools")
    debug = {"EMBER_DEBUG": "1", "EMBER_DEBUG_DIR": str(base / "debug" / "dbg")}
    r = {"output_code": _Run(base / "output_code", {"TORCH_LOGS": "output_code"}),
         "trace": _Run(base / "trace", {"TORCH_TRACE": str(base / "trace" / "trace")}),
         "compile_debug": _Run(base / "compile_debug", {"TORCH_COMPILE_DEBUG": "1"}),
         "debug": [_Run(base / "debug", debug)]}
    r["debug"][0].wait()
    r["debug"].append(_Run(base / "debug", debug, 1))
    yield r
    for run in [r["output_code"], r["trace"], r["compile_debug"]] + r["debug"]:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def test_torch_logs_output_code_shows_the_kernels(children):
    out = children["output_code"].result()
    assert "ember: output code of 0-0_forward" in out.stderr, out.stderr[-3000:]
    assert "ember: output code of 0-0_backward" in out.stderr
    assert "void ember_k0(" in out.stderr and "exp = aten.exp.default" in out.stderr
    assert "em_exp" not in out.stderr.split("ember: output code of")[1].split("/* kernel 0:")[0]


def test_torch_trace_holds_ember_artifacts(children):
    run = children["trace"]
    run.result()
    trace = run.tmp_path / "trace"
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


def test_torch_compile_debug_folder(children):
    run = children["compile_debug"]
    run.result()
    tmp_path = run.tmp_path
    dumps = list(tmp_path.glob("torch_compile_debug/run_*/ember/graph_*_0-0_forward/kernels.c"))
    assert dumps, sorted(str(p) for p in tmp_path.rglob("*") if "ember" in str(p))[:20]


def test_debug_runs_apart_and_graphs_named_by_compile_id(children):
    for run in children["debug"]:
        run.result()
    tmp_path = children["debug"][0].tmp_path
    runs = sorted((tmp_path / "dbg").glob("run_*_pid*"))
    assert len(runs) == 2, runs
    for run in runs:
        names = sorted(p.name for p in run.iterdir())
        assert names == ["graph_001_0-0_forward", "graph_002_0-0_backward"], names
        src = (run / names[0] / "kernels.c").read_text()
        assert '#include "prelude.h"' in "\n".join(src.splitlines()[:4]), src[:400]
        assert (run / names[0] / "prelude.h").read_text().count("em_") > 100
        assert (run / names[0] / "after_lower.txt").exists() and (run / names[0] / "graph.txt").exists()
