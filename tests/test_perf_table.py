"""docs/PERFORMANCE.md is made by tools/perf_table.py from bench/results/:
the committed file must be what the script makes of the committed results
(so the table never goes stale), and the script must pick, per machine, the
newest run of each configuration."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the recorded results live in the source checkout, not in the sdist
pytestmark = pytest.mark.skipif(not (ROOT / "bench" / "results").is_dir() or not (ROOT / "docs").is_dir(),
                                reason="needs the source checkout's bench/results and docs")


def _perf_table():
    spec = importlib.util.spec_from_file_location("perf_table", ROOT / "tools" / "perf_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_performance_md_is_generated_from_results():
    pt = _perf_table()
    text = pt.render(str(ROOT / "bench" / "results"))
    committed = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert committed == text, "docs/PERFORMANCE.md is stale: run python tools/perf_table.py"
    # every run folder the table names exists and every machine has a section
    for line in text.splitlines():
        if line.startswith("- `"):
            folder = line.split("`")[1]
            assert (ROOT / "bench" / "results" / folder / "results.json").exists(), folder
    assert "## NVIDIA H100" in text and "## CPU:" in text


def _run(tmp, folder, date, ember_ms, gpu="NVIDIA H100 80GB HBM3 (79 GiB, sm_90)", batch=32):
    meta = {"command": f"ember bench --name {folder}", "date": date, "device": "cuda",
            "machine": {"gpu": gpu, "torch": "2.11.0", "cpu": "x", "cores": 16, "git": "abc"},
            "dtype": "fp32", "mode": "infer", "image_size": None, "seq_len": None, "small": False}
    rows = [{"model": "resnet50", "backend": b, "batch_size": batch, "status": "ok", "step_ms": t,
             "first_call_s": 1.0, "accuracy": {"verdict": "pass"}}
            for b, t in (("eager", 10.0), ("inductor", 5.0), ("ember", ember_ms))]
    d = tmp / folder
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"meta": meta, "results": rows, "kernels": []}))


def test_newest_run_of_a_configuration_wins(tmp_path):
    pt = _perf_table()
    _run(tmp_path, "old", "2026-11-01T00:00:00+00:00", 9.0)
    _run(tmp_path, "new", "2026-11-02T00:00:00+00:00", 4.0)
    _run(tmp_path, "other-batch", "2026-10-01T00:00:00+00:00", 7.0, batch=64)
    _run(tmp_path, "h200", "2026-10-01T00:00:00+00:00", 6.0, gpu="NVIDIA H200 (140 GiB, sm_90)")
    text = pt.render(str(tmp_path))
    h100, h200 = text.split("## NVIDIA H200")
    assert "| resnet50 inference fp32 b32 | 10.0 | 5.00 | 4.00 | 0.80 |" in h100
    assert "`old`" not in text                      # superseded: same machine and configuration
    assert "| resnet50 inference fp32 b64 |" in h100 and "`other-batch`" in h100
    assert "`h200`" in h200 and "`h200`" not in h100
    assert "geometric mean over the 2 rows" in h100
    assert "ember bench --name new" in h100


def test_dynamic_runs_are_their_own_rows(tmp_path):
    """A --dynamic run is a configuration of its own (it does not replace the
    static one), and its ember time is shown against the static one's."""
    pt = _perf_table()
    _run(tmp_path, "static", "2026-11-01T00:00:00+00:00", 4.0)
    _run(tmp_path, "dyn", "2026-11-02T00:00:00+00:00", 5.0)
    meta_path = tmp_path / "dyn" / "results.json"
    data = json.loads(meta_path.read_text())
    data["meta"]["dynamic"] = True
    data["kernels"] = [{"kernel": "k", "shape": "2^28", "backend": "ember", "status": "ok", "ms": 2.2}]
    meta_path.write_text(json.dumps(data))
    sdata = json.loads((tmp_path / "static" / "results.json").read_text())
    sdata["kernels"] = [{"kernel": "k", "shape": "2^28", "backend": "ember", "status": "ok", "ms": 2.0}]
    (tmp_path / "static" / "results.json").write_text(json.dumps(sdata))
    text = pt.render(str(tmp_path))
    assert "| resnet50 inference fp32 b32 | 10.0 | 5.00 | 4.00 | 0.80 |" in text
    assert "| resnet50 inference fp32 b32 dynamic | 10.0 | 5.00 | 5.00 | 1.00 | 1.0 | 1.0 | 1.25 |" in text
    assert "`static`" in text and "`dyn`" in text
    static_k, dyn_k = text.split("Memory-bound kernels (`")[1:]
    assert static_k.startswith("static`)") and "dynamic" not in static_k.split("\n\n")[0]
    assert dyn_k.startswith("dyn`, every backend compiled with `dynamic=True`")
    assert "| k | 2^28 | - | - | 2.20 | - | - | 2.00 | 1.10 |" in dyn_k
