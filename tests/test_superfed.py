"""SuPerFed (learners/superfed.py): mixing, phases, λ* on validation data, reduction to FedAvg."""

from __future__ import annotations

import pytest
import torch
from learner_fixtures import blobs, regression, sgd_protocol

from coalitions.errors import InputError
from coalitions.learners.methods.baselines import FedAvg
from coalitions.learners.methods.superfed import SuPerFedLM, SuPerFedMM, layer_index, mix
from coalitions.learners.training.engine import flatten
from coalitions.learners.training.protocol import TrainingProtocol

SIZES = (10, 13, 7, 12)   # the training sizes of the federation most tests build
KW = dict(protocol=sgd_protocol(4, SIZES, model="mlp", batch_size=5), seed=3, engine="batched")


@pytest.mark.parametrize("cls", [SuPerFedMM, SuPerFedLM])
def test_reduces_to_fedavg_with_mixing_off(cls):
    fed = blobs(sizes=SIZES)
    avg = FedAvg(**KW).fit(fed)
    sup = cls(mu=0.0, nu=0.0, start=1.0, lambda_grid=(0.0,), **KW).fit(fed)
    assert torch.allclose(flatten(sup.global_), flatten(avg.global_), atol=1e-6)
    assert torch.allclose(flatten(sup.params_), flatten(avg.params_), atol=1e-6)
    assert sup.utilities_ == avg.utilities_
    assert sup.estimate_.blocks() == avg.estimate_.blocks() == [list(fed.names)]
    assert sup.estimate_.weights is None and sup.estimate_.config["graph"] == "structural"


def test_phase_two_trains_the_local_models_and_mixing_matters():
    fed = blobs(sizes=SIZES)
    mm = SuPerFedMM(start=0.5, **KW).fit(fed)
    lm = SuPerFedLM(start=0.5, **KW).fit(fed)
    assert mm.rounds_ == lm.rounds_ == 4
    start = SuPerFedMM(start=0.5, **KW)     # the local models before the first round: the state a fit starts from
    start.prepare(fed, torch.device("cpu"))
    init_local = start.init_state(fed, torch.Generator().manual_seed(int(start.seed)), torch.device("cpu"))["local"]
    assert not torch.allclose(flatten(mm.local_), flatten(init_local))
    assert not torch.allclose(flatten(mm.local_), flatten(lm.local_))
    # phase I only: local models are never touched
    only1 = SuPerFedMM(start=1.0, **KW).fit(fed)
    assert torch.equal(flatten(only1.local_), flatten(init_local))


def test_lambda_is_chosen_on_validation_data():
    fed = blobs(sizes=SIZES)
    m = SuPerFedMM(start=0.25, **KW).fit(fed)
    assert m.val_curve_.shape == (fed.n, 11)
    for i, name in enumerate(fed.names):
        k = list(m.lambda_grid).index(m.lambda_[i])
        assert m.val_curve_[i, k] == m.val_curve_[i].max()           # best validation accuracy
        assert m.utilities_["val"][name] == pytest.approx(m.val_curve_[i, k])
    lam = torch.as_tensor(m.lambda_, dtype=torch.float32)[:, None]
    want = (1 - lam) * flatten({k: v.expand(fed.n, *v.shape[1:]) for k, v in m.global_.items()}) \
        + lam * flatten(m.local_)
    assert torch.allclose(flatten(m.params_), want, atol=1e-6)


def test_regression_picks_the_lowest_validation_mse():
    fed = regression()
    p = sgd_protocol(4, fed.sizes("train"), model="linear", lr=0.02)    # batch 32
    m = SuPerFedMM(protocol=p, start=0.25, seed=0, engine="batched").fit(fed)
    for i in range(fed.n):
        assert m.val_curve_[i, list(m.lambda_grid).index(m.lambda_[i])] == m.val_curve_[i].min()


def test_mix_and_layers():
    p = {"c1": torch.ones(2, 2), "cb1": torch.ones(2), "w": torch.ones(3, 3), "b": torch.ones(3)}
    assert layer_index(p) == {"c1": 0, "cb1": 0, "w": 1, "b": 1}
    f = {"a": torch.zeros(2), "b": torch.zeros(2)}
    l = {"a": torch.ones(2), "b": torch.ones(2)}
    assert torch.equal(mix(f, l, torch.tensor(0.25), None)["a"], torch.full((2,), 0.25))
    out = mix(f, l, torch.tensor([0.1, 0.9]), {"a": 0, "b": 1})
    assert torch.allclose(out["a"], torch.full((2,), 0.1)) and torch.allclose(out["b"], torch.full((2,), 0.9))


@pytest.mark.parametrize("kw,match", [({"mu": -1}, "^mu must be"), ({"start": 2}, "^start must be"),
                                      ({"lambda_grid": (0.5, 2.0)}, "^lambda_grid must be")])
def test_bad_options(kw, match):
    with pytest.raises(InputError, match=match):
        SuPerFedMM(**kw).fit(blobs())


def test_early_stopping_counts_only_the_personalised_rounds():
    """Issue 33: patience once ended SuPerFed in phase I (FedAvg), before its defining step acted.  The early
    stop now records phase I's rounds but neither stops nor keeps a model there; with ``start = 1`` (no phase
    II) every round counts, as for FedAvg.  At rate 0.01 the blobs' validation loss rises at round 11 of 40:
    patience 1 stopped there before."""
    p = TrainingProtocol(model="mlp", hidden=4, lr=0.01, steps=40, patience=1, weight_decay=1e-3)
    learner = SuPerFedMM(protocol=p, start=0.5, device="cpu", seed=0).fit(blobs())
    warmup = learner.warmup_rounds()
    assert learner.rounds_ == 40 and warmup == 20
    history = learner.val_loss_history_
    assert any(b >= a for a, b in zip(history[:warmup], history[1:warmup], strict=False))   # phase I did turn up
    assert learner.rounds_run_ > warmup and learner.best_round_ > warmup
    assert len(history) == learner.rounds_run_ and learner.best_val_loss_ == pytest.approx(
        history[learner.best_round_ - 1])
    fedavg_like = SuPerFedMM(protocol=p, start=1.0, device="cpu", seed=0).fit(blobs())
    assert fedavg_like.warmup_rounds() == 0 and fedavg_like.rounds_run_ <= 11
