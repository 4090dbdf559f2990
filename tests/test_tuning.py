"""Every column's learning rate from one grid, chosen on validation (learners/training/tuning.py, issue 18)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from learner_fixtures import blobs

from coalitions.learners.experiments.runner import compute_piece, lr_tuning
from coalitions.learners.training.protocol import TrainingProtocol
from coalitions.learners.training.tuning import tune_lr

pytest.importorskip("torch")


def test_lowest_validation_loss_wins_ties_go_to_the_earlier_rate_and_nan_never_wins():
    scores = {0.1: 0.5, 0.03: 0.2, 0.01: 0.2, 0.003: math.nan}
    best, rec = tune_lr(lambda lr: lr, [0.1, 0.03, 0.01, 0.003], scores.__getitem__)
    assert best == 0.03 and rec["chosen"] == 0.03
    assert rec["grid"] == [0.1, 0.03, 0.01, 0.003] and rec["val_loss"] == [0.5, 0.2, 0.2, None]
    best, rec = tune_lr(lambda lr: lr, [0.1, 0.01], lambda lr: math.nan)
    assert best == 0.1 and rec["val_loss"] == [None, None]   # nothing finite: the first rate, recorded as such
    with pytest.raises(ValueError, match="empty"):
        tune_lr(lambda lr: lr, [], lambda fit: 0.0)


@pytest.mark.parametrize("method", ["fedamp", "fedavg"])   # Local chooses per client: test_local_per_client.py
def test_a_column_is_trained_once_per_rate_and_keeps_the_best_on_validation(method):
    fed = blobs()
    grid = [0.001, 0.01, 0.1]
    options = {"protocol": TrainingProtocol(model="mlp", steps=20, lr_grid=grid)}   # every learner takes the protocol
    est = compute_piece(fed, None, method, options, seed=0, device="cpu")
    rec = lr_tuning(est)
    assert rec["grid"] == grid and len(rec["val_loss"]) == 3
    assert rec["chosen"] == grid[min(range(3), key=lambda k: rec["val_loss"][k])]
    assert len(set(rec["val_loss"])) == 3    # the rates really trained different models
    trained = est.config["protocol"]["lr"] if "protocol" in est.config else est.config["lr"]  # under a protocol, its rate
    assert trained == rec["chosen"]   # the estimate is the fit at the kept rate


def test_stopping_record_reads_the_fitted_attributes_and_none_without_them():
    from types import SimpleNamespace

    from coalitions.learners.experiments.runner import stopping_record

    assert stopping_record(SimpleNamespace()) is None   # a loop without early stopping records nothing
    fitted = SimpleNamespace(lr_=0.05, stopped_at_=120, hit_max_=False)
    assert stopping_record(fitted) == {"lr": 0.05, "stopped_at": 120, "hit_max": False}
    assert stopping_record(SimpleNamespace(stopped_at_=300, hit_max_=True))["hit_max"] is True


def test_report_names_the_columns_that_hit_the_maximum():
    from coalitions.learners.experiments.report import _lr_section

    runs = [{"seed": 0, "methods": {"fedavg": {"lr_tuning": {"grid": [0.01, 0.1], "chosen": 0.1},
                                                 "stopping": {"lr": 0.1, "stopped_at": 50, "hit_max": True}},
                                      "spo": {"stopping": {"lr": 0.01, "stopped_at": 20, "hit_max": False}}}}]
    text = "\n".join(_lr_section({"runs": runs}, {"fedavg": "FedAvg", "spo": "SPO"}))
    assert "| FedAvg | 0.1 (max) |" in text and "| SPO | 0.01 @ 20 |" in text
    assert "without stopping (on at least one seed): FedAvg;" in text


def test_report_gives_locals_rate_and_stop_per_client():
    from coalitions.learners.experiments.report import _lr_section

    local = {"lr_tuning": {"grid": [0.015, 0.15], "chosen": {"a": 0.15, "b": 0.015}},
             "stopping": {"lr": None, "stopped_at": 40, "hit_max": False, "lr_clients": [0.15, 0.015],
                          "stopped_at_clients": [12, 40]}}
    text = "\n".join(_lr_section({"runs": [{"seed": 0, "methods": {"local": local}}]}, {"local": "Local"}))
    assert "| Local | 0.15 @ 12, 0.015 @ 40 |" in text and "each client's rate and stopping step" in text


def test_spo_column_gets_the_protocols_patience_and_grid():
    from coalitions.learners.experiments.catalogue import HEART, budgeted_options
    from coalitions.learners.methods.spo import SPO

    exp = dataclasses.replace(HEART, protocol=HEART.protocol.with_(patience=3))
    opts = budgeted_options(exp, True, "spo", [50, 60])
    assert opts == {"protocol": exp.protocol_for(True)}     # the protocol itself, as every column
    p = SPO(protocol=opts["protocol"]).protocol_for(blobs())
    assert (p.patience, p.lr_grid, p.steps) == (3, HEART.protocol.lr_grid, exp.protocol_for(True).steps)
    with pytest.raises(TypeError, match="steps"):   # one place for the budget: SPO has no steps of its own
        SPO(protocol=opts["protocol"], steps=7)


def _fake_spo(monkeypatch) -> dict:
    """Replace the registry's ``create`` by a recorder of the options and parameters SPO would get."""
    import coalitions.learners.methods.registry as registry

    seen: dict = {}

    class Fake:
        def set_params(self, **kw):
            seen["params"] = kw
            return self

        def fit(self, fed):
            return self

    def create(name, options, **kw):
        seen["options"] = dict(options)
        return Fake()

    monkeypatch.setattr(registry, "create", create)
    return seen


def test_fit_spo_hands_the_protocol_to_the_estimator_not_to_its_options(monkeypatch):
    from coalitions.learners.experiments.spo_column import fit_spo

    seen = _fake_spo(monkeypatch)
    p = TrainingProtocol(steps=10, patience=4, lr_grid=(0.1, 0.01))
    fit_spo(None, {"search_steps": 3}, 0, "cpu", protocol=p)
    assert seen == {"options": {"search_steps": 3}, "params": {"protocol": p}}
    fit_spo(None, {"search_steps": 3}, 0, "cpu")     # no protocol: SPO resolves the data's default at fit time
    assert seen == {"options": {"search_steps": 3}, "params": {"protocol": None}}


def test_a_spo_piece_takes_the_experiments_protocol_and_no_training_setting_of_its_own(monkeypatch):
    from coalitions.errors import InputError
    from coalitions.learners.experiments import columns
    from coalitions.learners.experiments.catalogue import HEART
    from coalitions.learners.methods.registry import create

    with pytest.raises(InputError, match="--lr-grid does not apply to --method spo"):
        create("spo", {"lr_grid": (0.1, 0.01)})      # a grid is the protocol's, never a column's option
    seen = _fake_spo(monkeypatch)
    monkeypatch.setattr(columns, "with_records", lambda learner, fed: learner)
    fed = blobs()
    p = HEART.protocol_for(False)
    compute_piece(fed, HEART, "spo", {"search_steps": 3, "protocol": p}, 0, "cpu")
    assert seen == {"options": {"search_steps": 3}, "params": {"protocol": p}}
    exp = dataclasses.replace(HEART, protocol=None)   # no protocol: SPO trains the data's default (SPO.protocol_for)
    compute_piece(fed, exp, "spo", {"search_steps": 3}, 0, "cpu")
    assert seen == {"options": {"search_steps": 3}, "params": {"protocol": None}}
