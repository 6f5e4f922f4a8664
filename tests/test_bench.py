"""Tests of the benchmark harness (`ember bench`), the zoo and `ember demo`.

Fast: the arithmetic, the accuracy rule, argument parsing and the reports are
tested on synthetic data; the end-to-end runs use the --small MLP with a few
steps (each worker is a subprocess that imports torch: a few seconds each).
"""
from __future__ import annotations

import json
import math
import os

import pytest
import torch

from conftest import zoo_small_train_step
from ember.tools import bench, zoo


# ------------------------------------------------------------------ arithmetic
def test_median_and_percentile():
    assert bench.median([3.0, 1.0, 2.0]) == 2.0
    assert bench.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert bench.median([7]) == 7.0
    with pytest.raises(ValueError):
        bench.median([])
    assert bench.percentile([1, 2, 3, 4, 5], 50) == 3
    assert bench.percentile([1, 2, 3, 4, 5], 0) == 1
    assert bench.percentile([1, 2, 3, 4, 5], 100) == 5
    assert bench.percentile([0, 10], 10) == pytest.approx(1.0)


def test_geomean_and_speedup():
    assert bench.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert bench.geomean([1.5]) == pytest.approx(1.5)
    assert bench.geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert bench.geomean([]) is None
    with pytest.raises(ValueError):
        bench.geomean([1.0, 0.0])
    with pytest.raises(ValueError):
        bench.geomean([1.0, -2.0])
    assert bench.speedup(10.0, 5.0) == pytest.approx(2.0)
    assert bench.speedup(5.0, 10.0) == pytest.approx(0.5)
    assert bench.speedup(None, 5.0) is None
    assert bench.speedup(5.0, 0.0) is None


def test_tolerances_follow_pytorch():
    assert bench.tolerance(train=False, dtype="fp32") == 1e-3
    assert bench.tolerance(train=True, dtype="fp32") == 1e-2
    assert bench.tolerance(train=False, dtype="bf16") == 1e-2
    assert bench.tolerance(train=True, dtype="fp16") == 1e-2


# -------------------------------------------------------------------- accuracy
def _t(*vals, dtype=torch.float32):
    return torch.tensor(vals, dtype=dtype)


def test_accuracy_pass_within_tolerance_without_fp64():
    ref = [("out", torch.linspace(-2, 2, 2000))]
    res = [("out", ref[0][1] * (1 + 5e-4))]
    called = []
    v = bench.accuracy(ref, res, 1e-3, fp64=lambda: called.append(1) or ref)
    assert v["verdict"] == bench.PASS
    assert not called, "the fp64 reference is computed only when allclose fails"
    assert v["max_abs_err"] == pytest.approx(1e-3, rel=1e-2)


def test_accuracy_fail_without_fp64_reference():
    ref = [("out", torch.ones(2000))]
    res = [("out", torch.ones(2000) * 1.1)]
    v = bench.accuracy(ref, res, 1e-3)
    assert v["verdict"] == bench.FAIL
    assert "out" in v["detail"] and "no fp64" in v["detail"]


def test_accuracy_tolerance_scales_with_small_results():
    # logits of about 1e-9 (mobilenet_v2 at torchvision's initialisation): an
    # answer 50% off is within atol = 1e-3 of them, but not within tol x their RMS
    ref = torch.randn(2000, generator=torch.Generator().manual_seed(0)) * 1e-9
    v = bench.accuracy([("out", ref)], [("out", ref * 1.5)], 1e-3)
    assert v["verdict"] == bench.FAIL
    assert bench.accuracy([("out", ref)], [("out", ref * (1 + 5e-4))], 1e-3)["verdict"] == bench.PASS
    big = torch.randn(2000, generator=torch.Generator().manual_seed(1)) * 30   # RMS above 1: atol stays tol
    assert bench.accuracy([("out", big)], [("out", big + 9e-4)], 1e-3)["verdict"] == bench.PASS


def test_accuracy_fp64_rule_passes_when_compiled_is_as_close_to_exact_as_eager():
    exact = torch.linspace(1, 2, 2000, dtype=torch.float64)
    eager = (exact + 0.01).float()          # eager itself 1e-2 away from the exact answer
    comp = (exact - 0.012).float()          # compiled 1.2e-2 away, other side: 2.2e-2 from eager
    v = bench.accuracy([("out", eager)], [("out", comp)], 1e-3, fp64=lambda: [("out", exact)])
    assert v["verdict"] == bench.PASS_FP64


def test_accuracy_fp64_rule_fails_when_compiled_is_much_worse():
    exact = torch.linspace(1, 2, 2000, dtype=torch.float64)
    eager = (exact + 1e-4).float()
    comp = (exact + 0.05).float()
    v = bench.accuracy([("out", eager)], [("out", comp)], 1e-3, fp64=lambda: [("out", exact)])
    assert v["verdict"] == bench.FAIL
    assert "rmse" in v["detail"]


def test_accuracy_fp64_multiplier_for_small_and_low_precision_tensors():
    exact = torch.zeros(10, dtype=torch.float64)
    eager = torch.full((10,), 0.01)
    comp = torch.full((10,), 0.025)     # 2.5x eager's error: m = 3 for < 1000 elements
    assert bench.accuracy([("o", eager)], [("o", comp)], 1e-3,
                          fp64=lambda: [("o", exact)])["verdict"] == bench.PASS_FP64
    big_exact = torch.zeros(5000, dtype=torch.float64)
    big_eager, big_comp = torch.full((5000,), 0.01), torch.full((5000,), 0.025)   # m = 2
    assert bench.accuracy([("o", big_eager)], [("o", big_comp)], 1e-3,
                          fp64=lambda: [("o", big_exact)])["verdict"] == bench.FAIL
    half = big_comp.to(torch.bfloat16)   # fp16/bf16 results: m = 3
    assert bench.accuracy([("o", big_eager.to(torch.bfloat16))], [("o", half)], 1e-3,
                          fp64=lambda: [("o", big_exact)])["verdict"] == bench.PASS_FP64


def test_accuracy_structure_shapes_ints_and_none_grads():
    a = torch.arange(6)
    assert bench.accuracy([("i", a)], [("i", a.clone())], 1e-3)["verdict"] == bench.PASS
    assert bench.accuracy([("i", a)], [("i", a + 1)], 1e-3)["verdict"] == bench.FAIL
    assert bench.accuracy([("x", _t(1.0))], [("x", _t(1.0)), ("y", _t(2.0))], 1e-3)["verdict"] == bench.FAIL
    assert bench.accuracy([("x", torch.ones(2, 3))], [("x", torch.ones(3, 2))], 1e-3)["verdict"] == bench.FAIL
    assert bench.accuracy([("grad:w", None)], [("grad:w", None)], 1e-3)["verdict"] == bench.PASS
    assert bench.accuracy([("grad:w", None)], [("grad:w", _t(1.0))], 1e-3)["verdict"] == bench.FAIL
    nan = _t(float("nan"), 1.0)
    assert bench.accuracy([("n", nan)], [("n", nan.clone())], 1e-3)["verdict"] == bench.PASS
    assert bench.accuracy([("n", _t(0.0, 1.0))], [("n", nan)], 1e-3)["verdict"] == bench.FAIL


def _row(model, backend, speedup=None, verdict=bench.PASS, status="ok", first=1.0, mem=None, step=1.0):
    return {"model": model, "backend": backend, "status": status, "speedup": speedup,
            "step_ms": step, "first_call_s": first, "peak_mem_mb": mem,
            "accuracy": {"verdict": verdict, "detail": "x"}}


def test_summary_excludes_failed_models_from_speed():
    rows = [
        _row("a", "eager", verdict=bench.BASELINE, mem=100.0, step=10.0),
        _row("b", "eager", verdict=bench.BASELINE, mem=200.0, step=10.0),
        _row("c", "eager", verdict=bench.BASELINE, mem=50.0, step=10.0),
        _row("a", "ember", speedup=2.0, first=2.0, mem=50.0),
        _row("b", "ember", speedup=8.0, first=4.0, mem=100.0),
        _row("c", "ember", speedup=100.0, verdict=bench.FAIL, first=6.0),   # fast but wrong
        _row("a", "inductor", speedup=1.5, verdict=bench.PASS_FP64, first=30.0),
        _row("b", "inductor", status="error", first=None),
    ]
    rows[-1]["first_call_s"] = None
    bench.finish_rows(rows)
    assert rows[0]["speedup"] == 1.0
    assert rows[3]["mem_ratio"] == pytest.approx(0.5)
    assert rows[4]["mem_ratio"] == pytest.approx(0.5)
    assert not bench.passed(rows[5]) and not bench.passed(rows[7])
    assert bench.passed(rows[6]) and bench.passed(rows[0])
    s = bench.summarize(rows, bench.parse_backends("inductor,ember"))
    assert s["ember"]["geomean_speedup"] == pytest.approx(4.0)        # sqrt(2 * 8); c left out
    assert s["ember"]["models_in_geomean"] == 2
    assert (s["ember"]["passed"], s["ember"]["total"]) == (2, 3)
    assert s["ember"]["pass_rate"] == pytest.approx(2 / 3)
    assert s["ember"]["mean_first_call_s"] == pytest.approx(4.0)      # every completed first call
    assert s["ember"]["failed"] == ["c"]
    assert s["ember"]["geomean_mem_ratio"] == pytest.approx(0.5)
    assert s["inductor"]["geomean_speedup"] == pytest.approx(1.5)
    assert (s["inductor"]["passed"], s["inductor"]["total"]) == (1, 2)
    assert s["inductor"]["mean_first_call_s"] == pytest.approx(30.0)
    assert s["eager"]["geomean_speedup"] == pytest.approx(1.0)
    table = bench.format_table(rows)
    assert "FAIL" in table and "ERROR" in table and "(100.00x)" in table
    md = bench.format_markdown({"meta": _meta(), "results": rows, "summary": s, "kernels": []}, [])
    assert "## Failures" in md and "**c / ember**" in md and "| ember | 4.00x | 2 | 2/3 (67%)" in md


def _meta(**kw):
    m = {"command": "python -m ember bench --models x", "cwd": "/tmp", "date": "today",
         "machine": {"cpu": "cpu", "cores": 2, "torch_threads": 2, "memory_gb": 1.0, "os": "os",
                     "python": "3", "torch": torch.__version__, "gpu": None},
         "device": "cpu", "dtype": "fp32", "mode": "infer", "optimizer": None, "iters": 3,
         "warmup": 1, "batch_size": None, "seq_len": None, "small": True, "warm_cache": False,
         "backends": ["eager", "ember"], "models": [], "kernels": False, "notes": [],
         "tolerance": 1e-3, "out_dir": "/tmp/x"}
    m.update(kw)
    return m


def test_reports_and_chart(tmp_path):
    rows = [_row("mlp", "eager", verdict=bench.BASELINE, mem=10.0),
            _row("mlp", "inductor", speedup=1.3, first=30.0, mem=12.0),
            _row("vit", "eager", verdict=bench.BASELINE),
            _row("vit", "inductor", speedup=0.9, verdict=bench.FAIL)]
    bench.finish_rows(rows)
    krows = [{"kernel": "sin(x)+cos(y)", "shape": "2^18", "backend": b, "status": "ok", "bytes": 3 << 20,
              "ms": ms, "copy_ms": 1.0, "gbps": 3.0, "copy_gbps": 3.0, "of_floor": 1.0 / ms,
              "first_call_s": 0.1, "accuracy": {"verdict": v}}
             for b, ms, v in (("eager", 2.0, bench.BASELINE), ("inductor", 1.1, bench.PASS))]
    krows[1].update(kernel_ms=1.0, copy_kernel_ms=0.97, kernel_of_floor=0.97)  # a GPU row: the profiler's too
    bench.finish_kernel_rows(krows)
    backends = bench.parse_backends("inductor")
    report = {"meta": _meta(out_dir=str(tmp_path)), "results": rows,
              "summary": bench.summarize(rows, backends), "kernels": krows,
              "kernel_summary": bench.summarize_kernels(krows, backends)}
    paths = bench.write_outputs(report, str(tmp_path))
    md = (tmp_path / "results.md").read_text()
    assert "python -m ember bench --models x" in md
    assert "peak RSS growth" in md and "## How the numbers are measured" in md
    assert "Memory-bound kernels" in md and "91%" in md
    assert "| kernel of floor |" in md and "| 97% |" in md and "Kernel of floor" in md
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["summary"]["inductor"]["geomean_speedup"] == pytest.approx(1.3)
    assert krows[1]["speedup"] == pytest.approx(2.0 / 1.1)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "chart.png").stat().st_size > 1000
    assert (tmp_path / "kernels.png").exists()
    assert str(tmp_path / "chart.png") in paths


def test_no_stale_chart(tmp_path):
    # a run that draws no chart must not leave an earlier run's picture in its
    # folder, where it would read as this run's
    (tmp_path / "chart.png").write_bytes(b"old picture")
    (tmp_path / "kernels.png").write_bytes(b"old picture")
    rows = [_row("mlp", "eager", verdict=bench.BASELINE), _row("mlp", "inductor", speedup=1.1)]
    bench.finish_rows(rows)
    report = {"meta": _meta(out_dir=str(tmp_path)), "results": rows,
              "summary": bench.summarize(rows, bench.parse_backends("inductor"))}
    paths = bench.write_outputs(report, str(tmp_path), chart=False)
    assert not (tmp_path / "chart.png").exists() and not (tmp_path / "kernels.png").exists()
    assert sorted(os.path.basename(p) for p in paths) == ["results.json", "results.md"]


def test_image_and_seq_options():
    a = bench.parse_args(["--models", "resnet50", "--image-size", "128", "--seq-len", "64"])
    assert a.image_size == 128 and a.seq_len == 64
    from ember.tools import zoo
    assert zoo.Ctx(image_size=128).image() == 128 and zoo.Ctx(small=True).image() == 64
    with pytest.raises(SystemExit):
        bench.parse_args(["--image-size", "0"])


# ---------------------------------------------------------------- command line
def test_parse_backend_modes():
    b = bench.parse_backend("ember:reduce-overhead")
    assert (b.name, b.mode, b.label, b.cudagraphs) == ("ember", "reduce-overhead", "ember:reduce-overhead", True)
    b = bench.parse_backend("inductor:max-autotune")
    assert (b.name, b.mode) == ("inductor", "max-autotune")
    b = bench.parse_backend("inductor:default")
    assert (b.mode, b.label) == (None, "inductor")
    assert bench.parse_backend(" ember ").label == "ember"
    assert (bench.parse_backend("dynamo").label, bench.parse_backend("dynamo").compiled) == ("dynamo", True)
    for bad in ("tvm", "eager:reduce-overhead", "ember:fast", "aot_eager:max-autotune", "dynamo:reduce-overhead"):
        with pytest.raises(ValueError):
            bench.parse_backend(bad)


def test_dynamo_backend_is_dynamos_capture_alone():
    """`dynamo`: torch.compile with torch's "eager" backend, the part of every
    first call that no backend can cut (the floor's first half)."""
    import torch
    from torch._dynamo.utils import counters

    def fn(x):
        return torch.sin(x) + 1

    before = counters["stats"]["unique_graphs"]
    c = bench.compile_with(fn, bench.parse_backend("dynamo"))
    x = torch.randn(4)
    torch.testing.assert_close(c(x), fn(x))
    assert counters["stats"]["unique_graphs"] == before + 1  # Dynamo captured it


def test_parse_backends_puts_eager_first_once():
    labels = [b.label for b in bench.parse_backends("inductor,ember,ember:default,eager,ember:reduce-overhead")]
    assert labels == ["eager", "inductor", "ember", "ember:reduce-overhead"]
    assert [b.label for b in bench.parse_backends("eager")] == ["eager"]


def test_parse_args():
    a = bench.parse_args(["--models", "builtin", "--backends", "eager,inductor:max-autotune",
                          "--train", "--dtype", "bf16", "--batch-size", "4", "--iters", "7"])
    assert a.mode == "train" and a.dtype == "bf16" and a.batch_size == 4 and a.iters == 7
    assert [b.label for b in a.backend_specs] == ["eager", "inductor:max-autotune"]
    assert bench.parse_args([]).mode == "infer"
    for bad in (["--train", "--infer"], ["--backends", "nope"], ["--dtype", "fp8"], ["--iters", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_cli_dispatch(capsys):
    from ember import cli
    assert cli.main(["--help"]) == 0
    assert "bench" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "transformer_block" in out and "softmax(0.125*x)" in out


# ------------------------------------------------------------------------- zoo
def test_groups_resolve():
    names = [e.name for e in zoo.resolve("builtin")[0]]
    assert names == ["mlp", "transformer_block", "small_resnet", "small_vit"]
    entries, _ = zoo.resolve("mlp,builtin,mlp")
    assert [e.name for e in entries] == names[:1] + names[1:]
    all_names = [e.name for e in zoo.resolve("all")[0]]
    assert set(names) <= set(all_names)
    assert all(zoo.get(n).available() for n in all_names)
    with pytest.raises(ValueError, match="unknown model"):
        zoo.resolve("no_such_model")


def test_groups_leave_out_missing_packages(monkeypatch):
    monkeypatch.setattr(zoo, "_have", lambda mod: mod is None)   # only torch
    entries, notes = zoo.resolve("vision,nlp,builtin")
    assert [e.group for e in entries] == ["vision"] * 4 + ["builtin"] * 4
    assert all(e.source == "ember.tools.vision" for e in entries[:4])
    assert any("torchvision" in n for n in notes) and any("transformers" in n for n in notes)
    with pytest.raises(ValueError, match="needs the package 'torchvision'"):
        zoo.resolve("resnet18")
    with pytest.raises(ValueError, match="timm"):
        zoo.resolve("timm:resnet18")


def test_sweep_groups_list_without_timm(monkeypatch):
    timm_names = [n for n, _ in zoo.SWEEP_TIMM]
    assert len(set(timm_names)) == len(timm_names) >= 40
    fams = {f for _, f in zoo.SWEEP_TIMM}
    assert {"cnn", "depthwise-se", "convnext", "vit", "swin", "maxvit", "mlp-mixer",
            "poolformer"} <= fams
    assert len(zoo.SWEEP_HF) >= 12 and {f for _, f in zoo.SWEEP_HF} >= {
        "encoder", "decoder", "encoder-decoder", "vision", "speech"}
    monkeypatch.setattr(zoo, "_have", lambda mod: mod in (None, "transformers"))
    entries, notes = zoo.resolve("sweep-timm")
    assert entries == [] and any("timm" in n for n in notes)
    listed = zoo.group("sweep-timm", only_available=False)
    assert [e.name for e in listed] == ["timm:" + n for n in timm_names]
    assert zoo.family("timm:swin_tiny_patch4_window7_224") == "swin" and zoo.family("llama") == "decoder"
    assert "sweep-timm (63 models" in zoo.listing() and "maxvit_tiny_tf_224" in zoo.listing()
    hf, notes = zoo.resolve("sweep-hf")
    assert [e.name for e in hf] == [n for n, _ in zoo.SWEEP_HF] and not notes
    # the sweeps stay out of `all`, whose members are the three groups'
    assert {e.group for e in zoo.group("all", only_available=False)} == {"builtin", "vision", "nlp"}


@pytest.mark.parametrize("name", ["albert", "llama", "bart", "hf-vit", "whisper", "wav2vec2"])
def test_sweep_hf_entries_build_and_train_small(name):
    pytest.importorskip("transformers")
    zoo_small_train_step(name)


def test_gpu_lock_excludes_a_second_holder(tmp_path):
    import fcntl
    path = str(tmp_path / "gpu.lock")
    with bench.gpu_lock(path):
        with open(path) as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path) as other:       # released on leaving
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with bench.gpu_lock(None):
        pass
    a = bench.parse_args(["--gpu-lock", path, "--profile-steps", "0"])
    assert a.gpu_lock == path and a.profile_steps == 0
    with pytest.raises(SystemExit):
        bench.parse_args(["--profile-steps", "-1"])


def test_gpu_ms_column():
    rows = [_row("m", "eager", verdict=bench.BASELINE), _row("m", "ember", speedup=2.0)]
    rows[1]["gpu_ms"] = 1.234
    bench.finish_rows(rows)
    table = bench.format_table(rows)
    assert "GPU ms" in table.splitlines()[0] and "1.23" in table
    assert bench._columns(False) == [c for c in bench.RESULT_COLUMNS if c != "warm 1st s"]
    assert len(bench.result_cells(rows[1], False)) == len(bench._columns(False))
    assert len(bench.result_cells(rows[1], True)) == len(bench.RESULT_COLUMNS)


@pytest.mark.parametrize("name", ["mlp", "transformer_block", "small_resnet", "small_vit"])
def test_builtin_entries_build_run_and_train(name):
    e = zoo.get(name)
    ctx = zoo.Ctx("cpu", small=True)
    torch.manual_seed(0)
    m = e.make_model(ctx)
    ex = e.inputs(ctx, 2, torch.Generator().manual_seed(1))
    out = m(*ex.args, **ex.kwargs)
    loss = e.loss(out, ex.target)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())
    ex2 = e.inputs(ctx, 2, torch.Generator().manual_seed(1))
    assert torch.equal(ex.args[0], ex2.args[0]), "inputs come from the seeded generator"


# torchvision's parameter counts of the same architectures (224 x 224 images)
OURS = {"resnet50_ours": 25_557_032, "densenet121_ours": 7_978_856,
        "mobilenet_v2_ours": 3_504_872, "vit_b_16_ours": 86_567_656}


@pytest.mark.parametrize("name", list(OURS))
def test_ours_entries_build_and_run_without_torchvision(name):
    e = zoo.get(name)
    assert e.available() and e.group == "vision" and "not torchvision" in e.description
    tv = zoo.get(name[:-len("_ours")])
    assert (tv.source, e.inputs.__qualname__, e.loss, e.batch_gpu, e.batch_cpu) == \
        ("torchvision", tv.inputs.__qualname__, tv.loss, tv.batch_gpu, tv.batch_cpu)
    assert name in zoo.listing()
    ctx = zoo.Ctx("cpu", image_size=64)
    torch.manual_seed(0)
    m = e.make_model(ctx).eval()
    # the ViT's positions are sized for the images: 16 + 1 of them at 64 x 64, 196 + 1 at 224
    fewer = (196 - 16) * 768 if name.startswith("vit") else 0
    assert sum(p.numel() for p in m.parameters()) == OURS[name] - fewer
    ex = e.inputs(ctx, 2, torch.Generator().manual_seed(1))
    assert ex.args[0].shape == (2, 3, 64, 64)
    with torch.no_grad():
        out = m(*ex.args, **ex.kwargs)
    assert out.shape == (2, 1000) and torch.isfinite(out).all()
    assert e.loss(out, ex.target).dim() == 0


def test_disable_dropout_and_output_tensors():
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5),
                            torch.nn.MultiheadAttention(4, 2, dropout=0.1))
    zoo.disable_dropout(m)
    assert m[1].p == 0.0 and m[2].dropout == 0.0
    a, b = torch.ones(1), torch.zeros(2)
    names = [n for n, _ in zoo.output_tensors({"logits": a, "extra": (b, None, "s")})]
    assert names == ["logits", "extra[0]"]


def test_kernel_set():
    assert list(zoo.KERNELS) == ["sin(x)+cos(y)", "gelu(x*w+b)", "gelu(layer_norm(x))",
                                 "softmax(0.125*x)", "sum(x, inner dim)", "sum(x, outer dim)"]
    assert zoo._kshape("vec", cuda=True, small=False) == (1 << 28,)
    assert zoo._kshape("vec", cuda=False, small=False) == (1 << 24,)
    assert zoo._kshape("rows", cuda=True, small=False) == (65536, 1024)
    assert zoo._kshape("soft", cuda=True, small=False) == (16384, 4096)
    assert zoo._kshape("square", cuda=True, small=False) == (8192, 8192)
    for k in zoo.KERNELS.values():
        ins = k.make(False, True, torch.float32, "cpu")
        assert k.fn(*ins).numel() > 0


# ------------------------------------------------------------------ end to end
def _run(tmp_path, *argv):
    out = tmp_path / "out"
    rc = bench.main(["--out", str(out), "--small", "--no-chart", *argv])
    data = json.loads((out / "results.json").read_text())
    return rc, data, out


def test_end_to_end_eager(tmp_path):
    rc, data, out = _run(tmp_path, "--models", "mlp", "--backends", "eager", "--iters", "3")
    assert rc == 0
    (row,) = data["results"]
    assert row["status"] == "ok", row
    assert row["backend"] == "eager" and row["n_steps"] == 3 and row["step_ms"] > 0
    assert row["first_call_s"] > 0 and row["accuracy"]["verdict"] == bench.BASELINE
    assert data["summary"]["eager"]["pass_rate"] == 1.0
    md = (out / "results.md").read_text()
    assert "--models mlp --backends eager --iters 3" in md and "| mlp | eager |" in md
    assert (out / "logs" / "mlp__eager.log").exists()


def test_end_to_end_kernels(tmp_path):
    rc, data, _ = _run(tmp_path, "--kernels", "--backends", "eager", "--iters", "2", "--warmup", "0")
    assert rc == 0, data["kernels"]
    assert len(data["kernels"]) == len(zoo.KERNELS)
    for r in data["kernels"]:
        assert r["status"] == "ok" and r["gbps"] > 0 and 0 < r["of_floor"] < 100, r


def test_worker_error_is_reported(tmp_path):
    """The worker (run here in-process) turns an exception into an error result."""
    spec = {"kind": "model", "model": "no_such_model", "backend": "eager", "backend_mode": None,
            "backend_label": "eager", "device": "cpu", "dtype": "fp32", "mode": "infer",
            "batch_size": None, "seq_len": None, "small": True, "iters": 1, "warmup": 0,
            "optimizer": "sgd", "seed": 0, "result_path": str(tmp_path / "r.json")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert bench._worker_main(["--worker", str(tmp_path / "spec.json")]) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["status"] == "error" and "unknown model" in res["error"] and res["traceback"]
    assert bench.short_error("BackendCompilerFailed: backend='ember' raised:\nCompileError: x\n"
                             "\nSet TORCHDYNAMO_VERBOSE=1 for more") == "CompileError: x"


@pytest.mark.ember_only
def test_end_to_end_ember(tmp_path):
    rc, data, _ = _run(tmp_path, "--models", "mlp", "--backends", "ember", "--iters", "3")
    rows = {r["backend"]: r for r in data["results"]}
    assert rows["ember"]["status"] == "ok", rows["ember"].get("error")
    assert rows["ember"]["accuracy"]["verdict"] in (bench.PASS, bench.PASS_FP64), rows["ember"]["accuracy"]
    assert rows["ember"]["ember"]["graphs"] >= 1
    assert rc == 0


# ------------------------------------------------------------------------ demo
def test_demo_runs_with_another_backend(capsys):
    from ember.tools import demo
    rc = demo.main(["--backend", "aot_eager", "--seconds", "0.2", "--model", "mlp"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASS" in out and "max abs error" in out and "bench --models" in out


def test_demo_fails_loudly(capsys):
    from ember.tools import demo
    rc = demo.main(["--mode", "no-such-mode", "--seconds", "0.2", "--model", "mlp"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out


@pytest.mark.ember_only
def test_demo_with_ember(capsys):
    from ember.tools import demo
    rc = demo.main(["--seconds", "0.5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASS" in out


# ------------------------------------------------------------ dynamic shapes
def test_dynamic_flag_reaches_every_compiled_backend(monkeypatch):
    """--dynamic: torch.compile(dynamic=True) for Inductor, Dynamo's capture
    and ember, in every mode; without it torch.compile's default (None)."""
    assert bench.parse_args(["--dynamic"]).dynamic and not bench.parse_args([]).dynamic
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    for label in ("inductor", "inductor:reduce-overhead", "dynamo", "ember", "ember:reduce-overhead"):
        bench.compile_with(abs, bench.parse_backend(label), dynamic=True)
        bench.compile_with(abs, bench.parse_backend(label))
    assert [kw["dynamic"] for kw in seen] == [True, None] * 5
    assert [kw.get("mode") for kw in seen[:4]] == [None, None, "reduce-overhead", "reduce-overhead"]
    assert bench.compile_with(abs, bench.parse_backend("eager"), dynamic=True) is abs


def test_compiles_cell_shows_symbolic_and_per_shape():
    assert bench.compiles_cell({}) == "-"
    assert bench.compiles_cell({"ember_compiles": 2, "symbolic_compiles": 0, "specialized": 0}) == "2"
    assert bench.compiles_cell({"ember_compiles": 4, "symbolic_compiles": 2, "specialized": 1}) == \
        "4 (2 symbolic, 1 per shape)"
    s = {"compiles": 5, "symbolic_compiles": 3, "symbolic_refused": ["x"]}
    assert bench._compile_counts(s, bench._compile_counts({"compiles": 1, "symbolic_compiles": 1})) == \
        {"ember_compiles": 4, "symbolic_compiles": 2, "specialized": 1}


@pytest.mark.ember_only
def test_end_to_end_dynamic(tmp_path):
    """A model run with --dynamic: recorded in the meta and the headers, and
    ember's graph was compiled once for every size (a symbolic program)."""
    rc, data, out = _run(tmp_path, "--models", "mlp", "--backends", "ember", "--iters", "2",
                         "--warmup", "0", "--dynamic", "--device", "cpu")
    assert data["meta"]["dynamic"] is True
    row = {r["backend"]: r for r in data["results"]}["ember"]
    assert row["status"] == "ok" and row["accuracy"]["verdict"] in (bench.PASS, bench.PASS_FP64), row
    assert row["ember_compiles"] >= 1 and row["symbolic_compiles"] == row["ember_compiles"], row
    assert row["specialized"] == 0 and row["ember"]["symbolic_compiles"] == row["symbolic_compiles"]
    md = (out / "results.md").read_text()
    assert md.startswith("# ember bench: out (dynamic=True)") and "| dynamic shapes | dynamic=True" in md
    assert f"| {bench.compiles_cell(row)} |" in md and "symbolic" in bench.compiles_cell(row)
    assert rc == 0


@pytest.mark.ember_only
def test_dynamic_kernels_are_symbolic(tmp_path, monkeypatch):
    """The --kernels worker (in this process) with dynamic=True: each kernel
    compiled once, symbolic, and right; without it, static."""
    monkeypatch.setattr(zoo, "KERNELS", {k: zoo.KERNELS[k] for k in ("gelu(x*w+b)", "softmax(0.125*x)")})
    for dynamic in (True, False):
        spec = {"device": "cpu", "dtype": "fp32", "backend": "ember", "backend_mode": None, "small": True,
                "iters": 1, "warmup": 0, "dynamic": dynamic}
        res: dict = {}
        bench._worker_kernels(spec, res)
        assert [r["status"] for r in res["kernels"]] == ["ok", "ok"], res["kernels"]
        for r in res["kernels"]:
            assert r["accuracy"]["verdict"] == bench.PASS, r
            assert (r["ember_compiles"], r["symbolic_compiles"], r["specialized"]) == (1, int(dynamic), 0), r
