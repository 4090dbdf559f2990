"""The thread policy (coalitions.learners.training.threads): one rule, applied by every fit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.training import threads as th  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402


@pytest.fixture
def no_override():
    before = th.get_override()
    th.set_override(None)
    yield
    th.set_override(before)


@pytest.mark.parametrize("kind,shape", [("logistic", (20,)), ("linear", (3, 4)), ("mlp", (1, 28, 28)),
                                        ("cnn", (1, 28, 28)), ("cnn", (3, 9, 10)), ("cnn", (2, 8, 8))])
def test_step_macs_counts_what_pytorch_counts(kind, shape):
    # PyTorch's own flop counter (2 flops per multiply-add) on one forward pass
    spec = make_model(kind, shape, 7, hidden=13)
    p = {k: v[0] for k, v in spec.init(torch.Generator().manual_seed(0), 1).items()}
    with FlopCounterMode(display=False) as fc:
        spec.forward(p, torch.zeros(5, *shape))
    assert th.step_macs(spec, 5) == fc.get_total_flops() / 2
    assert th.step_macs(spec, 5, models=3) == 3 * th.step_macs(spec, 5)


@given(macs=st.floats(0, 1e12), allowed=st.integers(1, 64), load=st.floats(0, 100),
       env=st.one_of(st.none(), st.integers(1, 16).map(str)), default=st.integers(1, 64))
def test_decide_rule(macs, allowed, load, env, default):
    assert th.get_override() is None
    n = th.decide(macs, allowed=allowed, load=load, env=env, default=default)
    assert 1 <= n <= max(1, allowed)
    if macs < th.PARALLEL_MACS:
        assert n == 1                                               # small steps: one thread
    else:
        free = max(1, allowed - int(load))                          # never more than the free cores
        assert n == max(1, min(free, default, int(env) if env else free))


def test_explicit_threads_and_override_win(no_override):
    assert th.decide(1e12, threads=3) == 3
    th.set_override(2)
    assert th.decide(0.0) == 2 and th.decide(1e12, allowed=64, load=0) == 2
    assert th.decide(0.0, threads=5) == 5                           # an estimator's own setting first
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InputError, match="--threads"):
            th.set_override(bad)


def test_free_cores_measures_this_machine():
    n = th.free_cores()
    assert 1 <= n <= len(__import__("os").sched_getaffinity(0))
    assert th.free_cores(allowed=4, load=2.7) == 2 and th.free_cores(allowed=2, load=9) == 1


def test_using_sets_and_restores(no_override):
    before = torch.get_num_threads()
    with th.using(0.0) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with th.using(0.0, threads=2) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == before


def test_fits_apply_the_policy(no_override):
    """Library entry points (the oracle, a personalised learner, SPO) train small models on one thread."""
    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.methods.baselines import Local
    from coalitions.learners.methods.spo import SPO
    from coalitions.learners.training.protocol import TrainingProtocol

    fed = load("digits", clients=3, seed=0)
    torch.set_num_threads(2)
    try:
        seen = []

        def probe(*_):
            seen.append(torch.get_num_threads())

        ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=2), device="cpu", progress=probe).fit(fed)
        Local(protocol=TrainingProtocol(model="logistic", steps=1), device="cpu", progress=probe).fit(fed)
        SPO(protocol=TrainingProtocol(steps=50, batch_size=256), search_steps=2, starts=2, line_search=2, device="cpu",
            progress=probe).fit(fed)
        assert seen and set(seen) == {1}
        seen.clear()
        ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=1), device="cpu", threads=2,
                         progress=probe).fit(fed)
        assert set(seen) == {2}
        assert torch.get_num_threads() == 2                          # restored after each fit
    finally:
        torch.set_num_threads(1)


def test_blas_follows_the_policy(no_override):
    """NumPy's BLAS threads follow PyTorch's (threadpoolctl), inside a fit and process-wide."""
    pytest.importorskip("threadpoolctl")
    if th.blas_threads() is None:
        pytest.skip("no BLAS library that threadpoolctl controls is loaded")
    start = th.blas_threads()
    try:
        with th.using(0.0, threads=2):
            assert th.blas_threads() == 2
        assert th.blas_threads() == start
        with th.using(0.0):                 # small work: one thread for PyTorch and BLAS alike
            assert th.blas_threads() == 1 and torch.get_num_threads() == 1
        assert th.configure(3) == 3 and th.blas_threads() == 3
        assert th.configure(None) == 1 and th.blas_threads() == 1
    finally:
        th.limit_blas(start)
