"""Local tuned per client, and one selection rule for every column (issue 33, items 1 and 2).

Local's clients' models are independent, so each client chooses its rate on the grid and its
stopping step on its own tuning rows, as the exhaustive game chooses its model of ``{i}``; Local
is then the game's single-client models.  Every other column keeps the rate whose *kept* models
(those early stopping keeps) have the lowest mean tuning loss, not the last round's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.data.datasets import load
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.experiments.columns import compute_piece, lr_tuning
from coalitions.learners.methods.base import ClientsEarlyStop
from coalitions.learners.methods.baselines import FedAvg, Local
from coalitions.learners.training.engine import flatten
from coalitions.learners.training.protocol import DEFAULT_PROTOCOLS
from coalitions.learners.training.tuning import kept_val_loss

pytestmark = pytest.mark.usefixtures("one_thread")

# heart with the experiments' roles: a grid, patience and held-out tuning rows; lr 1.5 over-shoots, so clients stop
HEART = DEFAULT_PROTOCOLS[("binary", "logistic")].with_(steps=60, patience=3, lr_grid=(0.015, 0.15, 1.5),
                                                        tune_split=0.2)


def _singletons(values, n):
    return np.array([values[i, 1 << i] for i in range(n)])


@pytest.fixture(scope="module")
def heart():
    fed = load("heart", seed=0)
    oracle = ExhaustiveOracle(protocol=HEART, seed=1, device="cpu").fit(fed)
    return fed, oracle


def test_local_is_the_exhaustive_games_single_client_models(heart):
    fed, oracle = heart
    local = Local(protocol=HEART, seed=1, device="cpu").fit(fed)
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        got = np.array([local.utilities_[part][c] for c in fed.names])
        np.testing.assert_allclose(got, _singletons(values, fed.n), rtol=0, atol=1e-6)
    singles = [1 << i for i in range(fed.n)]
    assert local.lr_clients_ == [float(oracle.lr_chosen_[m]) for m in singles]
    assert local.stopped_at_clients_ == [int(oracle.stopped_at_[m]) for m in singles]
    # the federation really asks for per-client choices: one rate or one stop for all could not match
    assert len(set(local.lr_clients_)) > 1 and len(set(local.stopped_at_clients_)) > 1
    # the protocol's local steps per round are the round-based methods' (FedProx's proximal term acts only past
    # the first): Local never communicates and evaluates after every epoch whatever they are
    # it ran its whole budget when one of its clients did, at the rate that client kept
    assert local.hit_max_ == any(s == HEART.steps for s in local.stopped_at_clients_)
    several = Local(protocol=HEART.with_(local_steps=5), seed=1, device="cpu").fit(fed)
    assert several.utilities_ == local.utilities_ and several.stopped_at_clients_ == local.stopped_at_clients_


def test_the_local_column_of_a_reproduction_is_the_games_singletons(heart):
    fed, oracle = heart
    est = compute_piece(fed, None, "local", {"protocol": HEART}, seed=1, device="cpu")
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        got = np.array([est.utilities[part][c] for c in fed.names])
        np.testing.assert_allclose(got, _singletons(values, fed.n), rtol=0, atol=1e-6)
    rec = lr_tuning(est)
    assert rec["grid"] == list(HEART.lr_grid)
    assert rec["chosen"] == {c: float(oracle.lr_chosen_[1 << i]) for i, c in enumerate(fed.names)}
    assert est.extra["stopping"]["lr_clients"] == list(rec["chosen"].values())


def test_each_client_keeps_its_own_best_round():
    stop = ClientsEarlyStop(2, 3)
    for row in ([3, 3, 3], [2, 4, 1], [2.5, 5, 2], [2.2, 1, 0.5]):
        assert not stop.stopped
        stop.update_clients(row)
    # client 1 stopped at round 3 (no improvement on rounds 2 and 3): its later 1.0 is not seen
    assert stop.best_rounds(3) == [2, 1, 4] and stop.stop_rounds(3) == [4, 3, 4] and not stop.stopped
    assert stop.update_clients([1, 1, 0.1]).tolist() == [False, False, True]
    fed = blobs(sizes=(9, 12, 7, 10))
    p = sgd_protocol(30, model="mlp", hidden=8, batch_size=None, lr=0.5, patience=2)
    local = Local(protocol=p, seed=3, device="cpu").fit(fed)
    hist = np.array(local.val_loss_clients_)
    for i in range(fed.n):   # each client's kept model is its own best round (up to its own stop)
        upto = local.stopped_at_clients_[i] // local.steps_per_round_
        assert local.best_round_clients_[i] == int(np.argmin(hist[:upto, i])) + 1
        assert local.best_val_loss_clients_[i] == pytest.approx(hist[:upto, i].min())
    assert len(set(local.best_round_clients_)) > 1
    # client i's kept model: the same client trained alone for its best round's steps, without patience
    for i in range(fed.n):
        short = Local(protocol=p.with_(patience=None, steps=local.best_round_clients_[i]), seed=3,
                      device="cpu").fit(fed)
        assert torch.equal(flatten({k: v[i:i + 1] for k, v in local.params_.items()}),
                           flatten({k: v[i:i + 1] for k, v in short.params_.items()}))


def test_every_column_is_scored_by_its_kept_models_not_its_last_round():
    fed = blobs(sizes=(9, 12, 7, 10))
    p = sgd_protocol(30, model="mlp", hidden=8, batch_size=None, lr=0.5, patience=2)
    fitted = FedAvg(protocol=p, seed=3, device="cpu").fit(fed)
    assert not fitted.hit_max_
    assert kept_val_loss(fitted) == pytest.approx(min(fitted.val_loss_history_))
    assert kept_val_loss(fitted) < fitted.val_loss_history_[-1]     # the old rule read the last, worse round
    unstopped = FedAvg(protocol=p.with_(patience=None), seed=3, device="cpu").fit(fed)
    assert kept_val_loss(unstopped) == pytest.approx(unstopped.val_loss_history_[-1])   # it keeps the last round
    grid = (0.05, 0.5)
    est = compute_piece(fed, None, "fedavg", {"protocol": p.with_(lr_grid=grid)}, seed=3, device="cpu")
    for lr, recorded in zip(grid, lr_tuning(est)["val_loss"], strict=True):
        at = FedAvg(protocol=p.with_(lr=lr), seed=3, device="cpu").fit(fed)
        assert recorded == pytest.approx(min(at.val_loss_history_), abs=1e-12)


def test_coalitions_learn_keeps_rates_by_the_same_rule():
    """``coalitions learn --lr-grid`` (methods/learning.py) and ``reproduce`` (compute_piece) share the rule."""
    from coalitions.learners.methods.learning import Learning

    fed = load("heart", seed=0)
    training = {"lr_grid": (0.15, 1.5), "patience": 3, "steps": 60}
    fedavg = Learning("fedavg", {}, training, device="cpu", seed=1).fit(fed)
    piece = compute_piece(fed, None, "fedavg", {"protocol": DEFAULT_PROTOCOLS[("binary", "logistic")].with_(
        lr_grid=(0.15, 1.5), patience=3, steps=60)}, seed=1, device="cpu")
    assert fedavg.extra["lr_tuning"] == lr_tuning(piece)
    local = Learning("local", {}, training, device="cpu", seed=1).fit(fed)
    assert set(local.extra["lr_tuning"]["chosen"]) == set(fed.names)   # per client, as the game's {i}
