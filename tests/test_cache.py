"""The disk cache (EMBER_CACHE_DIR), exercised from child processes so that
each run starts cold in memory: created private (0700), hit by a second
process, rebuilt when entries are corrupt, refused when world-writable, and
safe when two processes fill it at once; its default folder ($XDG_CACHE_HOME,
~/.cache, a private one in $TMPDIR), an uncached build with a warning where
it cannot be made, a compiler under a path with a space, and Ctrl-C while the
compiler hangs.

A child process costs seconds (importing torch, Dynamo's first compile), so
the scenarios' children run side by side in two phases from one module
fixture, and each test asserts on the outcome of its own child."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, ember_import_root

pytestmark = pytest.mark.ember_only

_CHILD = textwrap.dedent("""
    import json, os, shutil, sys, traceback
    sys.path.insert(0, sys.argv[1])
    import torch
    import ember

    def f(x, y):  # the matmul is a library step (no code in the object: it must still be cached)
        return torch.sin(x) * y + torch.exp(-x.abs()).sum(-1, keepdim=True) - 0.5 + (x @ y.t()).sum(-1, keepdim=True)

    x = torch.linspace(-2.0, 2.0, 60).reshape(6, 10)
    y = torch.linspace(0.5, 3.0, 60).reshape(6, 10).t().contiguous().t()
    results = {}
    for name, cache, mode in json.loads(sys.argv[2]):
        os.environ["EMBER_CACHE_DIR"] = cache      # read by ember at compile time
        # the kernel cache alone: a kept AOTAutograd result (plain/) would be loaded instead
        shutil.rmtree(os.path.join(cache, "plain"), ignore_errors=True)
        ember.reset()
        opts = {"cache": False} if mode == "nocache" else None
        res = {"ok": False}
        try:
            out = ember.compile(f, options=opts)(x, y)
            torch.testing.assert_close(out, f(x, y))
            res["ok"] = True
        except Exception as e:
            res["error"] = f"{type(e).__name__}: {e}"
            res["traceback"] = traceback.format_exc()
        st = ember.stats()
        res["stats"] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in st.items()}
        results[name] = res
    print("RESULT " + json.dumps(results, default=str))
""")


class Child:
    """One child process running scenarios [(name, cache_dir, mode)] in turn.
    ember keeps no compiled program in memory across ember.reset() and reads
    EMBER_CACHE_DIR at each compile, so scenarios on different cache dirs can
    share a process; were that to change, the 'not loaded' checks below would
    fail loudly (cache_hits >= 1), not pass by accident.  The runs whose point
    is a cold process (first fill, second-process hit, the concurrent pair)
    each get their own."""

    def __init__(self, base: Path, scenarios):
        script = base / "child.py"
        if not script.exists():
            script.write_text(_CHILD)
        env = dict(os.environ)
        env.pop("EMBER_DEBUG", None)
        env.pop("EMBER_CACHE", None)
        self.names = [n for n, _, _ in scenarios]
        arg = json.dumps([[n, str(c), m] for n, c, m in scenarios])
        self.proc = subprocess.Popen([sys.executable, str(script), ember_import_root(), arg],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.out = self.err = None

    def wait(self, timeout=400):
        if self.out is None:
            try:
                self.out, self.err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.out, self.err = self.proc.communicate()
        return self

    def result(self, name=None) -> dict:
        self.wait()
        lines = [ln for ln in self.out.splitlines() if ln.startswith("RESULT ")]
        assert self.proc.returncode == 0 and lines, (
            f"child failed: rc={self.proc.returncode}\nstdout:\n{self.out[-3000:]}\n"
            f"stderr:\n{self.err[-3000:]}")
        res = json.loads(lines[-1][len("RESULT "):])[name or self.names[0]]
        res["stderr"] = self.err
        return res


def _so_files(cache: Path):
    return sorted(p for p in cache.rglob("*.so") if p.is_file())


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    os.chmod(dst, _mode(src))
    return dst


def _flip(p: Path):
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    for i in range(mid, min(mid + 64, len(data))):   # bytes in the middle (code/data)
        data[i] ^= 0xFF
    p.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Phase 1: the first fill of a cache, and two processes filling another
    empty cache at once.  Phase 2: a fresh process on a copy of the filled
    cache (the hit), and one process going through the other scenarios, each
    on its own cache dir (copies of the filled one, changed one way each)."""
    base = tmp_path_factory.mktemp("ember_cache")
    r = {"dirs": base}
    tmpl = base / "template"
    conc_dir = base / "concurrent"
    fill = Child(base, [("fill", tmpl, "default")])
    conc = [Child(base, [("concurrent", conc_dir, "default")]) for _ in range(2)]
    fill.wait()
    r["fill"] = fill
    r["template_files"] = ({str(p.relative_to(tmpl)): (_mode(p), p.stat().st_uid)
                            for p in tmpl.rglob("*")} if tmpl.exists() else {})
    r["template_mode"] = _mode(tmpl) if tmpl.exists() else None
    r["template_sos"] = [str(p) for p in _so_files(tmpl)] if tmpl.exists() else []
    for c in conc:
        c.wait()
    r["concurrent"] = conc
    r["concurrent_files"] = ([p for p in conc_dir.rglob("*") if p.is_file()]
                             if conc_dir.exists() else [])

    scen = [("concurrent_verify", conc_dir, "default")]
    if tmpl.exists():
        r["hit"] = Child(base, [("hit", _copy(tmpl, base / "hit"), "default")])
        for kind in ("flip", "truncate", "garbage"):
            d = _copy(tmpl, base / kind)
            for p in _so_files(d):
                if kind == "flip":
                    _flip(p)
                elif kind == "truncate":
                    p.write_bytes(p.read_bytes()[:100])
                else:
                    p.write_bytes(b"this is not a shared object\n")
            scen.append((kind, d, "default"))
        d = _copy(tmpl, base / "ww_entries")
        os.chmod(d, 0o777)
        scen.append(("ww_entries", d, "default"))
        d = _copy(tmpl, base / "gw_entry")
        for p in _so_files(d):
            os.chmod(p, 0o666)
        scen.append(("gw_entry", d, "default"))
    wwf = base / "ww_fresh"
    wwf.mkdir()
    os.chmod(wwf, 0o777)
    scen.append(("ww_fresh", wwf, "default"))
    scen.append(("nocache", base / "nocache", "nocache"))
    child = Child(base, scen)
    for name, _, _ in scen:
        r[name] = child
    child.wait()
    if "hit" in r:
        r["hit"].wait()
    yield r
    for d in (base / "ww_entries", wwf):
        if d.exists():
            os.chmod(d, 0o700)


def test_cache_created_private(runs):
    first = runs["fill"].result()
    assert first["ok"], first
    assert runs["template_mode"] == 0o700, \
        f"cache dir mode is {runs['template_mode'] and oct(runs['template_mode'])}, expected 0o700"
    assert first["stats"]["cache_hits"] == 0, first["stats"]
    assert runs["template_sos"], f"nothing cached: {runs['template_files']}"
    for name, (m, uid) in runs["template_files"].items():
        assert not m & (stat.S_IWGRP | stat.S_IWOTH), f"{name} is group/world writable ({oct(m)})"
        assert uid == os.getuid(), f"{name} not owned by us"


def test_second_process_hits_cache(runs):
    res = runs["hit"].result()
    assert res["ok"], res
    assert res["stats"]["cache_hits"] >= 1, f"second process missed the cache: {res['stats']}"


@pytest.mark.parametrize("kind", ["flip", "truncate", "garbage"])
def test_corrupt_entries_are_rebuilt(runs, kind):
    """Every *.so corrupted (bytes flipped in the middle, truncated, or
    replaced): the right answer, rebuilt rather than loaded."""
    res = runs[kind].result(kind)
    assert res["ok"], res
    assert res["stats"]["cache_hits"] == 0, \
        f"a corrupted ({kind}) entry was loaded from the cache: {res['stats']}"


def test_world_writable_cache_dir_is_refused(runs):
    """A cache dir others can write to could hold planted code: ember must not
    load from it.  Either compiling fails with an error naming the dir, or it
    succeeds without loading anything from there."""
    res = runs["ww_entries"].result("ww_entries")
    cache = runs["dirs"] / "ww_entries"
    if res["ok"]:
        assert res["stats"]["cache_hits"] == 0, \
            f"loaded code from a world-writable cache dir: {res['stats']}"
    else:
        err = res.get("error", "")
        assert str(cache) in err or "cache" in err.lower(), \
            f"refused without naming the cache dir: {err}"


def test_world_writable_fresh_cache_dir(runs):
    """A world-writable (empty) dir created beforehand: refused or not used."""
    res = runs["ww_fresh"].result("ww_fresh")
    cache = runs["dirs"] / "ww_fresh"
    if res["ok"]:
        assert res["stats"]["cache_hits"] == 0
    else:
        err = res.get("error", "")
        assert str(cache) in err or "cache" in err.lower(), res


def test_group_writable_entry_not_loaded(runs):
    res = runs["gw_entry"].result("gw_entry")
    assert res["ok"], res
    assert res["stats"]["cache_hits"] == 0, \
        f"loaded a cache entry that others may write: {res['stats']}"


@pytest.mark.skip(reason="entries owned by another user need root to set up")
def test_entries_owned_by_another_user_not_loaded():
    pass


def test_two_processes_fill_empty_cache_concurrently(runs):
    for c in runs["concurrent"]:
        res = c.result()
        assert res["ok"], res
    leftovers = [p for p in runs["concurrent_files"]
                 if ".tmp" in p.name or p.name.startswith("tmp") or p.suffix == ".part"]
    assert not leftovers, f"temporary files left in the cache: {leftovers}"
    # the entry is valid: a third process hits it and gets the right answer
    third = runs["concurrent_verify"].result("concurrent_verify")
    assert third["ok"], third
    assert third["stats"]["cache_hits"] >= 1, third["stats"]


def test_cache_disabled_by_option(runs):
    """options={"cache": False}: right answer, nothing written to the disk cache."""
    res = runs["nocache"].result("nocache")
    assert res["ok"], res
    cache = runs["dirs"] / "nocache"
    assert not (cache.exists() and _so_files(cache)), list(cache.rglob("*"))


# ---------------------------------------------------------------- where the cache lives, what runs it
# One more child, started with EMBER_CC naming a compiler under a path with a
# space (a wrapper of the real one, quoted as a shell would quote it): it
# compiles under different XDG_CACHE_HOME / HOME / TMPDIR settings and with a
# cache folder that cannot be made, then compiles a graph its compiler hangs
# on, and is sent SIGINT (Ctrl-C) meanwhile.

_ENV_CHILD = textwrap.dedent("""
    import json, os, signal, sys, time, traceback, warnings
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, also when the tests run in the background
    # (a background job starts with SIGINT ignored, and the child would inherit that)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    import torch
    import ember

    def f(x, y):
        return torch.cos(x) * y - 0.25

    x = torch.linspace(-2.0, 2.0, 40).reshape(4, 10)
    y = torch.linspace(0.5, 3.0, 40).reshape(4, 10)
    results = {}
    tmpdir = os.environ["TMPDIR"]
    for name, env, opts in json.loads(sys.argv[2]):
        for k, v in env.items():                 # read by the C core at compile time
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        ember.reset()
        res = {"ok": False}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = ember.compile(f, options=opts)(x, y)
                torch.testing.assert_close(out, f(x, y))
                res["ok"] = True
            except Exception as e:
                res["error"] = f"{type(e).__name__}: {e}"
                res["traceback"] = traceback.format_exc()
        res["warnings"] = [str(w.message) for w in caught]
        res["cache_hits"] = ember.stats()["cache_hits"]
        results[name] = res

    os.environ["TMPDIR"] = tmpdir
    open(sys.argv[3], "w").close()               # from now on the compiler hangs
    ember.reset()
    res = {}
    try:
        ember.compile(lambda x: torch.sinh(x) + 2, options={"cache_dir": sys.argv[4]})(x)
        res["outcome"] = "finished"
    except BaseException as e:                    # KeyboardInterrupt is no Exception
        res["outcome"] = type(e).__name__
        res["raised_at"] = time.time()
    results["interrupt"] = res
    print("RESULT " + json.dumps(results), flush=True)
""")


@pytest.fixture(scope="module")
def env_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("ember_cache_env")
    (base / "afile").write_text("a regular file: no folder can be made under it, even by root\n")
    ccdir = base / "my cc"
    ccdir.mkdir()
    cc = ccdir / "cc"
    real = os.environ.get("EMBER_CC", "cc")
    cc.write_text(f'#!/bin/sh\necho ran >> "{base}/cc-ran"\n'
                  f'if [ "$1" != --version ] && [ -e "{base}/hang-now" ]; then\n'
                  f'  sleep 60 & echo $! > "{base}/sleep.pid"; wait\nfi\n'
                  f'exec {real} "$@"\n')
    cc.chmod(0o700)
    for d in ("tmp", "tmp_nohome"):
        (base / d).mkdir()

    env = dict(os.environ, EMBER_CC=f"'{cc}'", TMPDIR=str(base / "tmp"))
    for k in ("EMBER_DEBUG", "EMBER_NO_CACHE", "EMBER_CACHE_DIR", "XDG_CACHE_HOME"):
        env.pop(k, None)
    scen = [
        ("xdg", {"XDG_CACHE_HOME": str(base / "xdg"), "HOME": str(base / "home_xdg")}, None),
        ("relative_xdg", {"XDG_CACHE_HOME": "not/absolute", "HOME": str(base / "home")}, None),
        ("no_home", {"XDG_CACHE_HOME": None, "HOME": None, "TMPDIR": str(base / "tmp_nohome")}, None),
        ("unwritable", {}, {"cache_dir": str(base / "afile" / "cache")}),
    ]
    (base / "env_child.py").write_text(_ENV_CHILD)
    p = subprocess.Popen([sys.executable, str(base / "env_child.py"), ember_import_root(), json.dumps(scen),
                          str(base / "hang-now"), str(base / "cc_cache")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    r = {"base": base}
    pidfile = base / "sleep.pid"
    deadline = time.time() + 300
    while not pidfile.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)                               # its pid written: the compiler is waiting on it
    r["signalled_at"] = time.time()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"child failed: rc={p.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    r.update(json.loads(lines[-1][len("RESULT "):]))
    r["stderr"] = err
    r["sleep_pid"] = int(pidfile.read_text()) if pidfile.exists() else None
    yield r


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def test_xdg_cache_home(env_runs):
    res = env_runs["xdg"]
    assert res["ok"], res
    base = env_runs["base"]
    assert _so_files(base / "xdg" / "ember"), list((base / "xdg").rglob("*"))
    assert _mode(base / "xdg" / "ember") == 0o700
    assert not (base / "home_xdg" / ".cache").exists(), "used ~/.cache although XDG_CACHE_HOME is set"


def test_relative_xdg_ignored_home_used(env_runs):
    """The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored."""
    res = env_runs["relative_xdg"]
    assert res["ok"], res
    assert _so_files(env_runs["base"] / "home" / ".cache" / "ember")


def test_no_home_private_temp_folder(env_runs):
    """HOME and XDG_CACHE_HOME unset: a folder of our own in $TMPDIR, mode 0700."""
    res = env_runs["no_home"]
    assert res["ok"], res
    d = env_runs["base"] / "tmp_nohome" / f"ember-cache-{os.geteuid()}"
    assert d.is_dir() and not d.is_symlink() and _mode(d) == 0o700 and d.stat().st_uid == os.geteuid()
    assert _so_files(d)


def test_unwritable_cache_builds_uncached_with_warning(env_runs):
    res = env_runs["unwritable"]
    assert res["ok"], res
    assert res["cache_hits"] == 0
    folder = str(env_runs["base"] / "afile" / "cache")
    assert any(folder in w and "without the disk cache" in w for w in res["warnings"]), res["warnings"]


def test_ember_cc_with_a_space(env_runs):
    """EMBER_CC="'/path/my cc/cc'" (quoted as a shell would): every compile
    above ran through it."""
    assert env_runs["xdg"]["ok"], env_runs["xdg"]
    ran = (env_runs["base"] / "cc-ran").read_text().split() if (env_runs["base"] / "cc-ran").exists() else []
    assert len(ran) >= 4, "the compiler under the path with a space did not run"


def test_ctrl_c_stops_a_hanging_compiler(env_runs):
    """SIGINT while the compiler hangs: KeyboardInterrupt within a few seconds,
    the compiler's child killed, no build folder left behind."""
    res = env_runs["interrupt"]
    base = env_runs["base"]
    assert res["outcome"] == "KeyboardInterrupt", (res, env_runs["stderr"][-3000:])
    assert res["raised_at"] - env_runs["signalled_at"] < 5, res
    assert env_runs["sleep_pid"] and _ended(env_runs["sleep_pid"])
    assert not list((base / "tmp").glob("ember-*")), list((base / "tmp").iterdir())
    assert not [p for p in (base / "cc_cache").iterdir() if p.name.startswith(".")]
