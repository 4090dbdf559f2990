"""The one learning-rate selection rule (learners/training/tuning.py: RateChoice, choose_rate), against references.

Every tuned place chooses its rate by it: a column (tune_lr), Local's clients, the exhaustive game's
subset models (game/chunks.py) and SPO's hypernetworks.  The references below are the loops each of
them ran before the rule was shared (issue 32), word for word: the rule must give their choice on
any table, ties, NaN and infinities included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.learners.training.tuning import RateChoice, choose_rate, tune_lr

#: Few distinct values, so that ties are common, and every non-finite one.
LOSS = st.sampled_from([0.0, 0.1, 0.2, 0.2, 1.0, 3.5, math.nan, math.inf, -math.inf])
TABLE = st.integers(1, 5).flatmap(
    lambda tracks: st.lists(st.lists(LOSS, min_size=tracks, max_size=tracks), min_size=1, max_size=6))


def ref_tune_lr(column):
    """tune_lr's loop (one track): a finite score strictly below the best so far wins; the first is the default."""
    best, best_score = None, math.inf
    for k, s in enumerate(column):
        if best is None or (math.isfinite(s) and s < best_score):
            best, best_score = k, (s if math.isfinite(s) else math.inf)
    return best


def ref_local(table):
    """Local._per_client's: argmin per client of the losses, a non-finite one read as +inf."""
    kept = np.array(table, dtype=float)
    kept_or_inf = np.where(np.isfinite(kept), kept, np.inf)
    return [int(np.argmin(kept_or_inf[:, i])) for i in range(kept.shape[1])]


def ref_chunks(table):
    """ChunkTrainer.__call__'s: strictly below the best so far, which starts at +inf (-1: no rate kept)."""
    best_loss = np.full(len(table[0]), np.inf)
    chosen = np.full(len(table[0]), -1)
    for k, pooled in enumerate(np.array(table, dtype=float)):
        better = pooled < best_loss
        best_loss = np.where(better, pooled, best_loss)
        chosen[better] = k
    return chosen.tolist()


def ref_spo(column):
    """SPO._train_tuned's: the first run, replaced by a run whose loss is below the kept one (Python's <)."""
    best = None
    for k, s in enumerate(column):
        if best is None or s < best[0]:
            best = (s, k)
    return best[1]


@settings(max_examples=400, deadline=None)
@given(TABLE)
def test_the_rule_gives_every_callers_former_choice(table):
    columns = [list(c) for c in zip(*table, strict=True)]
    assert choose_rate(table).tolist() == ref_local(table) == [ref_tune_lr(c) for c in columns]
    assert choose_rate(table, finite_only=False, first=False).tolist() == ref_chunks(table)
    assert choose_rate(table, finite_only=False).tolist() == [ref_spo(c) for c in columns]
    for c in columns:   # one track, a 1-D table: tune_lr itself
        assert tune_lr(lambda lr: lr, range(len(c)), lambda lr, c=c: c[int(lr)])[1]["chosen"] == ref_tune_lr(c)


@settings(max_examples=200, deadline=None)
@given(TABLE)
def test_the_plain_reading_holds_where_every_loss_is_finite(table):
    """Finite losses: all four settings agree on the lowest loss, the earliest on a tie."""
    t = np.array(table, dtype=float)
    finite = np.all(np.isfinite(t), axis=0)
    plain = [min(range(len(t)), key=lambda k: (t[k, i], k)) for i in range(t.shape[1])]
    for finite_only in (True, False):
        for first in (True, False):
            got = choose_rate(t, finite_only=finite_only, first=first)
            assert [g for g, f in zip(got.tolist(), finite, strict=True) if f] == [
                p for p, f in zip(plain, finite, strict=True) if f]


def test_running_choice_reports_which_tracks_switch_and_their_rates():
    choice = RateChoice(finite_only=False, first=False)
    assert choice.offer([math.nan, 1.0, math.inf]).tolist() == [False, True, False]
    assert choice.offer([2.0, 1.0, math.nan]).tolist() == [True, False, False]
    assert choice.index.tolist() == [1, 0, -1] and choice.offered == 2
    assert np.array_equal(choice.rates([0.1, 0.01]), [0.01, 0.1, math.nan], equal_nan=True)
    assert bool(RateChoice().offer(math.nan))   # one track, a scalar loss: the first rate is the default
    with pytest.raises(ValueError, match="shape"):
        choice.offer([1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        choose_rate(np.zeros((0, 3)))
