"""Write docs/PERFORMANCE.md from the recorded benchmark results.

    python tools/perf_table.py            # rewrite docs/PERFORMANCE.md
    python tools/perf_table.py --check    # exit 1 if the file differs from the results

Reads every `results.json` that `ember bench` wrote under bench/results/
(ember/tools/bench.py: a "meta" dict with the machine, the command and the settings,
"results" rows per model and backend, "kernels" rows per kernel and backend)
and the one older kernel record of the H200 (gpu-kernels-h200.json, written
by the CUDA check script that `ember bench --kernels` replaced).  Groups the
runs by machine (the GPU's name, or the CPU's model and core count) and, per
machine, keeps the newest run of each model configuration (model, batch,
dtype, inference or training, image size, sequence length, dynamic shapes
or not, compile mode), so
a run that is re-measured replaces the older one in the table without any
hand editing.  Nothing here is typed in by hand: every number comes from the
JSON, and tests/test_perf_table.py checks the committed file is what this
script makes of the committed results.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
OUT = os.path.join(ROOT, "docs", "PERFORMANCE.md")

# The H200's kernel record predates `ember bench --kernels`; its JSON carries
# no command, so the command that wrote it is named here.
LEGACY_KERNELS = {
    "gpu-kernels-h200.json": "bash tests/gpu/run_on_device.sh --out $OUT",
}


# ------------------------------------------------------------------ loading
def load_runs(results_dir: str = RESULTS) -> List[Dict[str, Any]]:
    """Every ember bench run under results_dir: dicts with the report and
    its folder relative to results_dir, oldest first."""
    runs = []
    for path in glob.glob(os.path.join(results_dir, "**", "results.json"), recursive=True):
        with open(path) as f:
            report = json.load(f)
        if not isinstance(report, dict) or "meta" not in report:
            continue
        folder = os.path.relpath(os.path.dirname(path), results_dir).replace(os.sep, "/")
        runs.append({"folder": folder, "report": report, "meta": report["meta"]})
    runs.sort(key=lambda r: (r["meta"].get("date") or "", r["folder"]))
    return runs


def load_legacy_kernels(results_dir: str = RESULTS) -> List[Dict[str, Any]]:
    out = []
    for name, command in sorted(LEGACY_KERNELS.items()):
        path = os.path.join(results_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                out.append({"file": name, "command": command, "data": json.load(f)})
    return out


def machine_key(meta: Dict[str, Any]) -> str:
    """The machine a run measured: the GPU's name (without its memory size
    and arch, which the card's name already implies), else the CPU's."""
    mi = meta.get("machine") or {}
    gpu = mi.get("gpu")
    if gpu and str(meta.get("device", "")).startswith("cuda"):
        return gpu.split(" (")[0]
    return f"CPU: {mi.get('cpu', '?')}, {mi.get('cores', '?')} cores"


def _mode(label: str) -> str:
    return label.split(":", 1)[1] if ":" in label else "default"


def _backend(label: str) -> str:
    return label.split(":", 1)[0]


def config_key(meta: Dict[str, Any], row: Dict[str, Any], mode: str) -> Tuple:
    return (row.get("model"), row.get("batch_size"), meta.get("dtype"), meta.get("mode"),
            meta.get("image_size"), meta.get("seq_len"), bool(meta.get("small")), bool(meta.get("dynamic")), mode)


def current_rows(runs: List[Dict[str, Any]]) -> Dict[str, Dict[Tuple, Dict[str, Any]]]:
    """machine -> config -> the newest run's rows for that configuration:
    {"run": run, "ember": row, "inductor": row or None, "eager": row or None}."""
    out: Dict[str, Dict[Tuple, Dict[str, Any]]] = {}
    for run in runs:                       # oldest first: a newer run overwrites
        meta, rows = run["meta"], run["report"].get("results") or []
        for r in rows:
            if _backend(r.get("backend", "")) != "ember":
                continue
            mode = _mode(r["backend"])
            same = {_backend(x.get("backend", "")): x for x in rows if x.get("model") == r.get("model")
                    and (_mode(x.get("backend", "")) == mode or x.get("backend") == "eager")}
            out.setdefault(machine_key(meta), {})[config_key(meta, r, mode)] = {
                "run": run, "ember": r, "inductor": same.get("inductor"), "eager": same.get("eager")}
    return out


def floor_rows(runs: List[Dict[str, Any]]) -> Dict[Tuple, Dict[str, Any]]:
    """(machine, config without mode) -> the newest aot_eager row: Dynamo and
    AOTAutograd with no compiler behind them, the floor of any first call."""
    out = {}
    for run in runs:
        for r in run["report"].get("results") or []:
            if r.get("backend") == "aot_eager" and r.get("status") == "ok":
                out[(machine_key(run["meta"]),) + config_key(run["meta"], r, "")[:-1]] = r
    return out


def current_kernels(runs: List[Dict[str, Any]]) -> Dict[str, Dict[bool, Dict[str, Any]]]:
    """machine -> dynamic (`ember bench --dynamic`) or not -> the newest run with kernel rows."""
    out: Dict[str, Dict[bool, Dict[str, Any]]] = {}
    for run in runs:
        if run["report"].get("kernels"):
            out.setdefault(machine_key(run["meta"]), {})[bool(run["meta"].get("dynamic"))] = run
    return out


def static_kernels_for(runs: List[Dict[str, Any]], dyn_run: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The static kernel run a dynamic one is set beside: the newest of its machine recorded no
    later than it (a later static run measured a later tree, in another lease)."""
    best = None
    for run in runs:  # oldest first
        if run["report"].get("kernels") and not run["meta"].get("dynamic") and \
                machine_key(run["meta"]) == machine_key(dyn_run["meta"]) and \
                (run["meta"].get("date") or "") <= (dyn_run["meta"].get("date") or ""):
            best = run
    return best


# --------------------------------------------------------------- formatting
def ms(x: Optional[float]) -> str:
    if x is None:
        return "-"
    x = float(x)
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def sec(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def geomean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _ok(r: Optional[Dict[str, Any]]) -> bool:
    return bool(r) and r.get("status") == "ok"


def _step(r: Optional[Dict[str, Any]]) -> Optional[float]:
    return r.get("step_ms") if _ok(r) else None


def _verdict(r: Optional[Dict[str, Any]]) -> str:
    if not r:
        return "-"
    if r.get("status") != "ok":
        return "ERROR"
    return (r.get("accuracy") or {}).get("verdict", "-")


def _config_text(key: Tuple) -> str:
    model, batch, dtype, how, image, seq, small, dynamic, mode = key
    parts = [model, "training" if how == "train" else "inference", dtype, f"b{batch}"]
    if image:
        parts.append(f"{image}px")
    if seq:
        parts.append(f"seq {seq}")
    if small:
        parts.append("small")
    if dynamic:
        parts.append("dynamic")
    if mode != "default":
        parts.append(mode)
    return " ".join(str(p) for p in parts)


def _md(header: List[str], rows: List[List[str]], left: Tuple[str, ...]) -> List[str]:
    """A Markdown table; the columns named in left are left-aligned, the rest (numbers) right."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if h in left else "---:" for h in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _sort_key(key: Tuple) -> Tuple:
    model, batch, dtype, how, image, seq, small, dynamic, mode = key
    return (how == "train", str(model), str(dtype), batch or 0, image or 0, seq or 0, small, mode, dynamic)


def _static_key(key: Tuple) -> Tuple:
    """The same configuration without dynamic shapes."""
    return key[:-2] + (False, key[-1])


def models_section(machine: str, configs: Dict[Tuple, Dict[str, Any]],
                   floors: Dict[Tuple, Dict[str, Any]]) -> List[str]:
    keys = sorted(configs, key=_sort_key)
    with_floor = any((machine,) + k[:-1] in floors for k in keys)
    # dynamic=True rows: ember's step time against its own static one of the same configuration
    with_dyn = any(k[-2] for k in keys)
    header = ["configuration", "eager ms", "Inductor ms", "ember ms", "ember / Inductor",
              "first call s: Inductor", "first call s: ember"] + (["aot_eager floor"] if with_floor else []) + \
             (["ember dynamic / static"] if with_dyn else []) + ["accuracy", "run"]
    rows, ratios = [], []
    for k in keys:
        c = configs[k]
        e, i, m = _step(c["eager"]), _step(c["inductor"]), _step(c["ember"])
        q = ratio(m, i)
        if q and _verdict(c["ember"]).startswith("pass"):
            ratios.append(q)
        row = [_config_text(k), ms(e), ms(i), ms(m), "-" if q is None else f"{q:.2f}",
               sec((c["inductor"] or {}).get("first_call_s")), sec(c["ember"].get("first_call_s"))]
        if with_floor:
            fl = floors.get((machine,) + k[:-1])
            row.append(sec(fl.get("first_call_s")) if fl else "-")
        if with_dyn:
            st = configs.get(_static_key(k)) if k[-2] else None
            d = ratio(m, _step(st["ember"])) if st else None
            row.append("-" if d is None else f"{d:.2f}")
        row += [_verdict(c["ember"]), f"`{c['run']['folder']}`"]
        rows.append(row)
    g = geomean(ratios)
    out = [f"Models: step time in ms (median), each backend in its own process with cold caches. "
           f"*ember / Inductor* below 1: ember faster"
           + (f"; geometric mean over the {len(ratios)} rows that passed: **{g:.2f}**." if g else "."),
           ""]
    out += _md(header, rows, ("configuration", "accuracy", "run"))
    if with_floor:
        out += ["", "*aot_eager floor*: the first call of Dynamo and AOTAutograd with no compiler behind "
                "them (`--backends aot_eager`), which no `torch.compile` backend can go below."]
    if with_dyn:
        out += ["", "*dynamic*: every backend compiled with `dynamic=True` (`ember bench --dynamic`); "
                "*ember dynamic / static*: its ember step time over the newest static run of the same "
                "configuration (1: as fast)."]
    return out


def kernels_section(run: Dict[str, Any], static: Optional[Dict[str, Any]] = None) -> List[str]:
    """The kernel table of a run; for a dynamic=True run, with ember's
    static times of `static` (static_kernels_for) beside them."""
    rows = run["report"]["kernels"]
    by = {(r.get("kernel"), _backend(r.get("backend", ""))): r for r in rows}
    dyn = bool(run["meta"].get("dynamic"))
    sby = {r.get("kernel"): r for r in (static or {}).get("report", {}).get("kernels") or []
           if _backend(r.get("backend", "")) == "ember" and r.get("shape")} if dyn else {}
    names = []
    for r in rows:
        if r.get("kernel") not in names:
            names.append(r.get("kernel"))
    out_rows = []
    for n in names:
        cells = [n, (by.get((n, "ember")) or by.get((n, "eager")) or {}).get("shape", "-")]
        for be in ("eager", "inductor", "ember"):
            r = by.get((n, be))
            cells.append(ms(r.get("ms")) if _ok(r) else "-")
        for be in ("inductor", "ember"):
            r = by.get((n, be))
            f = r.get("of_floor") if _ok(r) else None
            cells.append("-" if f is None else f"{100 * f:.0f}%")
        if dyn:
            r, st = by.get((n, "ember")), sby.get(n)
            same = st is not None and r is not None and st.get("shape") == r.get("shape")
            cells.append(ms(st.get("ms")) if same and _ok(st) else "-")
            d = ratio(_step_k(r), _step_k(st)) if same else None
            cells.append("-" if d is None else f"{d:.2f}")
        out_rows.append(cells)
    out = [f"Memory-bound kernels (`{run['folder']}`"
           + (", every backend compiled with `dynamic=True`" if dyn else "")
           + "): ms per call; *of floor* = the time of a copy of "
           "the same bytes in the same process / the kernel's time (100%: as fast as a copy)"
           + (f"; *ember static ms*: the same kernel and shape in `{static['folder']}`, "
              "*dynamic / static* the ratio (1: as fast)" if dyn and static else "") + ".", ""]
    out += _md(["kernel", "shape", "eager ms", "Inductor ms", "ember ms", "Inductor of floor",
                "ember of floor"] + (["ember static ms", "dynamic / static"] if dyn else []),
               out_rows, ("kernel", "shape"))
    return out


def _step_k(r: Optional[Dict[str, Any]]) -> Optional[float]:
    return r.get("ms") if _ok(r) else None


def legacy_kernels_section(rec: Dict[str, Any]) -> List[str]:
    d = rec["data"]
    rows = []
    for r in d["rows"]:
        fl = r.get("floor_ms")
        rows.append([r["kernel"], ms(r.get("eager")), ms(r.get("inductor")), ms(r.get("ember")),
                     "-" if not (fl and r.get("inductor")) else f"{100 * fl / r['inductor']:.0f}%",
                     "-" if not (fl and r.get("ember")) else f"{100 * fl / r['ember']:.0f}%"])
    out = [f"Memory-bound kernels (`{rec['file']}`, torch {d.get('torch')}; copy bandwidth "
           f"{d.get('copy_GBps', 0):.0f} GB/s): ms per call (median of 50); *of floor* = the bytes "
           "moved at the copy bandwidth / the kernel's time.", "",
           f"Command: `{rec['command']}` (its script, tests/gpu/check_cuda.py, is gone: "
           "`ember bench --kernels` measures the same set).", ""]
    out += _md(["kernel", "eager ms", "Inductor ms", "ember ms", "Inductor of floor",
                "ember of floor"], rows, ("kernel",))
    return out


def _machine_order(name: str) -> Tuple:
    return (not name.startswith("CPU"), name)


def render(results_dir: str = RESULTS) -> str:
    runs = load_runs(results_dir)
    configs = current_rows(runs)
    floors = floor_rows(runs)
    kernels = current_kernels(runs)
    legacy = load_legacy_kernels(results_dir)
    machines = sorted(set(configs) | set(kernels) | {r["data"].get("device") for r in legacy},
                      key=_machine_order)
    L = ["# Performance", "",
         "Generated by `python tools/perf_table.py` from the JSON that `ember bench` recorded under "
         "`bench/results/` (see its README for what each folder is); do not edit by hand: "
         "tests/test_perf_table.py fails when this file and the results disagree. One section per "
         "machine; each row is the newest run of its configuration on that machine, and *run* names "
         "its folder, whose `results.md` has the full table, the machine and the method "
         "(bench/README.md).", ""]
    for mach in machines:
        L += [f"## {mach}", ""]
        used = [c["run"] for c in (configs.get(mach) or {}).values()]
        used += list((kernels.get(mach) or {}).values())
        # the static run each dynamic kernel run is set beside (listed with the others)
        beside = {dyn: static_kernels_for(runs, k) for dyn, k in (kernels.get(mach) or {}).items() if dyn}
        used += [r for r in beside.values() if r]
        seen, folders = set(), []
        for r in sorted(used, key=lambda r: r["folder"]):
            if r["folder"] not in seen:
                seen.add(r["folder"])
                folders.append(r)
        if folders:
            torches = sorted({(r["meta"].get("machine") or {}).get("torch", "?") for r in folders})
            cards = sorted({(r["meta"].get("machine") or {}).get("gpu") or
                            f"{(r['meta'].get('machine') or {}).get('cpu')}, "
                            f"{(r['meta'].get('machine') or {}).get('cores')} cores" for r in folders})
            dates = sorted((r["meta"].get("date") or "?")[:10] for r in folders)
            span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
            L += [f"{'Machine' if mach.startswith('CPU') else 'Card'}: {', '.join(cards)}. "
                  f"torch {', '.join(torches)}. Runs of {span}.", ""]
        if mach in configs:
            L += models_section(mach, configs[mach], floors) + [""]
        for dyn, krun in sorted((kernels.get(mach) or {}).items()):   # static first
            L += kernels_section(krun, beside.get(dyn)) + [""]
        for rec in legacy:
            if rec["data"].get("device") == mach:
                L += legacy_kernels_section(rec) + [""]
        if folders:
            L += ["Commands (each run's folder, date, the commit it measured and the exact command "
                  "line it recorded):", ""]
            for r in folders:
                m = r["meta"]
                git = (m.get("machine") or {}).get("git")
                L.append(f"- `{r['folder']}` ({(m.get('date') or '?')[:10]}"
                         + (f", {git}" if git else "") + f"): `{m.get('command', '?')}`")
            L.append("")
    return "\n".join(L).rstrip() + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=RESULTS, help="folder of recorded results (bench/results)")
    ap.add_argument("--out", default=OUT, help="file to write (docs/PERFORMANCE.md)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if the file is stale")
    a = ap.parse_args(argv)
    text = render(a.results)
    if a.check:
        try:
            with open(a.out) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{a.out} is stale: run python tools/perf_table.py", file=sys.stderr)
        return 0 if same else 1
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
