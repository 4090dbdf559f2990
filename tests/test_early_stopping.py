"""Early stopping of the round-based learners (docs/learners-personalized.md): one validation
evaluation per round, the best round's models kept, the stopping step recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.methods.base import EarlyStop
from coalitions.learners.methods.baselines import FedAvg
from coalitions.learners.methods.fedamp import FedAMP
from coalitions.learners.methods.fedper import FedPer
from coalitions.learners.training.engine import flatten
from coalitions.params import ParameterError

# lr 0.5 over-shoots on these blobs, so the validation loss turns up and patience bites
STEPS = 30
PROTOCOL = sgd_protocol(STEPS, model="mlp", hidden=8, batch_size=None, lr=0.5)
KW = dict(seed=3, engine="batched")


def patient(patience=2, **changes):
    """The learners' keywords with the protocol's patience (and other fields) changed."""
    return {**KW, "protocol": PROTOCOL.with_(patience=patience, **changes)}


class Stop(Exception):
    pass


def test_early_stop_counts_rounds_without_improvement():
    s = EarlyStop(2)
    assert [s.update(v) for v in (3.0, 2.0, 2.5, 2.0)] == [True, True, False, False]
    assert s.stopped and s.best_round == 2 and s.best == 2.0
    never = EarlyStop(None, history=(1.0, 2.0, 3.0, 4.0))
    assert not never.stopped and never.best_round == 1


@pytest.mark.parametrize("cls", [FedAvg, FedPer, FedAMP])
def test_the_kept_models_are_a_run_that_ends_at_the_best_round(cls):
    fed = blobs(sizes=(9, 12, 7, 10))
    stopped = cls(**patient()).fit(fed)
    run = len(stopped.val_loss_history_)
    best = int(np.argmin(stopped.val_loss_history_)) + 1
    assert stopped.best_round_ == best
    if stopped.hit_max_:
        assert run == stopped.rounds_
    else:
        assert run == best + 2 and stopped.stopped_at_ == run * stopped.steps_per_round_
    # full batch: one step per round, FedAMP's default five (local_steps=5)
    assert stopped.steps_per_round_ == (5 if cls is FedAMP else 1) and stopped.lr_ == PROTOCOL.lr
    assert stopped.rounds_ == STEPS // stopped.steps_per_round_
    short = cls(**patient(None, steps=best * stopped.steps_per_round_)).fit(fed)
    assert torch.equal(flatten(stopped.params_), flatten(short.params_))
    assert stopped.utilities_ == short.utilities_
    assert short.hit_max_ and short.stopped_at_ == best * short.steps_per_round_


def test_the_fixture_actually_stops_early():
    fed = blobs(sizes=(9, 12, 7, 10))
    assert not FedAvg(**patient()).fit(fed).hit_max_


def test_resume_with_patience_equals_an_uninterrupted_run(tmp_path):
    fed = blobs(sizes=(9, 12, 7, 10))
    whole = FedAvg(**patient()).fit(fed)
    assert not whole.hit_max_

    def progress(done, total):
        if done == whole.best_round_ + 1:
            raise Stop
    path = tmp_path / "ck.npz"
    with pytest.raises(Stop):
        FedAvg(checkpoint=path, progress=progress, **patient()).fit(fed)
    resumed = FedAvg(checkpoint=path, **patient()).fit(fed)
    assert resumed.resumed_from_ == whole.best_round_ + 1
    assert torch.equal(flatten(resumed.params_), flatten(whole.params_))
    assert (resumed.stopped_at_, resumed.best_round_) == (whole.stopped_at_, whole.best_round_)


def test_patience_is_checked_and_comes_from_the_protocol_only():
    with pytest.raises(ParameterError, match="^patience must be"):
        PROTOCOL.with_(patience=0)
    with pytest.raises(TypeError):
        FedAvg(patience=2, **KW)
