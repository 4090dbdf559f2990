"""learners/experiments/statistics.py: bootstrap intervals, the paired Wilcoxon test, baselines, seeds."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from coalitions.errors import InputError
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.learners.experiments.statistics import (
    bootstrap_interval,
    bootstrap_intervals,
    majority_class,
    paired_wilcoxon,
    sample_scores,
    separate_seeds,
    signed_rank_null,
)


# ---------------------------------------------------------------------------- bootstrap
def coverage(simulate, truth, reps=300, **kw):
    hits = 0
    for r in range(reps):
        iv = bootstrap_interval(simulate(np.random.default_rng(r)), n_boot=600, seed=r, **kw)
        hits += iv.low <= truth <= iv.high
    return hits / reps


def test_bootstrap_one_seed_covers_the_mean_at_the_nominal_rate():
    # one seed, 80 test samples from N(1, 2^2): the plain percentile bootstrap of a mean
    cov = coverage(lambda g: [g.normal(1.0, 2.0, 80)], 1.0)
    # 300 replications: binomial SD of the rate ~0.013 around 0.95 (percentile intervals run a bit short)
    assert 0.90 <= cov <= 0.985, cov


def test_bootstrap_over_seeds_covers_when_seeds_differ():
    # the seed effect dominates (SD 1 between seeds, 0.5 within, 50 samples): resampling test samples
    # only would cover rarely; resampling seeds too covers at about the nominal rate (12 seeds)
    def sim(g):
        return [g.normal(g.normal(0.0, 1.0), 0.5, 50) for _ in range(12)]

    cov = coverage(sim, 0.0)
    assert 0.86 <= cov <= 0.99, cov
    within_only = 0
    for r in range(100):  # the same data with one pooled "seed": sample noise alone
        data = sim(np.random.default_rng(r))
        iv = bootstrap_interval([np.concatenate(data)], n_boot=300, seed=r)
        within_only += iv.low <= 0.0 <= iv.high
    assert within_only / 100 < 0.5


def test_bootstrap_is_conservative_but_bounded_when_seeds_agree():
    # no seed effect: two stages count the sample noise twice; the width stays within sqrt(2) (+ noise)
    S, n, sd = 6, 40, 1.0
    true_se = sd / np.sqrt(S * n)
    widths, hits = [], 0
    for r in range(200):
        g = np.random.default_rng(r)
        iv = bootstrap_interval([g.normal(0.0, sd, n) for _ in range(S)], n_boot=600, seed=r)
        widths.append((iv.high - iv.low) / (2 * 1.96 * true_se))
        hits += iv.low <= 0.0 <= iv.high
    assert 0.95 <= hits / 200 <= 1.0
    assert 1.05 < np.mean(widths) < 1.5, np.mean(widths)


def test_bootstrap_estimate_statistic_and_reproducibility():
    per_seed = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]]
    a, b = bootstrap_interval(per_seed, seed=3), bootstrap_interval(per_seed, seed=3)
    assert a == b and a.estimate == pytest.approx((0.75 + 5 / 6) / 2)
    assert a.n_seeds == 2 and a.n_samples == (4, 6) and a.low <= a.estimate <= a.high
    # constant scores: a zero-width interval
    c = bootstrap_interval([np.full(10, 0.5), np.full(7, 0.5)])
    assert c.low == c.high == c.estimate == 0.5
    # a callable statistic (AUC on (label, score) rows) takes the loop path and agrees in spirit
    g = np.random.default_rng(0)
    rows = [np.column_stack([y := g.integers(0, 2, 60), y + g.normal(0, 1.0, 60)]) for _ in range(3)]

    def auc(r):
        pos, neg = r[r[:, 0] == 1, 1], r[r[:, 0] == 0, 1]
        return float((pos[:, None] > neg[None, :]).mean()) if len(pos) and len(neg) else 0.5

    iv = bootstrap_interval(rows, n_boot=200, statistic=auc)
    assert iv.low < iv.estimate < iv.high and 0.6 < iv.estimate < 0.95
    out = bootstrap_intervals({"A": per_seed, "B": [[0.0, 1.0]]}, n_boot=100)
    assert set(out) == {"A", "B"} and out["B"].estimate == 0.5


def test_mean_fast_path_matches_the_loop():
    # the vectorised mean path and the generic loop estimate the same distribution
    g = np.random.default_rng(5)
    data = [g.normal(0, 1, 30), g.normal(0.5, 1, 45), g.normal(-0.2, 1, 20)]
    fast = bootstrap_interval(data, n_boot=4000, seed=1)
    slow = bootstrap_interval(data, n_boot=4000, seed=2, statistic=lambda x: float(np.mean(x)))
    assert fast.estimate == pytest.approx(slow.estimate)
    assert fast.low == pytest.approx(slow.low, abs=0.03) and fast.high == pytest.approx(slow.high, abs=0.03)


@pytest.mark.parametrize("bad, msg", [([], "at least one"), ([[]], "at least one"), ([[np.nan]], "finite")])
def test_bootstrap_rejects(bad, msg):
    with pytest.raises(InputError, match=msg):
        bootstrap_interval(bad)
    with pytest.raises(InputError, match="level"):
        bootstrap_interval([[1.0]], level=1.5)


def test_sample_scores():
    assert sample_scores("mse", [1.0, 2.0], [0.0, 2.0]).tolist() == [1.0, 0.0]
    assert sample_scores("accuracy", [1, 0, 2], [1, 1, 2]).tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(InputError, match="AUC"):
        sample_scores("auc", [1], [1])


# ---------------------------------------------------------------------------- Wilcoxon
def brute_force_p(d, alternative):
    """P-value by enumerating all 2^n sign patterns of the midranks (zeros dropped)."""
    d = np.asarray(d, float)
    d = d[d != 0]
    r = stats.rankdata(np.abs(d))
    w = r[d > 0].sum()
    sums = np.array([sum(r[i] for i in range(len(r)) if s[i]) for s in itertools.product((0, 1), repeat=len(r))])
    up, lo = np.mean(sums >= w - 1e-9), np.mean(sums <= w + 1e-9)
    return {"greater": up, "less": lo, "two-sided": min(1.0, 2 * min(up, lo))}[alternative]


def test_wilcoxon_hand_computed():
    # all six differences positive: W+ = 21, P(W+ >= 21) = 1/64
    res = paired_wilcoxon([1, 2, 3, 4, 5, 6], [0] * 6)
    assert res.testable and res.statistic == 21 and res.p_value == pytest.approx(1 / 64)
    # one negative (rank 2): W+ = 19; subsets of {1..6} with sum >= 19 are the complements of
    # those with sum <= 2: {}, {1}, {2} -> p = 3/64
    res = paired_wilcoxon([1, -2, 3, 4, 5, 6], [0] * 6)
    assert res.statistic == 19 and res.p_value == pytest.approx(3 / 64) and res.method == "exact"
    # a loss: lower is better, so A = b - 1 beats B everywhere
    res = paired_wilcoxon(np.arange(6.0), np.arange(6.0) + np.arange(1, 7), sense="min")
    assert res.p_value == pytest.approx(1 / 64)


def test_wilcoxon_zeros_and_too_few_pairs():
    # two zeros are dropped: 5 positive differences, p = 1/32 (< 0.05, testable)
    res = paired_wilcoxon([0, 0, 1, 2, 3, 4, 5], [0] * 7)
    assert res.testable and res.n_zero == 2 and res.n_used == 5 and res.p_value == pytest.approx(1 / 32)
    # four non-zero differences: the best possible p is 1/16 > 0.05, so no p-value
    res = paired_wilcoxon([0, 1, 2, 3, 4], [0] * 5)
    assert not res.testable and res.p_value is None and "not testable" in res.reason and res.n_used == 4
    # identical results everywhere (an all-alone CE against Local)
    res = paired_wilcoxon(np.ones((3, 4)), np.ones((3, 4)))
    assert not res.testable and res.n_zero == 12
    # two-sided needs one more pair
    assert not paired_wilcoxon([1, 2, 3, 4, 5], [0] * 5, alternative="two-sided").testable
    assert paired_wilcoxon([1, 2, 3, 4, 5, 6], [0] * 6, alternative="two-sided").p_value == pytest.approx(2 / 64)
    # tolerance: differences of 1e-12 count as zero
    assert not paired_wilcoxon(np.arange(8) * 1e-12, np.zeros(8), zero_tol=1e-9).testable


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-4, 4), min_size=5, max_size=11), st.sampled_from(["greater", "less", "two-sided"]))
def test_wilcoxon_exact_with_ties_against_enumeration(diffs, alternative):
    d = np.array(diffs, float)
    res = paired_wilcoxon(d, np.zeros_like(d), alternative=alternative, alpha=1.0)
    if np.count_nonzero(d) == 0:
        assert not res.testable
        return
    assert res.p_value == pytest.approx(brute_force_p(d, alternative), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(6, 60), st.sampled_from(["greater", "less", "two-sided"]))
def test_wilcoxon_agrees_with_scipy_without_ties(seed, n, alternative):
    g = np.random.default_rng(seed)
    a, b = g.normal(0.1, 1, n), g.normal(0, 1, n)
    res = paired_wilcoxon(a, b, alternative=alternative, alpha=1.0)
    ref = stats.wilcoxon(a, b, alternative=alternative)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.method == ("exact" if n <= 50 else "normal")


def test_signed_rank_null_without_ties_is_scipys_exact_distribution():
    p = signed_rank_null(np.arange(1, 11))
    assert p.sum() == pytest.approx(1.0)
    # P(W+ >= 40) for n = 10, one-sided, via the distribution and via scipy's exact test
    d = np.array([1, 2, 3, 4, 5, 6, 7, 8, -9, -10.0])  # W+ = 36
    assert p[72:].sum() == pytest.approx(stats.wilcoxon(d, alternative="greater", method="exact").pvalue)


def test_wilcoxon_rejects_unpaired_and_missing():
    with pytest.raises(InputError, match="paired"):
        paired_wilcoxon([1, 2], [1, 2, 3])
    with pytest.raises(InputError, match="finite"):
        paired_wilcoxon([1, np.nan], [1, 2])
    with pytest.raises(InputError, match="sense"):
        paired_wilcoxon([1], [1], sense="up")


# ---------------------------------------------------------------------------- majority class
def test_majority_class_on_a_hand_made_federation():
    def split(y):
        return Split(np.zeros((len(y), 1), np.float32), np.array(y, np.int64))

    a = Client("a", split([1, 1, 0]), split([0, 1]), split([1, 0, 0, 0]))   # majority 1: 1/4 on test
    b = Client("b", split([0, 1]), split([0, 1]), split([0, 0, 1]))         # tie -> label 0: 2/3
    c = Client("c", split([2, 2, 2, 1]), split([0, 2]), split([2, 2]))      # majority 2: 2/2
    fed = Federation("toy", "multiclass", "accuracy", (a, b, c), 3)
    rows = majority_class(fed)
    assert list(rows) == ["a", "b", "c"]
    assert (rows["a"].label, rows["a"].accuracy, rows["a"].n_test) == (1, 0.25, 4)
    assert rows["a"].train_share == pytest.approx(2 / 3)
    assert (rows["b"].label, rows["b"].accuracy) == (0, pytest.approx(2 / 3))
    assert (rows["c"].label, rows["c"].accuracy, rows["c"].train_share) == (2, 1.0, 0.75)
    reg = Federation("r", "regression", "mse", (Client("x", *[Split(np.zeros((2, 1)), np.zeros(2))] * 3),))
    with pytest.raises(InputError, match="regression"):
        majority_class(reg)


# ---------------------------------------------------------------------------- seeds
def test_separate_seeds_are_spawned_children():
    for seed in (0, 1, 7, 2**40):
        s = separate_seeds(seed)
        kids = [np.random.SeedSequence(seed, spawn_key=(k,)).generate_state(1, dtype=np.uint32)[0] for k in (0, 1)]
        assert (s.user, s.data, s.init) == (seed, int(kids[0]), int(kids[1]))
        assert s.data != s.init and s == separate_seeds(seed)
    pairs = [separate_seeds(k) for k in range(200)]
    assert len({p.data for p in pairs}) == 200 and len({p.init for p in pairs}) == 200
    # independent: the data seeds tell nothing about the init seeds (rank correlation near 0)
    rho = stats.spearmanr([p.data for p in pairs], [p.init for p in pairs]).statistic
    assert abs(rho) < 0.25
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="--seed"):
            separate_seeds(bad)


# ---------------------------------------------------------------------------- issue 19: seeds, Holm, binomial, ties
from coalitions.learners.experiments.statistics import (  # noqa: E402
    MIN_SEEDS,
    clopper_pearson,
    detectable_difference,
    family_tests,
    holm,
    paired_t_power,
    retraining_support,
    seed_level_test,
    wilson,
)


def test_holm_against_a_hand_example():
    # sorted: 0.01 (×4 = 0.04), 0.02 (×3 = 0.06), 0.03 (×2 = 0.06), 0.04 (×1 = 0.04 → 0.06 by monotonicity)
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, None, 0.6]) == [pytest.approx(1.0), None, pytest.approx(1.0)]
    assert holm([]) == [] and holm([0.2]) == [0.2]
    with pytest.raises(InputError):
        holm([1.5])


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_holm_never_lowers_a_p_value_and_keeps_the_order(ps):
    adj = holm(ps)
    assert all(a >= p - 1e-12 and a <= 1 for a, p in zip(adj, ps, strict=True))
    order = np.argsort(ps, kind="stable")
    assert all(adj[order[k]] <= adj[order[k + 1]] + 1e-12 for k in range(len(ps) - 1))


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (60, 60), (57, 60), (1, 1), (0, 1), (50, 100)])
def test_clopper_pearson_and_wilson_are_scipys_intervals(k, n):
    ref = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert clopper_pearson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)
    ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)
    lo, hi = clopper_pearson(k, n)
    assert lo < hi  # never [1, 1] nor [0, 0] on a finite sample


def test_binomial_intervals_refuse_bad_counts():
    for k, n in ((3, 2), (-1, 4), (1, 0), (1.5, 4)):
        with pytest.raises(InputError):
            clopper_pearson(k, n)
    with pytest.raises(InputError):
        wilson(1, 4, level=1.0)


def test_seed_level_test_uses_seed_means_not_client_pairs():
    """Ten clients share each seed's split and initialisation: a seed's effect moves all ten together."""
    rng = np.random.default_rng(0)
    b = rng.uniform(0.5, 0.9, (10, 5))
    effect = np.array([0.05, 0.04, 0.03, -0.04, 0.001])  # one value per seed, shared by its clients
    a = b + effect + rng.normal(0, 1e-3, (10, 5))
    t = seed_level_test(a, b)
    assert t["n_seeds"] == 5 and t["seed_differences"] == pytest.approx(effect, abs=2e-3)
    d = np.array(t["seed_differences"])
    assert t["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    assert t["direction"] == "no significant difference"
    assert paired_wilcoxon(a, b, alternative="two-sided").p_value < 0.05  # what 50 "independent" pairs would say


def test_fewer_than_five_seeds_are_underpowered():
    b = np.full((4, MIN_SEEDS - 1), 0.5)
    a = b + np.linspace(0.2, 0.3, MIN_SEEDS - 1)
    t = seed_level_test(a, b)
    assert t["direction"] == "underpowered" and t["p"] < 0.05
    a5, b5 = np.hstack([a, a[:, :1]]), np.hstack([b, b[:, :1]])
    assert seed_level_test(a5, b5)["direction"] == "better"
    assert seed_level_test(b5, a5)["direction"] == "worse"


def test_ties_within_the_tolerance_are_identical():
    """Synthetic regime II: CE and Local differ by 4e-11 on an MSE of 1e-4 — the same model."""
    local = np.full((6, 5), 1.0e-4) + np.arange(30).reshape(6, 5) * 1e-7
    ce = local + 4e-11
    t = seed_level_test(ce, local, sense="min")
    assert t["direction"] == "identical" and t["p"] is None and t["n_tied"] == 30
    assert seed_level_test(local * 1.5, local, sense="min")["direction"] == "worse"


def test_family_tests_adjust_within_the_family_only():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.6, 0.8, (8, 6))
    values = {"Local": base, "A": base + rng.normal(0.03, 0.02, (8, 6)), "B": base + rng.normal(0, 0.02, (8, 6)),
              "Same": base.copy()}
    out = family_tests(values, ["Local"])
    raw = [out[c]["Local"]["p"] for c in ("A", "B")]
    assert [out[c]["Local"]["p_holm"] for c in ("A", "B")] == pytest.approx(holm(raw))
    assert out["Same"]["Local"]["direction"] == "identical" and "p_holm" not in out["Same"]["Local"]
    assert out["A"]["Local"]["family_size"] == 2 and "Local" not in out


def test_the_primary_test_stands_outside_the_family_and_says_what_it_could_detect():
    """Issue 33: CE against Local on the primary game, pre-specified, at α without Holm; "inconclusive" (not "not
    reproduced") when it cannot decide, with the difference it detects with 80 % power."""
    rng = np.random.default_rng(3)
    base = rng.uniform(0.6, 0.8, (6, 10))
    values = {"Local": base, "CE": base + rng.normal(0.004, 0.01, (1, 10)), "A": base + rng.normal(0.02, 0.01, (6, 10)),
              "B": base + rng.normal(0, 0.02, (6, 10))}
    out = family_tests(values, ["Local"], primary=("CE", "Local"))
    t = out["CE"]["Local"]
    assert t["primary"] and "p_holm" not in t and out["A"]["Local"]["family_size"] == 2
    d = np.asarray(t["seed_differences"])
    assert t["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    assert t["direction"] == ("inconclusive" if t["p"] >= 0.05 else "better" if d.mean() > 0 else "worse")
    # the detectable difference is where the noncentral-t power reaches 0.8, and it shrinks like 1/sqrt(seeds)
    assert paired_t_power(t["detectable"], d.std(ddof=1), d.size) == pytest.approx(0.8, abs=1e-9)
    assert detectable_difference(1.0, 40) < detectable_difference(1.0, 10) < detectable_difference(1.0, 5)
    # against a simulation of the paired t-test itself
    sims = rng.normal(0.5, 1.0, (4000, 10))
    rejected = np.mean(stats.ttest_1samp(sims, 0.0, axis=1).pvalue < 0.05)
    assert rejected == pytest.approx(paired_t_power(0.5, 1.0, 10), abs=0.03)
    # no true difference: the test cannot decide, and says so
    undecided = family_tests({"Local": base, "CE": base + np.tile([0.01, -0.012], 5)}, ["Local"],
                             primary=("CE", "Local"))["CE"]["Local"]
    assert undecided["p"] > 0.05 and undecided["direction"] == "inconclusive" and undecided["detectable"] > 0


def test_retraining_support_is_the_share_of_seeds():
    assert retraining_support(["a", "b", "a", "a"]) == {"a": 0.75, "b": 0.25}
    with pytest.raises(InputError):
        retraining_support([])
