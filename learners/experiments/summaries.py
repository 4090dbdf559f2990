"""What a reproduction reports of its pieces: the exact game's summary, each learner's, and the tables.

Pure functions from trained pieces (games, estimates) to the typed records of
:mod:`.results`: the exact game's CE and its test metrics (:func:`exact_summary`), a
learner's comparison with the exact game (``_method_summary``), the per-regime summary
table over seeds (:func:`summarize`), the seed-level statistics (:func:`regime_statistics`)
and the threshold sensitivity (:func:`sensitivity_summary`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

import coalitions as co
from coalitions.compare import compare
from coalitions.errors import InputError
from coalitions.learners.experiments.agreement import (
    _is_ce,
    _mean,
    _names,
    rules_against_exact,
    sensitivity_against_exact,
)
from coalitions.learners.experiments.catalogue import (
    METHOD_LABELS,
    Experiment,
)
from coalitions.learners.experiments.columns import (
    lr_tuning,
    oracle_settings,
)
from coalitions.learners.experiments.results import (
    Comparison,
    ExactSummary,
    MethodSummary,
    Run,
    partition_key,
)
from coalitions.learners.experiments.seedstats import ALPHA, LEVEL, MAJORITY, N_BOOT
from coalitions.payoffs import models_in

__all__ = ["exact_summary", "summarize", "seed_record", "regime_statistics", "sensitivity_summary", "exact_outputs"]


def _blocks(game: co.Game, partition) -> list[list[str]]:
    return [_names(game, k) for k in sorted(partition, key=lambda k: k & -k)]


def exact_summary(game: co.Game, test_game: co.Game, metric: str | None,
                  eq: co.Equilibrium | None = None, replicates=None) -> ExactSummary:
    """The exact game's CE and each client's metric alone, in the CE and with everyone.

    ``game`` holds validation metrics (it decides everything); ``test_game`` the
    same models scored on test data (reported, never used to choose).  ``eq``:
    ``co.solve(game)`` when the caller already has it.  ``replicates``
    (:class:`coalitions.replicates.Replicates`, optional): bootstrap replicates
    of ``game``, which give the CE's support (docs/concepts.md §6).
    """
    from coalitions.io import support_to_json
    from coalitions.support import support

    eq = co.solve(game) if eq is None else eq
    cert = eq.certificate if eq.certificate is not None else co.certify(game, eq.masks, eq.semantics, eq.tol)
    # every replicate solved as the game was: the same level, against the game's own standard errors
    sup = None if replicates is None else support_to_json(game, support(eq.masks, replicates, eq.semantics,
                                                                        eq.tol, z=eq.z, uncertainty=game.uncertainty))
    bg = co.ExactOracle(game).benefit_graph(game.grand)
    used = models_in(game, eq.masks)
    raw_val, raw_test = game.raw_values(), test_game.raw_values()
    scores = {}
    for part, raw in (("val", raw_val), ("test", raw_test)):
        scores[part] = {
            "local": {c: float(raw[i, 1 << i]) for i, c in enumerate(game.clients)},
            "ce": {c: float(raw[i, used[i]]) for i, c in enumerate(game.clients)},
            "all": {c: float(raw[i, game.grand]) for i, c in enumerate(game.clients)},
        }
    return ExactSummary(
        metric=metric, partition=_blocks(game, eq.masks), certificate=bool(cert.holds),
        found_by=eq.found_by, rounds=[[_names(game, k) for k in r] for r in eq.rounds],
        ocs={game.clients[i]: _names(game, c) for i, c in bg.collaborators},
        ambiguous=sorted(game.clients[i] for i in bg.ambiguous),
        edges=[[game.clients[j], game.clients[i]] for j, i in bg.edges],
        model_in_ce={game.clients[i]: _names(game, used[i]) for i in range(game.n)},
        val=scores["val"], test=scores["test"], support=sup, equilibrium=eq)


def _method_summary(estimate, game, eq: co.Equilibrium | None = None) -> MethodSummary:
    comparison = None
    if game is not None:
        cmp = compare(estimate, game, exact=eq)
        comparison = Comparison(**{k: cmp[k] for k in Comparison.KEYS if k != "is_exact_ce"},
                                is_exact_ce=_is_ce(game, estimate))
    return MethodSummary(
        partition=[list(b) for b in estimate.blocks()], test=dict(estimate.utilities["test"]),
        val=dict(estimate.utilities["val"]),
        weights=None if estimate.weights is None else estimate.weights.tolist(),
        edges=[[estimate.clients[j], estimate.clients[i]] for j, i in estimate.benefit_graph.edges],
        compare=comparison, estimate=estimate, sensitivity=sensitivity_against_exact(estimate, game, eq),
        rules=rules_against_exact(estimate, game, eq), lr_tuning=lr_tuning(estimate),
        stopping=(estimate.extra or {}).get("stopping"))


def exact_outputs(fed, exp: Experiment, init_seed: int, game: co.Game, eq: co.Equilibrium, where: Path,
                  device: str, options: dict | None = None,
                  extra: dict[str, list[int]] | None = None) -> dict[str, list[np.ndarray]]:
    """Each client's test outputs under the exact game's models it is scored with: alone, in the CE, with everyone.

    ``{"local" | "ce" | "all": [outputs of client i]}`` (and ``extra``'s keys: ``{name: [the model
    coalition of client i]}``, such as ``"ce_paper"``: the models of SPO's coalitions), from
    :meth:`coalitions.learners.exact.ExhaustiveOracle.subset_outputs` (only
    these ``≤ 2N + 1`` models are trained again), kept in
    ``<where>-exact-outputs.npz`` so that a rerun reads them back.  ``options``: the oracle's
    keywords of the run (:meth:`Experiment.oracle_options`); ``None``: those of a full run
    without a regime's changes.
    """
    n = fed.n
    used = models_in(game, eq.masks)
    want = {"local": [1 << i for i in range(n)], "ce": [int(u) for u in used], "all": [int(game.grand)] * n,
            **{k: [int(m) for m in ms] for k, ms in (extra or {}).items()}}
    path = where.with_name(where.name + "-exact-outputs.npz")
    stamp = np.array([fed.options.get("seed", -1), init_seed], dtype=np.int64)
    settings = options if options is not None else oracle_settings(exp)
    # the oracle's settings too: outputs of models trained under another protocol (a fixed rate where a grid is
    # wanted, another budget) are trained again, never mixed in
    made = np.array(json.dumps({k: v.to_json() if hasattr(v, "to_json") else v for k, v in settings.items()},
                               sort_keys=True, default=str))
    stored: dict[str, Any] = {}   # arrays (Any: numpy's savez stub would also match **stored against allow_pickle)
    if path.exists():
        with np.load(path) as z:
            if ("seeds" in z.files and np.array_equal(z["seeds"], stamp) and "settings" in z.files
                    and str(z["settings"]) == str(made)):
                stored = {k: z[k] for k in z.files}

    def key(m: int, i: int) -> str:
        return f"m{m}_c{i}"

    missing = sorted({m for ms in want.values() for i, m in enumerate(ms) if key(m, i) not in stored})
    if missing:
        from coalitions.learners.exact import ExhaustiveOracle

        # ``options``: the oracle's (Experiment.oracle_options), whose protocol holds the oracle's protocol fields
        rows = ExhaustiveOracle(device=device, seed=init_seed, **settings).subset_outputs(fed, missing, "test")
        for m, row in zip(missing, rows, strict=True):
            for i, o in enumerate(row):
                if o is not None:
                    stored[key(m, i)] = np.asarray(o, dtype=np.float32)
        stored["seeds"] = stamp
        stored["settings"] = made
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, **stored)
        tmp.replace(path)
    return {col: [stored[key(m, i)] for i, m in enumerate(ms)] for col, ms in want.items()}


def _stats(values: list[float]) -> dict:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "n": int(x.size)}


def summarize(regime: dict, methods) -> dict:
    """Per-client test metric of every column (mean, sample std and count over seeds).

    Columns: each learner by its label, ``CE (ours)`` after SPO (SPO's hypernetwork read at
    SPO's own CE's coalitions: :func:`ce_ours`), ``CE (paper)`` (SPO's CE by the paper's
    definition, the exact game's models trained on its coalitions: ``spo_column.ce_paper``), ``CE`` (the
    exact equilibrium) where the exact game was computed.  ``mean`` averages the clients of each
    seed first.
    """
    runs = regime["runs"]
    clients = regime["clients"]
    columns: dict[str, list[dict]] = {}
    have_exact = bool(runs) and all("exact" in r for r in runs)
    for m in methods:
        columns[METHOD_LABELS.get(m, m)] = [r["methods"][m]["test"] for r in runs]
        if m == "spo" and runs and all(r["methods"]["spo"].get("ce_ours") for r in runs):
            columns["CE (ours)"] = [r["methods"]["spo"]["ce_ours"]["test"] for r in runs]
        if m == "spo" and runs and all(r["methods"]["spo"].get("ce_paper") for r in runs):
            columns["CE (paper)"] = [r["methods"]["spo"]["ce_paper"]["test"] for r in runs]
        if m == "spo" and have_exact:
            columns["CE"] = [r["exact"]["test"]["ce"] for r in runs]
            if all(r["exact"].get("loss") for r in runs):   # the validation-loss game's CE, scored by the metric
                columns["CE (loss game)"] = [r["exact"]["loss"]["test"]["ce"] for r in runs]
    if have_exact and "CE" not in columns:  # no SPO among the learners: CE last
        columns["CE"] = [r["exact"]["test"]["ce"] for r in runs]
        if all(r["exact"].get("loss") for r in runs):
            columns["CE (loss game)"] = [r["exact"]["loss"]["test"]["ce"] for r in runs]
    table = {}
    for label, per_seed in columns.items():
        row = {c: _stats([t[c] for t in per_seed]) for c in clients}
        row["mean"] = _stats([float(np.nanmean([t[c] for c in clients])) for t in per_seed])
        table[label] = row
    out = {"columns": list(columns), "test": table}
    if all("exact" in r for r in runs):
        exact = [partition_key(r["exact"]["partition"]) for r in runs]
        out["exact_partitions"] = {p: exact.count(p) for p in dict.fromkeys(exact)}
        agree = {}
        for m in methods:
            cmps = [r["methods"][m].get("compare") for r in runs]
            if all(c is not None for c in cmps):
                agree[m] = {"same_partition": sum(c["same_partition"] for c in cmps),
                            "edge_f1": _stats([c["edge_f1"] for c in cmps]),
                            "ari": _stats([c["ari"] for c in cmps]),
                            "is_exact_ce": sum(c["is_exact_ce"] for c in cmps)}
        out["agreement"] = agree
    return out


def _columns(methods, have_exact: bool) -> list[tuple[str, str]]:
    """``(key, label)`` of the report's columns: the learners, ``CE (paper)`` and ``CE`` after SPO (or ``CE`` last)
    where the game exists."""
    cols = [(m, METHOD_LABELS.get(m, m)) for m in methods]
    if have_exact:
        at = next((k + 1 for k, (m, _) in enumerate(cols) if m == "spo"), len(cols))
        exact = [("ce", "CE"), ("ce_loss", "CE (loss game)")]   # the second only where the run has a loss game
        cols[at:at] = ([("ce_paper", "CE (paper)")] if "spo" in methods else []) + exact
    return cols


def seed_record(fed, run: Run, exact_out: dict | None, estimates: dict) -> dict:
    """One seed's test labels and every column's test outputs and metric, for :func:`regime_statistics`."""
    from coalitions.learners.experiments.statistics import majority_class

    names = list(fed.names)
    rec: dict = {"y": {c.name: np.asarray(c.test.y) for c in fed.clients}, "outputs": {}, "metric": {},
                 "ids": {c.name: c.test.ids for c in fed.clients}}
    for m, est in estimates.items():
        rec["outputs"][m] = {c: np.asarray(est.extra["test_outputs"][c], dtype=np.float64) for c in names}
        rec["metric"][m] = dict(run.methods[m].test)
    if exact_out is not None and run.exact is not None:
        rec["outputs"]["ce"] = {c: np.asarray(exact_out["ce"][i], dtype=np.float64) for i, c in enumerate(names)}
        rec["metric"]["ce"] = dict(run.exact.test["ce"])
        loss = run.exact.loss
        if loss is not None and "ce_loss" in exact_out:   # the validation-loss game's CE, scored by the metric
            rec["outputs"]["ce_loss"] = {c: np.asarray(exact_out["ce_loss"][i], dtype=np.float64)
                                         for i, c in enumerate(names)}
            rec["metric"]["ce_loss"] = dict(loss["test"]["ce"])
        paper = run.methods["spo"].ce_paper if "spo" in run.methods else None
        if paper is not None and "ce_paper" in exact_out:   # SPO's CE scored by the exact game's models
            rec["outputs"]["ce_paper"] = {c: np.asarray(exact_out["ce_paper"][i], dtype=np.float64)
                                          for i, c in enumerate(names)}
            rec["metric"]["ce_paper"] = dict(paper["test"])
    if fed.task != "regression":
        rec["majority"] = {c: row.label for c, row in majority_class(fed).items()}
    return rec


#: What ``statistics.intervals`` (MSE and AUC) are, in ``results.json`` beside them.
INTERVALS_METHOD = ("per-client two-stage percentile bootstrap: seeds resampled, then each drawn seed's test rows "
                    "resampled independently (rows a fixed test set repeats across seeds count as new: too narrow "
                    "there); for the verdicts read seed.seed_tests")


def regime_statistics(clients: list[str], metric: str, records: list[dict], methods,
                      primary_game: str | None = None) -> dict:
    """Per-client intervals and seed-level paired tests of every column (docs/formats.md, ``statistics``).

    ``records``: one :func:`seed_record` per seed.  For MSE and AUC, for every column (the
    learners and ``CE``) and client, the 95% two-stage bootstrap
    interval over the client's test samples and the seeds
    (:func:`~.statistics.bootstrap_interval` of :func:`~.statistics.output_samples`), labelled
    by ``intervals_method``; for accuracy none (it collapsed to ``[1, 1]`` on a perfect client
    and counted every seed's rows as new): the Clopper–Pearson intervals replace it.
    Under ``"seed"`` (:func:`~.seedstats.seed_statistics`) every column's seed-level test
    against Local and, for accuracy, the majority class, Holm-adjusted as one family, with the
    interval of each difference; Clopper–Pearson intervals of each client's pooled test accuracy
    over its distinct test rows (``records``' ``ids``); Student-t intervals over the seeds of
    the mean over clients.  ``outputs_check``: the
    largest difference between a metric recomputed from the stored outputs and
    the one the run recorded (the outputs are the scored models').
    """
    from coalitions.learners.experiments.seedstats import distinct_test_rows, primary_column, seed_statistics
    from coalitions.learners.experiments.statistics import bootstrap_interval, output_samples

    have_exact = all("ce" in r["outputs"] for r in records)
    cols = [(k, lab) for k, lab in _columns(methods, have_exact) if all(k in r["outputs"] for r in records)]
    majority = metric == "accuracy" and all("majority" in r for r in records)
    intervals: dict[str, dict] = {}
    values: dict[str, np.ndarray] = {}   # (clients, seeds) test metric of each column
    check = 0.0
    for key, label in cols + ([(MAJORITY, MAJORITY)] if majority else []):
        row = {}
        per_pair = np.full((len(clients), len(records)), np.nan)
        for ci, c in enumerate(clients):
            data, stat = [], None
            for si, r in enumerate(records):
                if key == MAJORITY:
                    d = (r["y"][c] == r["majority"][c]).astype(np.float64)
                    per_pair[ci, si] = float(d.mean())
                else:
                    d, stat = output_samples(metric, r["y"][c], r["outputs"][key][c])
                    per_pair[ci, si] = r["metric"][key][c]
                    mine = float(stat(d)) if stat is not None else float(d.mean())
                    if math.isfinite(mine) and math.isfinite(per_pair[ci, si]):
                        check = max(check, abs(mine - per_pair[ci, si]))
                data.append(d)
            try:
                iv = bootstrap_interval(data, level=LEVEL, n_boot=N_BOOT, seed=0, statistic=stat)
                row[c] = {"estimate": iv.estimate, "low": iv.low, "high": iv.high,
                          "n_samples": list(iv.n_samples)}
            except InputError:  # a metric undefined on this client's test data (one class: no AUC)
                row[c] = {"estimate": None, "low": None, "high": None, "n_samples": [len(x) for x in data]}
        intervals[label] = row
        values[label] = per_pair
    n_test = np.array([[len(r["y"][c]) for r in records] for c in clients], dtype=np.int64)
    distinct = distinct_test_rows(clients, [r.get("ids") or {} for r in records])
    out = {"level": LEVEL, "n_boot": N_BOOT, "alpha": ALPHA, "columns": list(intervals),
           "outputs_check": check, "seed": seed_statistics(clients, metric, values, n_test, distinct,
                                                           primary=primary_column(primary_game, values)),
           "distinct_test_rows": distinct}
    if metric != "accuracy":   # accuracy: the Clopper–Pearson intervals under "seed" (binomial)
        out["intervals"] = intervals
        out["intervals_method"] = INTERVALS_METHOD
    return out


def sensitivity_summary(runs: list[dict], methods) -> dict:
    """Per learner with a threshold: each threshold's CE (first seed) and its agreement with the exact CE over seeds."""
    out = {}
    for m in methods:
        sens = [r["methods"][m].get("sensitivity") for r in runs]
        if not sens or any(x is None for x in sens):
            continue
        rows = []
        for k, row in enumerate(sens[0]["rows"]):
            same = [x["rows"][k].get("same_partition") for x in sens if k < len(x["rows"])]
            rows.append({"threshold": row["threshold"], "partition": row["partition"],
                         "edges": _mean([len(x["rows"][k]["edges"]) for x in sens if k < len(x["rows"])]),
                         "edge_f1": _mean([x["rows"][k].get("edge_f1") for x in sens if k < len(x["rows"])]),
                         "same_partition": None if None in same else int(sum(same))})
        out[m] = {"rule": sens[0]["rule"], "threshold_used": sens[0]["threshold_used"], "rows": rows,
                  "seeds": len(sens)}
    return out
