"""ember past one process: DDP, FSDP2, compiled autograd and the functional
collectives, on the CPU (gloo) and, where a machine has two GPUs, on them
(NCCL, one GPU per rank).

One pair of processes (torch.multiprocessing, spawn) runs every scenario in
turn, each against the same run in eager: three SGD steps on data that
differs between the ranks, then the losses and parameters compared to
float32 tolerances.  Each rank writes what it found to a JSON file; the tests
read them, one test per scenario.

- DDP over a small transformer (with --runslow) and a small CNN, with buckets small enough
  that Dynamo's DDP optimizer (optimize_ddp) splits the graph at bucket
  boundaries (the number of graphs ember compiled says it did), and with
  optimize_ddp off (one forward and one backward graph).
- FSDP2 (fully_shard) per block with ember compiling each block, and the
  whole sharded model compiled at once.  FSDP2's hooks are not traced (torch
  2.13 runs them under dynamo.disable), so Dynamo breaks the whole model's
  graph at each sharded block and ember compiles the pieces.
- Compiled autograd with ember as its backend, in one process (with --runslow) and under DDP
  (optimize_ddp="python_reducer": the gradients' all-reduces are in the
  backward graph ember compiles, as functional collectives).
- The functional collectives in a compiled function, run.

On the GPUs every scenario runs again with the models and data on the rank's
GPU, plus DDP under mode="reduce-overhead" (DDP's all-reduces run in its
hooks, outside the graphs, so ember captures its CUDA graphs there).

The last tests need no second process: graphs with collectives traced with
fake tensors, compiled (not run), and ember's plan for them checked.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
import traceback

import pytest
import torch
import torch.distributed as dist

pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
    pytest.mark.skipif(os.environ.get("EMBER_TEST_BACKEND", "ember") not in ("", "ember"),
                       reason="ember's counters are checked"),
]

WORLD = 2
STEPS = 3
BUCKET_MB = 0.004  # 4 KB buckets: the models below have several
TOL = dict(rtol=1e-4, atol=1e-5)
TOL_CUDA = dict(rtol=1e-3, atol=1e-4)  # reductions in another order than cuDNN's and cuBLAS's
WAIT_S = 240  # the spawned pair, then it is killed


# ---------------------------------------------------------------- models
DEV = torch.device("cpu")  # the rank's device: its GPU under NCCL (set by _worker)


def _tol():
    return TOL_CUDA if DEV.type == "cuda" else TOL


class Transformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x))).mean(1)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Blocks(torch.nn.Module):
    """An MLP of residual blocks: FSDP2 shards each block."""

    def __init__(self, d=16):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(3))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        # no loop: compiled whole under FSDP2, Dynamo breaks the graph at each
        # block (its FSDP2 hooks are not traced), and a break inside a loop
        # would leave this frame to eager
        x = self.blocks[0](x)
        x = self.blocks[1](x)
        x = self.blocks[2](x)
        return self.head(torch.tanh(x))


def _batches(kind, rank):
    g = torch.Generator().manual_seed(100 + rank)
    shape = {"transformer": (4, 6, 8), "cnn": (4, 3, 8, 8), "blocks": (8, 16)}[kind]
    return [(torch.randn(shape, generator=g).to(DEV), torch.randint(0, 4, (shape[0],), generator=g).to(DEV))
            for _ in range(STEPS)]


def _fresh(cls):
    torch.manual_seed(0)
    return cls().to(DEV)


def _wrap_ddp(model):
    from torch.nn.parallel import DistributedDataParallel as DDP
    ids = [DEV.index] if DEV.type == "cuda" else None
    return DDP(model, device_ids=ids, bucket_cap_mb=BUCKET_MB)


def _train(model, params, batches, step=None):
    """STEPS SGD steps; the losses and the parameters after them."""
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        if step is None:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        else:
            loss = step(x, y)
        opt.step()
        losses.append(loss.detach().clone())
    return losses


def _full(p):
    """A parameter's whole value (an FSDP2 shard gathered)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()


def _compare(eager_losses, eager_params, losses, params):
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), **_tol())
    assert len(params) == len(eager_params)
    for (name, a), b in zip(params, eager_params):
        torch.testing.assert_close(a, b, **_tol(), msg=lambda m: f"parameter {name}: {m}")


def _reset():
    import ember
    from torch._dynamo.utils import counters
    ember.reset()
    counters.clear()


def _counts():
    """ember's counters since its reset, and Dynamo's (reset with it)."""
    import ember
    from torch._dynamo.utils import counters
    s = ember.stats()
    return {"graphs": s["graphs"], "whole_graph_fallbacks": s["whole_graph_fallbacks"],
            "fallbacks": s["fallbacks"], "graph_breaks": sum(counters["graph_break"].values()),
            "compiled_autograd_captures": counters["compiled_autograd"]["captures"]}


# ---------------------------------------------------------------- scenarios (in each rank)
def _ddp(cls, kind, optimize_ddp, mode=None):
    rank = dist.get_rank()
    batches = _batches(kind, rank)
    ref = _wrap_ddp(_fresh(cls))
    eager_losses = _train(ref, ref.parameters(), batches)
    eager_params = [_full(p) for p in ref.parameters()]
    ddp = _wrap_ddp(_fresh(cls))
    _reset()
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        model = torch.compile(ddp, backend="ember", mode=mode)
        losses = _train(model, ddp.parameters(), batches)
    _compare(eager_losses, eager_params, losses, [(n, _full(p)) for n, p in ddp.named_parameters()])
    return _counts()


def scenario_ddp_transformer_split():
    return _ddp(Transformer, "transformer", True)


def scenario_ddp_transformer_whole():
    return _ddp(Transformer, "transformer", False)


def scenario_ddp_cnn_split():
    return _ddp(CNN, "cnn", True)


def scenario_ddp_cnn_whole():
    return _ddp(CNN, "cnn", False)


def scenario_ddp_cnn_reduce_overhead():
    if DEV.type != "cuda":  # CUDA graphs: the GPUs' run only
        return {"idle": True}
    out = _ddp(CNN, "cnn", True, mode="reduce-overhead")
    import ember
    out["cudagraph_replays"] = ember.stats().get("cudagraph_replays", 0)
    return out


def _fsdp2(compile_blocks, compile_whole):
    from torch.distributed.fsdp import fully_shard
    rank = dist.get_rank()
    batches = _batches("blocks", rank)

    # on the rank's device: the CPU under gloo even where a GPU is present, which
    # fully_shard would otherwise pick
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(DEV.type, (dist.get_world_size(),))

    def sharded():
        m = _fresh(Blocks)
        for b in m.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        return m

    ref = sharded()
    eager_losses = _train(ref, ref.parameters(), batches)
    eager_params = [_full(p) for p in ref.parameters()]
    m = sharded()
    _reset()
    if compile_blocks:
        for b in m.blocks:
            b.compile(backend="ember")
    model = torch.compile(m, backend="ember") if compile_whole else m
    losses = _train(model, m.parameters(), batches)
    _compare(eager_losses, eager_params, losses, [(n, _full(p)) for n, p in m.named_parameters()])
    return _counts()


def scenario_fsdp2_blocks():
    return _fsdp2(True, False)


def scenario_fsdp2_whole():
    return _fsdp2(False, True)


def _compiled_autograd(make_ref, make, batches):
    """make_ref's model trained in eager; make's, in a compiled step whose
    backward compiled autograd traces whole and hands to ember."""
    ref = make_ref()
    eager_losses = _train(ref, ref.parameters(), batches)
    eager_params = [_full(p) for p in ref.parameters()]
    m = make()

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        return loss

    _reset()
    with torch._dynamo.config.patch(compiled_autograd=True):
        compiled = torch.compile(step, backend="ember")  # the flag is read here
    losses = _train(m, m.parameters(), batches, step=compiled)
    _compare(eager_losses, eager_params, losses, [(n, _full(p)) for n, p in m.named_parameters()])
    return _counts()


def scenario_compiled_autograd():
    # one process's run: rank 0's (rank 1 leaves it the cores)
    if dist.get_rank() != 0:
        return {"idle": True}
    return _compiled_autograd(lambda: _fresh(Blocks), lambda: _fresh(Blocks), _batches("blocks", 0))


def scenario_compiled_autograd_ddp():
    def ddp_python_reducer():
        # DDP reads the mode when it is made: its Python reducer's all-reduces
        # are traced by compiled autograd into the backward graph
        with torch._dynamo.config.patch(optimize_ddp="python_reducer"):
            return _wrap_ddp(_fresh(Blocks))

    return _compiled_autograd(lambda: _wrap_ddp(_fresh(Blocks)), ddp_python_reducer,
                              _batches("blocks", dist.get_rank()))


def scenario_functional_collectives():
    """The functional collectives in a graph ember compiles, run: each a
    fallback, in program order with its wait."""
    import torch.distributed._functional_collectives as funcol
    group = dist.group.WORLD

    def f(x, w):
        y = torch.relu(x) * 2
        g = funcol.all_gather_tensor(y, 0, group)
        r = funcol.reduce_scatter_tensor(torch.tanh(x), "sum", 0, group)
        u = torch.mm(torch.exp(torch.mm(x, w)) + 1, w)
        a = funcol.all_reduce(u, "sum", group)
        return g.sum(0) + a.sum(0) + r.mean(0)

    gen = torch.Generator().manual_seed(dist.get_rank())
    args = [(torch.randn(64, 64, generator=gen).to(DEV), torch.randn(64, 64, generator=gen).to(DEV) / 8)
            for _ in range(2)]
    _reset()
    compiled = torch.compile(f, backend="ember")
    for x, w in args:  # the second call reuses the first one's arena
        torch.testing.assert_close(compiled(x, w), f(x, w), **_tol())
    return _counts()


def scenario_all_gather_input_in_flight():
    """The graph of test_collective_operand_lives_to_its_wait, run: gloo reads
    the all-gather's input in a worker thread while the graph goes on, so an
    arena that gave the input's bytes to z before the wait sent z's values
    instead (7 runs in 30 gathered wrong data before the fix, 0 after)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember import _options, backend
    c10d = torch.ops._c10d_functional
    group = dist.group.WORLD.group_name

    def f(x, w):
        y = torch.relu(x) * 2
        ag = c10d.all_gather_into_tensor(y, WORLD, group)
        z = torch.exp(torch.mm(x, w)) + 1
        u = torch.mm(z, w)
        return c10d.wait_tensor(ag) * 3, u

    gen = torch.Generator().manual_seed(dist.get_rank())
    x, w = torch.randn(512, 512, generator=gen).to(DEV), torch.randn(512, 512, generator=gen).to(DEV) / 512
    _reset()
    gm = make_fx(f, tracing_mode="fake")(x, w)
    run = backend.compile_graph(gm, [x, w], dict(_options.resolve(), mode="default"))
    expect = f(x, w)
    for _ in range(20):
        for got, exp in zip(run([x, w]), expect):
            torch.testing.assert_close(got, exp, **_tol())
    return _counts()


SCENARIOS = [name[len("scenario_"):] for name in dir(sys.modules[__name__]) if name.startswith("scenario_")]
# Run with --runslow only (their tests are marked slow): DDP over the transformer (the CNN's
# runs split and whole go through the same DDP paths), compiled autograd in one process
# (compiled_autograd_ddp's run checks the same graphs and counters, and its all-reduces)
SLOW_SCENARIOS = {"ddp_transformer_split", "ddp_transformer_whole", "compiled_autograd"}
MODELS = [pytest.param("transformer", marks=pytest.mark.slow), "cnn"]


def _worker(rank, port, outdir, names, pg_backend):
    global DEV
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if pg_backend == "nccl":
        DEV = torch.device("cuda", rank)
        torch.cuda.set_device(DEV)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (the lent machines' rule)
        # fp32 as fp32 in eager and ember alike (cuDNN would pick TF32 for the convolutions)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    # Dynamo's DDP optimizer makes its first piece at least this big (1 MB by
    # default, as DDP's first bucket): as small as the others here, so that
    # models of a few KB split
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(BUCKET_MB * 2**20)
    # backend="ember" is found by its entry point; a checkout on PYTHONPATH (the GPU machine) has none
    from torch._dynamo.backends.registry import list_backends, register_backend
    if "ember" not in list_backends(exclude_tags=()):
        from ember.backend import ember_backend
        register_backend(name="ember")(ember_backend)
    dist.init_process_group(pg_backend, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60),
                            **({"device_id": DEV} if DEV.type == "cuda" else {}))
    results = {}
    try:
        for name in names:
            t0 = time.perf_counter()
            try:
                res = {"ok": True, **globals()["scenario_" + name]()}
            except Exception:  # reported by the test of that scenario
                res = {"ok": False, "error": traceback.format_exc()}
            res["seconds"] = round(time.perf_counter() - t0, 2)
            results[name] = res
            torch._dynamo.reset()
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=["gloo", "nccl"])
def results(request, tmp_path_factory):
    import torch.multiprocessing as mp
    pg_backend = request.param
    if pg_backend == "gloo" and not dist.is_gloo_available():
        pytest.skip("gloo is not available")
    if pg_backend == "nccl" and not (dist.is_nccl_available() and torch.cuda.device_count() >= WORLD):
        pytest.skip(f"NCCL runs need {WORLD} GPUs")
    outdir = str(tmp_path_factory.mktemp("ranks"))
    names = [n for n in SCENARIOS if request.config.getoption("--runslow") or n not in SLOW_SCENARIOS]
    # the kernel cache of the test session (conftest) is shared by the two ranks
    ctx = mp.spawn(_worker, args=(_free_port(), outdir, names, pg_backend), nprocs=WORLD, join=False)
    deadline = time.monotonic() + WAIT_S
    while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"the two ranks did not finish in {WAIT_S} s")
    out = []
    for r in range(WORLD):
        path = os.path.join(outdir, f"rank{r}.json")
        if not os.path.exists(path):
            pytest.fail(f"rank {r} ended without writing its results")
        with open(path) as f:
            out.append(json.load(f))
    return out


def _get(results, name):
    found = [r.get(name) for r in results]
    if any(f is None for f in found):
        pytest.fail(f"{name}: a rank did not get to it")
    for rank, f in enumerate(found):
        assert f["ok"], f"rank {rank}: {f['error']}"
    return [f for f in found if not f.get("idle")]


@pytest.mark.parametrize("model", MODELS)
def test_ddp_split_at_buckets(results, model):
    """optimize_ddp on: the graph split at bucket boundaries, each piece a
    forward and a backward graph ember compiled, eager's numbers."""
    for r in _get(results, f"ddp_{model}_split"):
        assert r["whole_graph_fallbacks"] == 0
        assert r["graphs"] >= 4 and r["graphs"] % 2 == 0, r


@pytest.mark.parametrize("model", MODELS)
def test_ddp_one_graph(results, model):
    """optimize_ddp off: one forward and one backward graph."""
    for r in _get(results, f"ddp_{model}_whole"):
        assert r["whole_graph_fallbacks"] == 0
        assert r["graphs"] == 2, r


def test_ddp_reduce_overhead(results):
    """On the GPUs: DDP's pieces captured as CUDA graphs, eager's numbers."""
    ranks = _get(results, "ddp_cnn_reduce_overhead")
    if not ranks:
        pytest.skip("CUDA graphs: the GPUs' run only")
    for r in ranks:
        assert r["whole_graph_fallbacks"] == 0
        assert r["cudagraph_replays"] >= 1, r


def test_fsdp2_per_block(results):
    for r in _get(results, "fsdp2_blocks"):
        assert r["whole_graph_fallbacks"] == 0
        # a forward and a backward graph for the first block, and for the second
        # (Dynamo recompiles once for another module, then reuses that graph)
        assert r["graphs"] >= 4, r


def test_fsdp2_whole_model(results):
    for r in _get(results, "fsdp2_whole"):
        assert r["whole_graph_fallbacks"] == 0
        assert r["graphs"] >= 2, r


def test_functional_collectives(results):
    for r in _get(results, "functional_collectives"):
        assert r["whole_graph_fallbacks"] == 0 and r["graphs"] == 1, r
        for op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "wait_tensor"):
            assert r["fallbacks"].get(f"_c10d_functional.{op}.default", 0) >= 1, r["fallbacks"]


def test_all_gather_input_in_flight(results):
    for r in _get(results, "all_gather_input_in_flight"):
        assert r["whole_graph_fallbacks"] == 0 and r["graphs"] == 1, r


@pytest.mark.slow
def test_compiled_autograd(results):
    """The forward graph, and the backward graph compiled autograd traced."""
    for r in _get(results, "compiled_autograd"):
        assert r["whole_graph_fallbacks"] == 0
        assert r["compiled_autograd_captures"] >= 1 and r["graphs"] >= 2, r


def test_compiled_autograd_ddp(results):
    """The gradients' all-reduces are in the backward graph ember compiled."""
    for r in _get(results, "compiled_autograd_ddp"):
        assert r["whole_graph_fallbacks"] == 0
        assert r["compiled_autograd_captures"] >= 1 and r["graphs"] >= 2, r
        assert r["fallbacks"].get("_c10d_functional.all_reduce.default", 0) >= 1, r["fallbacks"]
        assert r["fallbacks"].get("_c10d_functional.wait_tensor.default", 0) >= 1, r["fallbacks"]


# ---------------------------------------------------------------- collectives in one graph (one process)
# Graphs traced with fake tensors: compiled, not run (no process group needed).
def _register_functional_collectives():
    import importlib
    importlib.import_module("torch.distributed._functional_collectives")  # the _c10d_functional ops


def _compile_traced(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember import _options, backend
    _register_functional_collectives()
    gm = make_fx(fn, tracing_mode="fake")(*args)
    cg = backend.compile_graph(gm, list(args), dict(_options.resolve(), mode="default"))
    return gm, cg.info


def _fallback_step(info, op):
    from ember import _ext
    steps = [s for s, (kind, nid) in enumerate(info["steps"])
             if kind == _ext.STEP_FALLBACK and info["fallbacks"][nid]["op"] == op]
    assert len(steps) == 1, (op, info["fallbacks"])
    return steps[0]


def test_collective_operand_lives_to_its_wait():
    """all_gather_into_tensor reads its input until wait_tensor: the arena
    must not give the input's bytes to a value computed in between (here z,
    which the planner placed at the input's offset when the input died at the
    collective's step)."""
    c10d = torch.ops._c10d_functional

    def f(x, w):
        y = torch.relu(x) * 2
        ag = c10d.all_gather_into_tensor(y, 2, "0")
        z = torch.exp(torch.mm(x, w)) + 1  # between the collective and its wait, read by a fallback
        u = torch.mm(z, w)
        return c10d.wait_tensor(ag) * 3, u

    _, info = _compile_traced(f, torch.randn(32, 32), torch.randn(32, 32))
    from ember import _ext
    gather, wait = (_fallback_step(info, f"_c10d_functional.{op}.default") for op in ("all_gather_into_tensor",
                                                                                     "wait_tensor"))
    assert gather < wait
    y = info["values"][info["fallbacks"][info["steps"][gather][1]]["args"][0]]
    y = info["values"][y["root"]]
    assert y["storage"] == _ext.STORE_ARENA
    assert y["last_step"] >= wait
    lo, hi = y["arena_offset"], y["arena_offset"] + 4 * 32 * 32
    for v in info["values"]:
        if v is y or v["storage"] != _ext.STORE_ARENA or v["last_step"] < y["first_step"] or v["first_step"] > wait:
            continue
        n = 1 + sum((s - 1) * st for s, st in zip(v["sizes"], v["strides"]))
        assert v["arena_offset"] >= hi or v["arena_offset"] + n * 4 <= lo, "an arena value overwrites the input"


def test_reads_of_a_collective_go_through_its_wait():
    """A node that reads the collective's result after its wait_tensor reads
    the wait's result: its kernel cannot start before the wait (it would join
    the kernel of exp(t), which runs between the collective and the wait)."""
    c10d = torch.ops._c10d_functional

    def f(x):
        ag = c10d.all_gather_into_tensor(x, 1, "0")
        e = torch.exp(torch.mm(x, x))  # a kernel before the wait (the mm below reads e)
        s = torch.mm(e, x)
        c10d.wait_tensor(ag)
        return ag * 2 + e, s

    gm, info = _compile_traced(f, torch.randn(16, 16))
    wait_node = next(n for n in gm.graph.nodes if n.target is c10d.wait_tensor.default)
    mul = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    assert mul.args[0] is wait_node
    wait = _fallback_step(info, "_c10d_functional.wait_tensor.default")
    out = info["values"][info["outputs"][0]]
    assert out["first_step"] > wait


def test_collectives_are_never_dead_code():
    """A collective whose result nothing reads, and its wait, still run
    (every rank must issue it), in program order."""
    c10d = torch.ops._c10d_functional

    def f(x):
        c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", "0"))
        return x + 1

    _, info = _compile_traced(f, torch.randn(8))
    assert _fallback_step(info, "_c10d_functional.all_reduce.default") < \
        _fallback_step(info, "_c10d_functional.wait_tensor.default")


def test_no_cuda_graph_around_collectives(caplog):
    """mode="reduce-overhead" captures no graph that has a collective; the
    log says why (checked here on the graph: the capture itself needs a GPU)."""
    from ember import backend
    _register_functional_collectives()
    c10d = torch.ops._c10d_functional

    def with_collective(x):
        return c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", "0")) + 1

    def without(x):
        return x * 2 + 1

    from torch.fx.experimental.proxy_tensor import make_fx
    x = torch.randn(8)
    gm = make_fx(with_collective, tracing_mode="fake")(x)
    why = backend._cuda_graph_blocker(gm)
    assert "_c10d_functional.all_reduce.default" in why and "_c10d_functional.wait_tensor.default" in why
    with caplog.at_level("WARNING", logger="ember"):
        assert not backend._cuda_graph_ok(gm, "reduce-overhead")
    assert any("not capturing this graph as a CUDA graph" in r.getMessage() and "all_reduce" in r.getMessage()
               for r in caplog.records)
    plain = make_fx(without, tracing_mode="fake")(x)
    assert backend._cuda_graph_blocker(plain) is None and backend._cuda_graph_ok(plain, "reduce-overhead")
