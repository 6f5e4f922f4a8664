"""Compiled programs that outlive the process: torch's precompile protocol.

torch (2.11 and later; see docs/WARM_START.md for what each version offers)
saves a function compiled with torch.compile(fn, fullgraph=True,
backend=...).aot_compile((args, kwargs)) as Dynamo's guards and bytecode
plus the backend's compiled callable.  For a backend used through
AOTAutograd (as ember is) the callable is AOTAutograd's bundled cache entry:
its runtime wrappers and metadata (which rebuild the autograd.Function of a
training step without tracing) and, per graph, the OutputCode the
backend's fw/bw/inference compiler returned; ember saves that entry in a
form of its own (_dump_entry: its fields, each graph as its blob), which
loads without torch's cache-entry module and the Inductor modules it
imports (_load_entry).  EmberOutputCode is that
OutputCode: it runs a compiled graph and, when saved, packs into one
checked blob (pack_graph) the compiled C program (ember_program_save: the
plan, the fallbacks' nodes and the kernels' object), what the Python runner
took from the FX graph's walk (per fallback the op, its arguments, its
results' meta), and, where it may be compiled again or has no walk, the
ATen graph ember was handed; with its options and versions.  Loading
checks the blob, loads the program (no pass, no C compiler, no disk cache)
and builds the runner from the saved walk (no FX graph rebuilt, no fake
tensor, no walk).  A CUDA program carries NVRTC's images and loads them on
a device of the same architecture (no NVRTC); for another device or an
older driver it is compiled again from the saved graph.  A program
compiled once for every size (symbolic sizes) carries its size
expressions and its graph, walked again at load as the compile walked it;
a blob without a program (a graph compiled per shape) compiles the graph
again, the kernel disk cache making that a load.

ember.save/ember.load wrap torch's file in a checked container (format
version, ember, torch and Python versions, device, a SHA-256 of the body),
so nothing in a saved file is unpickled before it is checked: a mismatch or
a damaged file raises EmberError.

The plain path (ember.compile, no new API) keeps the same form of
AOTAutograd's entry per graph in ember's cache folder (plain_cache), keyed
by what the entry depends on, so a later process loads it instead of
running AOTAutograd and ember's compile; a damaged entry, or one this
process cannot key, is compiled as before.  Not here: Dynamo's own work,
which a warm process repeats unless torch's caching precompile is on.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib
import json
import os
import platform
import struct
import threading
import time
import types
from typing import Any, Callable, Optional

import torch

from .errors import EmberError

# A saved graph (EmberOutputCode's blob) and a saved function (ember.save's
# file): magic, a little-endian u32 header length, the JSON header, the body.
GRAPH_MAGIC = b"EMBERGRF"
FILE_MAGIC = b"EMBERAOT"
# bump when the header's fields or the body's encoding change
# (2: the body starts with the C program, header["program"] its length;
# 3: then the runner's walk, header["walk"] its length, then the graph if saved;
# 4: a saved function's AOTAutograd entry in ember's form, ENTRY_MAGIC)
FORMAT_VERSION = 4
# the options that change the program a graph compiles to; the others (where
# the cache lives, logging, threads) belong to the loading process
PROGRAM_OPTIONS = ("mode", "partition", "split_reductions", "gemm_pad", "cuda_epilogue")
# the private options the backend adds per graph (backend.make_backend) that a
# loaded graph needs again
GRAPH_OPTIONS = ("_kind", "_lend_from", "_adaptive_lend")

# The first torch whose aot_compile takes ember's graphs: AOTAutograd's
# bundled entries hold any OutputCode from 2.11 on, and ember's backend hands
# aot_compile its own SerializableCallable (EmberCompiledFunction), which
# 2.11 asks for (docs/WARM_START.md; tested on 2.11.0, 2.12.0 and 2.13.0)
PROTOCOL_TORCH = (2, 11)


def _torch_version() -> tuple:
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def has_protocol() -> bool:
    """Does this torch take ember's graphs into aot_compile's saved
    functions (PROTOCOL_TORCH, and OutputCode, what AOTAutograd's bundled
    cache entries hold per graph)?  Asked at compile time, not at import:
    importing it brings in Dynamo and Inductor."""
    if _torch_version() < PROTOCOL_TORCH:
        return False
    try:
        from torch._inductor.output_code import OutputCode  # noqa: F401
    except ImportError:
        return False
    return True


def _ember_version() -> str:
    from . import __version__
    return __version__


def device_info(device: Optional[torch.device]) -> dict:
    """The device a program runs on, as far as its code depends on it."""
    if device is None or device.type == "cpu":
        return {"type": "cpu", "machine": platform.machine()}
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return {"type": "cuda", "sm": major * 10 + minor, "cuda": torch.version.cuda}
    return {"type": device.type}


def _check_device(saved: dict, what: str) -> None:
    if saved.get("type") == "cpu":
        if saved.get("machine") != platform.machine():
            raise EmberError(f"ember: {what} was compiled for {saved.get('machine')} CPUs, "
                             f"this machine is {platform.machine()}")
        return
    if saved.get("type") == "cuda":
        if not torch.cuda.is_available():
            raise EmberError(f"ember: {what} was compiled for CUDA (sm_{saved.get('sm')}), "
                             "and no CUDA device is available")
        now = device_info(torch.device("cuda", torch.cuda.current_device()))
        if now["sm"] != saved.get("sm") or now["cuda"] != saved.get("cuda"):
            raise EmberError(f"ember: {what} was compiled for sm_{saved.get('sm')} with CUDA "
                             f"{saved.get('cuda')}, this device is sm_{now['sm']} with CUDA {now['cuda']}")
        return
    raise EmberError(f"ember: {what} was compiled for an unknown device {saved!r}")


def _pack(magic: bytes, header: dict, body: bytes) -> bytes:
    header = dict(header, sha256=hashlib.sha256(body).hexdigest(), body_bytes=len(body))
    h = json.dumps(header, sort_keys=True).encode()
    return magic + struct.pack("<I", len(h)) + h + body


def _unpack(data: bytes, magic: bytes, what: str) -> tuple:
    """The header and body of a packed blob, after checking its magic, format,
    versions and hash; raises EmberError for anything else."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < len(magic) + 4 or data[:len(magic)] != magic:
        raise EmberError(f"ember: {what} is not an ember artifact (no {magic.decode()} header)")
    (n,) = struct.unpack_from("<I", data, len(magic))
    start = len(magic) + 4
    if start + n > len(data):
        raise EmberError(f"ember: {what} is truncated (its header runs past the end)")
    try:
        header = json.loads(bytes(data[start:start + n]))
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except ValueError as e:
        raise EmberError(f"ember: {what} has a damaged header ({e})") from None
    if header.get("format") != FORMAT_VERSION:
        raise EmberError(f"ember: {what} has format version {header.get('format')!r}; this ember "
                         f"reads version {FORMAT_VERSION}: save it again with this ember")
    if header.get("ember") != _ember_version():
        raise EmberError(f"ember: {what} was saved by ember {header.get('ember')}, this is ember "
                         f"{_ember_version()}: save it again with this ember")
    if header.get("torch") != torch.__version__:
        raise EmberError(f"ember: {what} was saved with torch {header.get('torch')}, this is torch "
                         f"{torch.__version__}: save it again with this torch")
    body = bytes(data[start + n:])
    if len(body) != header.get("body_bytes"):
        raise EmberError(f"ember: {what} is truncated or padded: its body has {len(body)} bytes, "
                         f"the header says {header.get('body_bytes')}")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise EmberError(f"ember: {what} is corrupted: its SHA-256 does not match its header")
    return header, body


# ---------------------------------------------------------------- the walk beside a program
# What the runner of a saved program takes from its FX graph and the walk of it
# (backend.CompiledGraph.WALKED: per fallback its op, argument template and results' meta; the
# inputs' places, the constants, the outputs that are numbers), saved as it was at compile time, so
# that loading needs neither the graph nor the walk: no FX graph rebuilt, no fake tensor made, no
# node walked.  With it, per input, its name and meta (checked against the program's) and why the
# graph must not be captured as a CUDA graph, if it must not.  What holds anything else (an op that
# is not an ATen OpOverload, an argument of another type) is saved as the whole graph instead
# (GraphPickler) and walked again at load.
class _Unsaved(Exception):
    pass


_LEAVES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Node:
    """A loaded fallback's node: its name, for the runner's error messages."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _plain(x, refs: tuple) -> None:
    """Raises _Unsaved unless x is numbers, strings, torch's enums, the
    runner's references (refs) and lists, tuples and dicts of them."""
    if type(x) in _LEAVES or type(x) in refs:
        return
    if type(x) in (list, tuple):
        for y in x:
            _plain(y, refs)
        return
    if type(x) is dict:
        for k, y in x.items():
            _plain(k, refs)
            _plain(y, refs)
        return
    raise _Unsaved(f"a value of type {type(x).__name__}")


def _enc_target(t):
    if isinstance(t, torch._ops.OpOverload):
        return (t.namespace, t._opname, t._overloadname)
    raise _Unsaved(f"the target {t!r}")


def _dec_target(t):
    ns, name, overload = t
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError) as e:
        raise EmberError(f"ember: a saved graph calls {ns}::{name}.{overload}, which this process does not "
                         f"have ({type(e).__name__}: {e}): import the library that defines it first") from None


def _dump_walk(cg, gm: torch.fx.GraphModule) -> bytes:
    """The runner's walk of gm (cg.walked()) as plain data for pickle;
    raises _Unsaved for what it cannot hold."""
    import pickle
    from . import backend as _backend
    if cg.sym_args is not None:
        raise _Unsaved("symbolic sizes")
    w = cg.walked()
    refs = (_backend._Ref, _backend._PyRef)
    fallbacks = {}
    for nid, (target, node, *rest) in w["fallbacks"].items():
        _plain(rest, refs)
        fallbacks[nid] = (_enc_target(target), node.name, *rest)
    _plain([w["arg_positions"], w["const_outputs"], w["py_outputs"], w["written_args"]], ())
    consts = []
    for t in w["constants"]:
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            raise _Unsaved(f"a constant of type {type(t).__name__}")
        consts.append(t.detach())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = []
    for pos in w["arg_positions"]:
        t = placeholders[pos].meta["val"]
        inputs.append((placeholders[pos].name, tuple(t.shape), tuple(t.stride()), t.dtype))
    _plain(inputs, ())
    d = dict(w, device=None if w["device"] is None else str(w["device"]), fallbacks=fallbacks, constants=consts,
             inputs=inputs, cuda_graph_blocker=_backend._cuda_graph_blocker(gm))
    return pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL)


def _load_walk(data: bytes) -> dict:
    import pickle
    d = pickle.loads(data)
    d["device"] = None if d["device"] is None else torch.device(d["device"])
    d["fallbacks"] = {nid: (_dec_target(t), _Node(name), *rest) for nid, (t, name, *rest) in d["fallbacks"].items()}
    return d


# ---------------------------------------------------------------- one graph
def pack_graph(gm: torch.fx.GraphModule, opts: dict, device: Optional[torch.device],
               program: Optional[bytes] = None, compiled: Optional[Callable] = None) -> bytes:
    """One compiled graph as a checked blob: the C program (bytes of
    ember_program_save, or None); what its runner takes from the graph
    (_dump_walk of `compiled`, the backend.CompiledGraph the program is of),
    where it can be saved; and the ATen graph (torch's GraphPickler keeps
    the fake tensors of node.meta["val"] that ember walks), unless a CPU
    program and its walk make it needless (a CUDA program may be refused on
    another device or driver and compiled again).  In the header the
    program options and the backend's per-graph ones, the device, and
    where each part is."""
    from torch.fx._graph_pickler import GraphPickler, Options
    walk, graph = None, None
    try:
        cg = getattr(compiled, "inner", compiled)
        if program is not None and cg is not None and getattr(cg, "prog", None) is not None:
            try:
                walk = _dump_walk(cg, gm)
            except _Unsaved:
                pass
        if walk is None or _graph_device(gm) is not None:
            try:
                popts = Options(ops_filter=None)  # any op: ember's graphs hold only ATen ops
            except TypeError:  # a torch whose Options has no filter
                popts = Options()
            graph = GraphPickler.dumps(gm, popts)
    except Exception as e:
        raise EmberError(f"ember: cannot save the {opts.get('_kind', 'inference')} graph: {e}") from None
    header = {
        "format": FORMAT_VERSION, "ember": _ember_version(), "torch": torch.__version__,
        "device": device_info(device),
        "options": {k: opts[k] for k in PROGRAM_OPTIONS if k in opts},
        "graph_options": {k: opts[k] for k in GRAPH_OPTIONS if k in opts},
        # the body: the C core's compiled program (src/program_io.c; loading then skips ember's passes and
        # the build; None: compile again), the runner's walk (_dump_walk; None: walk the graph again), the
        # graph ("fx_pickle": torch's GraphPickler; None: not saved), in this order
        "program": None if program is None else {"format": _ext().PROGRAM_FORMAT, "bytes": len(program)},
        "walk": None if walk is None else len(walk),
        "graph": None if graph is None else "fx_pickle",
    }
    return _pack(GRAPH_MAGIC, header, (program or b"") + (walk or b"") + (graph or b""))


def _ext():
    from . import _ext as ext
    return ext


def program_bytes(fn) -> Optional[bytes]:
    """The C program of a compiled graph (backend.CompiledGraph, or the
    CudaGraphRunner around one) as bytes, its kernels included (a CUDA
    program's as NVRTC's images), or None where there is none to save: a
    graph torch runs whole, one compiled per shape (_Specializing)."""
    fn = getattr(fn, "inner", fn)
    prog = getattr(fn, "prog", None)
    if prog is None:
        return None
    try:
        return prog.save()
    except EmberError:
        return None


def _graph_parts(blob: bytes) -> tuple:
    """(header, program, walk, graph) of a blob from pack_graph, checked
    first: the parts' bytes, or None for those not saved."""
    header, body = _unpack(blob, GRAPH_MAGIC, "a saved graph")
    _check_device(header.get("device") or {}, "a saved graph")
    program, walk = None, None
    pinfo = header.get("program")
    if pinfo is not None:
        if not isinstance(pinfo, dict) or pinfo.get("format") != _ext().PROGRAM_FORMAT or \
                not isinstance(pinfo.get("bytes"), int) or not 0 < pinfo["bytes"] <= len(body):
            raise EmberError(f"ember: a saved graph's program is of another format or size ({pinfo!r}); "
                             f"this ember reads program format {_ext().PROGRAM_FORMAT}: save it again")
        program, body = body[:pinfo["bytes"]], body[pinfo["bytes"]:]
    n = header.get("walk")
    if n is not None:
        if type(n) is not int or not 0 < n <= len(body) or program is None:
            raise EmberError(f"ember: a saved graph's walk has a wrong size ({n!r}) or no program")
        walk, body = body[:n], body[n:]
    encoding = header.get("graph")
    if encoding not in ("fx_pickle", None) or (encoding is None and (walk is None or body)):
        raise EmberError(f"ember: a saved graph has an unknown graph encoding {encoding!r}")
    return header, program, walk, (body if encoding is not None else None)


def _read(what: str, read, data: bytes):
    try:
        return read(data)
    except EmberError:
        raise
    except Exception as e:  # the hash matched: a graph this torch cannot read
        raise EmberError(f"ember: a saved graph's {what} could not be read: {type(e).__name__}: {e}") from None


def _read_graph(data: bytes) -> torch.fx.GraphModule:
    from torch._subclasses import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    gm = GraphPickler.loads(data, FakeTensorMode(shape_env=ShapeEnv()))
    gm.recompile()
    return gm


def unpack_graph(blob: bytes) -> tuple:
    """(graph module or None, header, program bytes or None, the runner's
    walk (_load_walk) or None) of a blob from pack_graph, checked first."""
    header, program, walk, graph = _graph_parts(blob)
    return (None if graph is None else _read("graph", _read_graph, graph), header, program,
            None if walk is None else _read("walk", _load_walk, walk))


def _graph_device(gm: torch.fx.GraphModule) -> Optional[torch.device]:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type != "cpu":
            return val.device
    return None


_classes: dict = {}


def _output_code_class() -> type:
    """EmberOutputCode, made on first use as a subclass of torch's OutputCode."""
    cls = _classes.get("EmberOutputCode")
    if cls is not None:
        return cls
    from torch._inductor.output_code import OutputCode as _OutputCode

    class EmberOutputCode(_OutputCode):
        """A graph ember compiled, as AOTAutograd's cache entries (and so torch's
        precompile protocol) hold it: called boxed (one list of inputs);
        prepare_for_serialization packs the graph (pack_graph) and drops the
        compiled program; post_compile, in the loading process, checks the blob
        and compiles it again."""

        def __init__(self, fn: Callable, gm: torch.fx.GraphModule, opts: dict, ms: float = 0.0):
            # an instance attribute: AOTAutograd's wrappers copy __dict__ (functools.wraps)
            self._boxed_call = True
            self._fn = fn
            self._gm = gm
            self._opts = opts
            self._blob: Optional[bytes] = None
            self._fx_graph_cache_key = None
            self._fx_graph_cache_debug_lines = None
            self._time_taken_ns = int(ms * 1e6)  # AOTAutograd's cache entries add these up

        def __call__(self, *args):  # boxed (one list) or not, as the graph it wraps
            if self._fn is None:
                raise EmberError("ember: a loaded graph was run before it was compiled (post_compile)")
            return self._fn(*args)

        def _packed(self) -> bytes:
            if self._blob is not None:
                return self._blob
            return pack_graph(self._gm, self._opts, _graph_device(self._gm), program_bytes(self._fn), self._fn)

        def prepare_for_serialization(self) -> None:
            self._blob = self._packed()
            self._fn = None
            self._gm = None

        def __getstate__(self) -> dict:
            blob = self._packed()
            return {"_blob": blob, "_time_taken_ns": self._time_taken_ns}

        def __setstate__(self, state: dict) -> None:
            self._boxed_call = True
            self._blob = state["_blob"]
            self._time_taken_ns = state.get("_time_taken_ns") or 0
            self._fn = self._gm = self._opts = None
            self._fx_graph_cache_key = None
            self._fx_graph_cache_debug_lines = None

        def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
            if self._fn is None:
                self._fn = load_graph(self._blob)

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            pass

    EmberOutputCode.__module__ = __name__
    EmberOutputCode.__qualname__ = "EmberOutputCode"
    _classes["EmberOutputCode"] = EmberOutputCode
    return EmberOutputCode


def __getattr__(name):  # pickles name the class ember._precompile.EmberOutputCode
    if name == "EmberOutputCode" and has_protocol():
        return _output_code_class()
    if name == "EmberCompiledFunction" and _torch_version() >= PROTOCOL_TORCH:  # as a saved file names it
        return _serializable_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_graph(blob: bytes) -> Callable:
    """Check a saved graph and load its program, or compile it where it has
    none (the kernel disk cache makes its builds loads); stats()'s
    phases_ms["unpack"] has the unpacking, ["load"] the program's load
    (ember_program_load: its checks and the object's dlopen)."""
    from . import backend as _backend
    t0 = time.perf_counter()
    header, program, walk, graph = _graph_parts(blob)
    walked = None if walk is None else _read("walk", _load_walk, walk)
    gm = None if walked is not None else _read("graph", _read_graph, graph)  # else read only to compile it
    _backend._add_phase("unpack", t0)
    opts = dict(getattr(_current, "opts", None) or loading_options())
    opts.update(header.get("options") or {})
    opts.update(header.get("graph_options") or {})
    fn = None
    if program is not None:
        try:
            fn = _runner(program, opts, gm, walked)
        except EmberError as e:
            # a CUDA program for another device or driver (src/program_io.c's
            # check_device): compiled again, as a graph without a program is
            if "compile it again" not in str(e) or graph is None:
                raise
            _backend.log.warning("%s; compiling the graph again", e)
    if fn is None:
        if gm is None:
            t1 = time.perf_counter()
            gm = _read("graph", _read_graph, graph)
            _backend._add_phase("unpack", t1)
        fn = _backend.compile_graph(gm, None, opts)
    # counted as ember's compile, not AOTAutograd's, inside a backend call (a cache hit)
    _backend._inner.ms = getattr(_backend._inner, "ms", 0.0) + (time.perf_counter() - t0) * 1e3
    return fn


def _mismatch(what: str) -> EmberError:
    return EmberError(f"ember: a saved graph does not match its program: {what}")


def _check_walk(walked: dict, info: dict) -> None:
    """A saved walk against its program (they come under one hash; this
    refuses one that is not the program's, hash mended or not): each
    fallback's node and results, each argument's value id in range."""
    from . import backend as _backend
    nvalues = len(info["values"])
    fbs = walked["fallbacks"]
    for nid, f in info["fallbacks"].items():
        fb = fbs.get(nid)
        if fb is None or fb[1].name != f["name"]:
            raise _mismatch(f"fallback {f['name']} ({f['op']}) is node {nid} of the program, "
                            f"{'no node' if fb is None else fb[1].name} of the saved walk")
        if list(fb[2]) != list(f["outs"]):
            raise _mismatch(f"fallback {f['name']}'s results are values {list(f['outs'])} of the program, "
                            f"{list(fb[2])} of the saved walk")
    if len(fbs) != len(info["fallbacks"]):
        raise _mismatch(f"{len(info['fallbacks'])} fallbacks in the program, {len(fbs)} in the saved walk")

    def refs(a):
        if type(a) is _backend._Ref:
            if not -1 <= a.vid < nvalues:
                raise _mismatch(f"an argument reads value {a.vid}, the program has {nvalues}")
        elif type(a) in (list, tuple):
            for x in a:
                refs(x)
        elif type(a) is dict:
            for x in a.values():
                refs(x)
    for fb in fbs.values():  # (target, node, outs, metas, multi, positions, args_t, refs, ..., kwargs_t, ...)
        refs(fb[6])
        refs(fb[9])
        if any(not 0 <= vid < nvalues for _, vid in fb[7]):
            raise _mismatch(f"fallback {fb[1].name} reads a value the program has not")
    for i, (nid, _) in walked["py_outputs"].items():
        if nid not in fbs:
            raise _mismatch(f"output {i} is a number fallback {nid} returns, which the program has not")


def _runner(program: bytes, opts: dict, gm: Optional[torch.fx.GraphModule] = None,
            walked: Optional[dict] = None) -> Callable:
    """The compiled graph of a saved program: what backend.compile_graph
    makes, with the program loaded instead of compiled.  The runner's
    per-fallback state (the op, its arguments as a template, its results'
    meta) and its inputs' places come from the saved walk (walked), or,
    where none was saved, from the FX graph gm walked once more
    (backend._Builder, whose C graph is then dropped unused): ids are the
    compile's, which the program's fallbacks and inputs are checked
    against."""
    from . import backend as _backend
    prog = _ext().load_program(program)  # checked whole before its object is loaded
    if opts.get("_tune_gemms", opts.get("mode") in _backend._TUNING_MODES) and opts.get("cache", True):
        # a compile that tunes names the folder of its tuned choices (src/ember.c); a load names it here
        _ext().gemm_cache_dir(_cache_root(opts))
    with _backend._lock:
        _backend._stats["graphs"] += 1
    info = prog.info()
    symbolic = bool(info.get("num_syms"))  # sizes as expressions: no saved walk (_dump_walk), walked as compiled
    if walked is None:
        t1 = time.perf_counter()
        _backend._read_through_waits(gm)
        b = _backend._Builder(gm, symbolic=symbolic)
        try:
            b.build()
            if symbolic and len(b.sym_args()) != info["num_syms"]:
                raise _backend._WholeGraph(f"{info['num_syms']} size variables in the program")
        except _backend._WholeGraph as e:  # the compile walked it: a different graph
            raise _mismatch(str(e)) from None
        b.g = None  # the walk's C graph: never compiled
        _backend._add_phase("walk", t1)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        inputs = [(placeholders[pos].name, tuple(placeholders[pos].meta["val"].shape),
                   tuple(placeholders[pos].meta["val"].stride()), placeholders[pos].meta["val"].dtype)
                  for pos in b.arg_positions]
        nconst = len(b.constants)
    else:
        b, inputs, nconst = None, walked["inputs"], len(walked["constants"])
    if len(info["inputs"]) != len(inputs) + nconst:
        raise _mismatch(f"{len(info['inputs'])} inputs in the program, {len(inputs) + nconst} in the graph")
    # the inputs' meta: the kernels index them as the program was planned for (symbolic: their ranks
    # and dtypes; CompiledGraph._inputs_fit checks each call's sizes and strides)
    opaque = _ext().OPAQUE
    for vid, (name, shape, stride, dtype) in zip(info["inputs"], inputs):
        v = info["values"][vid]
        want = (tuple(v["sizes"]), tuple(v["strides"]), v["dtype"])
        got = (shape, stride, _backend.DTYPE_CODES.get(dtype, opaque))
        if symbolic:
            want, got = (len(want[0]), want[2]), (len(shape), got[2])
        if want != got:
            raise _mismatch(f"input {name} is {shape} {dtype} in the graph, {tuple(v['sizes'])} in the program")
    if walked is None:
        for nid, f in info["fallbacks"].items():
            node = b.fallback_nodes.get(nid)
            if node is None or node.name != f["name"]:
                raise _mismatch(f"fallback {f['name']} ({f['op']}) is node {nid} of the program, "
                                f"{'no node' if node is None else node.name} of the graph")
        cg = _backend.CompiledGraph(gm, b, prog, info)
        why = _backend._cuda_graph_blocker(gm)
    else:
        _check_walk(walked, info)
        cg = _backend.CompiledGraph(None, None, prog, info,
                                    walked={k: walked[k] for k in _backend.CompiledGraph.WALKED})
        why = walked["cuda_graph_blocker"]
    if symbolic:
        cg.spec_opts = opts  # a call whose inputs do not fit: compiled for its shapes
    _backend._record(info, b, loaded=True)
    r = info["report"]
    _backend.log.info("loaded a saved program of %d nodes: %d kernels, %d fallbacks in %.1f ms, no pass run",
                      r["nodes"], r["kernels"], r["fallbacks"], r["load_ms"])
    lend = opts.get("_lend_from")
    if lend is not None and not 0 <= lend <= len(cg.out_ids):
        lend = None
    # as backend.compile_graph ends: a CUDA graph in reduce-overhead is captured again (its kernels are not
    # compiled again), the lent outputs pooled
    mode = opts.get("mode")
    if cg.cuda and mode in ("reduce-overhead", "max-autotune"):
        if why is None:  # symbolic sizes: a CUDA graph per concrete shape
            runner = _backend.CudaGraphsByShape if cg.sym_args is not None else _backend.CudaGraphRunner
            return runner(cg, lend, adaptive=bool(opts.get("_adaptive_lend")))
        _backend.log.warning("mode %s: not capturing this graph as a CUDA graph: %s; it runs outside CUDA graphs",
                             mode, why)
    if lend is not None and cg.sym_args is None:  # symbolic: each output allocated per call
        cg.pool_outputs(lend)
    return cg


def wrap(fn: Callable, gm: torch.fx.GraphModule, opts: dict, ms: float = 0.0) -> Callable:
    """What the backend's compilers return: an EmberOutputCode where torch
    has the protocol, else the compiled graph itself.  A graph compiled for
    a plain-cache miss (_PlainMiss), its backward too when AOTAutograd
    compiles it at the first backward call, carries the miss's key as its
    FX-graph cache key: AOTAutograd makes the entry of a lazily compiled
    backward only where its graphs have one."""
    if not has_protocol():
        return fn
    oc = _output_code_class()(fn, gm, opts, ms)
    miss = getattr(_keeping, "miss", None)
    if miss is None:  # a backward compiled at the first backward call, under the forward's tracing context
        miss = getattr(torch._guards.TracingContext.try_get(), "_ember_plain_miss", None)
    if miss is not None:
        oc._fx_graph_cache_key = miss.key
        miss.forward = miss.forward or opts.get("_kind") == "forward"
    return oc


def _serializable_class() -> type:
    """EmberCompiledFunction, made on first use as a subclass of torch's
    BundledAOTAutogradSerializableCallable."""
    cls = _classes.get("EmberCompiledFunction")
    if cls is not None:
        return cls
    from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable as _Bundled

    class EmberCompiledFunction(_Bundled):
        """What ember's backend returns inside aot_compile: AOTAutograd's
        compiled function, whose bundled cache entry (runtime wrappers,
        metadata, an EmberOutputCode per graph) is what torch saves.  From
        torch 2.12 aot_compile_fullgraph wraps any backend's result that has
        a serialize function this way; 2.11's wraps only Inductor's and an
        AotAutograd backend object's, and refuses the rest, and ember's
        backend is a function that calls aot_autograd.  It hides serialize,
        so a torch that wraps such results does not wrap it again.  It saves
        the entry as ember's own (_dump_entry), which loads without torch's
        cache-entry module (_load_entry); an entry that holds more than
        ember's graphs is saved and loaded as torch does."""

        def __getattr__(self, attr: str) -> Any:
            if attr in ("serialize", "compiled_fn") or attr.startswith("__"):
                raise AttributeError(attr)
            return getattr(self.compiled_fn, attr)

        @classmethod
        def serialize_compile_artifacts(cls, fn) -> bytes:
            saved = getattr(fn.compiled_fn, "_ember_entry", None)  # a loaded function: saved again as it was
            if saved is not None:
                return saved
            with torch._functorch.config.patch("bundled_autograd_cache", True):
                data = _dump_entry(fn.compiled_fn.serialize())
            return data if data is not None else super().serialize_compile_artifacts(fn)

        @classmethod
        def deserialize_compile_artifacts(cls, data: bytes) -> Any:
            if not data.startswith(ENTRY_MAGIC):
                return super().deserialize_compile_artifacts(data)
            return cls(_load_entry(data))

    EmberCompiledFunction.__module__ = __name__
    EmberCompiledFunction.__qualname__ = "EmberCompiledFunction"
    _classes["EmberCompiledFunction"] = EmberCompiledFunction
    return EmberCompiledFunction


def serializable(compiled: Callable) -> Callable:
    """The backend's result as torch's aot_compile takes it: inside
    aot_compile (its switch bypass_autograd_cache_key is on) AOTAutograd's
    compiled function has a serialize function, and becomes an
    EmberCompiledFunction; elsewhere it is returned as it is."""
    if getattr(compiled, "serialize", None) is None or not has_protocol() or \
            not getattr(torch._functorch.config, "bypass_autograd_cache_key", False):
        return compiled
    return _serializable_class()(compiled)


# ---------------------------------------------------------------- AOTAutograd's entry
# What EmberCompiledFunction saves of AOTAutograd's bundled cache entry: its
# fields as plain data and each graph as its blob (pack_graph), under
# ENTRY_MAGIC.  Torch's own form pickles the entry's classes, whose module
# (torch._functorch._aot_autograd.aot_autograd_result) imports Inductor's
# cache, its output code and torch.export's archive code: on the CPU machine
# most of ember.load's own time, on a GPU machine Triton's import too.
# Loading ember's form rebuilds the callable from AOTAutograd's runtime
# wrappers (imported with Dynamo already) as torch's entry does
# (GenericAOTAutogradResult.wrap_post_compile, deserialize_bundled_cache_entry),
# without the steps that only log or time; the graphs' blobs are checked and
# loaded by load_graph, as an EmberOutputCode's are.
ENTRY_MAGIC = b"EMBERENT"

# the entry's fields kept, as torch 2.11 to 2.13 name them
_ENTRY_FIELDS = ("runtime_metadata", "dispatch_wrappers", "maybe_subclass_meta", "num_fw_outs_saved_for_bw",
                 "indices_of_inps_to_detach", "sanitized_aot_config")


def _dump_entry(entry) -> Optional[bytes]:
    """AOTAutograd's bundled entry in ember's form, or None where it holds
    what that form does not: a graph that is not ember's, user Triton
    kernels.  The backward graph's module (serialized_bw_module, which
    compiled autograd traces) is kept as its reduction (torch.fx's
    reduce_graph_module and its arguments)."""
    import pickle
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    oc = _output_code_class()
    fw, bw = getattr(entry, "compiled_fw", None), getattr(entry, "compiled_bw", None)
    if type(getattr(fw, "result", None)) is not oc or (bw is not None and type(getattr(bw, "result", None)) is not oc):
        return None
    if kernel_side_table.id_to_kernel or not all(hasattr(entry, k) for k in _ENTRY_FIELDS):
        return None
    state = {k: getattr(entry, k) for k in _ENTRY_FIELDS}
    bw_module = getattr(entry, "serialized_bw_module", None)
    state["bw_module"] = None if bw_module is None else (bw_module.fn, bw_module.args)
    state["fw"] = fw.result._packed()
    state["bw"] = None if bw is None else (bw.result._packed(), list(bw.backward_state_indices),
                                           bw.num_symints_saved_for_bw_)
    return ENTRY_MAGIC + pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _load_entry(data: bytes) -> Callable:
    """The callable AOTAutograd's entry saved by _dump_entry rebuilds: the
    graphs loaded (load_graph), wrapped in AOTAutograd's runtime wrappers,
    called with the flat inputs as torch's deserialized entry is."""
    import pickle
    from torch._functorch._aot_autograd import runtime_wrappers as rw
    from torch._functorch._aot_autograd.utils import simple_wraps
    from torch._subclasses import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    state = pickle.loads(data[len(ENTRY_MAGIC):])
    context = torch._guards.TracingContext.try_get()
    if context is None:  # as torch's entry: the wrappers may look at a tracing context
        context = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
    with torch._guards.tracing(context):
        compiled = _wrap_entry(state, rw)
    compiled = rw.SerializableCompiledFunction(compiled, lambda: data)

    @simple_wraps(compiled)
    def forward(*runtime_args: Any) -> Any:
        return compiled(list(runtime_args))

    forward.serialize = compiled.serialize
    forward._ember_entry = data  # saved again as it was (EmberCompiledFunction)
    return forward


def _wrap_entry(state: dict, rw) -> Callable:
    """GenericAOTAutogradResult.wrap_post_compile of torch 2.11 to 2.13 for
    ember's graphs: the forward (or inference) and backward graphs loaded,
    the backward one outside Dynamo, then AOTAutograd's runtime wrappers."""
    meta, cfg = state["runtime_metadata"], state["sanitized_aot_config"]
    fw = load_graph(state["fw"])
    bw = None
    if state["bw"] is not None:
        bw_blob, bw_state_indices, bw_symints = state["bw"]
        bw = torch._dynamo.disable(load_graph(bw_blob), reason="do not trace generated backwards pass")
    needs_autograd = bw is not None
    lazy = None
    if state["bw_module"] is not None:  # for compiled autograd, made when it asks
        reduce, reduce_args = state["bw_module"]
        lazy = rw.CachedAutogradLazyBackwardCompileInfo(lambda: reduce(*reduce_args))
    fw = rw.AOTDispatchSubclassWrapper(
        trace_joint=needs_autograd, fw_only=None, maybe_subclass_meta=state["maybe_subclass_meta"],
        num_fw_outs_saved_for_bw=state["num_fw_outs_saved_for_bw"],
    ).post_compile(fw, cfg, runtime_metadata=meta)
    fw = rw.FunctionalizedRngRuntimeWrapper(return_new_outs=not needs_autograd).post_compile(
        fw, cfg, runtime_metadata=meta)
    fw._boxed_call = True
    disable_amp = torch._C._is_any_autocast_enabled()
    if needs_autograd:
        args = dict(compiled_fw_func=fw, compiled_bw_func=bw, maybe_subclass_meta=state["maybe_subclass_meta"],
                    num_symints_saved_for_bw=bw_symints, backward_state_indices=bw_state_indices,
                    disable_amp=disable_amp, indices_of_inps_to_detach=state["indices_of_inps_to_detach"],
                    lazy_backward_info=lazy, bw_compiler=None, aot_config=cfg, fw_metadata=meta,
                    try_save_cache_entry=None)
        spec = getattr(rw, "AOTDispatchAutogradCompileSpec", None)
        if spec is not None:  # torch 2.12 on: one spec (2.13 added bw_compiler)
            import dataclasses
            names = {f.name for f in dataclasses.fields(spec)}
            fn = rw.AOTDispatchAutograd.post_compile(spec(**{k: v for k, v in args.items() if k in names}))
        else:  # torch 2.11: the spec's fields as arguments
            fn = rw.AOTDispatchAutograd.post_compile(
                fw, bw, args["maybe_subclass_meta"], bw_symints, bw_state_indices, disable_amp,
                args["indices_of_inps_to_detach"], lazy, cfg, fw_metadata=meta, try_save_cache_entry=None)
    else:
        fn = rw.RuntimeWrapper(indices_of_inps_to_detach=state["indices_of_inps_to_detach"], trace_joint=False,
                               disable_amp=disable_amp).post_compile(fw, cfg, runtime_metadata=meta)
    fn, _ = rw.post_compile(state["dispatch_wrappers"], fn, cfg, runtime_metadata=meta)
    return fn


# ---------------------------------------------------------------- a function
def _aot_config():
    """torch's switch for aot_compile (torch._dynamo.config.enable_aot_compile), on."""
    cfg = torch._dynamo.config
    if not hasattr(cfg, "enable_aot_compile"):
        raise EmberError(f"ember: torch {torch.__version__} has no aot_compile "
                         "(torch._dynamo.config.enable_aot_compile)")
    return cfg.patch(enable_aot_compile=True)


@contextlib.contextmanager
def _builtins_recorded():
    """Dynamo's saved runtime environment with the builtins its bytecode
    names (`type`, `len`, ...) among its globals.  torch 2.13's
    GraphCaptureOutput.get_runtime_env records them; 2.11's and 2.12's do
    not, so aot_compile of a forward that calls a builtin (Hugging Face's
    GPT-2 calls type()) raised "Missing required external references:
    ['type']".  Here the same is done after their get_runtime_env, for the
    aot_compile call only; where torch records them already it adds
    nothing."""
    import builtins
    cls = getattr(getattr(torch._dynamo, "convert_frame", None), "GraphCaptureOutput", None)
    orig = getattr(cls, "get_runtime_env", None)
    if orig is None:
        yield
        return

    def get_runtime_env(self):
        env = orig(self)
        used = getattr(env, "used_globals", None)
        for ref in getattr(env, "external_refs", ()) or ():
            if isinstance(used, dict) and ref not in used and hasattr(builtins, ref):
                used[ref] = getattr(builtins, ref)
        return env

    cls.get_runtime_env = get_runtime_env
    try:
        yield
    finally:
        cls.get_runtime_env = orig


class Compiled:
    """A function (or an nn.Module's forward) compiled ahead of time: call it
    as the original; save(path) writes it for ember.load."""

    def __init__(self, aot_fn, module: Optional[torch.nn.Module] = None, device: Optional[dict] = None):
        self._aot = aot_fn
        self._module = module
        self._device = device or {"type": "cpu", "machine": platform.machine()}

    def __call__(self, *args, **kwargs):
        if self._module is not None:
            return self._aot(self._module, *args, **kwargs)
        return self._aot(*args, **kwargs)

    def save(self, path: str) -> None:
        ext = _forward_functions(self._module)
        try:
            r = type(self._aot).serialize(self._aot, ext) if ext else type(self._aot).serialize(self._aot)
        except Exception as e:
            raise EmberError(f"ember: the compiled function could not be saved: {type(e).__name__}: {e}") from None
        body = getattr(r, "serialized_data", r)  # an AOTCompileSaveResult, or the bytes on older torch
        header = {"format": FORMAT_VERSION, "ember": _ember_version(), "torch": torch.__version__,
                  "python": platform.python_version(), "device": self._device,
                  "module": self._module is not None, "module_globals": _module_globals(self._aot),
                  "globals": _named_globals(self._aot)}
        _write_atomic(os.fspath(path), _pack(FILE_MAGIC, header, body))


def _write_atomic(path: str, data: bytes) -> None:
    """Write a file whole or not at all: a reader never sees half of one."""
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".ember-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _module_globals(aot) -> dict:
    """The Python modules Dynamo's bytecode loads as globals it named by id
    (codegen's create_load_python_module: ___module_<name>_<id>), which
    torch's saved function does not record: {global: module name}, for
    ember.load to import again."""
    env = getattr(getattr(aot, "_artifacts", None), "runtime_env", None)
    glb = getattr(aot, "_extra_globals", None) or {}
    out = {}
    for ref in getattr(env, "external_refs", ()) or ():
        mod = glb.get(ref)
        if isinstance(mod, types.ModuleType):
            out[ref] = mod.__name__
    return out


def _named_globals(aot) -> dict:
    """The other globals Dynamo's bytecode names (a class it rebuilds a
    result with, such as a dict subclass), which torch's saved function
    leaves to the loader's f_globals: {global: the module that defines it},
    where it is an attribute of the compiled function's own module by that
    name, for ember.load to take from that module again."""
    import builtins
    env = getattr(getattr(aot, "_artifacts", None), "runtime_env", None)
    glb = getattr(aot, "_extra_globals", None) or {}
    used = getattr(env, "used_globals", None) or {}
    name = glb.get("__name__")
    own = getattr(getattr(aot, "_artifacts", None), "backend_id", None)  # the compiled graph: given at load
    out = {}
    for ref in getattr(env, "external_refs", ()) or ():
        if ref in used or ref == own or ref not in glb or hasattr(builtins, ref) or isinstance(glb[ref], types.ModuleType):
            continue
        if isinstance(name, str):
            out[ref] = name
    return out


def _load_globals(header: dict, path) -> dict:
    """The f_globals a saved function is loaded with: the modules its
    bytecode names by id, and the globals it takes from its own module."""
    glb = {ref: importlib.import_module(name) for ref, name in (header.get("module_globals") or {}).items()}
    for ref, name in (header.get("globals") or {}).items():
        try:
            glb[ref] = getattr(importlib.import_module(name), ref)
        except (ImportError, AttributeError) as e:
            raise EmberError(f"ember: {path} names {ref!r} of module {name!r}, which this process cannot "
                             f"import ({type(e).__name__}: {e}); define it in an importable module") from None
    return glb


def _forward_functions(module: Optional[torch.nn.Module]) -> dict:
    """An nn.Module's forward and the functions its decorators wrap
    (functools.wraps' __wrapped__ chain, as Hugging Face's forwards have):
    saved by reference, as torch's external data, since pickle cannot name
    an inner function its class attribute no longer is; the loading process
    gives them back from the module it passes."""
    if module is None:
        return {}
    out, f, seen = {}, type(module).forward, set()
    while callable(f) and id(f) not in seen:
        seen.add(id(f))
        out[f"ember_forward_{len(out)}"] = f
        f = getattr(f, "__wrapped__", None)
    return out


def _saved_guards(entries) -> list:
    """The guards a saved function keeps: as torch's default for aot_compile
    (no globals, none of the types it cannot serialize), also leaving out
    guards whose derived types it cannot serialize (an ID_MATCH under a
    TYPE_MATCH: Hugging Face models' config objects), which it would refuse,
    and guards on functions' default arguments, which a loading process
    cannot find again (the functions its decorators wrap).  Left out too, or
    stripped, what would cost the loading process time and check nothing
    (_lean_guard)."""
    from torch._dynamo.guards import CheckFunctionManager
    bad = set(getattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES", ()))
    hooks_unguarded = bool(getattr(torch._dynamo.config, "skip_nnmodule_hook_guards", False))
    keep = []
    for g in entries:
        k = not (g.is_global or g.guard_type in bad or bad.intersection(getattr(g, "derived_guard_types", ()) or ())
                 or "__defaults__" in g.name or "__kwdefaults__" in g.name  # functions' defaults: code, not state
                 or (hooks_unguarded and g.guard_type == "EMPTY_NN_MODULE_HOOKS_DICT"))
        if k:
            _lean_guard(getattr(g, "orig_guard", None))
        keep.append(k)
    return keep


def _lean_guard(guard) -> None:
    """A kept guard without the stacks Dynamo recorded where it was made
    (the user's frames and its own): they are pickled with every guard, and
    the loading process formats them into each guard's message line as it
    rebuilds the guard tree, for messages only.  A failed guard still names
    its source and what it checks.  The other kind left out above,
    EMPTY_NN_MODULE_HOOKS_DICT (one per module and hook dictionary, a third
    of a ResNet's guards), builds nothing while
    torch._dynamo.config.skip_nnmodule_hook_guards is on (torch's default:
    hooks added after compiling are not guarded), so it is left out only
    where the saving process has it on."""
    for attr in ("user_stack", "stack"):
        if getattr(guard, attr, None) is not None:
            setattr(guard, attr, None)


def aot_compile(fn: Callable, args: tuple, kwargs: Optional[dict] = None, *, mode: Optional[str] = None,
                options: Optional[dict] = None, dynamic: Optional[bool] = False) -> Compiled:
    """Compile fn (a function or an nn.Module) for these example inputs now,
    with Dynamo's fullgraph capture, AOTAutograd (forward and backward graphs
    for a training step) and ember; the result runs as fn does and saves with
    .save(path) for ember.load in another process."""
    from . import _options as _opt
    from . import backend as _backend
    if not has_protocol():
        raise EmberError(f"ember: saving compiled functions needs torch "
                         f"{'.'.join(map(str, PROTOCOL_TORCH))} or later (its aot_compile takes ember's "
                         f"graphs); this is torch {torch.__version__}")
    module = fn if isinstance(fn, torch.nn.Module) else None
    # an nn.Module: its forward's function, called with the module first
    # (Dynamo traces its parameters as inputs), as torch's aot_compile_module does
    target = type(fn).forward if module is not None else fn
    if module is not None:
        args = (module,) + tuple(args)
    be = _backend.make_backend(options, mode)
    dev = None
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            dev = a.device
            break
    with _aot_config(), _builtins_recorded():
        compiled = torch.compile(target, fullgraph=True, backend=be, dynamic=dynamic,
                                 options={"guard_filter_fn": _saved_guards})
        if not hasattr(compiled, "aot_compile"):
            raise EmberError(f"ember: torch {torch.__version__}'s torch.compile has no aot_compile")
        aot = compiled.aot_compile((tuple(args), dict(kwargs or {})))
    return Compiled(aot, module, device_info(dev))


_gc_lock = threading.Lock()
_gc_loads = [0, False]  # loads inside _collector_off now; was the collector on before the first of them


@contextlib.contextmanager
def _collector_off():
    """Python's cyclic garbage collector off while a saved function loads.
    Unpickling torch's file (guards, fake tensors, AOTAutograd's wrappers)
    and rebuilding its guards make hundreds of thousands of objects, none of
    them garbage yet, and each collection the allocations trigger walks them
    (and, in a process that imported torch, the million objects before them)
    again: a quarter of ember.load's time on the CPU machine.  The first load
    in turns it off, the last out turns it back on if it was; what the load
    left is looked at by the collections after it, as any other objects."""
    with _gc_lock:
        if _gc_loads[0] == 0:
            _gc_loads[1] = gc.isenabled()
            gc.disable()
        _gc_loads[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_loads[0] -= 1
            if _gc_loads[0] == 0 and _gc_loads[1]:
                gc.enable()


# torch's unpickler of saved guards' tensors (GuardsStatePickler._unpickle_tensor), as torch 2.11
# to 2.13 define it: _one_fake_mode replaces it only where it takes these arguments
_UNPICKLE_TENSOR_ARGS = ("cls", "meta_tensor", "device", "pytype", "dispatch_keys_raw", "grad")
_fake_lock = threading.Lock()
_fake_loads = [0, None]  # loads inside _one_fake_mode now; torch's function while replaced


@contextlib.contextmanager
def _one_fake_mode():
    """The saved guards' tensors (each parameter's and input's example value,
    which the guard builder reads sizes, strides and dispatch keys from)
    unpickled into one FakeTensorMode while a saved function loads.  torch's
    unpickler makes a FakeTensorMode per tensor, whose constructor extracts
    the Python stack: a seventh of ember.load for a ResNet-50 training step
    on the CPU machine, where the compiling process had one mode for all of
    them.  Replaced for the loads under way (the first in, the last out),
    and only where torch's function is the one ember knows."""
    from torch._dynamo.guards import GuardsStatePickler as P
    with _fake_lock:
        if _fake_loads[0] == 0:
            import inspect
            orig = P.__dict__.get("_unpickle_tensor")
            if isinstance(orig, classmethod) and \
                    tuple(inspect.signature(orig.__func__).parameters) == _UNPICKLE_TENSOR_ARGS:
                from torch._subclasses.fake_tensor import FakeTensorConverter, FakeTensorMode
                mode, converter = FakeTensorMode(), FakeTensorConverter()

                def _unpickle_tensor(cls, meta_tensor, device, pytype, dispatch_keys_raw, grad):
                    ret = converter.from_meta_and_device(mode, meta_tensor, device, pytype,
                                                         torch._C.DispatchKeySet.from_raw_repr(dispatch_keys_raw))
                    ret.grad = grad
                    return ret
                P._unpickle_tensor = classmethod(_unpickle_tensor)
                _fake_loads[1] = orig
        _fake_loads[0] += 1
    try:
        yield
    finally:
        with _fake_lock:
            _fake_loads[0] -= 1
            if _fake_loads[0] == 0 and _fake_loads[1] is not None:
                P._unpickle_tensor = _fake_loads[1]
                _fake_loads[1] = None


def load(path, module: Optional[torch.nn.Module] = None) -> Compiled:
    """A function saved by Compiled.save, checked (format, versions, device,
    hash) before anything in it is read; for an nn.Module's forward, pass the
    module (its parameters are the saved function's inputs)."""
    with open(os.fspath(path), "rb") as f:
        data = f.read()
    header, body = _unpack(data, FILE_MAGIC, f"the file {os.fspath(path)}")
    if header.get("python") != platform.python_version():
        raise EmberError(f"ember: {path} was saved with Python {header.get('python')}, this is "
                         f"Python {platform.python_version()}")
    _check_device(header.get("device") or {}, os.fspath(path))
    if header.get("module") and module is None:
        raise EmberError(f"ember: {path} holds an nn.Module's forward: pass the module, "
                         "ember.load(path, module)")
    from torch._dynamo.aot_compile import AOTCompiledFunction
    try:
        ext = _forward_functions(module) if header.get("module") else {}
        glb = _load_globals(header, path)
        with _collector_off(), _one_fake_mode():
            aot = AOTCompiledFunction.deserialize(body, glb or None, ext) if ext or glb else \
                AOTCompiledFunction.deserialize(body)
    except EmberError:
        raise
    except Exception as e:
        raise EmberError(f"ember: {path} could not be loaded: {type(e).__name__}: {e}") from None
    return Compiled(aot, module if header.get("module") else None, header.get("device"))


def loading_options() -> dict:
    """The options a loaded graph compiles with, but for the saved program
    options: this process's (the environment's) cache, logging, threads."""
    from . import _options as _opt
    from . import backend as _backend
    opts = dict(_opt.resolve(None), mode="default")
    if opts["log"]:
        _backend._log_to_stderr()
    return opts


# ---------------------------------------------------------------- torch's cache, under precompiling
# torch._functorch.config's switches that make AOTAutograd keep its result for
# ember's graphs as an entry: look an entry up and make one for this backend's
# compiles (force_autograd_cache), hold each graph's OutputCode in it
# (bundled_autograd_cache: else the entry names Inductor's FX-graph cache),
# and compile the backward graph with the forward one (else it is compiled,
# and the entry made, at the first backward call, after these are unset)
_CACHE_SWITCHES = ("force_autograd_cache", "bundled_autograd_cache", "force_non_lazy_backward_lowering")
_current = threading.local()  # the options of the backend call loading entries in this thread


def _namespace(opts: dict) -> str:
    """What tells ember's entries in AOTAutograd's cache from other backends'
    (its key names no compiler): ember's version, the program options, and
    the Python side that decomposes and walks the graphs."""
    h = hashlib.sha256()
    h.update(_ember_version().encode())
    h.update(_core_hash().encode())
    h.update(json.dumps({k: opts.get(k) for k in PROGRAM_OPTIONS}, sort_keys=True).encode())
    h.update(_source_hash().encode())
    return "ember-" + h.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _core_hash() -> str:
    """The C core's identity (the extension's bytes), for the namespace: a
    rebuilt core with the same version must not read another's entries."""
    h = hashlib.sha256()
    with open(_ext().__file__, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """The Python side's identity: every module of the package (the
    decompositions AOTAutograd traces with, the walk, the runner)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()[:16]


_scope = threading.local()  # the namespace of the ember backend call in this thread, if any


def _install_cache_scope() -> bool:
    """AOTAutograd's local cache folder, per thread: inside an ember backend
    call under aot_compile or torch's caching precompile,
    <folder>/<namespace>.  Its key has no backend in it before torch 2.13
    (and, under aot_compile, only Dynamo's id for the function): an entry
    of another backend, or of another ember, for the same graph would be
    found, and under aot_compile (strict_autograd_cache) a bad one is an
    error.  Installed once; other threads and calls see torch's folder.
    False where torch has no such folder to scope (then ember keeps out of
    its cache)."""
    try:
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    except ImportError:
        return False
    if getattr(AOTAutogradCache, "_ember_scoped", False):
        return True
    orig = AOTAutogradCache.__dict__.get("_get_tmp_dir")
    if not isinstance(orig, classmethod):
        return False
    base = orig.__func__

    def _get_tmp_dir(cls):
        d = base(cls)
        ns = getattr(_scope, "ns", None)
        return os.path.join(d, ns) if ns else d

    AOTAutogradCache._get_tmp_dir = classmethod(_get_tmp_dir)
    AOTAutogradCache._ember_scoped = True
    return True


@contextlib.contextmanager
def autograd_cache(gm: torch.fx.GraphModule, opts: dict):
    """Around the backend's AOTAutograd call where torch's cache holds
    ember's graphs: inside aot_compile (which always looks there) and under
    torch's caching precompile, lookups and saves in a folder of ember's own
    for this ember and these options (_install_cache_scope).  The plain path
    keeps its entries in ember's own cache (plain_cache)."""
    cfg = torch._functorch.config
    if getattr(gm, "_backend_id", None) is None or not _install_cache_scope():
        yield
        return
    switches = has_protocol() and all(hasattr(cfg, k) for k in _CACHE_SWITCHES)
    # torch's caching precompile (torch._dynamo.config.caching_precompile,
    # saved by torch.compiler.save_cache_artifacts): Dynamo names the graph
    # (_backend_id) but, unlike aot_compile, leaves AOTAutograd's bundled
    # cache off, which is what records ember's compiled graphs for it
    caching = switches and getattr(torch._dynamo.config, "caching_precompile", False) and \
        not getattr(cfg, "bypass_autograd_cache_key", False)
    old_ns, _scope.ns = getattr(_scope, "ns", None), _namespace(opts)
    try:
        if caching:
            with cfg.patch({k: True for k in _CACHE_SWITCHES}):
                yield
        else:
            yield
    finally:
        _scope.ns = old_ns


# ---------------------------------------------------------------- the plain path's cache
# ember.compile (or torch.compile(backend="ember")) in a new process: Dynamo
# hands the backend the graph it handed the process before, and AOTAutograd
# would trace, partition and hand ember the same forward and backward graphs
# again.  ember keeps what AOTAutograd made of a graph, its bundled entry in
# ember's form (_dump_entry: the runtime metadata and each compiled graph's
# blob, its C program included), in ember's cache folder under a key of
# everything that entry depends on (_plain_key); a later process's backend
# call with the same key loads it as ember.load loads a saved function's
# (_load_entry): no AOTAutograd, no pass, no C compiler.  What cannot be keyed
# safely (plain_cache's reasons) is compiled as before and not kept.  On a
# miss AOTAutograd makes the entry as for its own cache, its key ember's
# (_install_plain_hooks: torch's key, which costs Inductor's imports and a
# hash of torch's sources, is never computed).  A training graph's backward
# stays lazy: AOTAutograd makes the entry when it compiles it, at the first
# backward call (wrap marks the graphs of a miss; a forward run alone keeps
# nothing).
PLAIN_MAGIC = b"EMBERPLN"
PLAIN_PREFIX = "ember-plain-"
# bump when what the key covers, or how, changes
PLAIN_KEY_VERSION = 1
# the options that change neither AOTAutograd's graphs nor ember's programs
_UNKEYED_OPTIONS = ("log", "cache", "cache_dir", "compile_threads", "compile_timeout", "host_cache_mb")
# a tensor the graph holds as an attribute is keyed by its bytes up to this size; a larger one is not kept
PLAIN_CONST_BYTES = 1 << 24
# an entry file larger than this is refused unread
PLAIN_MAX_BYTES = 1 << 32
# the namespaces of ops whose decompositions and derivatives come with torch (its version is keyed); another
# namespace's op (a user's custom op, whose Python may change between processes) is not kept
_TORCH_OP_NAMESPACES = ("aten", "prims")
# the modules of callables Dynamo's graphs call that are torch's or Python's own
_SAFE_MODULES = ("torch", "_operator", "operator", "math", "builtins")
# higher-order ops whose behaviour is their body's code (a subgraph the key holds) and their plain
# arguments: activation checkpointing (without a context_fn) and Dynamo's wrap
_PLAIN_HOPS = ("tag_activation_checkpoint", "wrap")
# node meta that steers AOTAutograd's partitioner (activation checkpointing's tags, annotations)
_PLAIN_NODE_META = ("recompute", "ac_graph_id", "partitioner_tag", "custom")
_PLAIN_LEAVES = (int, float, bool, str, complex, type(None), type(Ellipsis), torch.dtype, torch.device,
                 torch.layout, torch.memory_format)


_PLAIN_SEQS = (list, tuple, torch.Size, torch.fx.immutable_collections.immutable_list)
_PLAIN_MAPS = (dict, torch.fx.immutable_collections.immutable_dict)


class _NotKeyed(Exception):
    pass


def _plain_arg(a) -> None:
    """Raises _NotKeyed unless a node's argument is one the graph's code
    spells out (nodes, numbers, strings, torch's enums, slices and
    containers of them): anything else is an object the code only names."""
    t = type(a)
    if t is torch.fx.Node or t in _PLAIN_LEAVES:
        return
    if t in _PLAIN_SEQS:
        for x in a:
            _plain_arg(x)
        return
    if t in _PLAIN_MAPS:
        for k, x in a.items():
            _plain_arg(k)
            _plain_arg(x)
        return
    if t is slice:
        _plain_arg((a.start, a.stop, a.step))
        return
    raise _NotKeyed(f"an argument of type {t.__name__}")


def _plain_target(target) -> None:
    if isinstance(target, torch._ops.HigherOrderOperator):
        if target.name() not in _PLAIN_HOPS:
            raise _NotKeyed(f"the higher-order op {target.name()}")
        return
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        ns = getattr(target, "namespace", None) or target._qualified_op_name.split("::")[0]
        if ns not in _TORCH_OP_NAMESPACES:
            raise _NotKeyed(f"the op {ns}::{getattr(target, '__name__', target)} (not torch's)")
        return
    mod = getattr(target, "__module__", None)
    if not isinstance(mod, str) or not (mod in _SAFE_MODULES or mod.startswith("torch.")):
        raise _NotKeyed(f"a call to {getattr(target, '__qualname__', target)!r} of module {mod}")


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _plain_graph(gm: torch.fx.GraphModule, put) -> None:
    """The graph's part of the key: the code of the graph and of each graph
    it holds (higher-order ops' bodies), the tensors it holds by their
    bytes, the node meta AOTAutograd's partitioner reads, which inputs
    Dynamo marked static; raises _NotKeyed for what the code only names."""
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        raise _NotKeyed("the graph holds parameters or buffers")
    for name, mod in gm.named_modules():
        if not isinstance(mod, torch.fx.GraphModule):
            raise _NotKeyed(f"the module {name} ({type(mod).__name__})")
        if "_checkpoint_context_fn" in getattr(mod, "meta", {}):  # selective checkpointing: a Python policy
            raise _NotKeyed(f"the context_fn of checkpoint {name}")
        put("module", name, mod.code)
        for node in mod.graph.nodes:
            if node.op == "call_function":
                _plain_target(node.target)
            elif node.op == "call_module":
                raise _NotKeyed(f"a call of the module {node.target}")
            elif node.op == "get_attr":
                val = mod
                for part in str(node.target).split("."):
                    val = getattr(val, part, None)
                if type(val) is torch.Tensor:
                    if val.numel() * val.element_size() > PLAIN_CONST_BYTES or val.layout != torch.strided:
                        raise _NotKeyed(f"the tensor {node.target} ({tuple(val.shape)})")
                    put("tensor", node.target, tuple(val.shape), val.dtype, str(val.device), val.requires_grad,
                        hashlib.sha256(_tensor_bytes(val)).hexdigest())
                elif not isinstance(val, torch.fx.GraphModule):
                    raise _NotKeyed(f"the attribute {node.target} ({type(val).__name__})")
            elif node.op == "placeholder":
                put("static", (node.meta.get("tensor_dict") or {}).get("_dynamo_static_input_type"))
            _plain_arg(node.args)
            _plain_arg(node.kwargs)
            for k in _PLAIN_NODE_META:
                if k in node.meta:
                    _plain_arg(node.meta[k])
                    put("meta", node.name, k, node.meta[k])


def _plain_inputs(example_inputs, put) -> list:
    """The example inputs' part of the key, and their devices; raises
    _NotKeyed for symbolic sizes, tensor subclasses, other layouts and
    inputs that share storage."""
    storages: dict = {}
    devices = []
    for i, x in enumerate(example_inputs):
        if type(x) not in (torch.Tensor, torch.nn.Parameter):
            raise _NotKeyed(f"input {i} is a {type(x).__name__}" +
                            (" (symbolic sizes)" if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) else ""))
        if x.layout != torch.strided or x.is_nested or x.is_quantized:
            raise _NotKeyed(f"input {i} has layout {x.layout}")
        shape, stride = tuple(x.shape), tuple(x.stride())
        if not all(type(s) is int for s in shape + stride) or type(x.storage_offset()) is not int:
            raise _NotKeyed(f"input {i} has symbolic sizes")
        st = x.untyped_storage()
        if st.nbytes() and storages.setdefault((st.data_ptr(), str(x.device)), i) != i:
            # AOTAutograd's result then depends on which inputs overlap, and it guards on that (DuplicateInputs,
            # StorageOverlap): guards a loaded entry would not add
            raise _NotKeyed(f"inputs {storages[(st.data_ptr(), str(x.device))]} and {i} share storage")
        if x.device not in devices:
            devices.append(x.device)
        put("input", shape, stride, x.storage_offset(), x.dtype, str(x.device), x.requires_grad, x.is_leaf,
            type(x) is torch.nn.Parameter, x._is_view(), x.is_conj(), x.is_neg(), x.is_inference(), st.nbytes(),
            torch._C._dispatch_keys(x).raw_repr())
    return devices


@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    """The CPU the kernels were built for (-march=native): its first model
    name and feature lines, as the kernel cache keys it (src/build.c)."""
    keys, seen = ("model name", "flags", "Features", "CPU implementer", "CPU part"), {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line == "\n" and seen:
                    break
                for k in keys:
                    if k not in seen and line.startswith(k):
                        seen[k] = line
    except OSError:
        pass
    return platform.machine() + " " + hashlib.sha256("".join(seen.get(k, "") for k in keys).encode()).hexdigest()[:16]


def _plain_state(put) -> None:
    """What else AOTAutograd's result depends on: grad and inference mode,
    autocast, deterministic algorithms, the default dtype, the backends'
    switches that pick a decomposition, and the configs its tracing and
    partitioning read (torch._functorch's and Inductor's)."""
    autocast = []
    for dev in torch._C._autocast_supported_devices():
        if torch.is_autocast_enabled(dev):
            autocast.append((dev, torch.get_autocast_dtype(dev)))
    put("state", torch.is_grad_enabled(), torch.is_inference_mode_enabled(), autocast,
        torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_default_dtype(), torch.backends.cpu.get_cpu_capability(), torch._C._get_mkldnn_enabled(),
        torch.backends.cudnn.enabled, torch.backends.cuda.flash_sdp_enabled(),
        torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
        torch.backends.cuda.cudnn_sdp_enabled())
    import torch._inductor.config as inductor_config
    put("configs", hashlib.sha256(torch._functorch.config.save_config()).hexdigest(),
        hashlib.sha256(inductor_config.save_config()).hexdigest())


def _plain_key(gm: torch.fx.GraphModule, example_inputs, opts: dict) -> str:
    """The key of what AOTAutograd and ember make of gm for these inputs
    (raises _NotKeyed): versions (ember's, its C core's and Python's
    bytes, torch's, Python's), ember's options, the graph, the inputs, the
    devices and the process's state (_plain_state)."""
    h = hashlib.sha256()

    def put(*parts) -> None:
        h.update(repr(parts).encode())
        h.update(b"\0")

    put(PLAIN_KEY_VERSION, _ember_version(), _core_hash(), _source_hash(), torch.__version__,
        torch.version.git_version, platform.python_version())
    put("options", sorted((k, v) for k, v in opts.items() if k not in _UNKEYED_OPTIONS))
    _plain_graph(gm, put)
    for dev in _plain_inputs(example_inputs, put):
        put("device", device_info(dev), _cpu_id() if dev.type == "cpu" else None)
    _plain_state(put)
    return h.hexdigest()


def _cache_root(opts: dict) -> str:
    """ember's cache folder, as the C core finds it (src/build.c em_cache_dir)."""
    root = opts.get("cache_dir") or ""
    if not root:
        xdg, home, tmp = (os.environ.get(k, "") for k in ("XDG_CACHE_HOME", "HOME", "TMPDIR"))
        root = os.path.join(xdg, "ember") if xdg.startswith("/") else \
            os.path.join(home, ".cache", "ember") if home.startswith("/") else \
            os.path.join(tmp if tmp.startswith("/") else "/tmp", f"ember-cache-{os.geteuid()}")
    return root


def _plain_dir(opts: dict) -> Optional[str]:
    """ember's cache folder (as the C core finds it, src/build.c
    em_cache_dir) and its plain/ folder under it, made private where new;
    None where either is not ours alone (the entries hold programs ember
    loads, as the kernel cache does: the same checks)."""
    import stat
    root = _cache_root(opts)
    d = os.path.join(root, "plain")
    for path in (root, d):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
    return d


def _read_private(path: str) -> Optional[bytes]:
    """A file's bytes if it is ours alone and a regular file (not followed
    through a link), else None."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or \
                    st.st_size > PLAIN_MAX_BYTES:
                return None
            return f.read()
    except OSError:  # a read error: a miss, as a missing entry
        return None


class _PlainMiss:
    """A backend call's miss: around AOTAutograd's call, the switches that
    make it build its entry with ember's key (_install_plain_hooks), and
    where the entry goes."""

    def __init__(self, key: str, path: str, opts: dict):
        self.key, self.path, self.opts = PLAIN_PREFIX + key, path, opts
        self.saved: Optional[str] = None  # why not, or "" once saved
        self.forward = False  # a training graph's forward was compiled: its backward is compiled lazily

    def __enter__(self):
        self._guards = _aot_guards()
        _keeping.miss = self
        # the backward graph is compiled at the first backward call, under this tracing context (wrap)
        self._ctx = torch._guards.TracingContext.try_get()
        if self._ctx is not None:
            self._ctx._ember_plain_miss = self
        self._patch = torch._functorch.config.patch({k: True for k in _KEEP_SWITCHES})
        self._patch.__enter__()
        return self

    def __exit__(self, *exc):
        self._patch.__exit__(*exc)
        _keeping.miss = None
        from . import backend as _backend
        if exc[0] is None and self.saved is None and self.forward:
            # AOTAutograd makes the entry when it compiles the backward graph, at the first backward call
            with _lazy_lock:
                _lazy_misses[self.key] = self
            _backend.log.info("AOTAutograd's result to be kept in ember's cache (%s) at the first backward",
                              self.key[len(PLAIN_PREFIX):][:16])
            return False
        if self._ctx is not None and getattr(self._ctx, "_ember_plain_miss", None) is self:
            self._ctx._ember_plain_miss = None
        if exc[0] is None:
            self._said()
        return False

    def _said(self) -> None:
        from . import backend as _backend
        if self.saved == "":
            _backend.log.info("AOTAutograd's result kept in ember's cache (%s) for the next process",
                              self.key[len(PLAIN_PREFIX):][:16])
        else:
            _backend.log.info("AOTAutograd's result not kept: %s", self.saved or "AOTAutograd made no entry")

    def save(self, entry) -> None:
        """AOTAutograd's entry for this graph, saved in ember's form."""
        try:
            if getattr(entry, "guards_expr", None) or _aot_guards() != self._guards:
                raise _NotKeyed("AOTAutograd added guards (sizes, inputs that overlap), which a load would not")
            data = _dump_entry(entry)
            if data is None:
                raise _NotKeyed("the entry holds a graph that is not ember's")
            header = {"format": FORMAT_VERSION, "ember": _ember_version(), "torch": torch.__version__,
                      "key": self.key}
            _write_atomic(self.path, _pack(PLAIN_MAGIC, header, data))
            self.saved = ""
        except Exception as e:  # the compile goes on: only the next process pays
            self.saved = f"{type(e).__name__}: {e}"


def _aot_guards() -> int:
    """How many guards AOTAutograd has added to Dynamo's frame being compiled."""
    ctx = torch._guards.TracingContext.try_get()
    return len(getattr(getattr(ctx, "guards_context", None), "aotautograd_guards", None) or ())


_keeping = threading.local()  # .miss: the _PlainMiss of the backend call in this thread, if any
# AOTAutograd's switches for a plain-cache miss: make an entry (with ember's key: _install_plain_hooks)
# holding the OutputCodes; the backward graph stays lazy (its entry is made at the first backward)
_KEEP_SWITCHES = ("force_autograd_cache", "bundled_autograd_cache")
_lazy_lock = threading.Lock()
_lazy_misses: dict = {}  # key -> the _PlainMiss whose entry AOTAutograd makes at the first backward call
_plain_hooks: list = []  # [True] once installed, [False] where this torch has no place for them


def _install_plain_hooks() -> bool:
    """Three hooks on AOTAutograd's cache, for ember's graphs only (any
    other call goes to torch's functions): its lookup (try_load) answers a
    miss with ember's key at once, so AOTAutograd builds its entry without
    computing torch's key; make_entry holds ember's graphs in the entry
    (bundled) also at the first backward call, outside the backend call's
    switches; and its save hands an entry of ember's key to its _PlainMiss
    instead of torch's folder.  Installed
    once, where torch's functions are the ones ember knows (torch 2.11 to
    2.13: try_load returns the function and sets the key in the config it
    was given, or, from 2.13, returns both); False elsewhere (then nothing
    is kept)."""
    if _plain_hooks:
        return _plain_hooks[0]
    import dataclasses
    import inspect
    ok = False
    try:
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
        from torch._functorch._aot_autograd.schemas import AOTAutogradCacheInfo
        load, save = AOTAutogradCache.__dict__.get("try_load"), AOTAutogradCache.__dict__.get("save")
        make = AOTAutogradCache.__dict__.get("make_entry")
        if isinstance(load, staticmethod) and isinstance(save, staticmethod) and isinstance(make, staticmethod):
            sig = inspect.signature(load.__func__)
            names = list(sig.parameters)
            returns_config = str(sig.return_annotation).startswith("tuple")
            ok = names[:3] == ["mod", "args", "aot_config"] and \
                list(inspect.signature(save.__func__).parameters) == ["key", "entry", "remote"] and \
                list(inspect.signature(make.__func__).parameters)[:2] == ["compiled_fw_func", "compiled_bw_func"]
    except (ImportError, TypeError, ValueError):
        pass
    if ok:
        orig_load, orig_save, orig_make = load.__func__, save.__func__, make.__func__

        def try_load(*args, **kwargs):
            miss = getattr(_keeping, "miss", None)
            if miss is None:
                return orig_load(*args, **kwargs)
            aot_config = args[2] if len(args) > 2 else kwargs["aot_config"]
            info = AOTAutogradCacheInfo(miss.key, time.time_ns(), forward_symints=[])
            if returns_config:
                return None, dataclasses.replace(aot_config, cache_info=info)
            aot_config.cache_info = info
            return None

        def make_entry(*args, **kwargs):
            fw = kwargs["compiled_fw_func"] if "compiled_fw_func" in kwargs else args[0]
            while hasattr(fw, "__wrapped__"):
                fw = fw.__wrapped__
            key = getattr(fw, "_fx_graph_cache_key", None)
            if not (isinstance(key, str) and key.startswith(PLAIN_PREFIX)):
                return orig_make(*args, **kwargs)
            # at the first backward call, outside the backend call's switches: the entry holds ember's graphs
            with torch._functorch.config.patch(bundled_autograd_cache=True):
                return orig_make(*args, **kwargs)

        def save_entry(key, entry, remote):
            if not (isinstance(key, str) and key.startswith(PLAIN_PREFIX)):
                return orig_save(key, entry, remote)
            miss = getattr(_keeping, "miss", None)
            if miss is not None and miss.key == key:
                miss.save(entry)
                return
            with _lazy_lock:
                miss = _lazy_misses.pop(key, None)
            if miss is not None:  # made at the first backward call
                miss.save(entry)
                miss._said()

        AOTAutogradCache.try_load = staticmethod(try_load)
        AOTAutogradCache.make_entry = staticmethod(make_entry)
        AOTAutogradCache.save = staticmethod(save_entry)
    _plain_hooks.append(ok)
    return ok


def _plain_count(what: str) -> None:
    from . import backend as _backend
    with _backend._lock:
        _backend._stats[what] += 1


def plain_cache(gm: torch.fx.GraphModule, example_inputs, opts: dict) -> tuple:
    """The plain path's cache for one backend call: (the compiled function
    of a hit, None) or (None, a context for AOTAutograd's call that keeps
    its result, or a null one where it cannot be kept).  A hit, a miss and
    a graph not kept are counted in stats() (aot_cache_hits,
    aot_cache_misses, aot_cache_skipped) and said in the log."""
    from . import backend as _backend
    null = contextlib.nullcontext()
    t0 = time.perf_counter()
    try:
        if not opts.get("cache"):
            return None, null  # the cache option off: everything compiled again
        if opts.get("debug") or opts.get("_cuda_check") is not None:
            raise _NotKeyed("the debug option (its dumps are written by a compile)" if opts.get("debug")
                            else "a code generation check")
        if getattr(gm, "_backend_id", None) is not None:
            raise _NotKeyed("precompiling (aot_compile, caching precompile)")
        if not has_protocol() or not all(hasattr(torch._functorch.config, k) for k in _CACHE_SWITCHES):
            raise _NotKeyed(f"torch {torch.__version__} has no bundled AOTAutograd entries")
        ctx = torch._guards.TracingContext.try_get()
        if ctx is not None and getattr(ctx, "fakify_first_call", False):
            raise _NotKeyed("Dynamo's fakify_first_call")
        if getattr(torch._dynamo.compiled_autograd, "in_compiled_autograd_region", False):
            raise _NotKeyed("a compiled autograd graph")
        if torch._C._autograd._top_saved_tensors_default_hooks(True):
            raise _NotKeyed("saved tensors hooks (AOTAutograd inlines them)")
        if not _install_plain_hooks():
            raise _NotKeyed(f"torch {torch.__version__}'s AOTAutograd cache is not one ember knows")
        key = _plain_key(gm, example_inputs, opts)
        d = _plain_dir(opts)
        if d is None:
            raise _NotKeyed("ember's cache folder is not ours alone or cannot be made")
    except _NotKeyed as e:
        _plain_count("aot_cache_skipped")
        _backend.log.info("AOTAutograd's result not kept in ember's cache: %s", e)
        return None, null
    except Exception as e:  # a state or an input the key does not know: compiled as before
        _plain_count("aot_cache_skipped")
        _backend.log.info("AOTAutograd's result not kept in ember's cache: %s: %s", type(e).__name__, e)
        return None, null
    path = os.path.join(d, key + ".entry")
    data = _read_private(path)
    if data is not None:
        fn = _plain_load(data, path, key, opts)
        if fn is not None:
            _plain_count("aot_cache_hits")
            _backend.log.info("AOTAutograd's result from ember's cache (%s) in %.0f ms: no AOTAutograd, "
                              "no compile", key[:16], (time.perf_counter() - t0) * 1e3)
            return fn, null
    _plain_count("aot_cache_misses")
    _backend.log.info("AOTAutograd's result not in ember's cache (%s): tracing the graph", key[:16])
    return None, _PlainMiss(key, path, opts)


def _plain_load(data: bytes, path: str, key: str, opts: dict) -> Optional[Callable]:
    """The compiled function of an entry file, checked first (magic,
    format, versions, hash, its key); None, with the file removed and a
    warning, for one that does not check out or load."""
    from . import backend as _backend
    old = getattr(_current, "opts", None)
    _current.opts = opts
    try:
        header, body = _unpack(data, PLAIN_MAGIC, f"ember's cache entry {path}")
        if header.get("key") != PLAIN_PREFIX + key or not body.startswith(ENTRY_MAGIC):
            raise EmberError(f"ember: the cache entry {path} is not this graph's")
        with _collector_off():
            fn = _load_entry(body)
        return torch._dynamo.disable(fn, reason="do not trace AOT-compiled graph")
    except Exception as e:
        _backend.log.warning("%s; compiling the graph again", e if isinstance(e, EmberError) else
                             f"ember: the cache entry {path} could not be loaded ({type(e).__name__}: {e})")
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    finally:
        _current.opts = old
