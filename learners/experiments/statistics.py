"""Statistics for comparisons a reader can trust: intervals, paired tests, baselines, seeds.

Pure NumPy / SciPy; nothing here trains or reads a federation's features.

* :func:`bootstrap_interval` — percentile bootstrap interval of a client's
  metric over its test samples *and* the seeds (two-stage resampling).
* :func:`paired_wilcoxon` — Wilcoxon signed-rank test of "A beats B" over
  paired results (clients × seeds), as the FedAMP paper (Huang et al., AAAI
  2021) compares methods; says "not testable" instead of a p-value from
  too few non-zero differences.
* :func:`seed_level_test` — "A vs B" with the seeds as the replicates: a paired
  t-test over the seeds' client means (clients are not independent replicates of a
  federation; seeds are), "underpowered" below :data:`MIN_SEEDS` seeds, "identical"
  when every pair agrees within :data:`TIE_RTOL`.
* :func:`holm` — Holm–Bonferroni adjusted p-values of a family of tests;
  :func:`family_tests` runs a table's tests as one family.
* :func:`clopper_pearson`, :func:`wilson` — exact and score intervals of a
  binomial proportion (a client's test accuracy: never ``[1, 1]`` on a finite
  sample); :func:`distinct_rows` — how many distinct test rows stand behind a
  proportion pooled over seeds.
* :func:`seed_interval` — the Student-t interval of a mean over seeds (the replicates).
* :func:`retraining_support` — the share of seeds (new split, new initialisation)
  whose exact CE is each partition: the CE's support over retraining, beside the
  support over validation resamples of one trained game.
* :func:`majority_class` — each client's majority training label scored on its
  test data: the floor any classifier must clear.
* :func:`separate_seeds` — one user seed → a data-split seed and an
  initialisation seed, independent of each other, so that the two sources of
  variation can be varied (and reported) separately.

References: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993),
ch. 13 (percentile intervals); Davison & Hinkley, *Bootstrap Methods and their
Application* (1997), §3.8 (two-stage resampling of hierarchical data);
Wilcoxon, *Individual comparisons by ranking methods* (1945); Pratt (1959)
and Conover, *Practical Nonparametric Statistics* (1999), §5.7 (zeros and
ties); Holm, *A simple sequentially rejective multiple test procedure* (1979);
Clopper & Pearson (1934); Wilson (1927); Brown, Cai & DasGupta, *Interval
estimation for a binomial proportion* (2001).  ``docs/learners-data.md`` ("Statistics") states what each function
guarantees and what was measured.

Examples
--------
>>> iv = bootstrap_interval([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]], n_boot=500, seed=1)
>>> round(iv.estimate, 3), iv.low <= iv.estimate <= iv.high
(0.75, True)
>>> paired_wilcoxon([0.9, 0.8], [0.7, 0.7]).testable
False
>>> separate_seeds(0) == separate_seeds(0) and separate_seeds(0).data != separate_seeds(0).init
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coalitions.errors import InputError

__all__ = ["MIN_SEEDS", "TIE_RTOL", "clopper_pearson", "wilson", "seed_interval", "distinct_rows", "holm", "seed_level_test", "family_tests",
           "paired_t_power", "detectable_difference", "primary_test", "POWER",
           "retraining_support", "Interval", "bootstrap_interval", "bootstrap_intervals", "sample_scores", "output_samples", "WilcoxonResult",
           "paired_wilcoxon", "signed_rank_null", "paired_record", "MajorityRow", "majority_class", "SeedPair",
           "separate_seeds"]


# ---------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile bootstrap interval.

    Attributes
    ----------
    estimate : float
        The statistic on the data: the mean over seeds of each seed's statistic.
    low, high : float
        The ``(1 − level)/2`` and ``(1 + level)/2`` quantiles of the bootstrap replicates.
    level : float
    n_boot, n_seeds : int
    n_samples : tuple of int
        Test samples of each seed.
    """

    estimate: float
    low: float
    high: float
    level: float
    n_boot: int
    n_seeds: int
    n_samples: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.estimate:.4g} [{self.low:.4g}, {self.high:.4g}]"


def sample_scores(metric: str, y_true, y_pred) -> np.ndarray:
    """Per-sample scores whose mean is the metric: squared errors (``"mse"``) or 0/1 hits (``"accuracy"``).

    ``y_pred`` holds predicted values (regression) or predicted class ids.  AUC
    is not a mean of per-sample scores: bootstrap it with ``statistic=``
    (see :func:`bootstrap_interval`).
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape or y_true.ndim != 1:
        raise InputError(f"sample_scores: targets {y_true.shape} and predictions {y_pred.shape} differ")
    if metric == "mse":
        return (y_true.astype(np.float64) - y_pred.astype(np.float64)) ** 2
    if metric == "accuracy":
        return (y_true == y_pred).astype(np.float64)
    raise InputError(f"sample_scores: metric must be mse or accuracy, got {metric!r} (AUC: use statistic=)")


def _auc_rows(rows: np.ndarray) -> float:
    """AUC of rows ``[label, score_0, ...]`` (NaN when the rows hold one class): the federation's metric."""
    from coalitions.learners.data.metrics import evaluate

    return evaluate("auc", rows[:, 0].astype(np.int64), rows[:, 1:] if rows.shape[1] > 2 else rows[:, 1])


def output_samples(metric: str, y_true, outputs) -> tuple[np.ndarray, Callable[[np.ndarray], float] | None]:
    """A model's outputs on a client's test split as what :func:`bootstrap_interval` resamples.

    ``outputs`` are what the federation's metric reads
    (:func:`coalitions.learners.data.metrics.evaluate_batch`): predictions
    ``(n,)`` for ``"mse"``, a class-1 logit ``(n,)`` or class logits ``(n, C)``
    otherwise.  Returns ``(data, statistic)``: for ``"mse"`` and ``"accuracy"``
    the per-sample scores (squared errors, 0/1 hits; :func:`sample_scores`) and
    ``None`` (their mean is the metric); for ``"auc"``, which is not a mean of
    per-sample scores, rows ``[label, outputs...]`` and the AUC of rows.  Either
    way ``statistic(data)`` (or the mean) equals the metric of ``outputs``.
    """
    y = np.asarray(y_true)
    s = np.asarray(outputs, dtype=np.float64)
    if s.ndim == 2 and s.shape[1] == 1:
        s = s[:, 0]
    if s.shape[0] != y.shape[0] or s.ndim not in (1, 2):
        raise InputError(f"output_samples: outputs {s.shape} do not match {y.shape[0]} targets")
    if metric == "mse":
        return sample_scores("mse", y.astype(np.float64), s), None
    if metric == "accuracy":
        pred = (s > 0).astype(np.int64) if s.ndim == 1 else np.argmax(s, axis=1)
        return sample_scores("accuracy", y.astype(np.int64), pred), None
    if metric == "auc":
        return np.column_stack([y.astype(np.float64), s]), _auc_rows
    raise InputError(f"output_samples: metric must be mse, accuracy or auc, got {metric!r}")


def _mean_replicates(per_seed, picks, rng, max_cells=4_000_000):
    """Mean-statistic fast path: ``picks[b, j]`` is the seed of draw ``j`` of replicate ``b``."""
    B, S = picks.shape
    draw_means = np.empty((B, S))
    for s, x in enumerate(per_seed):
        where = np.argwhere(picks == s)
        n = len(x)
        rows = max(1, max_cells // n)
        for start in range(0, len(where), rows):
            w = where[start:start + rows]
            idx = rng.integers(0, n, (len(w), n))  # an independent resample for every draw of seed s
            draw_means[w[:, 0], w[:, 1]] = x[idx].mean(axis=1)
    return draw_means.mean(axis=1)


def bootstrap_interval(per_seed: Sequence, level: float = 0.95, n_boot: int = 2000, seed: int = 0,
                       statistic: Callable[[np.ndarray], float] | None = None) -> Interval:
    r"""Percentile bootstrap interval over test samples and seeds (two-stage resampling).

    The data are one client's results over ``S`` seeds: for seed ``s`` the
    per-test-sample scores ``x_{s,1..n_s}`` (or rows, for a ``statistic`` such
    as AUC that needs labels and scores together).  The estimate is

    .. math:: \hat\theta = \frac{1}{S} \sum_{s=1}^{S} T(x_{s,\cdot}),

    with ``T`` the mean (default) or ``statistic``.  Each of ``n_boot``
    replicates draws ``S`` seeds with replacement, ``s^*_1..s^*_S``, and, for
    every draw separately, ``n_{s^*_j}`` of that seed's samples with
    replacement, and computes

    .. math:: \hat\theta^* = \frac{1}{S} \sum_{j=1}^{S} T(x^*_{s^*_j,\cdot}).

    The interval is the ``(1 − level)/2`` and ``(1 + level)/2`` quantiles of
    the replicates (Efron & Tibshirani 1993, ch. 13).  Resampling seeds carries
    the variation between splits and initialisations; resampling samples
    within a seed carries the finite test set (Davison & Hinkley 1997, §3.8).
    With one seed only the second stage acts.  When the seeds differ little
    the two stages count the test-sample noise twice and the interval is
    conservative (up to √2 too wide; measured in ``docs/learners-data.md``);
    with very few seeds (3–5) the seed stage under-represents the spread
    between seeds.

    Parameters
    ----------
    per_seed : sequence of array_like
        One 1-D array of per-sample scores per seed (or 2-D rows, for ``statistic``).
    level : float
        Coverage, in ``(0, 1)``.
    n_boot : int
        Bootstrap replicates.
    seed : int
        Seed of the resampling (reproducible).
    statistic : callable, optional
        ``T(rows) -> float`` for a statistic other than the mean (a Python loop
        over ``n_boot × S`` resamples).  Replicates where ``T`` is not finite
        (an AUC of a one-class resample) are left out of the quantiles.

    Returns
    -------
    Interval
    """
    data = [np.asarray(x, dtype=np.float64) for x in per_seed]
    if not data or any(len(x) == 0 for x in data):
        raise InputError("bootstrap_interval needs at least one seed with at least one test sample")
    if not 0 < level < 1:
        raise InputError(f"bootstrap level must lie in (0, 1), got {level!r}")
    if int(n_boot) < 1:
        raise InputError(f"n_boot must be positive, got {n_boot!r}")
    if statistic is None and any(x.ndim != 1 for x in data):
        raise InputError("bootstrap_interval: per-seed scores must be 1-D (use statistic= for rows)")
    if statistic is None and not all(np.all(np.isfinite(x)) for x in data):
        raise InputError("bootstrap_interval: scores must be finite")
    T = (lambda x: float(np.mean(x))) if statistic is None else statistic
    estimate = float(np.mean([T(x) for x in data]))
    rng = np.random.default_rng(seed)
    S = len(data)
    picks = rng.integers(0, S, (int(n_boot), S))
    if statistic is None:
        reps = _mean_replicates(data, picks, rng)
    else:
        reps = np.array([np.mean([T(data[s][rng.integers(0, len(data[s]), len(data[s]))]) for s in row])
                         for row in picks])
        reps = reps[np.isfinite(reps)]  # a resample where the statistic is undefined (one class: no AUC)
        if reps.size == 0:
            raise InputError("bootstrap_interval: the statistic is undefined on every resample")
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return Interval(estimate, float(lo), float(hi), float(level), int(n_boot), S, tuple(len(x) for x in data))


def bootstrap_intervals(scores: Mapping[str, Sequence], **options) -> dict[str, Interval]:
    """:func:`bootstrap_interval` for every client: ``{client: per-seed scores}`` → ``{client: Interval}``."""
    return {client: bootstrap_interval(per_seed, **options) for client, per_seed in scores.items()}


# ---------------------------------------------------------------------------- Wilcoxon signed-rank
@dataclass(frozen=True)
class WilcoxonResult:
    """Outcome of :func:`paired_wilcoxon`.

    Attributes
    ----------
    testable : bool
        False when the non-zero differences are too few for any p-value to
        reach ``alpha`` (then ``p_value`` and ``statistic`` are ``None``).
    p_value : float or None
    statistic : float or None
        ``W+``: the sum of the ranks of ``|d|`` over the positive differences
        (``d > 0``: A better than B).
    n_pairs, n_zero, n_used : int
        Pairs given; pairs whose difference is zero (dropped); pairs ranked.
    alternative : str
        ``"greater"``: H1 "A is better than B"; ``"less"``: "A is worse";
        ``"two-sided"``.
    method : str
        ``"exact"`` (scipy, no ties), ``"exact with ties"`` (the conditional
        null distribution of ``W+`` given the tied ranks, computed exactly),
        ``"normal"`` (scipy's normal approximation with tie correction, more
        than 50 pairs), or ``"none"``.
    reason : str
        One line saying what was tested, or why nothing could be.
    """

    testable: bool
    p_value: float | None
    statistic: float | None
    n_pairs: int
    n_zero: int
    n_used: int
    alternative: str
    method: str
    reason: str


def signed_rank_null(ranks) -> np.ndarray:
    r"""Exact null distribution of ``2·W+`` for the given (mid)ranks.

    Under H0 every difference is as likely positive as negative, independently,
    so ``W+ = Σ_i r_i·[d_i > 0]`` is a sum of independent ``r_i`` or 0 with
    probability ½ each — also when ties make the ``r_i`` midranks (the
    distribution conditional on the observed ranks; Conover 1999, §5.7).
    Doubled midranks are integers, and the counts of sign patterns per value of
    ``2·W+`` follow from one pass of a knapsack recursion
    (``c_k(t) = c_{k−1}(t) + c_{k−1}(t − 2r_k)``).

    Returns
    -------
    ndarray
        ``p[t] = P(2·W+ = t)`` for ``t = 0 .. 2·Σ r_i``.
    """
    R = np.rint(2 * np.asarray(ranks, dtype=np.float64)).astype(np.int64)
    counts = np.zeros(int(R.sum()) + 1)
    counts[0] = 1.0
    top = 0
    for r in R:
        counts[r:top + r + 1] += counts[:top + 1].copy()
        top += r
    return counts / 2.0 ** len(R)


def paired_wilcoxon(a, b, sense: str = "max", alternative: str = "greater", alpha: float = 0.05,
                    zero_tol: float = 0.0) -> WilcoxonResult:
    r"""Wilcoxon signed-rank test that method A beats method B on paired results.

    ``a`` and ``b`` hold the two methods' metric for the same (client, seed)
    pairs, e.g. arrays of shape ``(clients, seeds)``; every pair counts once
    (Huang et al. 2021 compare FedAMP with each baseline this way).  The
    differences are oriented so that positive means *A better*:
    ``d = a − b`` for a metric to maximise (``sense="max"``: accuracy, AUC) and
    ``d = b − a`` for a loss (``sense="min"``: MSE).

    **Zeros.**  Pairs with ``|d| <= zero_tol`` (identical results, e.g. the same
    all-alone model) carry no evidence either way and are dropped before
    ranking (Wilcoxon's convention, SciPy's ``zero_method="wilcox"``); the
    result says how many.  **Too few pairs.**  With ``n`` non-zero differences
    the smallest attainable p-value is ``2^{-n}`` (one-sided) or ``2^{1−n}``
    (two-sided): all differences of one sign.  If even that exceeds
    ``alpha`` the result is *not testable* — no p-value is reported rather than
    one that could never be small.  **Ties** among ``|d|`` get midranks; the
    p-value then comes from the exact null distribution of ``W+`` given those
    ranks (:func:`signed_rank_null`) for up to 50 pairs.  Without ties SciPy's
    :func:`scipy.stats.wilcoxon` gives the exact p-value up to 50 pairs; above
    50, its normal approximation (with tie correction).

    The statistic is ``W+ = Σ_{d_i > 0} rank(|d_i|)``; H1 for
    ``alternative="greater"`` is that the differences are symmetric about a
    positive centre (A better).

    Parameters
    ----------
    a, b : array_like
        Paired results of A and B (same shape; flattened).
    sense : {"max", "min"}
    alternative : {"greater", "less", "two-sided"}
    alpha : float
        The level a p-value must be able to reach for the test to be run.
    zero_tol : float
        Differences at most this large in absolute value count as zero.

    Returns
    -------
    WilcoxonResult
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise InputError(f"paired test: A has shape {a.shape}, B has {b.shape}; results must be paired")
    if sense not in ("max", "min"):
        raise InputError(f"paired test: sense must be 'max' or 'min', got {sense!r}")
    if alternative not in ("greater", "less", "two-sided"):
        raise InputError(f"paired test: alternative must be greater, less or two-sided, got {alternative!r}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise InputError("paired test: results must be finite (a missing pair cannot be compared)")
    d = (a - b if sense == "max" else b - a).ravel()
    n_pairs = d.size
    nonzero = d[np.abs(d) > zero_tol]
    n, n_zero = nonzero.size, n_pairs - nonzero.size
    floor = 2.0 ** -n if alternative != "two-sided" else min(1.0, 2.0 ** (1 - n))
    what = {"greater": "A better than B", "less": "A worse than B", "two-sided": "A differs from B"}[alternative]
    if n == 0 or floor > alpha:
        reason = (f"not testable: {n} non-zero difference{'s' if n != 1 else ''} of {n_pairs} pairs "
                  f"({n_zero} zero); the smallest attainable p-value, {floor:.3g}, exceeds {alpha}")
        return WilcoxonResult(False, None, None, n_pairs, n_zero, n, alternative, "none", reason)
    ranks = stats.rankdata(np.abs(nonzero))
    w_plus = float(ranks[nonzero > 0].sum())
    ties = len(np.unique(np.abs(nonzero))) < n
    if ties and n <= 50:
        method = "exact with ties"
        p = signed_rank_null(ranks)
        t = int(round(2 * w_plus))
        upper, lower = float(p[t:].sum()), float(p[:t + 1].sum())
        p_value = {"greater": upper, "less": lower, "two-sided": min(1.0, 2 * min(upper, lower))}[alternative]
    else:
        method = "exact" if n <= 50 else "normal"
        res = stats.wilcoxon(nonzero, zero_method="wilcox", alternative=alternative,
                             method="exact" if n <= 50 else "approx")
        p_value = float(res.pvalue)
    reason = (f"Wilcoxon signed-rank, H1: {what} ({alternative}); {n} non-zero of {n_pairs} pairs "
              f"({n_zero} zero, dropped); W+ = {w_plus:g}, p = {p_value:.3g} ({method})")
    return WilcoxonResult(True, p_value, w_plus, n_pairs, n_zero, n, alternative, method, reason)


def paired_record(a, b, sense: str = "max", alpha: float = 0.05) -> dict:
    r"""A two-sided :func:`paired_wilcoxon` of A against B as a JSON-ready record, with its verdict.

    Pairs where either result is missing (NaN: a metric undefined on that
    client) are dropped first and counted in ``"missing"``.  The verdict
    ``"direction"`` is ``"better"`` (A better than B) or ``"worse"`` only when
    the two-sided p-value is below ``alpha``, the side given by ``W+`` against
    its null mean ``n(n+1)/4``; otherwise ``"no significant difference"``, or
    ``"not testable"`` when too few non-zero differences exist for any p-value
    to reach ``alpha`` (:func:`paired_wilcoxon`).  ``"mean_difference"`` is the
    mean of the oriented differences (positive: A better).

    Examples
    --------
    >>> paired_record([0.9] * 8, [0.5] * 8)["direction"]
    'better'
    >>> paired_record([0.5] * 8, [0.5] * 8)["direction"]
    'not testable'
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise InputError(f"paired test: A has {a.size} results, B has {b.size}; results must be paired")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    res = paired_wilcoxon(a, b, sense, "two-sided", alpha)
    d = (a - b) if sense == "max" else (b - a)
    if not res.testable:
        direction = "not testable"
    elif res.p_value is not None and res.p_value < alpha:
        direction = "better" if (res.statistic or 0.0) > res.n_used * (res.n_used + 1) / 4 else "worse"
    else:
        direction = "no significant difference"
    return {"statistic": res.statistic, "p": res.p_value, "n_pairs": res.n_pairs, "n_used": res.n_used,
            "n_zero": res.n_zero, "missing": int((~keep).sum()), "method": res.method, "alpha": alpha,
            "mean_difference": float(d.mean()) if d.size else None, "direction": direction}


# ---------------------------------------------------------------------------- binomial intervals
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""Clopper–Pearson (exact) interval of a binomial proportion ``k / n``.

    The bounds invert two one-sided binomial tests: ``low`` is the ``(1 − level)/2``
    quantile of ``Beta(k, n − k + 1)`` (0 when ``k = 0``), ``high`` the
    ``(1 + level)/2`` quantile of ``Beta(k + 1, n − k)`` (1 when ``k = n``)
    (Clopper & Pearson 1934).  Coverage is at least ``level`` for every true
    proportion; 60 hits of 60 give ``[0.940, 1]``, never ``[1, 1]``.  Equals
    :func:`scipy.stats.binomtest`'s ``proportion_ci(method="exact")``, which computes it.

    Examples
    --------
    >>> lo, hi = clopper_pearson(60, 60)
    >>> round(lo, 3), hi
    (0.94, 1.0)
    """
    from scipy.stats import binomtest

    k, n = _counts(k, n)
    ci = binomtest(k, n).proportion_ci(confidence_level=_level(level), method="exact")
    return float(ci.low), float(ci.high)


def seed_interval(per_seed, level: float = 0.95) -> tuple[float, float | None, float | None]:
    r"""The mean over seeds with its Student-t interval, the seeds being the replicates.

    ``per_seed``: one number per seed (a column's client mean on that seed, or a difference of
    two columns' client means).  The interval is ``x̄ ± t_{S−1}·s/√S``, ``s`` the sample
    standard deviation over the ``S`` seeds: what varies between replicates of the whole
    federation (split and initialisation).  The clients of one seed are not replicates: a
    bootstrap over a fixed set of clients measures how the clients differ, not how the result
    would change on another split (Adult's Local: [0.749, 0.814] over its two clients, seed SD
    0.0024).  ``(mean, None, None)`` with fewer than two seeds.

    Examples
    --------
    >>> est, lo, hi = seed_interval([0.80, 0.81, 0.79, 0.80, 0.80])
    >>> round(est, 3), round(lo, 3), round(hi, 3)
    (0.8, 0.791, 0.809)
    """
    from scipy.stats import t

    x = np.asarray(per_seed, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise InputError("seed_interval needs at least one finite value")
    mean = float(x.mean())
    if x.size < 2:
        return mean, None, None
    half = float(t.ppf((1 + _level(level)) / 2, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    return mean, float(mean - half), float(mean + half)


def distinct_rows(per_seed_ids) -> int | None:
    """The distinct test rows behind a client's results pooled over seeds, or None where unknown.

    ``per_seed_ids``: each seed's row ids of the client's test split
    (:attr:`Split.ids <coalitions.learners.data.federation.Split.ids>`: the source data's row
    numbers, the same row having the same id in every seed), ``None`` for a seed without them.
    Adult's test rows are the fixed ``adult.test``: 5 seeds of 181 PhD rows are 181 rows, not 905.

    Examples
    --------
    >>> distinct_rows([[0, 1, 2], [0, 1, 2]]), distinct_rows([[0, 1], [2, 3]]), distinct_rows([[0], None])
    (3, 4, None)
    """
    if any(ids is None for ids in per_seed_ids) or not per_seed_ids:
        return None
    return int(np.unique(np.concatenate([np.asarray(ids, dtype=np.int64) for ids in per_seed_ids])).size)


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""Wilson score interval of ``k / n``: the ``p`` with ``|p̂ − p| ≤ z·sqrt(p(1 − p)/n)``.

    .. math:: \frac{\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}}{1 + z^2/n}

    with ``z`` the ``(1 + level)/2`` normal quantile (Wilson 1927; Brown, Cai &
    DasGupta 2001 recommend it over the Wald interval).  Equals
    ``binomtest(k, n).proportion_ci(method="wilson")``.
    """
    from scipy.stats import norm

    k, n = _counts(k, n)
    z = float(norm.ppf((1 + _level(level)) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))


def _counts(k, n) -> tuple[int, int]:
    if isinstance(k, bool) or isinstance(n, bool) or int(n) != n or int(k) != k or not 0 <= k <= n or n < 1:
        raise InputError(f"a binomial interval needs counts 0 <= k <= n with n >= 1, got k={k!r}, n={n!r}")
    return int(k), int(n)


def _level(level: float) -> float:
    if not 0 < level < 1:
        raise InputError(f"interval level must lie in (0, 1), got {level!r}")
    return float(level)


# ---------------------------------------------------------------------------- seeds as replicates
#: Fewer seeds than this: a test prints "underpowered", not a verdict (with 4 seed-level
#: differences a t-test has 3 degrees of freedom and little power against any realistic effect).
MIN_SEEDS = 5
#: Two results within this relative difference are the same result (``|a − b| ≤ TIE_RTOL·max(|a|, |b|)``):
#: the same model computed twice in floating point.  Synthetic regime II's exact CE (everyone alone,
#: float64 closed form) and Local differ by up to 5e-6 relative (4e-11 on an MSE of 1e-4: float32
#: outputs); any difference between methods worth a test is orders larger, and accuracy or AUC on
#: ``n`` samples moves by at least ``1/n``.
TIE_RTOL = 1e-4


def holm(pvalues) -> list[float | None]:
    r"""Holm–Bonferroni adjusted p-values; ``None`` entries (no test) stay ``None`` and do not count.

    With the ``m`` p-values sorted, ``p_(1) ≤ … ≤ p_(m)``, the adjusted value of the
    ``k``-th is ``max_{j ≤ k} min(1, (m − j + 1)·p_(j))`` (Holm 1979).  Rejecting
    where the adjusted p is below α controls the family-wise error rate at α for
    any dependence between the tests.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, None])
    [0.03, 0.06, 0.06, None]
    """
    ps = [None if p is None else float(p) for p in pvalues]
    given = [(p, k) for k, p in enumerate(ps) if p is not None]
    if any(not 0 <= p <= 1 for p, _ in given):
        raise InputError("holm: p-values must lie in [0, 1]")
    m = len(given)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, (p, k) in enumerate(sorted(given)):
        running = max(running, min(1.0, (m - rank) * p))
        out[k] = round(running, 15)
    return out


def seed_level_test(a, b, sense: str = "max", alpha: float = 0.05, min_seeds: int = MIN_SEEDS,
                    rtol: float = TIE_RTOL) -> dict:
    r"""Is A better than B, with the seeds as replicates of the whole federation?

    ``a`` and ``b`` are ``(clients, seeds)`` arrays of the two columns' test metric
    (NaN where a client's metric is undefined: left out of that seed's mean).
    Clients of one seed share one split and one initialisation, so their
    ``clients × seeds`` pairs are not independent; the seeds are.  The statistic is
    the seed-level difference of client means, oriented so that positive is *A
    better* (``sense="max"``: accuracy, AUC; ``"min"``: MSE),

    .. math:: d_s = \pm\big(\bar a_{\cdot s} - \bar b_{\cdot s}\big),\qquad
              t = \frac{\bar d}{s_d/\sqrt{S}},

    referred to Student's t with ``S − 1`` degrees of freedom, two-sided (a
    paired t-test over seeds; it can reach α = 0.05 with 5 seeds, where an exact
    sign test over 5 seeds cannot).  Verdicts:

    * ``"identical"`` — every pair agrees within ``rtol`` (relative; :data:`TIE_RTOL`):
      the same model, whatever the p-value of rounding noise would say;
    * ``"underpowered"`` — fewer than ``min_seeds`` seeds: ``p`` is reported, no verdict;
    * ``"better"`` / ``"worse"`` — ``p < alpha`` (the caller may replace ``p`` by its
      Holm-adjusted value first: :func:`family_tests`);
    * ``"no significant difference"`` otherwise.

    Returns
    -------
    dict
        ``{"p", "statistic" (t), "n_seeds", "n_pairs", "n_tied", "mean_difference",
        "seed_differences", "ci", "direction", "test"}``; ``ci``: the ``1 − alpha`` Student-t
        interval of the mean difference over the seeds (:func:`seed_interval`; ``[None, None]``
        with one seed, ``[0, 0]`` when identical), oriented like it.

    Examples
    --------
    >>> seed_level_test([[0.9, 0.8, 0.9]], [[0.7, 0.7, 0.8]])["direction"]
    'underpowered'
    >>> seed_level_test([[1e-4 + 4e-11] * 5], [[1e-4] * 5], sense="min")["direction"]
    'identical'
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 1:
        a, b = a[None], b[None]
    if a.shape != b.shape or a.ndim != 2:
        raise InputError(f"seed-level test: A has shape {a.shape}, B has {b.shape}; need paired (clients, seeds)")
    if sense not in ("max", "min"):
        raise InputError(f"seed-level test: sense must be 'max' or 'min', got {sense!r}")
    keep = np.isfinite(a) & np.isfinite(b)
    seeds = np.flatnonzero(keep.any(axis=0))
    if seeds.size == 0:
        raise InputError("seed-level test: no pair has both results")
    tied = keep & (np.abs(a - b) <= rtol * np.maximum(np.abs(a), np.abs(b)))
    diff = np.where(keep, a - b, np.nan) * (1.0 if sense == "max" else -1.0)
    d = np.array([np.nanmean(diff[:, s]) for s in seeds])
    S = int(seeds.size)
    _, low, high = seed_interval(d, 1 - alpha)
    rec: dict[str, Any] = {"test": "paired t-test over seeds of the client-mean difference, two-sided", "n_seeds": S,
           "n_pairs": int(keep.sum()), "n_tied": int(tied.sum()), "missing": int((~keep).sum()),
           "mean_difference": float(d.mean()), "seed_differences": [float(x) for x in d], "statistic": None,
           "p": None, "alpha": alpha, "ci": [low, high]}
    if tied.sum() == keep.sum():
        return dict(rec, direction="identical", mean_difference=0.0, ci=[0.0, 0.0])
    if S >= 2:
        sd = float(d.std(ddof=1))
        if sd > 1e-9 * float(np.max(np.abs(d))):  # below: the seeds differ by the same amount up to rounding
            res = stats.ttest_1samp(d, 0.0)
            rec["statistic"], rec["p"] = float(res.statistic), float(res.pvalue)
        else:  # every seed differs by the same amount: no variation to refer it to
            rec["p"] = 0.0 if d.mean() != 0 else 1.0
    if S < min_seeds:
        return dict(rec, direction="underpowered")
    return dict(rec, direction=_verdict(rec["p"], rec["mean_difference"], alpha))


def _verdict(p, mean_difference: float, alpha: float) -> str:
    if p is not None and p < alpha:
        return "better" if mean_difference > 0 else "worse"
    return "no significant difference"


#: The power at which :func:`detectable_difference` states what a test that cannot decide could have detected.
POWER = 0.8


def paired_t_power(difference: float, sd: float, n: int, alpha: float = 0.05) -> float:
    r"""The power of the two-sided paired t-test over ``n`` seeds to detect a true mean difference ``difference``.

    With the seed differences' standard deviation ``sd``, :math:`T = \bar d/(s_d/\sqrt n)` follows the
    noncentral t with ``n − 1`` degrees of freedom and noncentrality :math:`\delta = d\sqrt n/s_d`; the power is
    :math:`P(|T| > t_{1-α/2,\,n-1})` (``scipy.stats.nct``).  ``sd`` is the observed one: a planning estimate.

    >>> round(paired_t_power(1.0, 1.0, 10), 3)
    0.803
    """
    from scipy import stats

    if n < 2 or not sd > 0:
        return float("nan")
    df = n - 1
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    nc = abs(float(difference)) * math.sqrt(n) / float(sd)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest true mean difference the paired t-test over ``n`` seeds detects with ``power`` (at ``sd``).

    Solves :func:`paired_t_power` ``= power`` (``scipy.optimize.brentq``); NaN with fewer than two seeds or no
    spread.

    >>> round(detectable_difference(1.0, 10), 3)
    0.996
    """
    from scipy.optimize import brentq

    if n < 2 or not sd > 0:
        return float("nan")
    hi = float(sd)
    while paired_t_power(hi, sd, n, alpha) < power:
        hi *= 2
    return float(brentq(lambda d: paired_t_power(d, sd, n, alpha) - power, 0.0, hi, xtol=1e-12 * hi))


def primary_test(a, b, sense: str = "max", alpha: float = 0.05, min_seeds: int = MIN_SEEDS) -> dict:
    """The pre-specified primary test: :func:`seed_level_test` at ``alpha``, outside any Holm family.

    When it cannot decide (no significant difference), its verdict is ``"inconclusive"``, and the record says
    what the test could have detected: ``detectable`` (the difference found with :data:`POWER` power at the
    observed spread of the seed differences, :func:`detectable_difference`) and ``power``.
    """
    rec = dict(seed_level_test(a, b, sense, alpha, min_seeds), primary=True)
    d = np.asarray(rec["seed_differences"], dtype=np.float64)
    if d.size >= 2 and rec["direction"] != "identical":
        rec["detectable"] = detectable_difference(float(d.std(ddof=1)), int(d.size), alpha, POWER)
        rec["power"] = POWER
    if rec["direction"] == "no significant difference":
        rec["direction"] = "inconclusive"
    return rec


def family_tests(values: Mapping[str, np.ndarray], references: Sequence[str], sense: str = "max",
                 alpha: float = 0.05, min_seeds: int = MIN_SEEDS, columns: Sequence[str] | None = None,
                 primary: tuple[str, str] | None = None) -> dict[str, dict[str, dict]]:
    """Every column against each reference by :func:`seed_level_test`, Holm-adjusted as one family.

    ``values``: ``{column: (clients, seeds) array}``; ``columns``: those tested (default: all).
    The family is every
    (column, reference) test of one table (one regime's report): the raw ``p`` and
    Holm's ``p_holm`` (:func:`holm`) are both kept, and "better"/"worse" is decided
    on ``p_holm``.  "identical" tests (no p-value) are left out of the family;
    "underpowered" ones get their Holm p but keep the verdict "underpowered".
    ``primary``: the ``(column, reference)`` pre-specified as the primary test, decided at ``alpha`` by
    :func:`primary_test` and left out of the family.

    Returns
    -------
    dict
        ``{column: {reference: record}}``.
    """
    out: dict[str, dict[str, dict]] = {}
    order = []
    for col in (values if columns is None else columns):
        v = values[col]
        for ref in references:
            if ref == col or ref not in values:
                continue
            if (col, ref) == primary:
                out.setdefault(col, {})[ref] = primary_test(v, values[ref], sense, alpha, min_seeds)
                continue
            out.setdefault(col, {})[ref] = seed_level_test(v, values[ref], sense, alpha, min_seeds)
            order.append((col, ref))
    tested = [(c, r) for c, r in order if out[c][r]["p"] is not None]
    adjusted = holm([out[c][r]["p"] for c, r in tested])
    for (c, r), ph in zip(tested, adjusted, strict=True):
        t = out[c][r]
        t["p_holm"] = ph
        t["family_size"] = len(tested)
        if t["direction"] != "underpowered":
            t["direction"] = _verdict(ph, t["mean_difference"], alpha)
    return out


def retraining_support(partitions: Sequence[str]) -> dict[str, float]:
    """The share of seeds whose exact CE is each partition (in first-seen order).

    Each seed draws a new split and a new initialisation and trains the whole
    game again, so this is the CE's support *over retraining*; the support of
    :func:`coalitions.support.support` resamples the validation rows of one trained
    game and cannot see the variation between trainings (a game whose values sit
    far from every tie scores 1.00 there whatever the next seed gives).

    Examples
    --------
    >>> retraining_support(["0|1", "0,1", "0|1"])
    {'0|1': 0.6666666666666666, '0,1': 0.3333333333333333}
    """
    if not partitions:
        raise InputError("retraining support needs at least one seed")
    n = len(partitions)
    return {p: sum(q == p for q in partitions) / n for p in dict.fromkeys(partitions)}


# ---------------------------------------------------------------------------- majority class
@dataclass(frozen=True)
class MajorityRow:
    """A client's majority-class baseline: the label, its test accuracy and the counts behind it."""

    client: str
    label: int
    accuracy: float
    n_test: int
    train_share: float


def majority_class(federation) -> dict[str, MajorityRow]:
    """Each client's majority *training* label, scored on its *test* data.

    The baseline predicts, for every test sample of client ``i``, the label
    most frequent in ``i``'s training split (ties: the smallest label id); its
    accuracy is the share of ``i``'s test samples with that label.  It uses no
    feature and no validation or test label to choose, so any classifier that
    has learned something must beat it; a method that does not is
    indistinguishable from predicting a constant.

    Parameters
    ----------
    federation : Federation
        A classification federation (task ``"binary"`` or ``"multiclass"``).

    Returns
    -------
    dict
        ``{client: MajorityRow}`` in client order.
    """
    if federation.task == "regression":
        raise InputError(f"federation {federation.name!r} is a regression task: no majority class")
    out = {}
    for c in federation.clients:
        counts = np.bincount(c.train.y, minlength=federation.n_classes or 0)
        label = int(np.argmax(counts))
        out[c.name] = MajorityRow(c.name, label, float(np.mean(c.test.y == label)), len(c.test),
                                  float(counts[label] / counts.sum()))
    return out


# ---------------------------------------------------------------------------- seeds
@dataclass(frozen=True)
class SeedPair:
    """A data-split seed and an initialisation seed derived from one user seed."""

    user: int
    data: int
    init: int


def separate_seeds(seed: int) -> SeedPair:
    """Derive a data-split seed and an initialisation seed from one user seed.

    ``numpy.random.SeedSequence(seed).spawn(2)`` gives two children with spawn
    keys ``(0,)`` and ``(1,)``; each child's first 32-bit word of
    ``generate_state`` is the seed: child 0 for the data split
    (``load(..., seed=data)``), child 1 for model initialisation and batch
    order.  SeedSequence hashes the user seed together with the spawn key, so
    the two are statistically independent streams and neither equals the user
    seed's own stream.  To vary one source of randomness while holding the other
    fixed, take ``separate_seeds(k).data`` for one ``k`` and
    ``separate_seeds(m).init`` over ``m`` (or the other way round).

    Parameters
    ----------
    seed : int
        Non-negative user seed.

    Returns
    -------
    SeedPair
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {seed!r}")
    data, init = (int(c.generate_state(1, dtype=np.uint32)[0]) for c in np.random.SeedSequence(int(seed)).spawn(2))
    return SeedPair(int(seed), data, init)
