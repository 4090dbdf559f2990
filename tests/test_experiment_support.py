"""The reports' support of the exact CE is taken as the CE was found: at its level, with the game's errors."""

import numpy as np

import coalitions as co
from coalitions.learners.experiments.summaries import exact_summary
from coalitions.noise import Uncertainty
from coalitions.replicates import Replicates
from coalitions.support import support


def _measured(seed: int = 0) -> tuple[co.Game, Replicates]:
    """A flat 6-client game (every coalition worth the same) measured with noise: ties everywhere."""
    rng = np.random.default_rng(seed)
    truth = np.where(np.isnan(co.mean_estimation([5] * 6).values), np.nan, 0.5)
    noise = lambda *shape: 0.01 * rng.normal(size=shape)  # noqa: E731
    game = co.Game.from_array(truth + noise(*truth.shape))
    reps = Replicates.from_array(game.raw_values()[None] + noise(50, *truth.shape), game.clients)
    return game.with_uncertainty(Uncertainty.from_replicates(reps)), reps


def test_the_reported_support_is_the_noise_aware_one():
    game, reps = _measured()
    eq = co.solve(game)
    assert eq.z == 1.96
    summary = exact_summary(game, game, "accuracy", eq=eq, replicates=reps)
    want = support(eq.masks, reps, eq.semantics, eq.tol, z=eq.z, uncertainty=game.uncertainty)
    point = support(eq.masks, reps, eq.semantics, eq.tol)             # every replicate on point values
    assert summary.support["partition"] == want.partition_share
    assert want.partition_share != point.partition_share                   # the two readings differ here
