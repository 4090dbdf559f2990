"""The one early-stopping rule (learners/training/stopping.py) against a plain reading of it.

The reference below is the rule as the docs state it, one track at a time in Python floats:
strictly lower is better, ``patience`` evaluations without improvement stop the track, a stopped
track sees nothing more.  :class:`Patience` runs every track at once on tensors; it must agree
with the reference on every sequence, ties and NaN included, and so must the adapters built on it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.learners.game.stopping import SubsetEarlyStop
from coalitions.learners.methods.base import ClientsEarlyStop, EarlyStop
from coalitions.learners.training.stopping import Patience


def reference(patience, losses, steps=None, warmup=0):
    """One track of the rule: ``(improved per evaluation, best, best_step, bad, stopped, stopped_at)``.

    The first ``warmup`` evaluations are only recorded (where the track was last evaluated)."""
    best, best_step, bad, stopped, stopped_at, improved = math.inf, 0, 0, False, 0, []
    for k, loss in enumerate(losses):
        step = k + 1 if steps is None else steps[k]
        if stopped:
            improved.append(False)
            continue
        stopped_at = step
        if k < warmup:
            improved.append(False)
            continue
        if loss < best:
            best, best_step, bad = loss, step, 0
            improved.append(True)
        else:
            bad += 1
            improved.append(False)
        stopped = patience is not None and bad >= patience
    return improved, best, best_step, bad, stopped, stopped_at


# losses from a few values, so that ties are frequent; NaN never improves
LOSS = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0, -1.0, math.inf, math.nan])
PATIENCE = st.one_of(st.none(), st.integers(1, 4))
WARMUP = st.integers(0, 3)


@settings(max_examples=300, deadline=None)
@given(PATIENCE, st.integers(1, 4).flatmap(lambda k: st.lists(st.lists(LOSS, min_size=k, max_size=k), max_size=12)),
       WARMUP)
def test_every_track_follows_the_reference(patience, rows, warmup):
    k = len(rows[0]) if rows else 2
    rule = Patience(patience, tracks=k, warmup=warmup)
    steps = [3 * (r + 1) for r in range(len(rows))]
    got = [rule.update(row, step=s).tolist() for row, s in zip(rows, steps, strict=True)]
    for j in range(k):
        improved, best, best_step, bad, stopped, stopped_at = reference(patience, [row[j] for row in rows], steps,
                                                                        warmup)
        assert [g[j] for g in got] == improved
        assert float(rule.best[j]) == best and int(rule.best_step[j]) == best_step
        assert int(rule.bad[j]) == bad and bool(rule.active[j]) is not stopped and int(rule.stopped_at[j]) == stopped_at
    assert rule.stopped == all(not bool(a) for a in rule.active)


@settings(max_examples=200, deadline=None)
@given(PATIENCE, st.lists(LOSS, max_size=15), WARMUP)
def test_the_scalar_adapters_follow_the_reference(patience, losses, warmup):
    improved, best, best_step, _, stopped, stopped_at = reference(patience, losses, warmup=warmup)
    scalar = Patience(patience, warmup=warmup)
    assert [bool(scalar.update(v)) for v in losses] == improved and scalar.stopped is stopped
    # the round runner's stop on the mean, fed only while it runs (as the runner does)
    stop = EarlyStop(patience, warmup=warmup)
    seen = [stop.update(v) for v in losses[:len(losses) if not stopped else stopped_at]]
    assert seen == improved[:len(seen)] and stop.stopped is stopped and stop.best_round == best_step
    assert stop.best_rounds(3) == [best_step] * 3 and stop.stop_rounds(2) == [stopped_at] * 2
    assert stop.best == best   # NaN never improves: the best is a number or inf


@settings(max_examples=200, deadline=None)
@given(PATIENCE, st.integers(1, 4).flatmap(lambda k: st.lists(st.lists(LOSS, min_size=k, max_size=k), max_size=12)),
       WARMUP)
def test_the_per_client_and_the_stacked_adapters_follow_the_reference(patience, rows, warmup):
    k = len(rows[0]) if rows else 3
    clients = ClientsEarlyStop(patience, k, warmup=warmup)
    got = [clients.update_clients(row).tolist() for row in rows]
    stacked = None if patience is None else SubsetEarlyStop(patience, k)
    for s, row in enumerate(rows, start=1):
        if stacked is not None:   # each model's parameters: its step
            stacked.update(torch.tensor(row), {"w": torch.full((k, 2), float(s))}, step=s)
    for j in range(k):
        improved, _, best_step, _, _, stopped_at = reference(patience, [row[j] for row in rows], warmup=warmup)
        assert [g[j] for g in got] == improved
        assert clients.best_rounds(k)[j] == best_step and clients.stop_rounds(k)[j] == stopped_at
        _, _, best_step, _, stopped, stopped_at = reference(patience, [row[j] for row in rows])  # no warm-up
        if stacked is not None:
            assert int(stacked.best_step[j]) == best_step and int(stacked.stopped_at[j]) == stopped_at
            assert bool(stacked.active[j]) is not stopped
            assert stacked.best_params({"w": torch.zeros(k, 2)})["w"][j].tolist() == (
                [float(best_step)] * 2 if best_step else [0.0, 0.0] if not rows else [1.0, 1.0])


def test_a_stopped_rule_keeps_its_record_and_its_state_round_trips():
    rule = Patience(2, tracks=3)
    for row in ([3.0, 1.0, 2.0], [3.0, 0.5, 2.0], [3.0, 0.7, 1.0], [0.0, 0.8, 1.0]):
        rule.update(row)
    assert rule.active.tolist() == [False, False, True] and rule.stopped_at.tolist() == [3, 4, 4]
    assert rule.best_step.tolist() == [1, 2, 3] and rule.best.tolist() == [3.0, 0.5, 1.0]
    again = Patience(2, tracks=3)
    again.load_state_dict({k: v.clone() for k, v in rule.state_dict().items()})
    assert rule.state_dict()["active"].dtype == torch.int64
    assert (rule.update([1.0, 0.0, 0.5]).tolist() == again.update([1.0, 0.0, 0.5], step=5).tolist()
            == [False, False, True])
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in rule.state_dict().items())


@pytest.mark.parametrize("patience", [0, -1, 1.5, True, "2"])
def test_a_patience_that_is_no_count_of_evaluations_is_refused(patience):
    with pytest.raises((ValueError, TypeError)):
        Patience(patience)


@pytest.mark.parametrize("warmup", [-1, 1.5, True, "2"])
def test_a_warmup_that_is_no_count_of_evaluations_is_refused(warmup):
    with pytest.raises((ValueError, TypeError)):
        Patience(2, warmup=warmup)


def test_losses_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match="for 2 tracks"):
        Patience(1, tracks=2).update([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="for 2 tracks"):
        Patience(1, tracks=2).update(1.0)
    assert Patience(1).update(np.float32(0.5)).tolist() == [True]
