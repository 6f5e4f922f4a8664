"""The runner's per-call work (ember/backend.py, CompiledGraph): what a call
of a compiled graph does in Python around the C run, pinned by counts, not
timings.  A fallback's arguments and result checks are bound once, when the
graph is compiled (_FallbackPlan), and a call whose fallback results are laid
out as the graph says stores them as they are; the outputs that view a tensor
ember allocated for the call are made without torch's dispatch (no
torch.as_strided); results that differ from the graph's meta still go the
general way (cast, copied to the graph's strides)."""
import pytest
import torch
import torch.nn.functional as F

from ember import backend
from conftest import assert_same, compile_fn

pytestmark = pytest.mark.skipif(not hasattr(backend, "CompiledGraph"), reason="ember's runner")


@pytest.fixture
def graphs(monkeypatch):
    """The CompiledGraphs made while the test runs, in order."""
    made = []
    init = backend.CompiledGraph.__init__

    def record(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(backend.CompiledGraph, "__init__", record)
    return made


@pytest.fixture
def counts(monkeypatch):
    """Calls of the runner's general paths: plans made, general result bindings, torch.as_strided."""
    n = {"plans": 0, "bind": 0, "as_strided": 0}
    plan_init, bind, as_strided = backend._FallbackPlan.__init__, backend.CompiledGraph._bind_results, torch.as_strided

    def count(key, fn):
        def wrapped(*a, **kw):
            n[key] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(backend._FallbackPlan, "__init__", count("plans", plan_init))
    monkeypatch.setattr(backend.CompiledGraph, "_bind_results", count("bind", bind))
    monkeypatch.setattr(torch, "as_strided", count("as_strided", as_strided))
    return n


def convs(x, w1, w2):
    # two convolutions (torch's, as fallbacks) and, among the outputs, views of tensors ember computes
    y = F.conv2d(x, w1, padding=1).relu()
    z = F.conv2d(y, w2).sigmoid()
    return z.sum(), y.transpose(2, 3), z[:, 1:]


def test_fallback_bound_once_and_outputs_viewed_directly(graphs, counts):
    x, w1, w2 = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(5, 4, 1, 1)
    with torch.no_grad():
        f = compile_fn(convs)
        assert_same(f(x, w1, w2), convs(x, w1, w2))
        g = graphs[-1]
        assert len(g.fallbacks) == 2 and counts["plans"] == 2
        assert len(g._host_views) == 2  # the transpose and the slice of ember's results
        counts.update(plans=0, bind=0, as_strided=0)
        for _ in range(3):
            args = [x, w1, w2]
            assert_same(g(args), convs(x, w1, w2))
    # three calls: no plan made again, every result stored as torch returned it, no dispatched view
    assert counts == {"plans": 0, "bind": 0, "as_strided": 0}


def test_result_unlike_meta_goes_the_general_way(graphs, counts):
    # a fallback whose result's strides differ from what the graph says: copied to the graph's
    x, w1, w2 = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(5, 4, 1, 1)
    with torch.no_grad():
        f = compile_fn(convs)
        f(x, w1, w2)
        g = graphs[-1]
        nid, plan = next(iter(g._plans.items()))
        vid, shape, stride, dtype = plan.check[0][1:]
        plan.check = ((0, vid, shape, tuple(reversed(stride)), dtype),)  # no result is laid out so
        counts.update(bind=0)
        assert_same(g([x, w1, w2]), convs(x, w1, w2))
    assert counts["bind"] == 1


def mm_topk(a, b):
    # a fallback with several results (topk's values and indices), both read
    v, i = torch.topk(a @ b, 3, dim=1)
    return v * 2, i


def sorted_values(x):
    # a fallback with a result nothing reads (sort's indices): the general binding drops it
    return torch.sort(x, 1).values * 2


def test_fallbacks_with_several_results(graphs, counts):
    a, b = torch.randn(6, 5), torch.randn(5, 7)
    f = compile_fn(mm_topk)
    assert_same(f(a, b), mm_topk(a, b))
    plan, = graphs[-1]._plans.values()
    assert plan.multi and len(plan.check) == 2
    counts.update(bind=0)
    for _ in range(2):
        assert_same(f(a, b), mm_topk(a, b))
    assert counts["bind"] == 0

    x = torch.randn(4, 9)
    f = compile_fn(sorted_values)
    assert_same(f(x), sorted_values(x))
    plan, = graphs[-1]._plans.values()
    assert plan.check is None
    counts.update(bind=0)
    for _ in range(2):
        assert_same(f(x), sorted_values(x))
    assert counts["bind"] == 2


def test_training_outputs_pooled_on_the_cpu(graphs, monkeypatch):
    # a training step's saved activations and gradients: one block per call each (a large block from
    # ember's block cache), not one torch allocation per tensor; the gradients are eager's
    import copy
    from ember import _ext
    blocks = []
    host_empty = _ext.host_empty
    monkeypatch.setattr(_ext, "host_empty", lambda n: blocks.append(n) or host_empty(n))
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU()) for _ in range(3)])
    ref = copy.deepcopy(m)
    x = torch.randn(256, 512)
    cm = compile_fn(m)
    for _ in range(2):
        cm(x).square().sum().backward()
        ref(x).square().sum().backward()
        for a, b in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
            a.grad = b.grad = None
    fw, bw = graphs[-2:]
    for g in (fw, bw):
        assert g.block is not None and len(g.block[1]) > 1 and g.block[0] >= _ext.HOST_CACHE_MIN
    assert len(fw.host) <= 1  # the caller's output alone (before the saved activations) on its own
    assert sorted(blocks) == sorted([fw.block[0], bw.block[0]] * 2)


def test_run_without_its_arena_is_refused(graphs):
    # a program whose values live in an arena, run without one: an error naming the bytes, not a crash
    from ember import EmberError

    def f(x, w):
        return (F.conv2d(x.sin(), w).cos() * 2).sum(1)

    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with torch.no_grad():
        compile_fn(f)(x, w)
    g = graphs[-1]
    assert g.arena_bytes > 0
    vals = [None] * g.nvalues
    for vid, pos in zip(g.input_ids, g.arg_positions):
        vals[vid] = (x, w)[pos]
    with pytest.raises(EmberError, match="needs an arena of"):
        g.prog.run(vals, None, g._run_fallback, 0, backend._Call(vals, None, None, {}))
