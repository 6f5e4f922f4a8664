"""Errors: malformed graphs handed to the C builder, unsupported dtypes, a
missing or failing C compiler.  Nothing may crash the interpreter; every
malformed graph raises _ext.EmberError naming what is wrong."""
from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
import torch.nn.functional as F

from conftest import EAGER, ROOT, assert_same, ember_import_root, check, compile_fn, ember_stats, reset

needs_ember = pytest.mark.ember_only


# ------------------------------------------------------- builder helpers
def _ext():
    import ember.backend  # noqa: F401  (see test_ext_dtype_codes_on_plain_import)
    from ember import _ext as ext
    return ext


def _contig(sizes):
    st, acc = [], 1
    for s in reversed(sizes):
        st.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(st))


def _val(g, sizes, dtype=torch.float32, strides=None, offset=0, device=0):
    ext = _ext()
    sizes = tuple(sizes)
    return g.value(ext.DTYPE_CODES[dtype], device, sizes,
                   _contig(sizes) if strides is None else tuple(strides), offset)


def _inputs(g, *shapes):
    vs = []
    for s in shapes:
        v = _val(g, s)
        g.input(v)
        vs.append(v)
    return vs


def _good_add(g, set_outputs=True):
    a, b = _inputs(g, (2, 3), (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.add.Tensor", "add_ok", [("tensor", a), ("tensor", b)], [out])
    if set_outputs:
        g.outputs([out])
    return out


# Each case builds (and compiles) a malformed graph.  `node` is the FX node
# name the error must mention (with `op`), or None for value-level errors.
def case_arg_value_does_not_exist(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.add.Tensor", "node_badref", [("tensor", a), ("tensor", 999)], [out])
    g.outputs([out])
    return g.compile({})


def case_arg_value_negative_id(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.mul.Tensor", "node_negref", [("tensor", -1), ("tensor", a)], [out])
    g.outputs([out])
    return g.compile({})


def case_out_value_does_not_exist(g):
    (a,) = _inputs(g, (2, 3))
    g.node("aten.neg.default", "node_badout", [("tensor", a)], [4242])
    g.outputs([a])
    return g.compile({})


def case_tensors_list_bad_id(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (4, 3))
    g.node("aten.cat.default", "node_catbad", [("tensors", [a, 31337]), 0], [out])
    g.outputs([out])
    return g.compile({})


def case_sizes_strides_length_mismatch(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 0, (2, 3), (1,), 0)
    return g.compile({})


def case_too_many_dims(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 0, (1,) * 100, (1,) * 100, 0)
    return g.compile({})


def case_huge_ndim(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 0, (1,) * 5000, (1,) * 5000, 0)
    return g.compile({})


def case_negative_size(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 0, (-2, 3), (3, 1), 0)
    return g.compile({})


def case_numel_overflow(g):
    v = _ext().DTYPE_CODES[torch.float32]
    x = g.value(v, 0, (2 ** 40, 2 ** 40), (2 ** 40, 1), 0)
    g.input(x)
    out = g.value(v, 0, (2 ** 40, 2 ** 40), (2 ** 40, 1), 0)
    g.node("aten.neg.default", "node_huge", [("tensor", x)], [out])
    g.outputs([out])
    return g.compile({})


def case_negative_storage_offset(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 0, (2, 3), (3, 1), -5)
    return g.compile({})


def case_bad_dtype_code(g):
    g.value(999, 0, (2, 3), (3, 1), 0)
    return g.compile({})


def case_bad_device_code(g):
    v = _ext().DTYPE_CODES[torch.float32]
    g.value(v, 77, (2, 3), (3, 1), 0)
    return g.compile({})


def case_outputs_bad_id(g):
    out = _good_add(g, set_outputs=False)
    g.outputs([out, 123456])
    return g.compile({})


def case_outputs_negative_id(g):
    (a,) = _inputs(g, (2,))
    g.outputs([-7])
    return g.compile({})


def case_input_bad_id(g):
    g.input(55)
    return g.compile({})


def case_view_reads_outside_input(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (4, 4))
    g.node("aten.view.default", "node_bigview", [("tensor", a), ("ints", [4, 4])], [out])
    g.outputs([out])
    return g.compile({})


def case_as_strided_reads_outside_input(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (3, 3), strides=(3, 1), offset=2)
    g.node("aten.as_strided.default", "node_asstrided",
           [("tensor", a), ("ints", [3, 3]), ("ints", [3, 1]), 2], [out])
    g.outputs([out])
    return g.compile({})


def case_slice_view_offset_outside_input(g):
    (a,) = _inputs(g, (4, 5))
    out = _val(g, (2, 5), strides=(5, 1), offset=100)
    g.node("aten.slice.Tensor", "node_slice", [("tensor", a), 0, 1, 3, 1], [out])
    g.outputs([out])
    return g.compile({})


def case_view_then_pointwise_outside_input(g):
    (a,) = _inputs(g, (3,))
    v = _val(g, (8,), strides=(1,))
    g.node("aten.view.default", "node_view8", [("tensor", a), ("ints", [8])], [v])
    out = _val(g, (8,))
    g.node("aten.exp.default", "node_exp8", [("tensor", v)], [out])
    g.outputs([out])
    return g.compile({})


def case_sum_string_dims(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2,))
    g.node("aten.sum.dim_IntList", "node_sumstr", [("tensor", a), "not-dims", False], [out])
    g.outputs([out])
    return g.compile({})


def case_sum_dim_out_of_range(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2,))
    g.node("aten.sum.dim_IntList", "node_sumdim", [("tensor", a), ("ints", [7]), False], [out])
    g.outputs([out])
    return g.compile({})


def case_sum_missing_args(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2,))
    g.node("aten.sum.dim_IntList", "node_sumnoargs", [], [out])
    g.outputs([out])
    return g.compile({})


def case_add_string_operand(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.add.Tensor", "node_addstr", [("tensor", a), "seven"], [out])
    g.outputs([out])
    return g.compile({})


def case_unary_none_operand(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.exp.default", "node_expnone", [None], [out])
    g.outputs([out])
    return g.compile({})


def case_cat_single_tensor_not_list(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.cat.default", "node_catkind", [("tensor", a), 0], [out])
    g.outputs([out])
    return g.compile({})


def case_pad_string_pads(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 5))
    g.node("aten.constant_pad_nd.default", "node_padstr", [("tensor", a), "1,1", 0.0], [out])
    g.outputs([out])
    return g.compile({})


def case_pointwise_shape_mismatch(g):
    a, b = _inputs(g, (2, 3), (4, 5))
    out = _val(g, (4, 5))
    g.node("aten.add.Tensor", "node_addshape", [("tensor", a), ("tensor", b)], [out])
    g.outputs([out])
    return g.compile({})


def case_pointwise_output_larger_than_inputs(g):
    (a,) = _inputs(g, (3,))
    out = _val(g, (1000,))
    g.node("aten.sin.default", "node_sinbig", [("tensor", a)], [out])
    g.outputs([out])
    return g.compile({})


def case_value_produced_twice(g):
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.neg.default", "node_first", [("tensor", a)], [out])
    g.node("aten.abs.default", "node_twice", [("tensor", a)], [out])
    g.outputs([out])
    return g.compile({})


def case_node_writes_an_input(g):
    a, b = _inputs(g, (2, 3), (2, 3))
    g.node("aten.neg.default", "node_writesinput", [("tensor", a)], [b])
    g.outputs([b])
    return g.compile({})


def case_use_before_definition(g):
    (a,) = _inputs(g, (2, 3))
    t = _val(g, (2, 3))
    out = _val(g, (2, 3))
    g.node("aten.neg.default", "node_usesfuture", [("tensor", t)], [out])
    g.node("aten.abs.default", "node_deflater", [("tensor", a)], [t])
    g.outputs([out])
    return g.compile({})


def case_output_never_defined(g):
    _inputs(g, (2, 3))
    orphan = _val(g, (2, 3))
    g.outputs([orphan])
    return g.compile({})


# name: (builder, op and node the message must name (None: value-level),
#        whether a recorded fallback of that node is an acceptable answer).
# Arguments of the wrong kind for a lowered op may become a fallback (torch then
# runs the op and raises its own error); graph-structure errors must raise.
MALFORMED = {
    "arg_value_does_not_exist": (case_arg_value_does_not_exist, "aten.add.Tensor", "node_badref",
                                 False),
    "arg_value_negative_id": (case_arg_value_negative_id, "aten.mul.Tensor", "node_negref", False),
    "out_value_does_not_exist": (case_out_value_does_not_exist, "aten.neg.default", "node_badout",
                                 False),
    "tensors_list_bad_id": (case_tensors_list_bad_id, "aten.cat.default", "node_catbad", False),
    "sizes_strides_length_mismatch": (case_sizes_strides_length_mismatch, None, None, False),
    "too_many_dims": (case_too_many_dims, None, None, False),
    "huge_ndim": (case_huge_ndim, None, None, False),
    "negative_size": (case_negative_size, None, None, False),
    "numel_overflow": (case_numel_overflow, None, None, False),
    "negative_storage_offset": (case_negative_storage_offset, None, None, False),
    "bad_dtype_code": (case_bad_dtype_code, None, None, False),
    "bad_device_code": (case_bad_device_code, None, None, False),
    "outputs_bad_id": (case_outputs_bad_id, None, None, False),
    "outputs_negative_id": (case_outputs_negative_id, None, None, False),
    "input_bad_id": (case_input_bad_id, None, None, False),
    "view_reads_outside_input": (case_view_reads_outside_input, "aten.view.default",
                                 "node_bigview", False),
    # as_strided may read any element of its input's storage, which ember does
    # not see: it is left to torch (which raises if the storage is too small)
    "as_strided_reads_outside_input": (case_as_strided_reads_outside_input,
                                       "aten.as_strided.default", "node_asstrided", True),
    "slice_view_offset_outside_input": (case_slice_view_offset_outside_input,
                                        "aten.slice.Tensor", "node_slice", False),
    "view_then_pointwise_outside_input": (case_view_then_pointwise_outside_input,
                                          "aten.view.default", "node_view8", False),
    "sum_string_dims": (case_sum_string_dims, "aten.sum.dim_IntList", "node_sumstr", True),
    "sum_dim_out_of_range": (case_sum_dim_out_of_range, "aten.sum.dim_IntList", "node_sumdim",
                             True),
    "sum_missing_args": (case_sum_missing_args, "aten.sum.dim_IntList", "node_sumnoargs", True),
    "add_string_operand": (case_add_string_operand, "aten.add.Tensor", "node_addstr", True),
    "unary_none_operand": (case_unary_none_operand, "aten.exp.default", "node_expnone", True),
    "cat_single_tensor_not_list": (case_cat_single_tensor_not_list, "aten.cat.default",
                                   "node_catkind", True),
    "pad_string_pads": (case_pad_string_pads, "aten.constant_pad_nd.default", "node_padstr", True),
    "pointwise_shape_mismatch": (case_pointwise_shape_mismatch, "aten.add.Tensor",
                                 "node_addshape", True),
    "pointwise_output_larger_than_inputs": (case_pointwise_output_larger_than_inputs,
                                            "aten.sin.default", "node_sinbig", True),
    "value_produced_twice": (case_value_produced_twice, "aten.abs.default", "node_twice", False),
    "node_writes_an_input": (case_node_writes_an_input, "aten.neg.default", "node_writesinput",
                             False),
    # either node may be blamed: the use of an undefined value, or its late definition
    "use_before_definition": (case_use_before_definition, ("aten.neg.default", "aten.abs.default"),
                              ("node_usesfuture", "node_deflater"), False),
    "output_never_defined": (case_output_never_defined, None, None, False),
}


# Each case first runs in a forked child of a fresh interpreter, so that a case
# that kills the process (abort, segfault) fails its own test instead of the
# whole pytest run.
_FORK_RUNNER = textwrap.dedent("""
    import json, os, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    import test_errors as T
    from ember import _ext
    res = {}
    for name, (build, _, _, _) in T.MALFORMED.items():
        sys.stderr.write(f"=== {name}\\n"); sys.stderr.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                build(_ext.Graph())
                out = "compiled"
            except _ext.EmberError:
                out = "EmberError"
            except BaseException as e:
                out = type(e).__name__
            os.write(w, out.encode())
            os._exit(0)
        os.close(w)
        got = b""
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            got += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        res[name] = {"outcome": got.decode(),
                     "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                     "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}
    print("RESULT " + json.dumps(res))
""")


@pytest.fixture(scope="module")
def crash_report(tmp_path_factory):
    if EAGER:
        pytest.skip("needs ember")
    d = tmp_path_factory.mktemp("malformed")
    script = d / "runner.py"
    script.write_text(_FORK_RUNNER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(d / "cache"))
    r = subprocess.run([sys.executable, str(script), ember_import_root(), str(ROOT / "tests")],
                       capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"runner failed: {r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    import json
    res = json.loads(lines[-1][len("RESULT "):])
    # the stderr section of each case
    parts = {}
    cur = None
    for ln in r.stderr.splitlines():
        if ln.startswith("=== "):
            cur = ln[4:].strip()
            parts[cur] = []
        elif cur is not None:
            parts[cur].append(ln)
    for k in res:
        res[k]["stderr"] = "\n".join(parts.get(k, []))[-1500:]
    return res


@needs_ember
def test_valid_graph_compiles():
    """The builder calls the malformed cases use, on a well-formed graph."""
    ext = _ext()
    g = ext.Graph()
    _good_add(g)
    p = g.compile({})
    assert p is not None
    assert issubclass(ext.EmberError, RuntimeError)
    assert {torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool} <= \
        set(ext.DTYPE_CODES)


@needs_ember
def test_ext_dtype_codes_on_plain_import():
    """`from ember import _ext` alone gives the documented _ext.DTYPE_CODES
    (torch dtype -> code) and EmberError, without importing anything else first."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import torch\n"
            "from ember import _ext\n"
            "assert issubclass(_ext.EmberError, RuntimeError)\n"
            "assert _ext.DTYPE_CODES[torch.float32] >= 0\n"
            "print('OK')\n")
    r = subprocess.run([sys.executable, "-c", code, ember_import_root()], capture_output=True, text=True,
                       timeout=120, cwd=tempfile.gettempdir())  # `-c` puts the folder it runs in first
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


@needs_ember
@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_graph_raises(name, crash_report):
    build, op, node, may_fall_back = MALFORMED[name]
    rep = crash_report[name]
    assert rep["signal"] == 0 and rep["exit"] == 0, \
        f"{name} killed the interpreter (signal {rep['signal']}, exit {rep['exit']}):\n{rep['stderr']}"
    ext = _ext()
    g = ext.Graph()
    pairs = list(zip(op, node)) if isinstance(op, tuple) else [(op, node)]
    try:
        prog = build(g)
    except ext.EmberError as e:
        msg = str(e)
        assert msg.strip(), "EmberError with an empty message"
        if op is not None:
            assert any(o in msg and n in msg for o, n in pairs), \
                f"message does not name the op and node {pairs}: {msg!r}"
        return
    assert may_fall_back, f"{name}: a malformed graph compiled without an EmberError"
    fbs = prog.info()["fallbacks"]
    recorded = [f for f in fbs.values() if any(f.get("op") == o and f.get("name") == n
                                               for o, n in pairs)]
    assert recorded, f"{name}: compiled, but node {node} is not a recorded fallback: {fbs}"
    assert all(f.get("reason") for f in recorded), f"fallback without a reason: {recorded}"


@needs_ember
@pytest.mark.parametrize("bad_arg", [("bogus", 1), ("tensor",), ("tensor", "x"), ("ints", 5),
                                     ("ints", [1, "a"]), ("tensors", 3), ("dtype", "f32"),
                                     ("kw",), ("kw", 5, 1), object(), [1, 2], {"a": 1}],
                         ids=lambda a: type(a).__name__ if type(a) is object else repr(a)[:30])  # no address: xdist
def test_malformed_arg_encoding_raises(bad_arg):
    """Arguments the binding cannot encode: an exception, or (like any
    argument ember does not understand) a recorded fallback; never a crash."""
    ext = _ext()
    g = ext.Graph()
    (a,) = _inputs(g, (2, 3))
    out = _val(g, (2, 3))
    try:
        g.node("aten.add.Tensor", "node_enc", [("tensor", a), bad_arg], [out])
        g.outputs([out])
        prog = g.compile({})
    except (ext.EmberError, TypeError, ValueError):
        return
    fbs = prog.info()["fallbacks"]
    assert any(f.get("name") == "node_enc" and f.get("reason") for f in fbs.values()), \
        f"an argument {bad_arg!r} was accepted and node_enc lowered: {fbs}"


@needs_ember
def test_graph_reuse_after_compile_is_an_error_not_a_crash():
    ext = _ext()
    g = ext.Graph()
    _good_add(g)
    g.compile({})
    with pytest.raises((ext.EmberError, RuntimeError, ValueError)):
        g.compile({})
    with pytest.raises((ext.EmberError, RuntimeError, ValueError)):
        _val(g, (2, 2))


@needs_ember
def test_wrong_python_types_to_builder():
    ext = _ext()
    g = ext.Graph()
    with pytest.raises((ext.EmberError, TypeError, ValueError, OverflowError)):
        g.value("f32", 0, (2,), (1,), 0)
    with pytest.raises((ext.EmberError, TypeError, ValueError, OverflowError)):
        g.value(ext.DTYPE_CODES[torch.float32], 0, (2, "x"), (1, 1), 0)
    with pytest.raises((ext.EmberError, TypeError, ValueError, OverflowError)):
        g.value(ext.DTYPE_CODES[torch.float32], 0, (2 ** 70,), (1,), 0)
    with pytest.raises((ext.EmberError, TypeError, ValueError, OverflowError)):
        g.node(None, "n", [], [])
    with pytest.raises((ext.EmberError, TypeError, ValueError, OverflowError)):
        g.outputs(5)
    with pytest.raises((ext.EmberError, TypeError, ValueError)):
        g.compile("not a dict")


_LOOP_SCRIPT = textwrap.dedent("""
    import os, sys, resource
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    import test_errors as T
    from ember import _ext

    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    skip = set(sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[4] else set()

    def one_round():
        for name, (build, _, _, may_fall_back) in T.MALFORMED.items():
            if name in skip:
                continue
            g = _ext.Graph()
            try:
                p = build(g)
            except _ext.EmberError:
                pass
            else:          # whether it should have raised is test_malformed_graph_raises' job
                p.info()
                del p
            del g

    for _ in range(30):
        one_round()
    before = rss_kb()
    n = int(sys.argv[3])
    for _ in range(n):
        one_round()
    after = rss_kb()
    print(f"rounds={n} rss_before_kb={before} rss_after_kb={after}")
    growth = after - before
    if growth > 16 * 1024:
        raise SystemExit(f"memory grew by {growth} kB over {n} rounds of malformed graphs")
    print("OK")
""")


@needs_ember
def test_malformed_graphs_in_a_loop_no_crash_no_leak(tmp_path, crash_report):
    """All malformed cases, hundreds of times, in a child process: it must
    neither crash nor grow (the graph and its pool are freed on every error).
    Cases that kill the process on their own are left out here (they fail in
    test_malformed_graph_raises), so this test measures repetition and leaks."""
    crashing = [n for n, r in crash_report.items() if r["signal"] or r["exit"]]
    script = tmp_path / "loop.py"
    script.write_text(_LOOP_SCRIPT)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script), ember_import_root(), str(ROOT / "tests"), "400",
                        ",".join(crashing)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, \
        f"rc={r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"


# ------------------------------------------------------- unsupported dtypes
def test_complex_falls_back_with_eager_result():
    def fn(x):
        return x * 2 + 1

    def make():
        return (torch.randn(4, 5, dtype=torch.complex64),)

    check(fn, make, strict=False)
    st = ember_stats()
    assert st["fallbacks"] or st["whole_graph_fallbacks"] >= 1, \
        f"complex ops ran without a recorded fallback: {st}"


def test_complex_mixed_with_real_ops():
    def fn(x, y):
        z = torch.complex(x, y) * 2
        return z.abs() + x.sin(), torch.view_as_real(z)

    check(fn, lambda: (torch.randn(3, 4), torch.randn(3, 4)), strict=False)
    st = ember_stats()
    assert st["fallbacks"] or st["whole_graph_fallbacks"] >= 1, st


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.uint8, torch.int8])
def test_other_dtypes_are_right(dtype):
    """dtypes beyond the five: lowered or fallen back, the result is eager's."""
    def fn(x, y):
        return x + y, x * 2, (x > y), x.to(torch.float32).sum(-1)

    def make():
        if dtype.is_floating_point:
            return torch.randn(5, 6).to(dtype), torch.randn(5, 6).to(dtype)
        return (torch.randint(0, 10, (5, 6)).to(dtype), torch.randint(0, 10, (5, 6)).to(dtype))

    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.float16 else {}
    check(fn, make, strict=False, **tol)


# ------------------------------------------------------------ C compiler
def _unique_fn():
    c = 1.0 + random.random()          # a constant no other graph has: no cached build

    def fn(x):
        return torch.sin(x) * c + torch.cos(x)
    return fn


def _compile_and_run(fn):
    cf = compile_fn(fn)
    return cf(torch.randn(4, 4))


@needs_ember
def test_missing_c_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CC", "/nonexistent/cc")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    reset()
    with pytest.raises(Exception) as ei:
        _compile_and_run(_unique_fn())
    assert "C compiler" in str(ei.value), f"message does not say 'C compiler': {ei.value!r}"
    # and ember recovers once a compiler is there again
    monkeypatch.delenv("EMBER_CC")
    reset()
    fn = _unique_fn()
    x = torch.randn(4, 4)
    assert_same(compile_fn(fn)(x), fn(x))


@needs_ember
def test_failing_c_compiler_error_text(monkeypatch, tmp_path):
    cc = tmp_path / "badcc.sh"
    cc.write_text("#!/bin/sh\necho 'badcc: simulated compiler failure 4242' >&2\nexit 1\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EMBER_CC", str(cc))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    reset()
    with pytest.raises(Exception) as ei:
        _compile_and_run(_unique_fn())
    msg = str(ei.value)
    assert "C compiler" in msg, f"message does not say 'C compiler': {msg!r}"
    assert "simulated compiler failure 4242" in msg, f"compiler's stderr not in message: {msg!r}"


@needs_ember
def test_compiler_that_succeeds_without_output(monkeypatch, tmp_path):
    """A 'compiler' that exits 0 but writes nothing: an error, not a crash or a
    half-loaded library."""
    cc = tmp_path / "liarcc.sh"
    cc.write_text("#!/bin/sh\nexit 0\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EMBER_CC", str(cc))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    reset()
    with pytest.raises(Exception):
        _compile_and_run(_unique_fn())


@needs_ember
def test_compiler_failure_leaves_no_cache_entry(monkeypatch, tmp_path):
    cc = tmp_path / "badcc.sh"
    cc.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    cc.chmod(0o700)
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CC", str(cc))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache))
    reset()
    with pytest.raises(Exception):
        _compile_and_run(_unique_fn())
    sos = list(cache.rglob("*.so")) if cache.exists() else []
    assert not sos, f"a failed build left cache entries: {sos}"


@needs_ember
def test_compiler_output_that_is_not_utf8(monkeypatch, tmp_path):
    """A compiler whose messages are not UTF-8 (or are cut inside a character):
    the error still names the C compiler, it does not become a UnicodeDecodeError."""
    cc = tmp_path / "latin1cc.sh"
    cc.write_text("#!/bin/sh\nprintf 'caf\\351 \\342\\200 broken 4243\\n' >&2\nexit 1\n")
    cc.chmod(0o700)
    monkeypatch.setenv("EMBER_CC", str(cc))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    reset()
    with pytest.raises(Exception) as ei:
        _compile_and_run(_unique_fn())
    msg = str(ei.value)
    assert "UnicodeDecodeError" not in msg and "C compiler" in msg, msg
    assert "broken 4243" in msg, msg


# ------------------------------------------- fallbacks found by the OpInfo sweep
def test_fallback_reads_fused_value_through_optional_tensor_list():
    """aten.index.Tensor's indices are a Tensor?[] ([None, i + 1]): the C core
    must see the use of i + 1 and keep it (it was fused away and the fallback
    got None)."""
    check(lambda x, i: x[:, i + 1], lambda: (torch.randn(3, 4), torch.tensor([0, 2, 1])),
          strict=False, dynamic=False)
    check(lambda x: F.interpolate(x * 2, scale_factor=2, mode="bilinear"),
          lambda: (torch.randn(1, 2, 5, 5),), strict=False, dynamic=False)
    check(lambda x: F.unfold(x + 1, 2), lambda: (torch.randn(1, 2, 5, 5),), strict=False,
          dynamic=False)


def test_cat_of_empty_tensors():
    check(lambda a, b: torch.cat([a, b]), lambda: (torch.randn(0), torch.randn(0)), dynamic=False)
    check(lambda a, b: torch.cat([a, b], 1) * 2, lambda: (torch.randn(0, 3), torch.randn(0, 2)),
          dynamic=False)


def test_as_strided_outside_the_inputs_elements():
    """as_strided may read any element of the input's storage, also before its
    storage offset: ember leaves such a view to torch instead of failing."""
    def fn(x):
        return torch.as_strided(x, (2, 2), (1, 2), 0) + 1
    base = torch.randn(15)
    got = compile_fn(fn, dynamic=False)(base[5:])
    assert_same(got, fn(base[5:]))


def test_fallback_result_nothing_reads_may_differ_from_its_meta():
    """_embedding_bag_forward_only's helper results have other shapes at run
    time than in their meta; nothing reads them, so that is not an error."""
    def fn(i, w, o):
        return F.embedding_bag(i, w, o, mode="sum")
    check(fn, lambda: (torch.tensor([1, 2, 4, 5, 4]), torch.randn(10, 5), torch.tensor([0, 3])), strict=False,
          dynamic=False)


def test_fallback_result_dtype_differs_from_its_meta():
    """bfloat16 _batch_norm_with_update_functional returns bfloat16 running
    statistics where its meta says float32: the kernels that read them must
    see the meta's dtype (they read garbage before)."""
    bf = torch.bfloat16

    def fn(x, w, b, rm, rv):
        return torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.5, 0.6)
    torch.manual_seed(0)
    args = [torch.randn(5, 5, 5, dtype=bf), torch.randn(5, dtype=bf), torch.randn(5, dtype=bf),
            torch.randn(5, dtype=bf), torch.rand(5, dtype=bf)]
    mine = [a.clone() for a in args]
    exp = fn(*args)
    got = compile_fn(fn, dynamic=False)(*mine)
    assert_same(got, exp)
    assert_same(mine[3], args[3], msg="running_mean")
    assert_same(mine[4], args[4], msg="running_var")


@pytest.mark.parametrize("op", ["floordiv", "trunc", "remainder", "fmod"])
def test_integer_division_by_zero_raises_like_eager(op):
    """Eager raises RuntimeError('ZeroDivisionError') for an int64 divisor of 0
    on CPU; so does ember (its kernels never trap), and with nonzero divisors
    the same compiled function gives eager's answer afterwards."""
    f = {"floordiv": lambda a, b: (a * 2) // b,
         "trunc": lambda a, b: torch.div(a * 2, b, rounding_mode="trunc"),
         "remainder": lambda a, b: (a * 2) % b,
         "fmod": lambda a, b: torch.fmod(a * 2, b)}[op]
    a, zero, ok = torch.tensor([5, -3, 7]), torch.tensor([1, 0, 2]), torch.tensor([2, -1, 3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, zero)
    cf = compile_fn(f, dynamic=False)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cf(a, zero)
    assert_same(cf(a, ok), f(a, ok))


@needs_ember
def test_kernels_built_in_parts_share_the_prelude_globals():
    """A graph of many kernels is compiled as several translation units at
    once (build.c) and linked: every kernel is there and gives eager's
    answer, and a division by zero in any of them, whichever part it was
    compiled in, sets the one flag run.c reads (prelude_c.h's globals are
    defined in the first part only)."""
    def f(*xs):
        return [(a * 2) // b for a, b in zip(xs[0::2], xs[1::2])]
    args = []
    for i in range(8):   # eight shapes: eight kernels, two parts of four
        args += [torch.arange(3 + i) + 5, torch.arange(3 + i) % 3 + 1]
    reset()
    cf = compile_fn(f, dynamic=False, options={"compile_threads": 2, "cache": False})
    assert_same(cf(*args), f(*args))
    st = ember_stats()
    assert st["kernels"] == 8 and st["c_parts"] == 2, st
    for i in range(8):
        bad = list(args)
        bad[2 * i + 1] = bad[2 * i + 1].clone()
        bad[2 * i + 1][1] = 0
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            cf(*bad)
    assert_same(cf(*args), f(*args))
    # one thread: one piece
    reset()
    assert_same(compile_fn(f, dynamic=False, options={"compile_threads": 1, "cache": False})(*args), f(*args))
    assert ember_stats()["c_parts"] == 1
