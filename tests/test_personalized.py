"""The shared learner machinery (learners/personalized.py): checkpoints, seeds, oracles, estimates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.errors import InputError
from coalitions.estimate import estimate_from_json, estimate_to_json
from coalitions.learners.methods.base import RefitOracle
from coalitions.learners.methods.baselines import FedAvg, Local
from coalitions.learners.methods.fedamp import FedAMP, FedAMPHeuristic
from coalitions.learners.methods.federico import FedeRiCo
from coalitions.learners.methods.superfed import SuPerFedLM, SuPerFedMM
from coalitions.learners.training.engine import flatten
from coalitions.oracles import StructuralOracle

ROUNDS = 5
KW = dict(protocol=sgd_protocol(ROUNDS, (9, 12, 7, 10), model="logistic", batch_size=6), seed=1, engine="batched")
METHODS = [Local, FedAvg, FedAMP, FedAMPHeuristic, FedeRiCo, SuPerFedMM, SuPerFedLM]


def kw(cls) -> dict:
    """KW, and FedAMP's floor of local steps a round lowered to the protocol's (ROUNDS rounds for every method)."""
    return {**KW, **({"local_steps": 1} if "local_steps" in cls.param_names() else {})}


class Stop(Exception):
    pass


def _stop_at(k):
    def progress(done, total, info):
        assert total == ROUNDS and isinstance(info, dict) and "loss" in info
        if done == k:
            raise Stop
    return progress


@pytest.mark.parametrize("cls", METHODS)
def test_resume_from_checkpoint_equals_an_uninterrupted_run(cls, tmp_path):
    fed = blobs(sizes=(9, 12, 7, 10))
    whole = cls(**kw(cls)).fit(fed)
    path = tmp_path / "ck.pt"
    with pytest.raises(Stop):
        cls(checkpoint=path, progress=_stop_at(3), **kw(cls)).fit(fed)
    resumed = cls(checkpoint=path, **kw(cls)).fit(fed)
    assert resumed.resumed_from_ == 3
    assert torch.equal(flatten(resumed.params_), flatten(whole.params_))
    assert resumed.utilities_ == whole.utilities_
    assert resumed.loss_history_ == whole.loss_history_
    if whole.weights_ is not None:
        assert np.array_equal(resumed.weights_, whole.weights_)
        assert all(np.array_equal(a, b) for a, b in zip(resumed.weights_history_, whole.weights_history_, strict=True))


def test_same_seed_same_result_and_another_seed_differs():
    fed = blobs(sizes=(9, 12, 7, 10))
    a, b = (FedeRiCo(**KW).fit(fed) for _ in range(2))
    assert torch.equal(flatten(a.params_), flatten(b.params_)) and np.array_equal(a.weights_, b.weights_)
    c = FedeRiCo(**{**KW, "seed": 2}).fit(fed)
    assert not torch.equal(flatten(a.params_), flatten(c.params_))


def test_checkpoint_of_another_run_is_refused(tmp_path):
    fed = blobs(sizes=(9, 12, 7, 10))
    path = tmp_path / "ck.pt"
    Local(checkpoint=path, **KW).fit(fed)
    with pytest.raises(InputError, match="different run"):
        Local(checkpoint=path, **{**KW, "protocol": KW["protocol"].with_(lr=0.3)}).fit(fed)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="not a readable"):
        Local(checkpoint=path, **KW).fit(fed)


def test_estimate_round_trips_through_json():
    fed = blobs(sizes=(9, 12, 7, 10))
    for m in (FedAMPHeuristic(**KW).fit(fed), SuPerFedMM(**KW).fit(fed)):
        e = m.estimate_
        doc = json.loads(json.dumps(estimate_to_json(e)))
        back = estimate_from_json(doc)
        assert back.clients == e.clients and back.masks == e.masks
        assert back.planted_groups == fed.planted_groups
        assert doc["config"]["method"] == m.method and doc["config"]["seed"] == 1


def test_refit_oracle_trains_again_on_the_remaining_clients():
    fed = blobs(sizes=(9, 12, 7, 10))
    m = FedAMPHeuristic(refit=True, rule="mass", **KW).fit(fed)
    assert m.estimate_.config["restricted"] == "refit"
    oracle = RefitOracle(m, fed, m.weights_)
    g = oracle.benefit_graph(0b0111)
    assert oracle.refits_ == 1 and g.within == 0b0111
    sub = FedAMPHeuristic(rule="mass", **KW).fit(type(fed)(fed.name, fed.task, fed.metric, fed.clients[:3],
                                                           fed.n_classes, None, fed.options))
    want = sub.oracle_.benefit_graph(0b111)
    assert g.collaborators == want.collaborators
    assert oracle.benefit_graph(0b0100).collaborators == ((2, 0),)


def test_structural_oracle():
    assert StructuralOracle("abc", True).benefit_graph(0b101).collaborators == ((0, 0b100), (2, 0b001))
    assert StructuralOracle("abc", False).benefit_graph(0b111).edges == ()


def test_fit_checks_its_input():
    with pytest.raises(InputError, match="Federation"):
        Local().fit([1, 2])
    with pytest.raises(InputError, match="^protocol must be a TrainingProtocol"):
        Local(protocol={"model": "mlp"}).fit(blobs())
    with pytest.raises(InputError, match="^rule must be one of"):
        FedAMP(rule="magic").fit(blobs())


def test_learn_command_runs_every_personalised_method(tmp_path, capsys):
    from coalitions.cli import main
    from coalitions.estimate import read_estimate

    for method in ("local", "fedavg", "fedamp", "fedamp-heuristic", "federico", "superfed-mm", "superfed-lm"):
        out = tmp_path / f"{method}.json"
        rc = main(["learn", "synthetic", "--method", method, "--steps", "2", "--samples", "8", "--seed", "3",
                   "--checkpoint", str(tmp_path / f"{method}.pt"), "-o", str(out)])
        assert rc == 0
        e = read_estimate(out)
        assert e.method == method and e.config["seed"] == 3 and e.config["protocol"]["steps"] == 2
        assert e.planted_groups == (("0", "1", "2"), ("3", "4", "5"))
        assert (e.weights is None) == (method in ("local", "fedavg", "superfed-mm", "superfed-lm"))
    assert main(["learn", "synthetic", "--method", "local", "--neighbours", "2", "-o", str(tmp_path / "x.json")]) == 2
    assert "--neighbours does not apply to --method local" in capsys.readouterr().err


def test_learn_says_when_a_learner_ran_its_whole_budget(tmp_path, capsys):
    """The result may be the budget's, not the method's: ``learn`` says so, and how to stop on the validation loss."""
    from coalitions.cli import main

    out = str(tmp_path / "e.json")
    assert main(["learn", "synthetic", "--method", "fedamp", "--steps", "2", "--samples", "8", "-o", out]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "whole budget" in ln]
    assert lines == ["  fedamp ran its whole budget (1 round): without --patience it always does; give --patience N "
                     "to stop where its validation loss stops improving"]
    assert main(["learn", "synthetic", "--method", "fedavg", "--steps", "2", "--patience", "5", "--samples", "8",
                 "-o", out]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "whole budget" in ln]
    assert said == ["  fedavg ran its whole budget (2 rounds) without stopping on --patience 5: its validation loss "
                    "was still improving; a larger --steps may change the result"]


@pytest.mark.parametrize("cls", METHODS)
def test_the_protocol_is_the_only_place_of_the_training_settings(cls):
    """Issue 18: no learner takes a training setting of its own; without a protocol it trains the task's default."""
    from coalitions.learners.training.protocol import protocol_with

    for legacy in ("model", "hidden", "rounds", "local_epochs", "batch_size", "optimizer", "lr", "momentum",
                   "weight_decay", "patience"):
        assert legacy not in cls.param_names()
        with pytest.raises(TypeError):
            cls(**{legacy: None})
    fed = blobs(sizes=(9, 12, 7, 10))
    m = cls(seed=1).fit(fed)
    want = protocol_with(fed.task, fed.input_shape)
    assert m.protocol_ == want and m.estimate_.config["protocol"] == want.to_json()
    assert m.rounds_ == -(-want.steps // m.steps_per_round_) and m.lr_ == want.lr   # FedAMP: 5 steps a round
