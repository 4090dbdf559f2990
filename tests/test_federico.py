"""FedeRiCo (learners/federico.py): EM posteriors, EMA of losses, ε-greedy sampling, mixtures."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from learner_fixtures import blobs, regression, sgd_protocol

from coalitions.errors import InputError
from coalitions.learners.methods.federico import FedeRiCo, data_weights, posterior, sample_neighbours
from coalitions.learners.training.engine import flatten, stack_select
from coalitions.params import ParameterError


def kw(rounds, sizes, **changes):
    """FedeRiCo's former defaults (Adam at 1e-3) on a logistic model, batch 6: ``rounds`` rounds on ``sizes``."""
    settings = dict(dict(model="logistic", batch_size=6, optimizer="adam", lr=1e-3), **changes)
    return dict(protocol=sgd_protocol(rounds, sizes, **settings), seed=4, engine="batched")


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 9), st.integers(0, 8), st.floats(0, 1), st.integers(0, 2**31))
def test_sampling_picks_distinct_others(n, k, eps, seed):
    k = min(k, n - 1)
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(n), size=n)
    nb = sample_neighbours(w, k, eps, np.random.default_rng(seed))
    assert nb.shape == (n, k)
    for i in range(n):
        assert i not in nb[i] and len(set(nb[i])) == k
    if eps == 0:  # greedy: the k others of highest weight
        for i in range(n):
            others = [j for j in range(n) if j != i]
            top = sorted(others, key=lambda j: (-w[i, j], j))[:k]
            assert list(nb[i]) == top


def test_posteriors_are_stochastic_and_follow_the_ema_of_losses():
    sizes = (12, 9, 15, 10, 8)
    fed = blobs(sizes=sizes)
    beta = 0.5
    m = FedeRiCo(beta=beta, neighbours=2, eps=0.5, accumulate=True, likelihood="sum", **kw(4, sizes)).fit(fed)
    assert m.rounds_ == len(m.posterior_history_) == 4
    n = fed.n
    prev_w = np.full((n, n), 1 / n)
    prev_ema = None
    for t, (w, ema) in enumerate(zip(m.posterior_history_, m.ema_history_, strict=True)):
        assert np.allclose(w.sum(axis=1), 1) and (w >= 0).all()
        # w_t ∝ π_t·exp(−L̂_t) with π_t = w_{t−1} (accumulate=True)
        want = prev_w * np.exp(-(ema - ema.min(axis=1, keepdims=True)))
        assert np.allclose(w, want / want.sum(axis=1, keepdims=True), atol=1e-9)
        if prev_ema is not None:  # only the sampled pairs (and self) moved
            sampled = np.zeros((n, n), bool)
            sampled[np.arange(n)[:, None], m.neighbours_history_[t]] = True
            sampled[np.arange(n), np.arange(n)] = True
            assert np.array_equal(ema[~sampled], prev_ema[~sampled])
        prev_w, prev_ema = w, ema
    # the last E-step's L̂ is the EMA of the losses of the models after round 3 (same seed ⇒ same models)
    before = FedeRiCo(beta=beta, neighbours=2, eps=0.5, accumulate=True, likelihood="sum", **kw(3, sizes)).fit(fed)
    phi = {k: v for k, v in before.params_.items()}
    d = before.train_data_
    nb = m.neighbours_history_[-1]
    for i in range(n):
        for j in [i, *nb[i]]:
            params = stack_select(phi, torch.tensor([j]))
            mean = before._task_loss({k: v[0] for k, v in params.items()}, d.X[i], d.y[i], d.m[i]).item()
            loss = mean * float(d.m[i].sum())     # the data's negative log-likelihood: the sum over samples
            assert m.ema_loss_[i, j] == pytest.approx((1 - beta) * before.ema_loss_[i, j] + beta * loss, rel=1e-5)


def test_the_default_is_the_ema_posterior_softmax_of_minus_the_ema():
    fed = blobs(sizes=(12, 9, 15))
    m = FedeRiCo(**kw(3, (12, 9, 15))).fit(fed)
    assert m.accumulate is False and m.estimate_.config["accumulate"] is False
    for w, ema in zip(m.posterior_history_, m.ema_history_, strict=True):
        assert np.allclose(w, posterior(torch.zeros(3, 3, dtype=torch.float64), torch.as_tensor(ema)).numpy())


def test_prediction_mixes_the_models_by_the_posterior():
    fed = blobs(sizes=(12, 9, 15))
    m = FedeRiCo(**kw(2, (12, 9, 15))).fit(fed)
    data = m.train_data_
    scores = m.client_scores(data)
    spec = m.spec_
    for i in range(fed.n):
        probs = sum(m.posterior_[i, j] * torch.softmax(spec.forward({k: v[j] for k, v in m.params_.items()},
                                                                    data.X[i]).double(), -1)
                    for j in range(fed.n))
        assert torch.allclose(scores[i], torch.log(probs), atol=1e-6)


def test_regression_mixture_is_the_weighted_prediction():
    fed = regression()
    p = sgd_protocol(2, fed.sizes("train"), model="linear", optimizer="adam", lr=0.01)   # batch 32
    m = FedeRiCo(protocol=p, seed=0, engine="batched").fit(fed)
    data = m.train_data_
    out = m.client_scores(data)
    i = 1
    want = sum(m.posterior_[i, j] * m.spec_.forward({k: v[j] for k, v in m.params_.items()}, data.X[i]).double()
               for j in range(fed.n))
    assert torch.allclose(out[i], want, atol=1e-6)


def test_data_weights_are_stochastic_and_follow_model_users():
    w = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # clients 0, 1 both use model 1
    a = data_weights(w)
    assert np.allclose(a, [[0.5, 0.5, 0], [0.5, 0.5, 0], [0, 0, 1]])
    rng = np.random.default_rng(0)
    a = data_weights(rng.dirichlet(np.ones(5), size=5))
    assert np.allclose(a.sum(axis=1), 1) and (a >= 0).all()


def test_estimate_weights_and_options():
    fed = blobs(sizes=(12, 9, 15, 10))
    m = FedeRiCo(weights="data", **kw(2, (12, 9, 15, 10))).fit(fed)
    assert np.allclose(m.estimate_.weights, data_weights(m.posterior_))
    assert m.estimate_.config["weights"] == "data"
    with pytest.raises(InputError, match="^eps must be"):
        FedeRiCo(eps=2).fit(fed)
    with pytest.raises(InputError, match="^weights must be one of"):
        FedeRiCo(weights="x").fit(fed)


def test_the_sum_likelihood_recovers_planted_groups_the_default_mean_merges():
    """learners-personalized.md, Methods: ``p(D_i | φ_j) ∝ exp(−Σ_x ℓ)`` with ``likelihood="sum"``; the default
    mean (a temperature of ``n_i``, chosen on held-out federations) merges two of the planted groups here."""
    fed = blobs(sizes=(30,) * 9, groups=((0, 1, 2), (3, 4, 5), (6, 7, 8)), seed=1)
    full = dict(kw(40, (), batch_size=None, lr=0.05), seed=0)   # full batch: 40 steps
    planted = {0b000000111, 0b000111000, 0b111000000}
    assert set(FedeRiCo(likelihood="sum", **full).fit(fed).estimate_.masks) == planted
    default = FedeRiCo(**full).fit(fed)
    assert default.likelihood == "mean" and set(default.estimate_.masks) != planted
    with pytest.raises(ParameterError, match="likelihood"):
        FedeRiCo(likelihood="median", **full).fit(fed)


def test_each_client_starts_from_its_own_model_so_the_posterior_can_leave_uniform():
    """EM's components must start apart: with one shared draw (as the other learners start their clients) every
    model took the same update for ever and the posterior stayed exactly uniform, on heart's four hospitals too."""
    sizes = (12, 9, 15, 10)
    fed = blobs(sizes=sizes)
    m = FedeRiCo(neighbours=3, **kw(3, sizes))
    m.prepare(fed, torch.device("cpu"))
    phi = m.init_params(torch.Generator().manual_seed(0), torch.device("cpu"), fed.n)
    rows = flatten(phi)
    assert all(not torch.equal(rows[i], rows[j]) for i in range(fed.n) for j in range(i))
    fitted = m.fit(fed)   # every client samples every other (K = N - 1): nothing but the start breaks the symmetry
    assert not np.allclose(fitted.posterior_, 1 / fed.n, rtol=0, atol=1e-9)
