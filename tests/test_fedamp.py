"""FedAMP and HeurFedAMP (learners/fedamp.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from learner_fixtures import blobs, sgd_protocol

from coalitions.errors import InputError
from coalitions.learners.methods.baselines import Local
from coalitions.learners.methods.fedamp import (
    FedAMP,
    FedAMPHeuristic,
    affinity_plain,
    attention_heuristic,
    attention_plain,
    local_epochs_for,
    proximal_loss,
)
from coalitions.learners.training.engine import Engine, flatten

finite = st.floats(-5, 5, allow_nan=False, width=32)


def amp_protocol(rounds, sizes, *, batch_size=32, local_steps=5, **kw):
    """``rounds`` FedAMP rounds of what the former legacy training gave (``local_epochs=1``).

    FedAMP's round is the fewest epochs giving every client ``local_steps`` steps
    (:func:`local_epochs_for`), so the protocol's round is made that many epochs.
    """
    epochs = local_epochs_for(sizes, batch_size, 1, local_steps)
    return sgd_protocol(rounds, sizes, batch_size=batch_size, local_epochs=epochs, **kw)


@settings(max_examples=80, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 7), st.integers(1, 6)), elements=finite),
       st.floats(0, 50), st.floats(1e-3, 50))
def test_plain_xi_rows_are_stochastic_and_the_diagonal_never_negative(W, alpha, sigma):
    xi, guarded = attention_plain(torch.as_tensor(W), alpha, sigma)
    xi = xi.numpy()
    assert np.allclose(xi.sum(axis=1), 1, atol=1e-9)
    assert (xi >= 0).all() and (np.diag(xi) >= 0).all()
    n = W.shape[0]
    off = alpha / sigma * np.exp(-((W[:, None, :].astype(np.float64) - W[None]) ** 2).sum(-1) / sigma)
    np.fill_diagonal(off, 0)
    s = off.sum(axis=1)
    for i in range(n):  # rows below the guard follow the formula exactly; guarded rows keep proportions
        want = off[i] if s[i] <= 1 else off[i] / s[i]
        assert np.allclose(np.delete(xi[i], i), np.delete(want, i), rtol=1e-6, atol=1e-12)
    assert guarded == int((s > 1).sum())


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(2, 7), st.integers(2, 6)), elements=finite.filter(lambda x: abs(x) > 1e-3)),
       st.floats(0, 100), st.floats(0, 1))
def test_heuristic_xi_has_the_given_diagonal_and_a_softmax_of_cosines(W, sigma, self_weight):
    xi = attention_heuristic(torch.as_tensor(W), sigma, self_weight).numpy()
    assert np.allclose(xi.sum(axis=1), 1) and (xi >= 0).all()
    assert np.allclose(np.diag(xi), self_weight)
    U = W.astype(np.float64) / np.linalg.norm(W.astype(np.float64), axis=1, keepdims=True)
    cos = U @ U.T
    i = 0
    e = np.exp(sigma * np.delete(cos[i], i) - np.max(sigma * np.delete(cos[i], i)))
    assert np.allclose(np.delete(xi[i], i), (1 - self_weight) * e / e.sum(), atol=1e-9)


def test_proximal_term_has_a_gradient():
    """The bug of a popular re-implementation: a detached proximal term has no gradient."""
    task = lambda p, X, y, m: torch.zeros(())
    loss = proximal_loss(task, coef=0.5)
    p = {"w": torch.tensor([[1.0, 2.0]])}
    u = {"w": torch.tensor([[0.0, 0.0]])}
    X, y, m = torch.zeros(1, 1), torch.zeros(1), torch.zeros(1)
    g, _ = Engine("cpu", path="batched").value_and_grad(loss, p, (X, y, m, u))
    assert torch.allclose(g["w"], torch.tensor([[1.0, 2.0]]))  # coef·2·(w − u)


def test_fedamp_with_lambda_differs_from_local_and_alpha_zero_equals_local():
    sizes = (10, 14, 9, 12)
    fed = blobs(sizes=sizes, image=False)
    kw = dict(seed=2, engine="batched")
    one = sgd_protocol(3, sizes, model="mlp", batch_size=5)     # 3 rounds of one epoch
    local = flatten(Local(protocol=one, **kw).fit(fed).params_)
    # FedAMP's round: 3 epochs (at least 5 steps for every client), 3 rounds as well
    amp_kw = dict(kw, protocol=amp_protocol(3, sizes, model="mlp", batch_size=5))
    amp = FedAMP(alpha_k=0.5, lam=1.0, sigma=10.0, **amp_kw).fit(fed)
    assert amp.rounds_ == 3
    assert not torch.allclose(flatten(amp.params_), local, atol=1e-3)
    # the same run with λ = 0 only moves the starting point: still different, but the
    # proximal term alone must change the result (λ > 0 vs λ = 0 from the same ξ)
    lam0 = FedAMP(alpha_k=0.5, lam=0.0, sigma=10.0, **amp_kw).fit(fed)
    assert not torch.allclose(flatten(amp.params_), flatten(lam0.params_), atol=1e-4)
    off = FedAMP(alpha_k=0.0, lam=1.0, local_steps=1, protocol=one, **kw).fit(fed)  # one epoch a round, as Local
    assert torch.equal(flatten(off.params_), local)
    assert np.array_equal(off.weights_, np.eye(fed.n))
    heur_off = FedAMPHeuristic(alpha_k=0.0, local_steps=1, protocol=one, **kw).fit(fed)
    assert torch.equal(flatten(heur_off.params_), local)


def test_fedamp_weights_history_and_estimate():
    sizes = (10, 14, 9, 12)
    fed = blobs(sizes=sizes)
    m = FedAMPHeuristic(protocol=amp_protocol(4, sizes, model="logistic"), seed=0, engine="batched").fit(fed)
    assert m.rounds_ == 4 and len(m.weights_history_) == 4
    for xi in [*m.weights_history_, m.weights_]:
        assert np.allclose(xi.sum(axis=1), 1) and (np.diag(xi) >= 0).all()
    e = m.estimate_
    assert e.method == "fedamp-heuristic" and e.config["restricted"] == "renormalise"
    assert np.allclose(e.weights, m.weights_)
    assert len(e.extra["weights_history"]) == 4
    assert e.planted_groups == fed.planted_groups
    assert set(e.utilities["test"]) == set(fed.names)


def test_heuristic_recovers_planted_groups_on_separable_blobs():
    sizes = (20, 20, 20, 20, 20, 20)
    fed = blobs(sizes=sizes, groups=((0, 1, 2), (3, 4, 5)), separation=4.0, seed=3)
    m = FedAMPHeuristic(protocol=amp_protocol(15, sizes, model="logistic"), sigma=200, self_weight=0.3, seed=0,
                        engine="batched").fit(fed)
    assert sorted(m.estimate_.blocks()) == [["0", "1", "2"], ["3", "4", "5"]]


@pytest.mark.parametrize("kw,match", [({"alpha_k": -1}, "^alpha_k must be"), ({"sigma": 0}, "^sigma must be"),
                                      ({"lam": float("nan")}, "^lam must be"),
                                      ({"protocol": {"steps": 1}}, "^protocol must be a TrainingProtocol")])
def test_bad_options_are_input_errors(kw, match):
    with pytest.raises(InputError, match=match):
        FedAMP(**kw).fit(blobs())
    with pytest.raises(InputError, match="^self_weight must be a number in"):
        FedAMPHeuristic(self_weight=1.5).fit(blobs())


def test_lambda_acts_only_with_more_than_one_local_step():
    """One local step per round starts at u_i, where the proximal gradient is zero: λ is inert.

    synthetic with 10 samples and batch 32 is one minibatch step an epoch; the default
    ``local_steps`` repeats epochs until every client has taken five.
    """
    from coalitions.learners.data.datasets import load

    fed = load("synthetic", samples=10, val=20, test=20, seed=0)
    sizes = fed.sizes("train")
    kw = dict(seed=0, engine="batched")
    five = amp_protocol(4, sizes)                               # 4 rounds of five 1-step epochs
    models = {lam: flatten(FedAMP(lam=lam, protocol=five, **kw).fit(fed).params_) for lam in (1e-6, 0.2, 5.0)}
    assert not torch.allclose(models[1e-6], models[0.2], atol=1e-6)
    assert not torch.allclose(models[0.2], models[5.0], atol=1e-6)
    single = sgd_protocol(4, sizes)                             # 4 rounds of one 1-step epoch
    one = {lam: flatten(FedAMP(lam=lam, local_steps=1, protocol=single, **kw).fit(fed).params_) for lam in (1e-6, 5.0)}
    assert torch.equal(one[1e-6], one[5.0])  # the documented inertness of a single step


def test_local_epochs_for_gives_every_client_the_steps():
    assert local_epochs_for(np.array([10, 40]), 32, 1, 5) == 5  # the 10-sample client: 1 step an epoch
    assert local_epochs_for(np.array([100, 400]), 32, 1, 5) == 2  # 4 steps an epoch
    assert local_epochs_for(np.array([100, 400]), 32, 3, 5) == 3  # local_epochs is a floor
    assert local_epochs_for(np.array([100]), None, 1, 5) == 5  # full batch: 1 step an epoch


def test_mean_distance_keeps_xi_when_every_coordinate_is_repeated_and_sum_drifts_to_identity():
    # A model 50 times larger whose every coordinate differs as before: under the paper's
    # ||w_i - w_j||^2 the off-diagonal attention collapses (xi -> I); over the parameter count it stays.
    W = torch.tensor([[0.0, 0.1, 0.2], [0.1, 0.0, 0.3], [0.3, 0.2, 0.0]], dtype=torch.float64)
    big = W.repeat(1, 50)
    xi_mean, _ = attention_plain(W, 0.5, 0.01, "mean")
    xi_mean_big, _ = attention_plain(big, 0.5, 0.01, "mean")
    assert torch.allclose(xi_mean, xi_mean_big)
    assert torch.diagonal(xi_mean).max() < 0.9
    xi_sum_big, _ = attention_plain(big, 0.5, 0.05)
    assert torch.allclose(xi_sum_big, torch.eye(3, dtype=torch.float64), atol=1e-6)
    assert np.allclose(affinity_plain(W, 0.01, "mean"), affinity_plain(big, 0.01, "mean"))


def test_fedamp_distance_option_is_checked_and_used():
    sizes = (20, 20, 20)
    fed = blobs(sizes=sizes, groups=((0, 1, 2),), seed=1)
    with pytest.raises(InputError, match="^distance must be"):
        FedAMP(protocol=amp_protocol(2, sizes, model="logistic"), distance="max").fit(fed)
    m = FedAMP(protocol=amp_protocol(3, sizes, model="logistic"), sigma=1.0, distance="mean", seed=0,
               engine="batched").fit(fed)
    W = flatten(m.params_)
    assert np.allclose(m.affinity_, affinity_plain(W, 1.0, "mean"))
    assert not np.allclose(m.affinity_, affinity_plain(W, 1.0, "sum"))
