"""Lazy games, the budgeted search and its statistical certificate (issue 34; docs/scale.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import one_line, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions import io as cio
from coalitions.axioms import outer_agreement
from coalitions.bitmask import popcount
from coalitions.brute_force import equilibrium_masks
from coalitions.lazy import GameSource, Measurement
from coalitions.lazy_analytic import MeanEstimationSource, PlantedSource
from coalitions.measured import MeasuredGame
from coalitions.noise import Uncertainty
from coalitions.pac import d_weights, draw_coalitions, draws_for, epsilon_bound, neighbourhood
from coalitions.replicates import Replicates
from coalitions.testing import CertificateFailure, assert_sampled_stable
from coalitions.testing.strategies import games

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Counting:
    """A source that records every coalition it is asked to measure, and can stop after some calls."""

    def __init__(self, inner, stop_after: int | None = None):
        self.inner, self.asked, self.calls, self.stop_after = inner, [], 0, stop_after
        self.clients, self.sense, self.provenance = inner.clients, inner.sense, inner.provenance

    def measure(self, masks):
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.asked += [int(m) for m in masks]
        return self.inner.measure(masks)


# ------------------------------------------------------------------ lazy sources


@FAST
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.integers(0, 10_000),
       st.sampled_from([0.0, 0.05, 0.5]), st.sampled_from([0.0, 0.25]), st.randoms(use_true_random=False))
def test_lazy_planted_equals_the_exhaustive_game_in_any_order(groups, seed, noise, ties, rnd):
    game = co.planted(groups, noise=noise, ties=ties, seed=seed)
    masks = list(range(1, 1 << game.n))
    rnd.shuffle(masks)
    src = PlantedSource(tuple(groups), noise, ties, seed)
    half = len(masks) // 2
    for part in (masks[:half], masks[half:]):
        if part:
            got = src.measure(np.array(part))
            assert np.array_equal(got.values, game.raw_values()[:, part], equal_nan=True)


@pytest.mark.parametrize("federation", ["uniform", "coarse", "fine"])
def test_lazy_mean_estimation_equals_the_exhaustive_game(federation):
    game = co.mean_estimation([5, 5, 25, 3, 40], federation=federation)
    masks = np.arange(1, 1 << 5)[::-1].copy()
    got = MeanEstimationSource((5, 5, 25, 3, 40), federation=federation).measure(masks)
    assert np.array_equal(got.values, game.raw_values()[:, masks], equal_nan=True)


def test_the_game_command_and_the_lazy_source_agree(capsys, tmp_path):
    rc, _, _ = run(capsys, "game", "planted", "--groups", "3,3", "--seed", "5", "-o", tmp_path / "g.npz")
    assert rc == 0
    game = co.read_game(tmp_path / "g.npz")
    masks = np.arange(1, 64)
    assert np.array_equal(PlantedSource((3, 3), seed=5).measure(masks).values, game.raw_values()[:, masks],
                          equal_nan=True)


def test_a_lazy_planted_game_of_50_clients_allocates_no_table():
    src = PlantedSource((10,) * 5, seed=1)
    big = np.array([(1 << 50) - 1, 0b1111111111], dtype=np.int64)
    v = src.measure(big).values
    assert v.shape == (50, 2) and np.isfinite(v[:, 0]).all() and np.isnan(v[10:, 1]).all()


def test_the_game_source_carries_the_uncertainty():
    game = co.planted([2, 1], seed=3)
    rng = np.random.default_rng(0)
    reps = Replicates.from_array(game.raw_values()[None] + rng.normal(0, 0.1, (5, 3, 8)) * ~np.isnan(
        game.raw_values()[None]), game.clients)
    noisy = game.with_uncertainty(Uncertainty.from_replicates(reps))
    cache = MeasuredGame(GameSource(noisy))
    cache.measure(np.arange(1, 8))
    assert cache.kind == "replicates"
    s, t = np.array([3, 5, 7]), np.array([1, 1, 1])
    assert np.allclose(cache.diff_se(0, s, t), noisy.uncertainty.diff_se(0, s, t))


# ------------------------------------------------------------------ the bound


@pytest.mark.parametrize("m", [1, 2, 29, 299, 3000])
def test_epsilon_without_a_blocker_is_the_closed_form_and_the_beta_quantile(m):
    stats = pytest.importorskip("scipy.stats")
    assert epsilon_bound(m, 0, 0.05) == pytest.approx(1 - 0.05 ** (1 / m), rel=1e-12)
    assert epsilon_bound(m, 0, 0.05) == pytest.approx(stats.beta.ppf(0.95, 1, m), rel=1e-9)


@pytest.mark.parametrize("m, k, delta", [(10, 3, 0.05), (299, 1, 0.05), (299, 7, 0.01), (1000, 40, 0.2)])
def test_epsilon_is_the_clopper_pearson_bound(m, k, delta):
    stats = pytest.importorskip("scipy.stats")
    assert epsilon_bound(m, k, delta) == pytest.approx(stats.beta.ppf(1 - delta, k + 1, m - k), rel=1e-9)
    assert epsilon_bound(m, m, delta) == 1.0


@pytest.mark.parametrize("eps, delta", [(0.01, 0.05), (0.05, 0.05), (0.1, 0.01), (0.001, 0.1)])
def test_the_draws_needed_are_the_least_that_reach_epsilon(eps, delta):
    m = draws_for(eps, delta)
    assert m == math.ceil(math.log(delta) / math.log(1 - eps)) or epsilon_bound(m - 1, 0, delta) > eps
    assert epsilon_bound(m, 0, delta) <= eps < epsilon_bound(m - 1, 0, delta)
    assert draws_for(0.01, 0.05) == 299


@pytest.mark.parametrize("distribution", ["uniform-size", "mixed"])
def test_d_is_a_distribution_and_the_draws_follow_it(distribution):
    n, part = 5, (0b00011, 0b11100)
    everything = np.arange(1, 1 << n)
    w = d_weights(everything, n, distribution, part)
    assert w.sum() == pytest.approx(1.0) and (w[np.bitwise_count(everything) < 2] == 0).all()
    drawn = draw_coalitions(np.random.default_rng(1), n, 40_000, distribution, part)
    freq = np.bincount(drawn, minlength=1 << n)[1:] / drawn.size
    assert np.abs(freq - w).max() < 0.01
    assert set(neighbourhood(part, n).tolist()) >= {0b11111, 0b00111}


# ------------------------------------------------------------------ the cache


def test_the_cache_never_measures_a_coalition_twice_and_counts_what_it_trains():
    src = Counting(PlantedSource((3, 3, 2), seed=4))
    cache = MeasuredGame(src)
    r = co.sample_ce(src, budget=600, epsilon=0.05, delta=0.05, cache=cache, seed=2)
    assert len(src.asked) == len(set(src.asked)) == cache.trainings == r.trained == r.trainings
    again = co.sample_ce(src, budget=600, epsilon=0.05, delta=0.05, cache=cache, seed=2)
    assert again == r and again.trained == 0 and len(src.asked) == cache.trainings


def test_an_interrupted_run_resumes_to_the_same_result_bit_for_bit(tmp_path):
    whole = co.sample_ce(PlantedSource((4, 4, 3), noise=0.3, seed=8), budget=900, epsilon=0.02, delta=0.05, seed=5)
    path = tmp_path / "cache.npz"
    stopped = Counting(PlantedSource((4, 4, 3), noise=0.3, seed=8), stop_after=7)
    with pytest.raises(KeyboardInterrupt):
        co.sample_ce(stopped, budget=900, epsilon=0.02, delta=0.05, seed=5, save_to=path)
    src = Counting(PlantedSource((4, 4, 3), noise=0.3, seed=8))
    cache = MeasuredGame.load(path, src)
    assert cache.trainings == len(stopped.asked) > 0
    resumed = co.sample_ce(src, budget=900, epsilon=0.02, delta=0.05, seed=5, cache=cache, save_to=path)
    assert resumed == whole
    assert json.dumps(co.sampled_ce.sampled_to_json(resumed)) == json.dumps(co.sampled_ce.sampled_to_json(whole))
    assert resumed.trained + len(stopped.asked) == whole.trained
    assert not set(src.asked) & set(stopped.asked)


def test_a_cache_of_another_source_is_refused_naming_the_difference(tmp_path):
    cache = MeasuredGame(PlantedSource((2, 2), seed=1))
    cache.measure(np.array([3, 12]))
    cache.save(tmp_path / "m.npz")
    for other, fragment in [(PlantedSource((2, 2), seed=2), "provenance 'seed' is 1 in the file, 2"),
                            (PlantedSource((2, 2), seed=1, names=["a", "b", "c", "d"]), "clients"),
                            (MeanEstimationSource((1, 2, 3, 4), names=["c0", "c1", "c2", "c3"]), "sense")]:
        with pytest.raises(co.InputError, match=fragment):
            MeasuredGame.load(tmp_path / "m.npz", other)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(co.InputError, match="bad.npz: not a coalitions/measured@1 file"):
        MeasuredGame.load(tmp_path / "bad.npz", PlantedSource((2, 2), seed=1))
    np.savez(tmp_path / "other.npz", format=np.array("coalitions/game@2"))
    with pytest.raises(co.InputError, match="lacks array|unknown format"):
        MeasuredGame.load(tmp_path / "other.npz", PlantedSource((2, 2), seed=1))


def test_a_source_answering_badly_is_refused():
    class Liar(PlantedSource):
        def measure(self, masks):
            m = super().measure(masks)
            return Measurement(m.masks, np.nan_to_num(m.values, nan=1.0))

    with pytest.raises(co.InputError, match="must be NaN"):
        MeasuredGame(Liar((2, 2))).measure(np.array([3]))


# ------------------------------------------------------------------ search and certificate


@FAST
@given(games(min_n=2, max_n=4, ties=None), st.integers(0, 3), st.sampled_from([0.0, 0.5]))
def test_an_exhaustive_sample_agrees_with_brute_force_about_outer_agreement(game, seed, tol):
    r = co.sample_ce(GameSource(game), budget=200, epsilon=0.05, delta=0.05, seed=seed, tol=tol)
    c = r.certificate
    assert c.outer_method == "exhaustive" and c.m == (1 << game.n) - 1 - game.n
    truth = outer_agreement(game, r.masks, "shared", tol)
    assert c.outer_agreement == truth.holds
    assert c.blocking_draws == truth.violations - sum(1 for b in c.individual)
    if c.outer_agreement and c.inner_agreement:
        assert c.inner_exhaustive
        assert tuple(sorted(r.masks)) in {tuple(sorted(p)) for p in equilibrium_masks(game, "shared", tol)}


def test_planted_groups_are_found_and_certified():
    r = co.sample_ce(PlantedSource((4, 4, 4), seed=3), budget=1000, epsilon=0.01, delta=0.05, seed=1)
    assert r.blocks() == [["c0", "c1", "c2", "c3"], ["c4", "c5", "c6", "c7"], ["c8", "c9", "c10", "c11"]]
    assert r.certificate.m == 299 and r.certificate.epsilon <= 0.01 and r.search.stopped == "stable"
    assert_sampled_stable(r, epsilon=0.01, inner_exhaustive=True)
    assert r.trainings <= 1000


def test_a_start_and_a_benefit_graph_are_used():
    src = PlantedSource((3, 3), seed=0)
    r = co.sample_ce(src, budget=400, epsilon=0.05, delta=0.05, start="c0,c1,c2|c3,c4,c5", seed=0)
    assert r.search.repairs == 0 and r.blocks() == [["c0", "c1", "c2"], ["c3", "c4", "c5"]]
    g = co.sample_ce(src, budget=400, epsilon=0.05, delta=0.05, edges=[(1, 0), (0, 1), (2, 0)], seed=0)
    assert g.blocks() == r.blocks()


def test_the_sampled_assertion_fails_on_a_blocked_partition():
    # no budget left to search: everyone stays alone, and the groups' coalitions block
    r = co.sample_ce(PlantedSource((3, 3), seed=0), budget=69, epsilon=0.05, delta=0.05, seed=0)
    assert r.search.trainings == 0 and r.masks == tuple(1 << i for i in range(6))
    assert not r.holds and r.certificate.blockers
    with pytest.raises(CertificateFailure, match="blocks: c"):
        assert_sampled_stable(r)


def test_the_budget_must_cover_the_certificate_before_anything_trains():
    src = Counting(PlantedSource((6, 6), seed=0))
    with pytest.raises(co.InputError, match="below the 323 coalitions"):
        co.sample_ce(src, budget=322, epsilon=0.01, delta=0.05)
    assert src.asked == []
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(co.InputError, match="epsilon must be a number strictly between 0 and 1"):
            co.sample_ce(src, budget=5000, epsilon=bad)


# ------------------------------------------------------------------ the command


def test_sample_ce_certifies_a_planted_game_and_writes_json(capsys, tmp_path):
    rc, out, _ = run(capsys, "sample-ce", "planted", "--groups", "4,4", "--seed", "3", "--budget", "800",
                     "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["format"] == "coalitions/sampled-equilibrium@1"
    assert data["certificate"]["m"] == 247 and data["certificate"]["outer_method"] == "exhaustive"
    assert data["partition"] == [["c0", "c1", "c2", "c3"], ["c4", "c5", "c6", "c7"]]
    rc, out, _ = run(capsys, "sample-ce", "planted", "--groups", "6,6", "--seed", "3", "--budget", "900",
                     "--epsilon", "0.05", "-o", tmp_path / "r.json", "--format", "json")
    assert rc == 0 and cio.read_json(tmp_path / "r.json")["certificate"]["m"] == 59


def test_sample_ce_resumes_from_its_cache_and_starts_from_a_file(capsys, tmp_path):
    args = ["sample-ce", "planted", "--groups", "5,5", "--seed", "1", "--budget", "900", "--epsilon", "0.02",
            "--resume", tmp_path / "c.npz", "--format", "json"]
    rc, first, _ = run(capsys, *args)
    rc2, second, err = run(capsys, *args)
    assert rc == rc2 == 0 and "measured already" in err
    a, b = json.loads(first), json.loads(second)
    assert a == b
    (tmp_path / "eq.json").write_text(first)
    rc, out, _ = run(capsys, "sample-ce", "planted", "--groups", "5,5", "--seed", "1", "--budget", "900",
                     "--epsilon", "0.02", "--from", tmp_path / "eq.json", "--format", "json")
    assert rc == 0 and json.loads(out)["search"]["repairs"] == 0


def test_sample_ce_reads_a_game_file_lazily(capsys, tmp_path):
    co.write_game(co.mean_estimation([5, 5, 25]), tmp_path / "g.json")
    rc, out, _ = run(capsys, "sample-ce", tmp_path / "g.json", "--budget", "100")
    assert rc == 0 and "partition: 0,1 | 2" in out


def test_sample_ce_says_no_when_the_sample_finds_blockers(capsys):
    rc, out, err = run(capsys, "sample-ce", "planted", "--groups", "3,3", "--budget", "70")
    assert rc == 1 and "certified: no" in out and "not certified" in one_line(err)


@pytest.mark.parametrize("args, fragment", [
    (["planted", "--groups", "6,6", "--budget", "300"], "--budget 300 is below the 323 coalitions"),
    (["planted", "--groups", "3,3", "--budget", "900", "--epsilon", "1.5"], "--epsilon must be a number strictly"),
    (["planted", "--groups", "3,3", "--budget", "900", "--delta", "0"], "--delta"),
    (["nowhere", "--budget", "900"], "unknown source 'nowhere'"),
    (["planted", "--budget", "900"], "planted needs --groups"),
    (["mean-estimation", "--sizes", "5,5", "--groups", "3", "--budget", "900"], "--groups is an option of planted"),
    (["planted", "--groups", "3,x", "--budget", "900"], "--groups must be comma-separated numbers"),
])
def test_sample_ce_refuses_bad_input_in_one_line(capsys, args, fragment):
    rc, _, err = run(capsys, "sample-ce", *args)
    assert rc == 2 and fragment in one_line(err)


@FAST
@given(games(min_n=2, max_n=4, ties=False), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 1.96]))
def test_noise_aware_blocking_agrees_with_the_exhaustive_check(game, seed, z):
    from coalitions.certificate import outer_agreement as streamed_outer

    se = np.random.default_rng(seed).uniform(0.0, 0.5, game.values.shape)
    noisy = game.with_uncertainty(Uncertainty.from_se(game, se))
    r = co.sample_ce(GameSource(noisy), budget=200, epsilon=0.05, delta=0.05, seed=1)
    assert r.certificate.z == 1.96 and r.certificate.outer_method == "exhaustive"   # the source's SEs set z
    r = co.sample_ce(GameSource(noisy), budget=200, epsilon=0.05, delta=0.05, seed=1, z=z)
    truth = streamed_outer(noisy, r.masks, "shared", 1e-9, z=z)
    assert r.certificate.outer_agreement == truth.holds


def test_a_budget_too_small_for_every_start_block_still_judges_at_the_sources_level():
    """The search's share holds fewer coalitions than the start has blocks: the certificate is still at z = 1.96.

    (It was judged on point values, z = 0: the level was read off the start's blocks only when all of them fit.)
    """
    n = 12
    game = co.planted([4, 4, 4], seed=2)
    se = np.where(np.isnan(game.values), np.nan, 0.05)
    noisy = game.with_uncertainty(Uncertainty.from_se(game, se))
    need = co.sampled_ce.required_budget(n, 0.05, 0.05)
    r = co.sample_ce(GameSource(noisy), budget=need + 5, epsilon=0.05, delta=0.05, seed=0)
    assert 0 < r.search.trainings < n and r.search.stopped == "budget"
    assert r.certificate.z == 1.96


def test_a_cache_of_one_game_file_is_refused_for_another_with_the_same_provenance(tmp_path):
    a = co.Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 2}})
    b = co.Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 3}, "b": {"b": 1, "a,b": 2}})
    cache = MeasuredGame(GameSource(a))
    cache.measure(np.array([1, 3]))
    cache.save(tmp_path / "m.npz")
    assert MeasuredGame.load(tmp_path / "m.npz", GameSource(a)).trainings == 2
    with pytest.raises(co.InputError, match="provenance 'sha256'"):
        MeasuredGame.load(tmp_path / "m.npz", GameSource(b))


def test_sample_ce_starts_from_an_estimate_and_its_benefit_graph(capsys, tmp_path):
    from coalitions.estimate import Estimate, write_estimate
    from coalitions.graph import BenefitGraph

    graph = BenefitGraph(("a", "b", "c"), 0b111, ((0, 0b010), (1, 0b001), (2, 0)))
    util = {"a": 0.5, "b": 0.25, "c": 0.125}
    est = Estimate(clients=("a", "b", "c"), method="spo", config={}, weights=None, utilities={"val": util, "test": util},
                   metric="mse", sense="min", benefit_graph=graph, partition=(0b100, 0b011), rounds=((0b011,), (0b100,)))
    write_estimate(est, tmp_path / "est.json")
    rc, out, _ = run(capsys, "sample-ce", "planted", "--groups", "2,1", "--names", "a,b,c", "--budget", "50",
                     "--from", tmp_path / "est.json", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["search"]["start"] == [["a", "b"], ["c"]] and data["partition"] == [["a", "b"], ["c"]]
    rc, _, err = run(capsys, "sample-ce", "planted", "--groups", "2,1", "--budget", "50", "--from", tmp_path / "est.json")
    assert rc == 2 and "its clients differ" in one_line(err)


def test_a_second_run_with_a_larger_budget_starts_where_the_first_stopped():
    src = Counting(PlantedSource((5, 5, 4), seed=6))
    cache = MeasuredGame(src)
    short = co.sample_ce(src, budget=360, epsilon=0.01, delta=0.05, cache=cache, seed=3)
    assert short.search.stopped == "budget"
    longer = co.sample_ce(src, budget=1500, epsilon=0.01, delta=0.05, cache=cache, seed=3)
    assert longer.search.stopped == "stable" and longer.trained < longer.trainings
    assert longer.trained + short.trained == cache.trainings == len(src.asked) == len(set(src.asked))
    assert longer == co.sample_ce(PlantedSource((5, 5, 4), seed=6), budget=1500, epsilon=0.01, delta=0.05, seed=3)


def test_a_block_too_large_to_check_exhaustively_is_never_enumerated(monkeypatch):
    # a 50-client grand coalition has 2^50 − 2 sub-coalitions: listing them before asking whether
    # they fit in the budget grew to 24 GB; only blocks whose sub-coalitions can fit are listed now
    import coalitions.sampled as sampled
    import coalitions.sampled_certificate as certificate

    budget = 600
    real = sampled.proper_subsets

    def guarded(block):
        assert (1 << int(sampled.popcount(np.array([block]))[0])) - 2 <= budget, "enumerated a block that cannot fit"
        return real(block)

    monkeypatch.setattr(sampled, "proper_subsets", guarded)
    monkeypatch.setattr(certificate, "proper_subsets", guarded)
    src = PlantedSource((30, 3, 1), seed=2)
    start = [list(src.clients[:30]), list(src.clients[30:33]), [src.clients[33]]]
    r = co.sample_ce(src, budget=budget, epsilon=0.02, delta=0.05, start=start, seed=0, exact_inner_up_to=40)
    how = {len(r.names(c.block)): c.method for c in r.certificate.inner}
    assert how[30] == "sampled" and how[3] == "exhaustive"
    assert r.trainings <= budget


@FAST
@given(games(min_n=3, max_n=6, ties=None), st.integers(0, 3))
def test_a_stable_search_passes_the_certificates_exhaustive_inner_checks(game, seed):
    # leave-one-out checks alone (exact_inner_up_to=1) miss a smaller part that splits off; the search
    # checks a larger block's every sub-coalition once no candidate blocks, where they fit, as the certificate does
    r = co.sample_ce(GameSource(game), budget=400, epsilon=0.05, delta=0.05, start=[list(game.clients)], seed=seed,
                     exact_inner_up_to=1)
    if r.search.stopped == "stable":
        assert all(c.found == 0 for c in r.certificate.inner if c.method == "exhaustive"), r.certificate.inner


def test_a_part_that_splits_off_a_block_is_found_beyond_the_leave_one_out_checks():
    # c0 and c1 do as well alone together as in the grand coalition, where c2..c4 need them; every
    # leave-one-out sub-coalition loses somebody, so only the whole inner check finds the part {c0, c1}
    n = 5
    masks = np.arange(1 << n)
    size = popcount(masks).astype(float)
    member = (masks[None, :] >> np.arange(n)[:, None]) & 1
    values = np.where(member, size[None, :], np.nan)
    values[:2] = np.where(member[:2], np.where((masks & 3) == 3, 5.0, size), np.nan)
    game = co.Game([f"c{i}" for i in range(n)], values)
    r = co.sample_ce(GameSource(game), budget=200, epsilon=0.05, delta=0.05, start=[list(game.clients)], seed=0,
                     exact_inner_up_to=1)
    assert r.search.stopped == "stable" and r.blocks() == [["c0", "c1"], ["c2", "c3", "c4"]]
    assert r.certificate.inner_agreement and r.holds


def test_the_certificates_measured_reserve_pays_for_the_last_whole_check():
    # the game above at a budget where the grand coalition's 30 sub-coalitions fit in the search's share only
    # with the certificate's reserve for the singletons and the blocks, all measured by then: the search splits
    # the part off there (its share spent: "budget") instead of leaving the refusal to the certificate
    n = 5
    masks = np.arange(1 << n)
    size = popcount(masks).astype(float)
    member = (masks[None, :] >> np.arange(n)[:, None]) & 1
    values = np.where(member, size[None, :], np.nan)
    values[:2] = np.where(member[:2], np.where((masks & 3) == 3, 5.0, size), np.nan)
    game = co.Game([f"c{i}" for i in range(n)], values)
    budget = 60
    assert budget - co.sampled_ce.required_budget(n, 0.05, 0.05) < 30   # the share alone cannot hold them
    r = co.sample_ce(GameSource(game), budget=budget, epsilon=0.05, delta=0.05, start=[list(game.clients)], seed=0,
                     exact_inner_up_to=1)
    assert r.search.stopped == "budget" and r.blocks() == [["c0", "c1"], ["c2", "c3", "c4"]]
    assert r.holds and r.trainings <= budget


def test_the_search_checks_each_client_alone_as_the_certificate_does():
    # client 0 is best alone; the others gain from every member, 0 included, so no leave-one-out
    # split of the grand coalition frees it, and the draws (sizes 2..N) never hold a singleton:
    # the search must ask each client alone, or it calls "stable" what the certificate then refuses
    n = 6
    masks = np.arange(1 << n)
    size = popcount(masks).astype(float)
    values = np.where((masks[None, :] >> np.arange(n)[:, None]) & 1, size[None, :], np.nan)
    values[0] = np.where(masks & 1, np.where(masks == 1, 10.0, 0.0), np.nan)
    game = co.Game([f"c{i}" for i in range(n)], values)
    r = co.sample_ce(GameSource(game), budget=200, epsilon=0.05, delta=0.05, start=[list(game.clients)], seed=0)
    assert r.search.stopped == "stable" and r.blocks() == [["c0"], ["c1", "c2", "c3", "c4", "c5"]]
    assert r.holds


# ------------------------------------------------------------------ the true share ε bounds


def _brute_share(game, partition, z, tol):
    """The D-share of blocking coalitions, coalition by coalition from the game's own values and SEs."""
    from coalitions.bitmask import members as mem

    n, share = game.n, 0.0
    own = {i: k for k in partition for i in mem(k)}
    for c in range(1, 1 << n):
        size = bin(c).count("1")
        if size < 2 or c in partition:
            continue
        gains = [(game.values[i, c] - game.values[i, own[i]] - tol,
                  game.uncertainty.diff_se(i, np.array([c]), own[i])[0] if game.uncertainty else 0.0)
                 for i in mem(c)]
        if all(d > z * se for d, se in gains):
            share += 1.0 / ((n - 1) * math.comb(n, size))
    return share


@FAST
@given(games(min_n=2, max_n=4, ties=None), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 1.0, 1.96]),
       st.sampled_from([0.0, 0.3]))
def test_the_true_blocking_share_is_the_brute_force_share_and_the_exhaustive_epsilon(game, seed, z, tol):
    from coalitions.sampled_certificate import blocking_share

    se = np.random.default_rng(seed).uniform(0.0, 0.5, game.values.shape)
    noisy = game.with_uncertainty(Uncertainty.from_se(game, se))
    r = co.sample_ce(GameSource(noisy), budget=200, epsilon=0.05, delta=0.05, seed=1, z=z, tol=tol)
    got = blocking_share(noisy, r.masks, z=z, tol=tol)
    assert got == pytest.approx(_brute_share(noisy, r.masks, z, tol), abs=1e-12)
    assert r.certificate.outer_method == "exhaustive"                      # every coalition drawn: ε is the share
    assert got == pytest.approx(r.certificate.epsilon, abs=1e-12)
    singletons = tuple(1 << i for i in range(game.n))
    assert blocking_share(noisy, singletons, z=z, tol=tol) == pytest.approx(
        _brute_share(noisy, singletons, z, tol), abs=1e-12)


def test_the_certified_epsilon_covers_the_true_share_of_a_noisy_planted_game():
    from coalitions.sampled_certificate import blocking_share

    for seed in range(5):
        game = co.planted([4, 3, 3], noise=0.3, seed=seed)
        r = co.sample_ce(GameSource(game), budget=1000, epsilon=0.05, delta=0.05, seed=seed)
        assert r.certificate.outer_method == "sampled"
        assert blocking_share(game, r.masks, z=r.certificate.z, tol=r.certificate.tol) <= r.certificate.epsilon
    every = blocking_share(game, tuple(1 << i for i in range(10)))          # the singletons: blocked often
    assert 0 < every <= 1


@pytest.mark.parametrize("partition, distribution, fragment", [
    ((0b011,), "uniform-size", "client 'c2'"),
    ((0b011, 0b110), "uniform-size", "two blocks"),
    ((0b111,), "cubes", "distribution must be one of"),
])
def test_the_true_share_refuses_a_bad_partition_or_distribution(partition, distribution, fragment):
    from coalitions.sampled_certificate import blocking_share

    with pytest.raises(co.InputError, match=fragment):
        blocking_share(co.planted([3], seed=0), partition, distribution=distribution)
