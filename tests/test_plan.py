"""The memory plan's client part, decided in C (src/plan.c) and read by the
backend: when each fallback result is dropped, where each host tensor's memory
comes from (torch, the CPU block cache, a pooled block of outputs) and the
pooled block's layout.  The reference is the Python that made these decisions
in ember/backend.py before they moved to C, kept here verbatim in substance:
the C plan must equal it on real graphs (zoo models' training forward and
backward graphs, and small graphs made to hit each case)."""
import pytest
import torch
import torch.nn.functional as F

import ember
from ember import _ext, backend
from ember.tools import zoo
from conftest import have_nvrtc

_HOST_CACHE_MIN = 2 << 20  # the old backend's constants (now HOST_CACHE_MIN, BLOCK_ALIGN in src/ember_int.h)
_BLOCK_ALIGN = 512
_ITEMSIZE = {code: dt.itemsize for dt, code in _ext.DTYPE_CODES.items()}


def _span(sizes, strides):
    if not all(sizes):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(sizes, strides))


def ref_drops(info):
    """The old CompiledGraph.__init__: fallback results dropped at the first fallback after their
    last use, unless they are an output's root."""
    values = info["values"]
    out_roots = {values[o]["root"] for o in info["outputs"] if o >= 0}
    fb_steps = [(s, idx) for s, (kind, idx) in enumerate(info["steps"]) if kind == _ext.STEP_FALLBACK]
    drop_at = {}
    for vid, v in enumerate(values):
        if v["storage"] != _ext.STORE_FALLBACK or vid in out_roots:
            continue
        for s, nid in fb_steps:
            if s > v["last_step"]:
                drop_at.setdefault(nid, []).append(vid)
                break
    return drop_at


def ref_host(info, cuda):
    """The old host list: (vid, bytes from the block cache or 0)."""
    host = []
    for vid, v in enumerate(info["values"]):
        if v["storage"] == _ext.STORE_HOST:
            nbytes = _span(v["sizes"], v["strides"]) * _ITEMSIZE[v["dtype"]]
            pooled = not cuda and nbytes >= _HOST_CACHE_MIN
            host.append((vid, nbytes if pooled else 0))
    return host


def ref_pool(info, host, start, cuda):
    """The old CompiledGraph.pool_outputs: (block bytes, [(vid, offset in elements)]) or None,
    and the host values left to allocate one by one.  On the CPU (since pooling came to it)
    only the values torch allocates are pooled: those from the block cache stay there."""
    values, outs = info["values"], info["outputs"]
    mine = {values[o]["root"] for o in outs[start:] if o >= 0}
    mine -= {values[o]["root"] for o in outs[:start] if o >= 0}
    entries, rest, off = [], [], 0
    for h in host:
        vid = h[0]
        v = values[vid]
        if vid not in mine or (not cuda and h[1]):
            rest.append(h)
            continue
        isz = _ITEMSIZE[v["dtype"]]
        entries.append((vid, off // isz))
        off += -(-_span(v["sizes"], v["strides"]) * isz // _BLOCK_ALIGN) * _BLOCK_ALIGN
    if len(entries) > 1:
        return (off, entries), rest
    return None, host


def _c_drops(info):
    """The C plan's drops as the old dict: fallback node id -> value ids."""
    drop_at = {}
    for vid, v in enumerate(info["values"]):
        if v["drop_step"] >= 0:
            drop_at.setdefault(info["steps"][v["drop_step"]][1], []).append(vid)
    return drop_at


def _compiled(cg):
    """(host as (vid, cached bytes), block as (bytes, [(vid, offset)]) or None) of a CompiledGraph."""
    host = [(h[0], h[4]) for h in cg.host]
    block = None if cg.block is None else (cg.block[0], [(e[0], e[4]) for e in cg.block[1]])
    return host, block


@pytest.fixture
def graphs(monkeypatch):
    """Every CompiledGraph the backend makes, with its pooling request, as (cg, gm, start)."""
    made = []

    class Spy(backend.CompiledGraph):
        def __init__(self, gm, b, prog, info):
            super().__init__(gm, b, prog, info)
            made.append([self, gm, None])

        def pool_outputs(self, start):
            made[-1][2] = start
            super().pool_outputs(start)

    monkeypatch.setattr(backend, "CompiledGraph", Spy)
    ember.reset()
    yield made
    ember.reset()


def _train_step(name, bs):
    entry = zoo.get(name)
    ctx = zoo.Ctx(small=True)
    torch.manual_seed(0)
    model = entry.make_model(ctx)
    ex = entry.inputs(ctx, bs, torch.Generator().manual_seed(0))
    cmod = ember.compile(model)
    entry.loss(cmod(*ex.args, **ex.kwargs), ex.target).backward()


@pytest.mark.parametrize("name,bs", [("mlp", 4), ("small_resnet", 2), ("transformer_block", 1)])
def test_zoo_training_plan_matches_reference(graphs, name, bs):
    _train_step(name, bs)
    kinds = [start for _, _, start in graphs]
    assert len(graphs) == 2 and all(s is not None for s in kinds), kinds  # forward and backward, pooled
    drops = pooled = 0
    for cg, _, start in graphs:
        info = cg.info
        assert cg.drop_at == ref_drops(info)
        drops += sum(map(len, cg.drop_at.values()))
        host, block = _compiled(cg)
        assert (block, host) == ref_pool(info, ref_host(info, False), start, False)
        pooled += 0 if block is None else len(block[1])
    # the saved activations and the gradients: one block per call each on the CPU too
    assert pooled > 1
    if name == "small_resnet":
        assert drops > 0  # convolutions run through torch on the CPU: their results are dropped


def test_drops_and_host_cache_of_a_small_graph(graphs):
    # two fallbacks in a row (torch's convolution): the first's result dies at the second; a
    # 4 MiB output comes from the block cache, a small one from torch
    def f(x, w):
        a = F.conv2d(x, w, padding=1)
        b = F.conv2d(a.relu(), w, padding=1)
        big = torch.ones(1024, 1024) * x.sum()
        return b * 2, big + 1

    x, w = torch.randn(1, 3, 8, 8), torch.randn(3, 3, 3, 3)
    got = ember.compile(f)(x, w)
    torch.testing.assert_close(got[0], f(x, w)[0])
    (cg, _, _), = graphs
    info = cg.info
    assert cg.drop_at == ref_drops(info) and cg.drop_at
    host, _ = _compiled(cg)
    assert host == ref_host(info, False)
    assert any(n >= _HOST_CACHE_MIN for _, n in host) and any(n == 0 for _, n in host)
    for vid, v in enumerate(info["values"]):
        if v["storage"] == _ext.STORE_HOST:
            assert v["host_alloc"] == (_ext.HOST_CACHE if v["host_bytes"] >= _HOST_CACHE_MIN else _ext.HOST_TORCH)
        if v["storage"] != _ext.STORE_FALLBACK:
            assert v["drop_step"] == -1
    # pooling from the first output: the large one keeps the block cache, and one small value
    # alone is one allocation either way (no block); a start past the outputs is an error naming it
    assert cg.prog.pool_outputs(0)[0] == 0
    with pytest.raises(ember.EmberError, match="pool_outputs: start 99"):
        cg.prog.pool_outputs(99)


@pytest.mark.skipif(not have_nvrtc(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")
def test_cuda_pooling_matches_reference(graphs):
    # the training graphs of the mlp, rebuilt for a GPU (the kernels compiled by NVRTC, not
    # loaded): the pooled block and its offsets are the old Python's for every start
    _train_step("mlp", 4)
    pooled = 0
    for cg, gm, start in graphs:
        b = backend._Builder(gm, device_override=_ext.CUDA)
        b.build()
        libs, incs = backend._cuda_dirs()
        copts = backend._opt.c_options(backend._opt.resolve(None), cuda_sm=90, build_only=True,
                                       cuda_lib_dirs=libs, cuda_include_dirs=incs)
        prog = b.g.compile(copts)
        info = prog.info()
        assert info["cuda"] and info["block_bytes"] == 0
        assert _c_drops(info) == ref_drops(info)
        host = ref_host(info, True)
        assert all(n == 0 for _, n in host)  # no block cache on a GPU
        for s in sorted({0, start, len(info["outputs"])}):
            block_bytes, plan = prog.pool_outputs(s)
            ref_block, ref_rest = ref_pool(info, host, s, True)
            got = sorted((vid, off // _ITEMSIZE[info["values"][vid]["dtype"]])
                         for vid, (alloc, _, off) in plan.items() if alloc == _ext.HOST_BLOCK)
            assert (block_bytes, got) == ((ref_block[0], ref_block[1]) if ref_block else (0, []))
            assert sorted(vid for vid, (alloc, _, _) in plan.items() if alloc != _ext.HOST_BLOCK) \
                == [vid for vid, _ in ref_rest]
            pooled += bool(ref_block)
    assert pooled  # some start pooled two or more outputs
