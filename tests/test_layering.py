"""The C core's files call each other in one direction: no cycle of calls
between them (issue 23: graph.c, lower.c and expand.c used to call each
other in a circle, the runtime called the builder back), and the runtime
(the program and what runs it) calls nothing of the compiler.  The call graph is
read from the sources: a file calls another when it names a function the
other defines (not static), calling it or taking its address."""
from __future__ import annotations

import re

from conftest import ROOT


def _calls():
    """Per file, the functions of other files it calls: {file: {function: defining file}}."""
    files = {p.stem: p.read_text() for p in sorted((ROOT / "src").glob("*.c"))}
    defs = {}
    for f, text in files.items():
        for m in re.finditer(r"^(?!static)[A-Za-z_][\w \*]*?\b([a-z_]\w*)\([^;{]*?\)\s*\{", text, flags=re.M):
            defs.setdefault(m.group(1), f)
    calls = {}
    for f, text in files.items():
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)  # names inside strings are not calls
        called = set(re.findall(r"\b([a-z_]\w*)\b", code))
        calls[f] = {fn: defs[fn] for fn in called if fn in defs and defs[fn] != f}
    return calls


def _call_graph():
    return {f: set(c.values()) for f, c in _calls().items()}


def _cycle(edges):
    """A cycle of files as a list, or None (depth-first search with colors)."""
    color, stack = {}, []

    def visit(f):
        color[f] = 1
        stack.append(f)
        for g in sorted(edges[f]):
            if color.get(g) == 1:
                return stack[stack.index(g):] + [g]
            if g not in color:
                found = visit(g)
                if found:
                    return found
        stack.pop()
        color[f] = 2
        return None

    for f in sorted(edges):
        if f not in color:
            found = visit(f)
            if found:
                return found
    return None


def test_call_graph_is_read():
    edges = _call_graph()
    # the driver calls the passes; the passes call the IR's helpers
    assert {"lower", "fuse", "plan", "verify"} <= edges["ember"], edges["ember"]
    assert "graph" in edges["lower"] and "graph" in edges["expand"]


def test_no_call_cycle_between_source_files():
    cycle = _cycle(_call_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# The runtime: the compiled program (program.c), saving and loading it
# (program_io.c), running it (run.c) and what they call.  build.c is the C build, but its loader (em_dl_*) also holds the
# program's loaded object; nothing else of it is the runtime's.  expr.c's
# ex_eval (a size expression's value, a pure function of the expression and
# the call's sizes) is how a program with symbolic sizes sizes its values.
RUNTIME = {"program", "program_io", "run", "blas", "blas_cpu", "cuda", "cache", "util", "hostmem"}
LOADER = {"em_dl_close", "em_dl_sym", "em_dl_load", "em_dl_bytes"}
EVAL = {"ex_eval"}


def _runtime_leaks(calls):
    """The runtime's calls out of the runtime: ["run.c -> lower.c (fn)", ...]."""
    leaks = []
    for f in sorted(RUNTIME & calls.keys()):
        for fn, g in sorted(calls[f].items()):
            if g not in RUNTIME and not (g == "build" and fn in LOADER) and not (g == "expr" and fn in EVAL):
                leaks.append(f"{f}.c -> {g}.c ({fn})")
    return leaks


def test_runtime_calls_no_compiler():
    calls = _calls()
    assert {"program", "run"} <= calls.keys()
    assert "program" in _call_graph()["run"]  # the check sees run.c's calls
    leaks = _runtime_leaks(calls)
    assert not leaks, "the runtime calls the compiler: " + "; ".join(leaks)


def test_the_runtime_check_finds_a_leak():
    calls = {"run": {"program_error": "program", "gather_error_node": "lower"},
             "program": {"em_dl_close": "build", "em_build": "build"}}
    assert _runtime_leaks(calls) == ["program.c -> build.c (em_build)", "run.c -> lower.c (gather_error_node)"]
