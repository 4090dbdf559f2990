"""Peeling on the measured part of a lazy game (coalitions.measured_peeling; docs/scale.md, "The start")."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_line, run
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.analytic import planted
from coalitions.graph import ExactOracle
from coalitions.lazy import GameSource
from coalitions.measured import MeasuredGame
from coalitions.measured_peeling import MeasuredOracle, measured_start, peel_measured
from coalitions.noise import Uncertainty


def _measured(game, masks=None):
    cache = MeasuredGame(GameSource(game))
    n = len(game.clients)
    cache.measure(np.arange(1, 1 << n) if masks is None else np.asarray(masks))
    return cache


@settings(max_examples=40, deadline=None)
@given(groups=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 10_000),
       within=st.integers(1, 2**9 - 1))
def test_with_every_coalition_measured_each_client_chooses_as_on_the_whole_game(groups, seed, within):
    """The collaborators of every client within every remaining set are the exact game's OCS (no ties)."""
    game = planted(groups, noise=0.05, seed=seed)
    n = len(game.clients)
    within &= (1 << n) - 1
    if not within:
        return
    oracle, exact = MeasuredOracle(_measured(game)), ExactOracle(game, "shared")
    for i in range(n):
        if within >> i & 1:
            assert oracle.ocs(i, within) == exact.ocs(i, within).collaborators


@settings(max_examples=25, deadline=None)
@given(groups=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 10_000),
       share=st.floats(0.0, 1.0), ties=st.sampled_from([0.0, 0.5]))
def test_a_partial_measurement_peels_to_a_partition_of_measured_blocks(groups, seed, share, ties):
    """Any measured part (singletons always; ties included): a partition whose blocks were all measured (a union
    of the members' choices that nobody measured is not peeled; its clients start alone)."""
    game = planted(groups, noise=0.05, ties=ties, seed=seed)
    n = len(game.clients)
    rng = np.random.default_rng(seed)
    others = [m for m in range(1, 1 << n) if m & (m - 1)]
    masks = [1 << i for i in range(n)] + [m for m in others if rng.random() < share]
    cache = _measured(game, sorted(masks))
    start = measured_start(cache)
    assert sorted(b for k in start for b in co.bitmask.members(k)) == list(range(n))
    assert set(start) <= set(int(m) for m in cache.masks)
    assert set(peel_measured(cache).partition) <= set(start)


def test_only_singletons_measured_gives_everyone_alone_and_a_missing_singleton_is_refused():
    game = planted((2, 2), seed=1)
    assert peel_measured(_measured(game, [1, 2, 4, 8])).partition == (1, 2, 4, 8)
    with pytest.raises(co.InputError, match="singleton measured; not measured: c3"):
        peel_measured(_measured(game, [1, 2, 4, 3]))


def test_a_gain_within_its_noise_is_not_formed():
    """Two clients who gain 0.1 together with a standard error of 0.1 per value stay alone at z = 1.96, pair at 0."""
    g = co.Game.from_array(np.array([[np.nan, 0.5, np.nan, 0.6], [np.nan, np.nan, 0.5, 0.6]]))
    game = g.with_uncertainty(Uncertainty.from_se(g, np.full((2, 4), 0.1)))
    cache = _measured(game)
    assert peel_measured(cache, z=0.0).partition == (3,)
    assert sorted(peel_measured(cache, z=1.96).partition) == [1, 2]


def test_sample_ce_starts_from_peeling_a_measured_file(capsys, tmp_path):
    """A first run's cache as the second run's start: it starts where the first ended and repairs nothing."""
    args = ["sample-ce", "planted", "--groups", "4,4,4", "--seed", "3", "--budget", "600", "--format", "json"]
    rc, first, _ = run(capsys, *args, "--resume", tmp_path / "c.npz")
    assert rc == 0
    rc, second, _ = run(capsys, *args, "--from", tmp_path / "c.npz")
    a, b = json.loads(first), json.loads(second)
    assert rc == 0 and b["partition"] == a["partition"] and b["search"]["start"] == a["partition"]
    assert b["search"]["repairs"] == 0 < a["search"]["repairs"]
    rc, _, err = run(capsys, "sample-ce", "planted", "--groups", "4,4,5", "--seed", "3", "--budget", "600",
                     "--from", tmp_path / "c.npz")
    assert rc == 2 and "measured by another source: its clients are 12, the source's 13" in one_line(err)
