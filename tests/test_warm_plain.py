"""A warm second process on the plain path (ember/_precompile.py, plain_cache; issue 25).

ember.compile(model) as a user writes it, in child processes sharing one
EMBER_CACHE_DIR: the first keeps what AOTAutograd made of each graph in
ember's cache; a second one loads it instead of running AOTAutograd (no
AOTAutograd trace at all, nothing compiled)
for a function, an nn.Module's inference, a training step with its
backward (BatchNorm's running statistics written), a function that writes
an input and returns views of its inputs, and a checkpointed layer, with
eager's results.  A changed graph, input
dtype, shape or requires_grad, or option is a miss; new weights are a hit
computing with the new weights; a custom op and selective checkpointing
are not kept; damaged entries,
and entries others may write, are misses that are compiled and kept again.  Never a crash, never a
wrong answer.  On the CPU by default; EMBER_TEST_DEVICE=cuda runs the same
with CUDA programs (a GPU machine).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import CHILD_PRELUDE, EAGER, ember_import_root, selected_tests

pytestmark = pytest.mark.skipif(EAGER, reason="ember's own cache")

_precompile = pytest.importorskip("ember._precompile")
if not _precompile.has_protocol():
    pytest.skip("this torch has no bundled AOTAutograd entries", allow_module_level=True)

# EMBER_TEST_DEVICE=cuda (as for the other suites) runs the same with CUDA programs
DEVICE = os.environ.get("EMBER_TEST_DEVICE", "cpu").strip() or "cpu"
TOL = 1e-5 if DEVICE == "cpu" else 1e-4
# the graphs of BASE
NAMES = ("function", "inference", "training", "mutation", "checkpoint")

COMMON = '''
import functools, json, os, sys, torch
import torch.utils.checkpoint
sys.path.insert(0, sys.argv[1])
import ember
from torch._dynamo.utils import compilation_time_metrics

''' + CHILD_PRELUDE + '''
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.bn = torch.nn.BatchNorm1d(32)  # training: its running statistics are inputs the graph writes
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.bn(self.norm(self.fc1(x)))))

def net(seed=1):
    torch.manual_seed(seed)
    return Net().to(DEVICE)

def inputs(n=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, 16, generator=g).to(DEVICE, dtype), torch.randn(16, 4, generator=g).to(DEVICE, dtype))

res = {}

def counted(name, run):
    """run() -> its largest difference from eager; with the cache's counts and AOTAutograd's traces of it"""
    torch._dynamo.reset()  # each a first compile (a recompile of another shape would be dynamic)
    before = ember.stats()
    traces = len(compilation_time_metrics.get("create_aot_dispatcher_function", ()))
    err = run()
    after = ember.stats()
    res[name] = {"err": err, "traces": len(compilation_time_metrics.get("create_aot_dispatcher_function", ())) - traces,
                 **{k: after["aot_cache_" + k] - before["aot_cache_" + k] for k in ("hits", "misses", "skipped")},
                 "compiles": after["compiles"] - before["compiles"], "loaded": after["loaded"] - before["loaded"]}

def function(dtype=torch.float32, n=8, y_grad=False):
    x, y = inputs(n, dtype)
    y.requires_grad_(y_grad)
    return (ember.compile(f)(x, y) - f(x, y)).abs().max().item()

def inference(seed=1):
    m = net(seed)
    with torch.no_grad():
        return (ember.compile(m)(inputs()[0]) - m(inputs()[0])).abs().max().item()

def training(seed=1, options=None):
    """two SGD steps of eager and of ember.compile on the same net: the largest difference of the
    parameters and buffers (BatchNorm's running statistics)"""
    m_eager, m_ember = net(seed), net(seed)
    step = ember.compile(m_ember, options=options)
    x, target = inputs()[0], torch.randn(8, 4, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    for run, m in ((m_eager, m_eager), (step, m_ember)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(run(x), target).backward()
            opt.step()
    pairs = list(zip(m_eager.parameters(), m_ember.parameters())) + list(zip(m_eager.buffers(), m_ember.buffers()))
    return max((a.float() - b.float()).abs().max().item() for a, b in pairs)

class Checkpointed(torch.nn.Module):
    """A layer under activation checkpointing (a higher-order op with a body subgraph)"""
    def __init__(self, **kw):
        super().__init__()
        self.a, self.b, self.kw = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4), kw

    def forward(self, x):
        h = torch.utils.checkpoint.checkpoint(lambda y: torch.nn.functional.gelu(self.a(y)), x,
                                              use_reentrant=False, **self.kw)
        return self.b(h)

def checkpointed(**kw):
    """a forward and backward of ember.compile and of eager: the largest difference of output and gradients"""
    torch.manual_seed(5)
    m_eager, m_ember = Checkpointed(**kw).to(DEVICE), Checkpointed(**kw).to(DEVICE)
    m_ember.load_state_dict(m_eager.state_dict())
    x = inputs()[0]
    out, ref = ember.compile(m_ember)(x), m_eager(x)
    out.square().sum().backward()
    ref.square().sum().backward()
    return max([(out - ref).abs().max().item()] +
               [(a.grad - b.grad).abs().max().item() for a, b in zip(m_eager.parameters(), m_ember.parameters())])

def forward_only():
    """a training graph (the parameters require grad) run forward only: its backward is never compiled"""
    m, x = net(3), inputs(5)[0]
    return (ember.compile(m)(x) - m(x)).abs().max().item()

def g(x, y):
    x.add_(1)  # an input mutation, and outputs that are views of the inputs
    return x.t(), y[1:], (x * y).sum()

def mutation():
    x, y = inputs(4)
    x, y = x[:, :4], y[:4]
    x1, y1, x2, y2 = x.clone(), y.clone(), x.clone(), y.clone()
    with torch.no_grad():
        got, want = ember.compile(g)(x1, y1), g(x2, y2)
    assert got[0]._base is x1 and got[1]._base is y1
    return max([(a - b).abs().max().item() for a, b in zip(got, want)] + [(x1 - x2).abs().max().item()])
'''

BASE = COMMON + '''
counted("function", function)
counted("inference", inference)
counted("training", training)
counted("mutation", mutation)
counted("checkpoint", checkpointed)
res["checkpoint"]["decompositions_built"] = ember.decompositions._DECOMPS is not None  # a miss's only
counted("forward_only", forward_only)
print(json.dumps(res))
'''

VARIANTS = COMMON + '''
counted("same", function)  # the control: a hit
counted("float64", lambda: function(dtype=torch.float64))
counted("shape", lambda: function(n=5))
counted("requires_grad", lambda: function(y_grad=True))
counted("option", lambda: training(options={"partition": "default"}))
counted("new_weights", lambda: inference(seed=7))
counted("graph", lambda: (ember.compile(lambda x, y: torch.tanh(x @ y))(*inputs())
                          - torch.tanh(inputs()[0] @ inputs()[1])).abs().max().item())

@torch.library.custom_op("ember_test_plain::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@twice.register_fake
def _(x):
    return torch.empty_like(x)

counted("custom_op", lambda: (ember.compile(lambda x: twice(x).sin())(inputs()[0])
                              - (inputs()[0] * 2).sin()).abs().max().item())

def must_save_mm(ctx, op, *args, **kwargs):  # selective checkpointing: a policy in Python, not in the graph
    mm = op == torch.ops.aten.mm.default
    return torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE if mm else torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE

counted("selective_checkpoint", lambda: checkpointed(
    context_fn=functools.partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, must_save_mm)))
print(json.dumps(res))
'''


def _run(script: str, cache: str, **env_more) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=cache, **env_more)
    env.pop("EMBER_CACHE", None)
    p = subprocess.run([sys.executable, "-c", script, ember_import_root()], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def warm(tmp_path_factory, request):
    """The first process's cache, its results, its entries' names, the later
    processes of the selected tests, started side by side once the first is
    done (each costs seconds on one core: importing torch, Dynamo's first
    compile), {name: future of its results}, and the damaged copy's folder."""
    cache = str(tmp_path_factory.mktemp("plain") / "cache")
    first = _run(BASE, cache)
    kept = [os.path.basename(p) for p in _entries(cache)]
    damaged = _damaged_copy(cache, kept, str(tmp_path_factory.mktemp("damaged") / "cache"))
    selected = selected_tests(request, __name__)
    later = {"second": (test_a_second_process_loads_aot_autograds_result, BASE, cache),
             "variants": (test_what_changes_the_graphs_is_a_miss, VARIANTS, cache),
             "damaged": (test_damaged_entries_are_compiled_again, BASE, damaged)}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield cache, first, kept, {name: pool.submit(_run, script, where)
                                   for name, (test, script, where) in later.items()
                                   if test.__name__ in selected}, damaged


def _entries(cache: str) -> list:
    d = os.path.join(cache, "plain")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".entry"))


def test_a_second_process_loads_aot_autograds_result(warm):
    cache, first, kept, later, _ = warm
    for name in NAMES:
        assert first[name]["misses"] == 1 and first[name]["hits"] == 0 and first[name]["err"] < TOL, first
    assert len(kept) == len(NAMES)
    second = later["second"].result()
    for name in NAMES:
        r = second[name]
        assert r["hits"] == 1 and r["misses"] == 0 and r["skipped"] == 0, second
        assert r["traces"] == 0 and r["compiles"] == 0, second  # no AOTAutograd, no ember compile
        assert r["err"] < TOL, second
    # a forward run alone compiled no backward graph, and its entry, made at the first backward, was not
    for r in (first["forward_only"], second["forward_only"]):
        assert r["misses"] == 1 and r["compiles"] == 1 and r["err"] < TOL, (first, second)
    # the training step's forward and backward graphs
    assert second["training"]["loaded"] == 2 and second["function"]["loaded"] == 1, second
    # hits only: AOTAutograd's decomposition table never made
    assert first["checkpoint"]["decompositions_built"] and not second["checkpoint"]["decompositions_built"], \
        (first, second)


def test_what_changes_the_graphs_is_a_miss(warm):
    res = warm[3]["variants"].result()
    assert res["same"]["hits"] == 1 and res["same"]["traces"] == 0, res
    for name in ("float64", "shape", "requires_grad", "option", "graph"):
        r = res[name]
        assert r["misses"] == 1 and r["hits"] == 0 and r["traces"] == 1, (name, res)
    # the weights are inputs, not part of the entry: other weights hit and compute with theirs
    assert res["new_weights"]["hits"] == 1, res
    # a custom op's Python, selective checkpointing's policy may change between processes: not kept
    for name in ("custom_op", "selective_checkpoint"):
        assert res[name]["skipped"] == 1 and res[name]["hits"] == 0, (name, res)
    assert max(r["err"] for r in res.values()) < TOL, res


def _damaged_copy(cache: str, kept: list, mine: str) -> str:
    """A copy of the cache whose entries have a byte flipped, are truncated,
    replaced, or writable by others (test_damaged_entries_are_compiled_again)."""
    shutil.copytree(cache, mine)
    for i, name in enumerate(kept):
        damage, path = ("flip", "truncate", "garbage", "writable")[i % 4], os.path.join(mine, "plain", name)
        data = bytearray(open(path, "rb").read())
        if damage == "writable":  # whole, but others may write it: ember loads programs from it, so not read
            os.chmod(path, 0o666)
            continue
        if damage == "flip":
            data[len(data) // 2] ^= 0xFF
        elif damage == "truncate":
            data = data[:len(data) // 3]
        else:
            data = bytearray(b"not an entry" * 10)
        with open(path, "wb") as fh:
            fh.write(data)
    return mine


def test_damaged_entries_are_compiled_again(warm):
    """Entries with a byte flipped, truncated, replaced, or writable by
    others: each a miss (a warning), compiled again and kept again, whole
    and private."""
    _, _, kept, later, mine = warm
    res = later["damaged"].result()
    assert sum(r["hits"] for r in res.values()) == 0, res
    for name in NAMES:
        r = res[name]
        assert r["misses"] == 1 and r["traces"] == 1 and r["err"] < TOL, res
    for name in kept:
        path = os.path.join(mine, "plain", name)
        assert open(path, "rb").read(8) == _precompile.PLAIN_MAGIC and not os.stat(path).st_mode & 0o077
