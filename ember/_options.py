"""ember's options: one table, src/options.def, read once per compile (ember.options() prints it).

Each user option is set as ``options={"name": value}`` (ember.compile,
torch.compile(backend="ember")) or as EMBER_<NAME> in the environment; the
dict wins.  ``resolve`` checks the keys and values against the table (an
unknown key or a bad value raises, naming the option and what it takes) and
returns every option's value, typed; this is the only place ember reads its
options from the environment.  ``options()`` prints the user's table.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from . import _ext

TABLE = _ext.options_table()
_BY_NAME = {o["name"]: o for o in TABLE}
TABLE_DEFAULTS = {o["name"]: o["default"] for o in TABLE}
USER = [o["name"] for o in TABLE if o["who"] == "user"]
# test options force a path at sizes where ember would not take it: accepted
# in options={...}, not read from the environment, not printed
_SETTABLE = {o["name"] for o in TABLE if o["who"] in ("user", "test")}

# the modes torch.compile documents, and what ember does in each
MODES = {
    "default": "fused kernels, planned memory, library GEMMs",
    "reduce-overhead": "as default, then each CUDA graph captured once and replayed (CUDA graphs)",
    "max-autotune": "as reduce-overhead, and each matrix product's cuBLASLt/cuBLAS algorithm timed at its "
                    "first run and the fastest kept (cached on disk; kernels' launch shapes are not tuned)",
    "max-autotune-no-cudagraphs": "as default, with the matrix products tuned as in max-autotune",
    "lite": "as default (torch's lighter Inductor mode; ember has no lighter one)",
}


def env_name(name: str) -> str:
    return "EMBER_" + name.upper()


def _text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if not isinstance(value, (str, int)):
        raise TypeError(f"ember: option {name} takes a {_BY_NAME[name]['type']}, not {type(value).__name__}")
    return str(value)


def _typed(name: str, text: str) -> Any:
    t = _BY_NAME[name]["type"]
    if t == "bool":
        return text == "1"
    if t == "int":
        return int(text)
    return text


def check_keys(options: Optional[dict]) -> None:
    """Raise for an option key ember does not know (ValueError, listing the options)."""
    for k in options or {}:
        if k not in _SETTABLE:
            raise ValueError(f"ember: unknown option {k!r}; the options are: {', '.join(USER)} "
                             f"(ember.options() describes them)")


def check_mode(mode: Optional[str]) -> str:
    """The mode as ember runs it; raise for a mode torch.compile would not take either."""
    if mode is None:
        return "default"
    if mode not in MODES:
        raise ValueError(f"ember: unknown mode {mode!r}; the modes are: {', '.join(MODES)}")
    return mode


def resolve(options: Optional[dict] = None) -> Dict[str, Any]:
    """Every option's value: the table's default, then EMBER_<NAME>, then
    `options`.  Raises ValueError (naming the option) for a bad key or value."""
    check_keys(options)
    texts = {k: _text(k, v) for k, v in (options or {}).items() if v is not None}
    return {k: _typed(k, v) for k, v in _ext.options_resolve(texts, True).items()}


def c_options(resolved: Dict[str, Any], **host: Any) -> Dict[str, str]:
    """The dict the C core compiles with: the resolved user and test options
    and the client's (host) settings, as text."""
    out = {k: _text(k, v) for k, v in resolved.items() if k in _SETTABLE}
    out.update({k: _text(k, v) for k, v in host.items() if v is not None})
    return out


def options(show: bool = True) -> Dict[str, Any]:
    """Print the user options (name, environment variable, default, value now,
    what it does) and return their values as this process would resolve them."""
    values = resolve()
    if show:
        def shown(o, v):
            if o["type"] == "bool":
                return "on" if v in (True, "1") else "off"
            if o["type"] == "choice" and v == o["default"]:
                return f"{v} ({o['choices'].replace('|', ', ')})"
            return str(v) if v != "" else "-"
        rows = [(o["name"], env_name(o["name"]), shown(o, o["default"]), shown(o, values[o["name"]]), o["doc"])
                for o in TABLE if o["who"] == "user"]
        w = [max(len(r[i]) for r in rows + [("option", "environment", "default", "now", "")]) for i in range(4)]
        head = ("option", "environment", "default", "now")
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)) + "  what it does")
        for r in rows:
            print("  ".join(r[i].ljust(w[i]) for i in range(4)) + "  " + r[4])
        print("\nmodes: " + "; ".join(f"{m}: {d}" for m, d in MODES.items()))
    return {k: values[k] for k in USER}
