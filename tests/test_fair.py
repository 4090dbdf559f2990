"""q-FFL and AFL (learners/methods/fair.py): q = 0 is FedAvg, the q-FedAvg step by hand, λ ascends to the worst client."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.methods.baselines import FedAvg
from coalitions.learners.methods.fair import AFL, QFFL, project_simplex, qffl_step
from coalitions.learners.training.engine import flatten


def kw(rounds: int, sizes) -> dict:
    """``rounds`` rounds of the MLP, batch 4, on clients of ``sizes`` training samples."""
    return dict(protocol=sgd_protocol(rounds, sizes, model="mlp", batch_size=4), seed=0, engine="batched")


KW = kw(3, (4, 16, 9, 12))


def test_qffl_with_q_zero_is_fedavg():
    fed = blobs(sizes=(4, 16, 9, 12))
    a = FedAvg(**KW).fit(fed)
    q = QFFL(q=0.0, **KW).fit(fed)
    assert torch.allclose(flatten(q.global_), flatten(a.global_), atol=1e-5)
    assert not torch.allclose(flatten(QFFL(q=2.0, **KW).fit(fed).global_), flatten(a.global_), atol=1e-4)


def test_qffl_step_by_hand_with_unequal_sizes_and_losses():
    w = {"a": torch.tensor([[1.0, 2.0]])}
    local = {"a": torch.tensor([[0.0, 2.0], [1.0, 0.0]])}
    F, p, q, L = np.array([0.5, 2.0]), np.array([0.25, 0.75]), 2.0, 10.0
    dw = [L * (np.array([1.0, 2.0]) - np.array(x)) for x in ([0.0, 2.0], [1.0, 0.0])]
    num = sum(p[k] * F[k] ** q * dw[k] for k in range(2))
    den = sum(p[k] * (q * F[k] ** (q - 1) * dw[k] @ dw[k] + L * F[k] ** q) for k in range(2))
    got = qffl_step(w, local, F, p, q, L)["a"][0].double().numpy()
    assert np.allclose(got, np.array([1.0, 2.0]) - num / den, atol=1e-6)
    # q = 0: the sample-size weighted average of the local models (not the plain mean)
    zero = qffl_step(w, local, F, p, 0.0, L)["a"][0].double().numpy()
    assert np.allclose(zero, 0.25 * np.array([0.0, 2.0]) + 0.75 * np.array([1.0, 0.0]), atol=1e-6)


def test_qffl_favours_the_client_with_the_larger_loss():
    w = {"a": torch.zeros(1, 1)}
    local = {"a": torch.tensor([[1.0], [-1.0]])}   # two clients pulling in opposite directions
    p = np.array([0.5, 0.5])
    for q in (0.5, 1.0, 3.0):
        step = qffl_step(w, local, np.array([1.0, 3.0]), p, q, 1.0)["a"].item()
        assert step < 0   # towards client 1, whose loss is larger
    assert qffl_step(w, local, np.array([1.0, 3.0]), p, 0.0, 1.0)["a"].item() == pytest.approx(0.0, abs=1e-7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 1)), min_size=1, max_size=7),
       st.integers(0, 2 ** 32 - 1))
def test_simplex_projection_is_the_nearest_point_of_the_simplex(v, seed):
    v = np.array(v)
    x = project_simplex(v)
    assert np.all(x >= 0) and x.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(seed)
    others = rng.dirichlet(np.ones(v.size), size=64)
    others = np.vstack([others, np.eye(v.size)])
    assert np.all(np.linalg.norm(v - x) <= np.linalg.norm(v - others, axis=1) + 1e-9)


def test_afl_lambda_moves_towards_the_worst_client():
    fed = blobs(sizes=(10, 13, 7, 12), groups=((0, 1, 2), (3,)))  # client 3 alone in its group: the worst off
    m = AFL(lambda_lr=0.5, **kw(5, (10, 13, 7, 12))).fit(fed)
    assert m.rounds_ == 5
    lam0 = m.lambda_history_[0]
    assert np.allclose(lam0, 0.25) and m.lambda_.sum() == pytest.approx(1.0)
    # every step moves λ along the losses at w^t: the client with the largest loss gains most
    lam1 = m.lambda_history_[1]
    F = m._losses(m.spec_.init(torch.Generator().manual_seed(0), 1))   # at w^0, every client's start
    assert np.allclose(lam1, project_simplex(lam0 + 0.5 * F))
    assert np.argmax(lam1 - lam0) == np.argmax(F)
    assert m.lambda_[3] > 0.25 and m.lambda_[3] == m.lambda_.max()
    assert m.estimate_.extra["lambda"]["3"] == pytest.approx(m.lambda_[3])


def test_afl_with_a_fixed_uniform_mixture_averages_uniformly():
    fed = blobs(sizes=(4, 16, 9, 12))
    m = AFL(lambda_lr=0.0, **KW).fit(fed)
    assert all(np.allclose(x, 0.25) for x in m.lambda_history_)
    # sizes differ, so a uniform average is not FedAvg's weighted one
    assert not torch.allclose(flatten(m.global_), flatten(FedAvg(**KW).fit(fed).global_), atol=1e-4)
