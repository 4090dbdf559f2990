"""A regime's statistics with the seeds as replicates: the tests, intervals and supports of a report.

Pure functions of per-(client, seed) numbers — a ``results.json`` holds all of them — so the
same code serves a fresh run (:func:`coalitions.learners.experiments.runner.regime_statistics`)
and the re-rendering of a committed run without retraining (:func:`refresh_results`, which
only reloads each seed's federation for its test-set sizes and majority-class baseline).

* **Tests**: every column against Local and the majority class, seed level
  (:func:`~.statistics.seed_level_test`), one Holm family per regime
  (:func:`~.statistics.family_tests`); raw and adjusted p both kept.
* **Per-client accuracy intervals**: Clopper–Pearson (:func:`~.statistics.clopper_pearson`,
  scipy's ``binomtest``) on the client's test accuracy pooled over the seeds, counted over the
  *distinct* test rows behind it (:func:`~.statistics.distinct_rows`): where every seed tests
  the same rows (Adult's ``adult.test``) or reuses some (heart), pooling seeds repeats rows and
  adds no new test evidence, so ``n`` is the distinct rows and the hits are the pooled accuracy
  times ``n``, rounded.  Never ``[1, 1]``.
* **Mean over clients**: the mean over seeds of each seed's client mean, with a Student-t
  interval over the seeds (:func:`~.statistics.seed_interval`): the seeds are the replicates,
  the clients are a fixed set.  The seed-level tests carry the interval of each column's
  difference with Local (``ci``), CE − Local among them.
* **Supports**: the exact CE's support over validation resamples (recorded per seed by
  the run) and over retraining (:func:`~.statistics.retraining_support`), each labelled.
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.experiments.statistics import (
    MIN_SEEDS,
    TIE_RTOL,
    clopper_pearson,
    distinct_rows,
    family_tests,
    retraining_support,
    seed_interval,
)

__all__ = ["seed_statistics", "primary_column", "distinct_test_rows", "column_values", "exact_supports",
           "refresh_results", "MAJORITY", "LEVEL", "N_BOOT", "ALPHA"]

#: The report's column of the majority-class baseline (classification by accuracy).
MAJORITY = "Majority class"
#: Coverage of every interval, bootstrap replicates behind the bootstrap ones, level of the tests.
LEVEL, N_BOOT, ALPHA = 0.95, 2000, 0.05


def seed_statistics(clients: list[str], metric: str, values: dict[str, np.ndarray],
                    n_test: np.ndarray | None = None, n_distinct: dict | None = None,
                    primary: str | None = None) -> dict:
    """Seed-level tests (one Holm family and the primary test), Clopper–Pearson client intervals, seed-level mean
    intervals.

    Parameters
    ----------
    clients : list of str
    metric : {"accuracy", "auc", "mse"}
    values : dict
        ``{column label: (clients, seeds) test metric}``; the majority class under :data:`MAJORITY`.
    n_test : ndarray of int, shape (clients, seeds), optional
        Test samples behind each accuracy (needed for the Clopper–Pearson intervals).
    n_distinct : dict, optional
        ``{client: distinct test rows over the seeds}`` (:func:`~.statistics.distinct_rows`); a
        client missing or ``None``: its rows are taken as distinct (rows × seeds).
    primary : str, optional
        The column whose test against Local is the regime's pre-specified primary test (its primary game's
        CE: :func:`primary_column`), decided at ``alpha`` outside the Holm family
        (:func:`~.statistics.primary_test`: "inconclusive" with the difference it could have detected).

    Returns
    -------
    dict
        ``{"seed_tests": {column: {reference: record}}, "binomial": {column: {client: {"estimate",
        "low", "high", "hits", "n", "rows_over_seeds"}}} (accuracy only; ``n`` the distinct rows),
        "mean_intervals": {column: {"estimate", "low", "high", "n_seeds"}}, "family", "min_seeds",
        "tie_rtol", "alpha", "level"}``.
    """
    sense = "min" if metric == "mse" else "max"
    refs = ["Local"] + ([MAJORITY] if MAJORITY in values else [])
    first = (primary, "Local") if primary in values and "Local" in values else None
    tests = family_tests(values, refs, sense, ALPHA, MIN_SEEDS, columns=[c for c in values if c != MAJORITY],
                         primary=first)
    out: dict = {"seed_tests": tests, "min_seeds": MIN_SEEDS, "tie_rtol": TIE_RTOL, "alpha": ALPHA, "level": LEVEL,
                 "primary": None if first is None else list(first),
                 "family": "every column against Local and the majority class, in this regime"
                           + ("" if first is None else f", but the primary test ({first[0]} against Local)"),
                 "test": "paired t-test over seeds of the client-mean difference (seeds are the replicates), "
                         "two-sided, Holm-adjusted within the regime"}
    if metric == "accuracy" and n_test is not None:
        n = np.asarray(n_test, dtype=np.int64)
        out["binomial"] = {col: _binomial_row(clients, v, n, n_distinct or {}) for col, v in values.items()}
    means = {}
    for col, v in values.items():
        per_seed = [float(np.mean(v[:, s][np.isfinite(v[:, s])])) for s in range(v.shape[1])
                    if np.isfinite(v[:, s]).any()]
        if not per_seed:
            continue
        est, lo, hi = seed_interval(per_seed, LEVEL)
        means[col] = {"estimate": est, "low": lo, "high": hi, "n_seeds": len(per_seed)}
    out["mean_intervals"] = means
    out["mean_interval_method"] = "Student-t over the seeds of each seed's mean over clients (seeds are the replicates)"
    return out


def primary_column(primary_game: str | None, columns) -> str | None:
    """The column of the regime's primary test against Local: its primary game's CE, fixed before the runs.

    ``"CE (loss game)"`` where the validation-loss game is primary, else ``"CE"`` (the metric game's, also
    where no primary game was chosen: the paper's); None when the report has no such column.
    """
    col = "CE (loss game)" if primary_game == "loss" else "CE"
    return col if col in columns else None


def _binomial_row(clients: list[str], v: np.ndarray, n: np.ndarray, n_distinct: dict) -> dict:
    """One column's Clopper–Pearson interval per client, over the distinct test rows behind its pooled accuracy."""
    row = {}
    for ci, c in enumerate(clients):
        ok = np.isfinite(v[ci])
        total = int(n[ci][ok].sum())
        if total == 0:
            continue
        estimate = float(np.sum(v[ci][ok] * n[ci][ok])) / total       # the accuracy pooled over the seeds
        rows = n_distinct.get(c) or total
        rows = min(int(rows), total)
        k = int(np.rint(estimate * rows))
        lo, hi = clopper_pearson(k, rows, LEVEL)
        row[c] = {"estimate": estimate, "low": lo, "high": hi, "hits": k, "n": rows, "rows_over_seeds": total}
    return row


def distinct_test_rows(clients: list[str], per_seed_ids: list[dict]) -> dict[str, int | None]:
    """``{client: distinct test rows over the seeds}`` from each seed's ``{client: Split.ids}`` (None: unknown)."""
    return {c: distinct_rows([ids.get(c) for ids in per_seed_ids]) for c in clients}


def column_values(reg: dict) -> dict[str, np.ndarray]:
    """``{column: (clients, seeds)}`` test metric of every column of a regime of ``results.json``.

    The learners by their label, ``CE (ours)`` (SPO's models in SPO's CE), ``CE (paper)`` (the exact
    game's models of SPO's coalitions), ``CE`` and ``CE (loss game)`` (the exact games'), as
    :func:`~coalitions.learners.experiments.runner.summarize` orders them.
    """
    clients = reg["clients"]
    runs = reg["runs"]
    out = {}
    for col in reg["summary"]["columns"]:
        rows = []
        for r in runs:
            if col == "CE":
                t = r["exact"]["test"]["ce"]
            elif col == "CE (ours)":
                t = r["methods"]["spo"]["ce_ours"]["test"]
            elif col == "CE (paper)":
                t = r["methods"]["spo"]["ce_paper"]["test"]
            elif col == "CE (loss game)":
                t = r["exact"]["loss"]["test"]["ce"]
            else:
                key = next(m for m, lab in _labels().items() if lab == col and m in r["methods"])
                t = r["methods"][key]["test"]
            rows.append([np.nan if t.get(c) is None else float(t[c]) for c in clients])
        out[col] = np.array(rows, dtype=np.float64).T
    return out


def _labels() -> dict[str, str]:
    from coalitions.learners.experiments.catalogue import METHOD_LABELS

    return METHOD_LABELS


def _partition_key(blocks) -> str:
    from coalitions.learners.experiments.results import partition_key

    return partition_key(blocks)


def exact_supports(reg: dict) -> dict | None:
    """The exact CE's two supports, each labelled with what it measures (None without an exact game).

    ``{"validation": [per-seed support of its CE over bootstrap replicates of the validation
    rows, or None], "retraining": {partition: share of seeds}, "loss_validation", "loss_retraining"}``
    (the ``loss_`` keys for the validation-loss game, where recorded).
    """
    runs = reg["runs"]
    if not runs or not all(r.get("exact") for r in runs):
        return None
    out = {"validation": [(r["exact"].get("support") or {}).get("partition") for r in runs],
           "retraining": retraining_support([_partition_key(r["exact"]["partition"]) for r in runs]),
           "validation_means": "share of 50 bootstrap resamples of the validation rows (the trained models fixed) "
                               "whose CE is this seed's CE",
           "retraining_means": "share of seeds (a new split and a new initialisation, every model retrained) "
                               "whose CE is this partition"}
    if all(r["exact"].get("loss") for r in runs):
        out["loss_validation"] = [(r["exact"]["loss"].get("support") or {}).get("partition") for r in runs]
        out["loss_retraining"] = retraining_support([_partition_key(r["exact"]["loss"]["partition"]) for r in runs])
    return out


def refresh_results(results: dict) -> dict:
    """``results`` (a ``results.json`` dict) with every regime's seed-level statistics recomputed; no training.

    Each seed's federation is rebuilt from its recorded ``data_seed`` and the regime's options
    (data only) for the test-set sizes and the majority-class baseline; everything else comes
    from ``results``.  Adds ``summary.statistics.seed`` and ``summary.supports``; the earlier
    within-seed Wilcoxon tests stay under ``summary.statistics.tests`` for comparison.
    """
    from coalitions.learners.data.datasets import load
    from coalitions.learners.experiments.statistics import majority_class

    for reg in results["regimes"]:
        clients = reg["clients"]
        values = column_values(reg)
        n_test = np.zeros((len(clients), len(reg["runs"])), dtype=np.int64)
        maj = np.full(n_test.shape, np.nan)
        ids: list[dict] = []
        for s, run in enumerate(reg["runs"]):
            if run.get("data_seed") is None:
                break
            fed = load(results["dataset"], seed=run["data_seed"], **reg["options"])
            ids.append({c.name: c.test.ids for c in fed.clients})
            sizes = dict(zip(fed.names, fed.sizes("test"), strict=True))
            n_test[:, s] = [sizes[c] for c in clients]
            if fed.task != "regression":
                rows = majority_class(fed)
                maj[:, s] = [rows[c].accuracy for c in clients]
        if reg["metric"] == "accuracy" and np.all(np.isfinite(maj)):
            values[MAJORITY] = maj
        st = reg["summary"].setdefault("statistics", {})
        if reg["metric"] == "accuracy":   # the older per-client bootstrap: replaced by seed.binomial
            st.pop("intervals", None)
        st["seed"] = seed_statistics(clients, str(reg["metric"]), values, n_test if n_test.all() else None,
                                     distinct_test_rows(clients, ids) if len(ids) == len(reg["runs"]) else None,
                                     primary=primary_column(reg.get("primary_game"), values))
        reg["summary"]["supports"] = exact_supports(reg)
    return results
