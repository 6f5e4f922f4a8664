"""ember's options (src/options.def, ember/_options.py): one table, read once
per compile from options={...} and EMBER_<NAME>; unknown keys, bad values
and unknown modes raise with the valid ones named, as Inductor does."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import EAGER, ROOT, ember_import_root

pytestmark = pytest.mark.skipif(EAGER, reason="ember's own options")


def _f(x):
    return torch.relu(x) * 2


def test_table_lists_the_user_options():
    from ember import _options as opt
    user = [o for o in opt.TABLE if o["who"] == "user"]
    assert 1 <= len(user) <= 12, [o["name"] for o in user]
    for o in user:
        assert o["doc"] and o["default"] is not None, o
    names = {o["name"] for o in opt.TABLE}
    assert {"debug", "cache", "cache_dir", "cc", "compile_threads", "partition"} <= names


def test_options_prints_and_resolves(capsys, monkeypatch):
    import ember
    monkeypatch.setenv("EMBER_COMPILE_THREADS", "3")
    vals = ember.options()
    out = capsys.readouterr().out
    assert "EMBER_COMPILE_THREADS" in out and "compile_threads" in out and "reduce-overhead" in out
    assert vals["compile_threads"] == 3 and vals["cache"] is True
    assert "split_reductions" not in vals and "cuda_device" not in vals  # test and host options are not shown


def test_unknown_option_raises_with_the_list():
    import ember
    with pytest.raises(ValueError, match=r"unknown option 'bogus_key'.*compile_threads"):
        ember.compile(_f, options={"bogus_key": 1})
    with pytest.raises(ValueError, match="unknown option 'cuda_device'"):
        ember.compile(_f, options={"cuda_device": 1})  # set by the binding, not by users


@pytest.mark.parametrize("key,value,match", [
    ("compile_threads", "many", "compile_threads must be an integer from 0 to 1024, not 'many'"),
    ("compile_threads", -1, "compile_threads must be an integer"),
    ("debug", "maybe", "debug must be one of 1/0, true/false, on/off, yes/no"),
    ("partition", "greedy", "partition must be one of min_cut|default, not 'greedy'"),
])
def test_bad_value_names_the_option(key, value, match):
    import ember
    with pytest.raises(ValueError, match=match):
        ember.compile(_f, options={key: value})


def test_bad_environment_value_names_the_variable(monkeypatch):
    import ember
    monkeypatch.setenv("EMBER_HOST_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="EMBER_HOST_CACHE_MB must be an integer"):
        ember.compile(_f)


def test_unknown_mode_raises_and_torch_modes_run():
    import ember
    with pytest.raises(ValueError, match="unknown mode 'fast'.*reduce-overhead"):
        ember.compile(_f, mode="fast")
    x = torch.randn(8)
    for mode in ("default", "lite", "max-autotune-no-cudagraphs"):
        ember.reset()
        torch.testing.assert_close(ember.compile(_f, mode=mode)(x), _f(x))


def test_torch_compile_rejects_unknown_option_and_mode():
    import ember  # noqa: F401  (registers nothing: the entry point does)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option 'bogus_key'"):
        torch.compile(_f, backend="ember", options={"bogus_key": 1})(torch.randn(4))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown mode 'fast'"):
        torch.compile(_f, backend="ember", mode="fast")(torch.randn(4))
    torch._dynamo.reset()


def test_dict_wins_over_environment(monkeypatch, tmp_path):
    # the environment's debug dump folder, overridden by options={...}
    import ember
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path / "env"))
    ember.reset()
    ember.compile(_f, options={"debug_dir": str(tmp_path / "dict")})(torch.randn(8))
    assert (tmp_path / "dict").is_dir() and not (tmp_path / "env").exists()
    ember.reset()
    ember.compile(_f, options={"debug": False, "debug_dir": str(tmp_path / "off")})(torch.randn(8))
    assert not (tmp_path / "off").exists()


def test_cli_prints_the_table(tmp_path):
    env = dict(os.environ, PYTHONPATH=ember_import_root())
    out = subprocess.run([sys.executable, "-m", "ember", "options"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "compile_timeout" in out.stdout and "EMBER_CACHE_DIR" in out.stdout


def test_no_option_read_outside_the_options_module():
    # the options table is the one place options come from: no pass reads the
    # environment (src/options.c reads EMBER_<NAME> once per compile)
    import re
    src = ROOT / "src"
    for p in sorted(src.glob("*.c")):
        if p.name == "options.c":
            continue
        for m in re.finditer(r'getenv\("([A-Z_]+)"\)', p.read_text()):
            assert not m.group(1).startswith("EMBER_"), f"{p.name} reads {m.group(1)}"
    for p in sorted((ROOT / "ember").rglob("*.py")):
        text = p.read_text()
        for m in re.finditer(r'os\.environ(?:\.get)?[\[(]"(EMBER_[A-Z_]+)"', text):
            assert m.group(1) in _TOOLING_VARIABLES, f"{p.name} reads {m.group(1)}"


# variables of the tools (bench's child processes, the models report), not options of the compiler
_TOOLING_VARIABLES = {"EMBER_GIT_COMMIT", "EMBER_BENCH_PHASE_FD", "EMBER_MODELS_REPORT"}
