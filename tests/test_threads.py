"""Thread safety: one compiled function called from 8 threads at once, and
compiled from 8 threads at once, gives eager's answers every call.

A call's working state lives in the call (ember/backend.py, _Call): the
graph's own CPU arena goes to one call at a time, the others get arenas of
their own; fallbacks, which let other threads run mid-call, read only their
call's state.  Graphs with symbolic sizes are specialized per shape without
FX's tracer (whose flag is the whole process's).  CUDA graphs serialize
their calls.  The CUDA tests run only where there is a GPU."""
from __future__ import annotations

import threading

import pytest
import torch

from conftest import assert_same, compile_fn, reset

NTHREADS = 8


def run_threads(work, n=NTHREADS):
    """work(i) in n threads started together; re-raises the first failure."""
    errors = []
    start = threading.Barrier(n)

    def body(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: B902 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def fallbacks_fn(x, w1, w2):
    # two matmuls run through torch (fallbacks, which let other threads in
    # mid-call); the relu between them is in the arena, read by the second
    return torch.log_softmax((x @ w1 + 1).relu() @ w2, -1)


def test_fallbacks_from_threads():
    """The issue's reproducer: 8 threads, each its own inputs, one compiled
    function whose graph has torch fallbacks reading arena values."""
    reset()
    torch.manual_seed(0)
    cf = compile_fn(fallbacks_fn)
    inputs = [(torch.randn(32, 64) * (i + 1), torch.randn(64, 128), torch.randn(128, 16)) for i in range(NTHREADS)]
    expected = [fallbacks_fn(*a) for a in inputs]
    assert_same(cf(*inputs[0]), expected[0])

    def work(i):
        for _ in range(60):
            assert_same(cf(*inputs[i]), expected[i])

    run_threads(work)


def big_fn(x, w):
    # outputs of 2.25 MiB (from ember's host-block cache on the CPU), a fallback between them
    y = (x * 2 + 1).relu()
    return y, torch.tanh(y @ w) - x


def test_big_outputs_from_threads():
    """Outputs large enough to come from the CPU host-block cache: each call
    gets blocks of its own, and outputs kept from earlier calls are not
    overwritten by other threads' calls."""
    reset()
    torch.manual_seed(1)
    cf = compile_fn(big_fn)
    w = torch.randn(768, 768) / 32
    inputs = [torch.randn(768, 768) + i for i in range(NTHREADS)]
    expected = [big_fn(x, w) for x in inputs]
    assert_same(cf(inputs[0], w), expected[0])

    def work(i):
        kept = []
        for _ in range(4):
            out = cf(inputs[i], w)
            assert_same(out, expected[i])
            kept.append(out)
        for out in kept:  # still this thread's answers after the others' calls
            assert_same(out, expected[i])

    run_threads(work)


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.l2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.l1(x)))


def test_training_step_from_threads():
    """Forward and backward graphs of one compiled module, from 8 threads:
    each thread's loss and gradients (torch.autograd.grad, so the threads do
    not share .grad) are eager's."""
    reset()
    torch.manual_seed(2)
    model = _MLP()
    cm = compile_fn(model)
    params = list(model.parameters())
    batches = [(torch.randn(16, 32) * (1 + i / 4), torch.randint(0, 10, (16,))) for i in range(NTHREADS)]

    def step(m, x, y):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        return (loss, *torch.autograd.grad(loss, params))

    expected = [step(model, x, y) for x, y in batches]
    assert_same(step(cm, *batches[0]), expected[0])

    def work(i):
        for _ in range(8):
            assert_same(step(cm, *batches[i]), expected[i])

    run_threads(work)


def test_training_compiles_from_threads():
    """8 threads each compile a function of their own and train it (the
    backward graph compiles at the first backward, outside Dynamo's lock,
    while other threads compile): every gradient is eager's, and Python's
    garbage collection thresholds, raised while ember compiles, are
    Python's own again after all of them.

    The forward calls (where Dynamo and AOTAutograd trace) take turns: in
    torch up to 2.13 FX's tracer sets a flag of the whole process, and a
    thread that enters any torch.compile'd function while another traces is
    refused ("Detected that you are using FX to symbolically trace a
    dynamo-optimized function", pytorch/pytorch#126024), with Inductor as
    with ember.  The backward compiles, ember's own work, overlap."""
    import gc
    reset()
    torch.manual_seed(6)
    fns = []
    for i in range(NTHREADS + 1):  # functions of their own (Dynamo caches by code object), one graph
        ns = {"torch": torch}
        exec(f"def step{i}(x, w):\n    return torch.tanh(x @ w + 1).square().mean()", ns)
        fns.append(ns[f"step{i}"])
    x, w = torch.randn(16, 32), torch.randn(32, 8, requires_grad=True)

    traced = threading.Lock()

    def grad(fn):
        with traced:
            loss = fn(x, w)
        return (loss, *torch.autograd.grad(loss, [w]))

    expected = grad(fns[0])
    assert_same(grad(compile_fn(fns[-1])), expected)  # the disk cache has the kernels
    thresholds = gc.get_threshold()

    def work(i):
        assert_same(grad(compile_fn(fns[i])), expected)

    run_threads(work)
    assert gc.get_threshold() == thresholds


@pytest.mark.ember_only
def test_gc_thresholds_after_overlapping_compiles():
    """Two compiles whose pauses of full collections overlap (the first ends
    before the second): Python's thresholds are its own again after both."""
    import gc
    from ember.backend import _young_gc_only
    thresholds = gc.get_threshold()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with _young_gc_only():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def second():
        a_in.wait(5)
        with _young_gc_only():
            b_in.set()
            a_out.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a_in.is_set() and b_in.is_set() and a_out.is_set()
    assert gc.get_threshold() == thresholds


def dynamic_fn(x, w):
    y = (x @ w).relu()
    return torch.softmax(y.view(x.shape[0], -1, 4).sum(-1), -1) * x.shape[0]


def dynamic_float_fn(x, w):  # a size divided as a float: compiled per shape (refused: docs/DYNAMIC_SHAPES.md)
    return dynamic_fn(x, w) + x.shape[0] / 3


@pytest.mark.parametrize("fn, per_shape", [(dynamic_fn, False), (dynamic_float_fn, True)],
                         ids=["symbolic", "per_shape"])
def test_compile_dynamic_from_threads(fn, per_shape):
    """32 first calls at new shapes from 8 threads while the other threads
    call the function: each right.  A graph ember compiles for every size is
    compiled once and its program run from every thread; one it compiles per
    shape (default dynamic: each a specialization compiled at call time)
    compiles all 32, none twice."""
    reset()
    torch.manual_seed(3)
    cf = compile_fn(fn)
    w = torch.randn(16, 32)
    # the static graph, then (a second shape) the one with symbolic sizes
    for n in (2, 3):
        x = torch.randn(n, 16)
        assert_same(cf(x, w), fn(x, w))

    def work(i):
        for k in range(4):
            x = torch.randn(4 + i + NTHREADS * k, 16)  # 32 shapes, none seen before
            assert_same(cf(x, w), fn(x, w))
            assert_same(cf(x, w), fn(x, w))  # and the compiled one again

    run_threads(work)
    from conftest import EAGER
    if not EAGER:
        import ember
        s = ember.stats()
        assert s["whole_graph_fallbacks"] == 0
        # two graphs handed in (the static one, the symbolic one)
        assert s["graphs"] == 2 and s["compiles"] == (2 + 4 * NTHREADS if per_shape else 2), s


# ------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def cuda_fallbacks_fn(x, w1, w2):
    # on a GPU the matmuls are cuBLASLt calls: cumsum is the fallback here, reading an arena value
    return torch.log_softmax(torch.cumsum((x @ w1 + 1).relu(), -1) @ w2 / 64, -1)


@cuda
def test_cuda_fallbacks_from_threads():
    reset()
    torch.manual_seed(4)
    cf = compile_fn(cuda_fallbacks_fn)
    inputs = [tuple(t.cuda() for t in (torch.randn(32, 64) * (i + 1), torch.randn(64, 128), torch.randn(128, 16)))
              for i in range(NTHREADS)]
    expected = [cuda_fallbacks_fn(*a) for a in inputs]
    assert_same(cf(*inputs[0]), expected[0])

    def work(i):
        for _ in range(60):
            assert_same(cf(*inputs[i]), expected[i])

    run_threads(work)


def cuda_graph_fn(x, w):
    # large outputs, and a fallback (cumsum) inside the captured graph
    y = (x * 2 + 1).relu()
    return y, torch.tanh(torch.cumsum(y, -1) @ w / 768) - x


@cuda
@pytest.mark.parametrize("own_streams", [False, True])
def test_cuda_graphs_from_threads(own_streams):
    """mode="reduce-overhead": one CUDA graph replayed from 8 threads (on the
    default stream, or each thread on a stream of its own): calls take turns,
    and each gets its own inputs' answers, which later replays (other
    threads', on other streams) do not overwrite."""
    reset()
    torch.manual_seed(5)
    cf = compile_fn(cuda_graph_fn, mode="reduce-overhead")
    w = (torch.randn(768, 768) / 32).cuda()
    inputs = [(torch.randn(768, 768) + i).cuda() for i in range(NTHREADS)]
    expected = [cuda_graph_fn(x, w) for x in inputs]
    for i in (0, 0, 1, 0):  # warm-up, capture, replays (x then copied in: its address moved)
        assert_same(cf(inputs[i], w), expected[i])

    def work(i):
        stream = torch.cuda.Stream() if own_streams else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.default_stream())
        with torch.cuda.stream(stream):
            kept = [cf(inputs[i], w) for _ in range(20)]
        stream.synchronize()
        for out in kept:
            assert_same(out, expected[i])

    run_threads(work)
    from conftest import EAGER
    if not EAGER:
        import ember
        s = ember.stats()
        assert s.get("cudagraph_replays", 0) >= NTHREADS * 20  # the threads' calls replayed the graph
