"""The Hugging Face architectures of the sweep (group sweep-hf, ember/tools/zoo.py),
small variants, through ember on the CPU against eager: inference, and one
training step.

Each model is built as `ember bench --small` builds it (zoo.Ctx(small=True),
random weights, dropout 0) at batch 2, and checked the way `ember bench`
checks a run: an eager copy and a compiled copy of the same weights take the
same inputs (bench.ModelRunner), and bench.accuracy compares the outputs
(inference) or the outputs, the loss and every parameter's gradient after the
first SGD step (training), with bench's tolerances and its fp64 rule.  Each
test asserts that ember compiled at least one graph and that no graph fell
back whole, and prints one line with ember's graphs, kernels and fallbacks
(ops run by torch: reported, not failed: library calls and ops not lowered
yet).

Cost: the models of FAST run through ember in CI; the others are marked slow
(`pytest --runslow tests/test_zoo_hf.py`): each costs 5 to 70 s of ember's
compiles on a 2-core machine.  Every new entry is also built and trained in
eager in CI (test_entry_builds_and_trains_in_eager, about a second each), so
a config that a transformers release breaks shows there.
"""
from __future__ import annotations

import copy

import pytest
import torch

from conftest import EAGER, compile_fn, get_ember, reset, zoo_small_train_step
from ember.tools import bench, zoo

pytest.importorskip("transformers")

# the architectures added to the sweep after its first 15
NEW = [n for n, _ in zoo.SWEEP_HF[15:]]
# the small variants that run through ember in CI, two of the cheapest to
# compile with code paths none of the first 15 has: GPT-J's rotary of
# interleaved pairs and parallel block (codegen), ConvNeXt's depthwise 7x7
# convolutions, channels-last LayerNorm and layer scale (hf-convnext)
FAST = ("codegen", "hf-convnext")


def _params(names):
    return [pytest.param(n, id=n, marks=() if n in FAST else pytest.mark.slow) for n in names]


def _runner(entry, base, example, train, compiled, fp64=False):
    """bench's runner of a copy of base; a compiled one compiles as conftest
    does (ember, or EMBER_TEST_BACKEND's torch backend)."""
    m = copy.deepcopy(base)
    m = m.double() if fp64 else m
    r = bench.ModelRunner(m, example, entry.loss, train, "cpu", "fp32", "sgd",
                          bench.BackendSpec("eager"), fp64=fp64)
    if compiled:
        r.fn = compile_fn(m)
    return r


def _check(name: str, train: bool) -> None:
    entry = zoo.get(name)
    ctx = zoo.Ctx("cpu", small=True)
    torch.manual_seed(0)
    base = entry.make_model(ctx)
    example = entry.inputs(ctx, 2, torch.Generator().manual_seed(1))
    reset()
    _, got = _runner(entry, base, example, train, True).first_call()
    _, ref = _runner(entry, base, example, train, False).first_call()

    def fp64():
        return _runner(entry, base, example, train, False, fp64=True).first_call()[1]

    acc = bench.accuracy(ref, got, bench.tolerance(train, "fp32"), fp64)
    what = "training step" if train else "inference"
    assert acc["verdict"] in (bench.PASS, bench.PASS_FP64), \
        f"{name} {what}: ember differs from eager: {acc['detail']}"
    assert acc["checked"] == len(ref) > (len(list(base.parameters())) if train else 0)
    if EAGER:
        return
    st = get_ember().stats()
    fb = ", ".join(f"{k} {v}" for k, v in sorted(st["fallbacks"].items(), key=lambda kv: -kv[1]))
    print(f"[zoo-hf] {name} {what}: {acc['verdict']}, graphs {st['graphs']}, "
          f"kernels {st['kernels']}, fallbacks: {fb or 'none'}")
    assert st["graphs"] >= 1, f"{name} {what}: ember compiled no graph"
    assert st["whole_graph_fallbacks"] == 0, \
        f"{name} {what}: graphs ran by torch as a whole: {st['whole_graph_reasons']}"


@pytest.mark.parametrize("name", _params(NEW))
def test_small_inference_matches_eager(name):
    _check(name, train=False)


@pytest.mark.parametrize("name", _params(NEW))
def test_small_training_step_matches_eager(name):
    _check(name, train=True)


@pytest.mark.parametrize("name", NEW)
def test_entry_builds_and_trains_in_eager(name):
    e = zoo_small_train_step(name)
    assert e.group == "hf" and e.source == "transformers" and zoo.family(name)


def test_sweep_hf_names_each_checkpoint_once():
    names = [n for n, _ in zoo.SWEEP_HF]
    assert len(names) == len(set(names)) >= 30
    assert set(names) <= set(zoo._HF) and {zoo.family(n) for n in names} == {
        "encoder", "decoder", "encoder-decoder", "vision", "speech"}
    for n in names:     # every model's kind of inputs is one _hf_inputs makes
        assert zoo._HF_KIND.get(n, "text") in ("text", "seq2seq", "image", "speech", "fbank", "wave")
