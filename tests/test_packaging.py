"""Packaging: the source distribution holds everything a build needs (no file
of the checkout outside it is read), installs into a fresh virtual
environment with pip and compiles a function there, and builds a wheel that
installs and imports; the metadata carries the license and the torch range
the README promises.

The fresh environments borrow torch (and pip, setuptools) from the
environment running the tests instead of installing them: a venv made
without pip whose site-packages holds a .pth line naming this environment's
site-packages.  (`python -m venv --system-site-packages` would not do: from
inside a venv it reaches the base interpreter's site-packages, not the
venv's.)  Only plain paths are added that way, so an editable ember of the
parent environment (a .pth hook in its site-packages) stays out, and ember
comes from the fresh environment itself, which the tests check.

The C core is compiled once: pip installs the sdist, and the wheel it built
on the way (kept in a pip cache of the test's own) is the one checked and
installed again.
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

VERSION_RANGE = ("torch<2.16", ">=2.11")     # as setuptools writes "torch>=2.11,<2.16"
PIP = ["-m", "pip", "--disable-pip-version-check"]
# nothing from an index, nothing else installed or uninstalled
INSTALL = ["install", "-q", "--no-build-isolation", "--no-deps", "--no-index", "--ignore-installed"]


def _run(cmd, timeout=300, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, (f"{' '.join(map(str, cmd))} exited {r.returncode}\n"
                               f"stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}")
    return r


def _clean_env(**extra):
    """The environment for commands in a fresh venv: nothing that would point
    Python at the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")}
    env.update(extra)
    return env


def _parent_site_dirs():
    """This environment's site-packages, and those its own .pth files add."""
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dirs += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _venv(path: Path) -> Path:
    """A fresh venv at path that sees this environment's packages (torch, pip,
    setuptools) after its own; returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    py = path / "bin" / "python"
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                env=_clean_env()).stdout.strip()
    Path(site, "_ember_test_parent.pth").write_text("".join(d + "\n" for d in _parent_site_dirs()))
    return py


def _installed(dist: str) -> bool:
    """Is the distribution installed?  (By its metadata: a folder named like
    it, as the checkout's build/, would fool an import check.)"""
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """The sdist of this checkout: `python -m build --sdist` where `build`
    is installed, else `setup.py sdist`."""
    out = tmp_path_factory.mktemp("sdist")
    if _installed("build"):
        _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", out, ROOT],
             cwd=ROOT)
    else:
        _run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", out], cwd=ROOT)
    found = sorted(out.glob("ember-*.tar.gz"))
    assert len(found) == 1, f"expected one sdist in {out}: {found}"
    return found[0]


def test_sdist_holds_the_sources(sdist):
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        pkg_info = tf.extractfile(next(n for n in tf.getnames() if n.count("/") == 1
                                       and n.endswith("/PKG-INFO"))).read().decode()
    need = {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in", "tools/embed.py",
            "ember/_ext.c", "ember/errors.py", "tests/conftest.py"}
    need |= {str(p.relative_to(ROOT)) for pat in ("src/*.c", "src/*.h", "src/*.def", "include/*.h")
             for p in ROOT.glob(pat)}
    missing = sorted(need - names)
    assert not missing, f"the sdist lacks {missing}"
    stray = sorted(n for n in names if n.endswith((".so", ".o", ".pyc")) or n.startswith("build/"))
    assert not stray, f"build outputs in the sdist: {stray}"
    assert "License-Expression: BSD-3-Clause" in pkg_info
    assert "License-File: LICENSE" in pkg_info
    req = next(ln for ln in pkg_info.splitlines() if ln.startswith("Requires-Dist: torch"))
    assert all(part in req for part in VERSION_RANGE), req


@pytest.fixture(scope="module")
def sdist_venv(sdist, tmp_path_factory):
    """A fresh venv with the sdist installed by pip (which builds the C core
    from the sdist alone, in a folder of its own), and the wheel pip built on
    the way (from its cache: the C core is compiled once for both tests)."""
    root = tmp_path_factory.mktemp("sdist-venv")
    py = _venv(root / "venv")
    cache = root / "pip-cache"
    _run([py] + PIP + ["--cache-dir", cache] + INSTALL + [sdist], env=_clean_env())
    wheels = sorted(cache.glob("wheels/**/ember-*.whl"))
    return root, py, (wheels[0] if len(wheels) == 1 else None)


def test_sdist_installs_and_compiles(sdist_venv, tmp_path):
    """In the venv the sdist went into, ember.compile and
    torch.compile(backend="ember") run a small function and agree with
    eager, and the `ember` script runs."""
    root, py, _ = sdist_venv
    code = textwrap.dedent("""\
        import os, sys, torch, ember
        venv = os.path.realpath(sys.prefix)
        assert os.path.realpath(ember.__file__).startswith(venv + os.sep), ember.__file__
        assert not os.path.realpath(torch.__file__).startswith(venv + os.sep), torch.__file__
        def f(x, y):
            return torch.softmax(x * y + 1.0, dim=-1).sum(0) - torch.tanh(y).mean()
        x, y = torch.randn(8, 33), torch.randn(8, 33)
        torch.testing.assert_close(ember.compile(f)(x, y), f(x, y))
        st = ember.stats()
        assert st["graphs"] >= 1 and st["kernels"] >= 1 and st["whole_graph_fallbacks"] == 0, st
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend="ember")(x, y), f(x, y))
        print("OK", ember.__file__)
        """)
    r = _run([py, "-c", code], cwd=tmp_path, env=_clean_env(EMBER_CACHE_DIR=str(tmp_path / "cache")))
    assert "OK" in r.stdout, r.stdout
    r = _run([root / "venv" / "bin" / "ember", "--version"], cwd=tmp_path, env=_clean_env())
    assert r.stdout.strip() == "ember 0.1.0", r.stdout


def test_wheel_from_sdist(sdist, sdist_venv, tmp_path):
    """The wheel built from the sdist holds the extension, the license and
    the metadata, not the C sources, and imports from a fresh venv."""
    wheel = sdist_venv[2]
    if wheel is None:           # pip kept no wheel in its cache: build one
        wheels = tmp_path / "wheels"
        _run([sys.executable] + PIP + ["--no-cache-dir", "wheel", "-q", "--no-build-isolation", "--no-deps",
                                       "--no-index", "--wheel-dir", wheels, sdist],
             cwd=tmp_path, env=_clean_env())
        found = sorted(wheels.glob("ember-*.whl"))
        assert len(found) == 1, found
        wheel = found[0]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert any(n.startswith("ember/_ext.") and n.endswith(".so") for n in names), names
    assert "ember/errors.py" in names and "ember/cli.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.endswith((".c", ".h"))], names
    assert "License-Expression: BSD-3-Clause" in meta
    assert "[torch_dynamo_backends]" in entry and "ember = ember.backend:ember_backend" in entry
    py = _venv(tmp_path / "venv")
    _run([py] + PIP + ["--no-cache-dir"] + INSTALL + [wheel], env=_clean_env())
    code = ("import os, sys, ember\n"
            "from ember import _ext\n"
            "assert os.path.realpath(_ext.__file__).startswith(os.path.realpath(sys.prefix) + os.sep)\n"
            "assert _ext.EmberError is ember.EmberError\n"
            "print('OK', _ext.version)\n")
    r = _run([py, "-c", code], cwd=tmp_path, env=_clean_env())
    assert r.stdout.startswith("OK"), r.stdout
