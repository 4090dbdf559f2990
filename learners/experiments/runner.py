"""Run one of the paper's experiments end to end: ``coalitions reproduce``.

For every regime and seed of an :class:`~coalitions.learners.experiments.catalogue.Experiment`:

1. build the federation (the seed fixes the data split and all training);
2. where affordable, train the exhaustive oracle (docs/concepts.md §5) and solve the exact
   game: its benefit graph, its CE with certificate, and each client's test
   metric alone, in the CE (the model :func:`coalitions.payoffs.models_in`
   picks on the client's coalition) and with everyone;
3. train every learner, keep its estimate, score it with
   :func:`coalitions.compare.compare` against the exact game, and certify
   whether the partition it proposes is a CE of the exact game.

Finished pieces are written under ``DIR/runs/<mode>/`` as they finish (the
exact games as ``coalitions/game@1``, the learners' estimates as
``coalitions/estimate@1``); a rerun of the same command reuses them, so an
interrupted run resumes without losing finished work.  Then ``results.json``
(``coalitions/reproduction@1``, the typed objects of :mod:`.results`), ``report.md``
(:mod:`.report`) and the figures (:mod:`.figures`) are written.

Examples
--------
>>> from coalitions.learners.experiments.runner import reproduce                  # doctest: +SKIP
>>> results = reproduce("synthetic", "out", quick=True)       # doctest: +SKIP
>>> results["regimes"][0]["runs"][0]["exact"]["partition"]    # doctest: +SKIP
[['0', '1', '2'], ['3', '4', '5']]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import coalitions as co
from coalitions.compare import compare
from coalitions.errors import InputError
from coalitions.files import write_text
from coalitions.io import read_json, write_json
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
    budget_record,
    get_experiment,
    select_methods,
)
from coalitions.learners.experiments.columns import (  # noqa: F401 (re-exported: the runner's public face)
    REPLICATES,
    _options,
    compute_named_piece,
    compute_piece,
    learner_outputs,
    lr_tuning,
    stopping_record,
    with_records,
)
from coalitions.learners.experiments.results import (
    RESULTS_FORMAT,
    Comparison,
    ExactSummary,
    MethodSummary,
    RegimeResult,
    Reproduction,
    Run,
    read_results,
    write_results,
)
from coalitions.learners.experiments.seedstats import ALPHA, LEVEL, MAJORITY, N_BOOT  # noqa: F401 (re-exported)
from coalitions.learners.experiments.spo_column import ce_ours, rules_summary
from coalitions.learners.experiments.statistics import separate_seeds
from coalitions.numbers import to_float
from coalitions.payoffs import models_in

__all__ = ["RESULTS_FORMAT", "reproduce", "run_experiment", "summarize", "exact_summary", "read_results", "ce_ours"]


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
    sup = None if replicates is None else support_to_json(game, support(eq.partition, replicates, eq.semantics,
                                                                        eq.tol))
    bg = co.ExactOracle(game).benefit_graph(game.grand)
    used = models_in(game, eq.partition)
    raw_val, raw_test = game.raw_values(), test_game.raw_values()
    scores = {}
    for part, raw in (("val", raw_val), ("test", raw_test)):
        scores[part] = {
            "local": {c: float(raw[i, 1 << i]) for i, c in enumerate(game.clients)},
            "ce": {c: float(raw[i, used[i]]) for i, c in enumerate(game.clients)},
            "all": {c: float(raw[i, game.grand]) for i, c in enumerate(game.clients)},
        }
    return ExactSummary(
        metric=metric, partition=_blocks(game, eq.partition), certificate=bool(eq.certificate.holds),
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
                  device: str, options: dict | None = None) -> dict[str, list[np.ndarray]]:
    """Each client's test outputs under the exact game's models it is scored with: alone, in the CE, with everyone.

    ``{"local" | "ce" | "all": [outputs of client i]}``, from
    :meth:`coalitions.learners.exact.ExhaustiveOracle.subset_outputs` (only
    these ``≤ 2N + 1`` models are trained again), kept in
    ``<where>-exact-outputs.npz`` so that a rerun reads them back.
    """
    n = fed.n
    used = models_in(game, eq.partition)
    want = {"local": [1 << i for i in range(n)], "ce": [int(u) for u in used], "all": [int(game.grand)] * n}
    path = where.with_name(where.name + "-exact-outputs.npz")
    stamp = np.array([fed.options.get("seed", -1), init_seed], dtype=np.int64)
    stored: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path) as z:
            if "seeds" in z.files and np.array_equal(z["seeds"], stamp):
                stored = {k: z[k] for k in z.files}

    def key(m: int, i: int) -> str:
        return f"m{m}_c{i}"

    missing = sorted({m for ms in want.values() for i, m in enumerate(ms) if key(m, i) not in stored})
    if missing:
        from coalitions.learners.exact import ExhaustiveOracle

        rows = ExhaustiveOracle(device=device, seed=init_seed, **{**exp.oracle, **(options or {})}).subset_outputs(
            fed, missing, "test")
        for m, row in zip(missing, rows, strict=True):
            for i, o in enumerate(row):
                if o is not None:
                    stored[key(m, i)] = np.asarray(o, dtype=np.float32)
        stored["seeds"] = stamp
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, **stored)
        tmp.replace(path)
    return {col: [stored[key(m, i)] for i, m in enumerate(ms)] for col, ms in want.items()}


def _read_timings(folder: Path) -> dict:
    """``{piece file name: seconds}`` of the pieces finished in ``folder`` (empty if none)."""
    path = folder / "timings.json"
    try:
        table = read_json(path) if path.exists() else {}
    except InputError:  # an unreadable table only loses the timings of earlier invocations
        return {}
    out = {}
    for piece, seconds in table.items():  # likewise an entry that is not a duration (10**400, "x", -1)
        try:
            if to_float(seconds, "a timing") >= 0:
                out[piece] = seconds
        except InputError:
            pass
    return out


def _record_time(folder: Path, piece: str, seconds: float) -> None:
    """Remember how long a finished piece took, so that a resumed run still reports it."""
    table = _read_timings(folder)
    table[piece] = round(seconds, 3)
    write_json(table, folder / "timings.json")


def _files(where: Path, what: str, loss: bool = False) -> tuple[Path, ...]:
    """The files of one piece: ``what`` is ``"exact"`` (two games, three with the ``loss`` game) or a learner's name."""
    if what == "exact":
        return ((where.with_name(where.name + "-game.json"), where.with_name(where.name + "-test-game.json"))
                + ((where.with_name(where.name + "-loss-game.json"),) if loss else ()))
    return (where.with_name(f"{where.name}-{what}.json"),)


def store_piece(where: Path, what: str, result, seconds: float) -> None:
    """Write a finished piece into the run folder (its last file marks it finished) with its time."""
    from coalitions.estimate import write_estimate

    files = _files(where, what, what == "exact" and len(result) > 4 and result[4] is not None)
    if what == "exact":
        if len(files) > 2:
            co.write_game(result[4], files[2], result[5])
        co.write_game(result[1], files[1])
        co.write_game(result[0], files[0], result[3])  # last: its presence marks the pair finished
    else:
        write_estimate(result, files[0])
    _record_time(where.parent, files[0].name, seconds)


def _done_line(where: Path, what: str, result, n: int, seconds: float) -> str:
    if what == "exact":
        return f"{where.name}: exact game, {2 ** n - 1} subset models ({result[2]}), {seconds:.1f} s"
    return f"{where.name}: {what}, {seconds:.1f} s"


def _read_piece(files, what: str):
    """A finished piece from its files: ``(game, test game, replicates, loss game, loss replicates)`` or an estimate."""
    if what == "exact":
        from coalitions.io import read_game_replicates

        game, reps = read_game_replicates(files[0])
        loss, loss_reps = read_game_replicates(files[2]) if len(files) > 2 else (None, None)
        return game, co.read_game(files[1]), reps, loss, loss_reps
    from coalitions.estimate import read_estimate
    from coalitions.numbers import to_array

    est = read_estimate(files[0])
    outputs = est.extra.get("test_outputs")
    for c, o in (outputs.items() if isinstance(outputs, dict) else ()):
        try:
            to_array(o, f"extra.test_outputs of client {c!r}")
        except InputError as e:
            raise InputError(f"{files[0]}: {e}") from None
    return est


def _is_current(piece, what: str, fed, init_seed: int) -> bool:
    """Was this finished piece made from this federation's split and ``init_seed``, with the report's records?

    Pieces of an earlier version (one seed for split and initialisation, or
    estimates without ``extra.test_outputs``) are trained again, never mixed in.
    """
    data_seed = fed.options.get("seed")
    if what == "exact":
        prov = piece[0].provenance
        return prov.get("seed") == init_seed and prov.get("options", {}).get("seed") == data_seed
    cfg = piece.config
    return (cfg.get("seed") == init_seed and cfg.get("data_options", {}).get("seed") == data_seed
            and "test_outputs" in piece.extra)


def _piece(fed, exp: Experiment, what: str, options: dict, seed: int, device: str, where: Path, log, progress,
           quiet: bool = False):
    """A piece read back from ``where`` when finished (said in ``log`` unless ``quiet``), else trained and written."""
    files = _files(where, what, what == "exact" and bool(options.get("loss_game")))
    if all(f.exists() for f in files):
        back = _read_piece(files, what)
        if _is_current(back, what, fed, seed):
            if not quiet:
                log(f"{where.name}: {'exact game' if what == 'exact' else what} read back from {files[0].name}")
            return back
        log(f"{where.name}: {files[0].name} was made with other seeds or lacks the test outputs; training again")
    t = time.perf_counter()
    tick = None if progress is None else (lambda done, total: progress(f"{where.name}: {what}", done, total))
    result = compute_piece(fed, exp, what, options, seed, device, tick)
    seconds = time.perf_counter() - t
    store_piece(where, what, result, seconds)
    log(_done_line(where, what, result, fed.n, seconds))
    return (result[0], result[1], result[3], result[4], result[5]) if what == "exact" else result


def _stats(values: list[float]) -> dict:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "n": int(x.size)}


def summarize(regime: dict, methods) -> dict:
    """Per-client test metric of every column (mean, sample std and count over seeds).

    Columns: each learner by its label, ``CE (ours)`` after SPO (SPO's utilities in
    SPO's own CE, the paper's row: :func:`ce_ours`), ``CE`` (the exact equilibrium)
    where the exact game was computed.  ``mean`` averages the clients of each seed first.
    """
    runs = regime["runs"]
    clients = regime["clients"]
    columns: dict[str, list[dict]] = {}
    have_exact = bool(runs) and all("exact" in r for r in runs)
    for m in methods:
        columns[METHOD_LABELS.get(m, m)] = [r["methods"][m]["test"] for r in runs]
        if m == "spo" and runs and all(r["methods"]["spo"].get("ce_ours") for r in runs):
            columns["CE (ours)"] = [r["methods"]["spo"]["ce_ours"]["test"] for r in runs]
        if m == "spo" and have_exact:
            columns["CE"] = [r["exact"]["test"]["ce"] for r in runs]
    if have_exact and "CE" not in columns:  # no SPO among the learners: CE last
        columns["CE"] = [r["exact"]["test"]["ce"] for r in runs]
    table = {}
    for label, per_seed in columns.items():
        row = {c: _stats([t[c] for t in per_seed]) for c in clients}
        row["mean"] = _stats([float(np.nanmean([t[c] for c in clients])) for t in per_seed])
        table[label] = row
    out = {"columns": list(columns), "test": table}
    if all("exact" in r for r in runs):
        exact = [tuple(tuple(b) for b in r["exact"]["partition"]) for r in runs]
        out["exact_partitions"] = {" | ".join(",".join(b) for b in p): exact.count(p) for p in dict.fromkeys(exact)}
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
    """``(key, label)`` of the report's columns: the learners, ``CE`` after SPO (or last) where the game exists."""
    cols = [(m, METHOD_LABELS.get(m, m)) for m in methods]
    if have_exact:
        at = next((k + 1 for k, (m, _) in enumerate(cols) if m == "spo"), len(cols))
        cols.insert(at, ("ce", "CE"))
    return cols


def seed_record(fed, run: Run, exact_out: dict | None, estimates: dict) -> dict:
    """One seed's test labels and every column's test outputs and metric, for :func:`regime_statistics`."""
    from coalitions.learners.experiments.statistics import majority_class

    names = list(fed.names)
    rec: dict = {"y": {c.name: np.asarray(c.test.y) for c in fed.clients}, "outputs": {}, "metric": {}}
    for m, est in estimates.items():
        rec["outputs"][m] = {c: np.asarray(est.extra["test_outputs"][c], dtype=np.float64) for c in names}
        rec["metric"][m] = dict(run.methods[m].test)
    if exact_out is not None and run.exact is not None:
        rec["outputs"]["ce"] = {c: np.asarray(exact_out["ce"][i], dtype=np.float64) for i, c in enumerate(names)}
        rec["metric"]["ce"] = dict(run.exact.test["ce"])
    if fed.task != "regression":
        rec["majority"] = {c: row.label for c, row in majority_class(fed).items()}
    return rec


def regime_statistics(clients: list[str], metric: str, records: list[dict], methods) -> dict:
    """Per-client intervals and seed-level paired tests of every column (docs/formats.md, ``statistics``).

    ``records``: one :func:`seed_record` per seed.  For every column (the
    learners, ``CE``, and for accuracy the majority-class baseline,
    :func:`~.statistics.majority_class`) and client, the 95% two-stage bootstrap
    interval over the client's test samples and the seeds
    (:func:`~.statistics.bootstrap_interval` of :func:`~.statistics.output_samples`);
    under ``"seed"`` (:func:`~.seedstats.seed_statistics`) every column's seed-level test
    against Local and, for accuracy, the majority class, Holm-adjusted as one family,
    Clopper–Pearson intervals of each client's pooled test hits, and bootstrap intervals
    of the mean over clients.  ``outputs_check``: the
    largest difference between a metric recomputed from the stored outputs and
    the one the run recorded (the outputs are the scored models').
    """
    from coalitions.learners.experiments.seedstats import seed_statistics
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
    return {"level": LEVEL, "n_boot": N_BOOT, "alpha": ALPHA, "columns": list(intervals), "intervals": intervals,
            "outputs_check": check, "seed": seed_statistics(clients, metric, values, n_test)}


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


def run_experiment(exp: Experiment, out: str | Path, *, quick: bool = False, device: str = "auto",
                   seeds=None, methods=None, log: Callable[[str], None] | None = None,
                   progress: Callable[[str, int, int], None] | None = None, backend: str = "local",
                   address: str | None = None) -> Reproduction:
    """Run ``exp`` into ``out`` and return the results (also written as ``results.json``).

    Parameters
    ----------
    exp : Experiment
    out : path
        Output folder; created if missing.  ``out/runs/<quick|full>/`` keeps
        every finished piece so that a rerun resumes.
    quick : bool
        Use the experiment's short settings.
    device : {"auto", "cpu", "cuda"}
    seeds, methods : sequence, optional
        Override the settings' seeds or the experiment's learners.
    log : callable, optional
        Receives one line per finished piece (progress).
    progress : callable, optional
        ``progress(piece, done, total)`` while a piece trains (``piece`` names
        it, e.g. ``"few-seed0: spo"``; ``done``/``total`` count subset
        model-epochs, rounds or steps); local backend only.
    backend : {"local", "ray"}
        ``"ray"``: the unfinished pieces (every regime, seed and learner, and
        the exact games) first run as Ray tasks
        (:func:`coalitions.learners.distributed.reproduce_pieces`), each written
        here as it arrives; the results are the same as the local backend's.
    address : str, optional
        Ray cluster address (``None``: a local Ray).

    Returns
    -------
    Reproduction
        The settings, every run (exact summary and each learner's summary), and
        per regime a :func:`summarize` table; the first seed's runs keep their
        equilibrium and estimates in memory (for the figures).
    """
    from coalitions.learners.data.datasets import load

    log = log or (lambda line: None)
    settings = exp.settings(quick)
    seeds = tuple(settings.seeds if seeds is None else seeds)
    methods = select_methods(exp, methods)
    if not seeds:
        raise InputError("no seeds to run")
    out = Path(out)
    runs_dir = out / "runs" / ("quick" if quick else "full")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    if backend not in ("local", "ray"):
        raise InputError(f"--backend must be local or ray, got {backend!r}")
    start = time.perf_counter()
    fresh: set = set()
    if backend == "ray":
        from coalitions.learners.distributed import reproduce_pieces

        todo = [(regime, seed, what) for regime in exp.regimes for seed in seeds
                for what in (["exact"] if exp.oracle is not None else []) + list(methods)
                if not all(f.exists() for f in _files(runs_dir / f"{regime.name}-seed{seed}", what,
                                                      what == "exact" and bool((exp.oracle or {}).get("loss_game"))))]
        fresh = reproduce_pieces(exp, quick, todo, runs_dir, device, log, compute_named_piece, store_piece,
                                 _done_line, address=address)
    from coalitions.learners.training.engine import resolve_device

    results = Reproduction(
        experiment=exp.name, title=exp.title, dataset=exp.dataset, quick=quick, device=str(resolve_device(device)),
        seeds=list(seeds), methods=list(methods), method_options={m: settings.options_for(m) for m in methods},
        oracle=({**exp.oracle, **(exp.quick_oracle if quick else {})} if exp.oracle is not None else None),
        published=exp.published,
        notes=exp.notes, regimes=[])
    budgets: dict = {}
    for regime in exp.regimes:
        runs: list[Run] = []
        clients: list[str] = []
        metric = None
        records = []
        for seed in seeds:
            pair = separate_seeds(seed)
            fed = load(exp.dataset, seed=pair.data, **regime.options)
            clients = list(fed.names)
            metric = getattr(fed, "metric", None)
            where = runs_dir / f"{regime.name}-seed{seed}"
            run = Run(seed=seed, methods={}, data_seed=pair.data, init_seed=pair.init)
            game = test_game = eq = None
            exact_out = None
            if seed == seeds[0]:
                budgets[regime.name] = budget_record(exp, quick, methods, fed.sizes("train"), regime)
            if exp.oracle is not None:
                game, test_game, reps, loss_game, loss_reps = _piece(
                    fed, exp, "exact", _options(exp, quick, "exact", fed, regime), pair.init, device, where, log,
                    progress, (where.name, "exact") in fresh)
                eq = co.solve(game)
                run.exact = exact_summary(game, test_game, metric, eq, reps)
                if loss_game is not None:  # the same models scored by validation loss (ExhaustiveOracle.loss_game)
                    loss = exact_summary(loss_game, test_game, "loss", replicates=loss_reps).to_json()
                    run.exact.loss = {k: loss[k] for k in ("metric", "partition", "certificate", "model_in_ce",
                                                           "val", "test", "support") if k in loss}
                exact_out = exact_outputs(fed, exp, pair.init, game, eq, where, device,
                                          _options(exp, quick, "exact", fed, regime))
                if seed != seeds[0]:
                    run.exact.equilibrium = None  # only the first seed's is drawn
            estimates = {}
            for m in methods:
                est = _piece(fed, exp, m, _options(exp, quick, m, fed, regime), pair.init, device, where, log, progress,
                             (where.name, m) in fresh)
                estimates[m] = est
                run.methods[m] = _method_summary(est, game, eq)
                if m == "spo":
                    run.methods[m].ce_ours = ce_ours(est)
                if seed != seeds[0]:
                    run.methods[m].estimate = None
            records.append(seed_record(fed, run, exact_out, estimates))
            runs.append(run)
        runs_json = [r.to_json() for r in runs]
        summary = summarize({"runs": runs_json, "clients": clients}, methods)
        summary["statistics"] = regime_statistics(clients, str(metric), records, methods)
        summary["sensitivity"] = sensitivity_summary(runs_json, methods)
        summary["spo_rules"] = rules_summary(runs_json)
        results.regimes.append(RegimeResult(regime.name, regime.title, regime.options, runs, clients, metric,
                                            summary))
    results.budget = budgets if any(v is not None for v in budgets.values()) else None
    results.elapsed_s = time.perf_counter() - start
    pieces = [f"{r.name}-seed{k}-{suffix}" for r in results.regimes for k in seeds
              for suffix in (["game.json"] if exp.oracle is not None else []) + [f"{m}.json" for m in methods]]
    timings = _read_timings(runs_dir)
    recorded = [timings.get(p) for p in pieces]
    results.compute_s = float(sum(t for t in recorded if t is not None))
    results.compute_complete = all(t is not None for t in recorded)
    return results


def _with_objects(results: Reproduction) -> dict:
    """The JSON of ``results`` with the in-memory equilibrium and estimates under ``_``-keys (for the figures)."""
    out = results.to_json()
    for reg, reg_json in zip(results.regimes, out["regimes"], strict=True):
        for run, run_json in zip(reg.runs, reg_json["runs"], strict=True):
            if run.exact is not None and run.exact.equilibrium is not None:
                run_json["exact"]["_equilibrium"] = run.exact.equilibrium
            for m, summary in run.methods.items():
                if summary.estimate is not None:
                    run_json["methods"][m]["_estimate"] = summary.estimate
    return out


def reproduce(name: str, out: str | Path, *, quick: bool = False, device: str = "auto", seeds=None,
              methods=None, log: Callable[[str], None] | None = None, figures: bool = True,
              progress: Callable[[str, int, int], None] | None = None, backend: str = "local",
              address: str | None = None) -> dict:
    """Run experiment ``name`` and write ``results.json``, ``report.md`` and figures into ``out``.

    Options as :func:`run_experiment`.  Returns the results (without in-memory objects) with ``"files"``: the
    paths written, relative to ``out``, and ``"plot_hint"`` when matplotlib is
    missing (DOT files are written either way).
    """
    from coalitions.learners.experiments.figures import write_figures
    from coalitions.learners.experiments.report import report_markdown

    exp = get_experiment(name)
    results = run_experiment(exp, out, quick=quick, device=device, seeds=seeds, methods=methods, log=log,
                             progress=progress, backend=backend, address=address)
    out = Path(out)
    live = _with_objects(results)
    files, hint = write_figures(live, out) if figures else ([], None)
    from coalitions.learners.experiments.report import convergence_note

    for reg, reg_json in zip(results.regimes, live["regimes"], strict=True):
        reg.convergence = convergence_note(reg_json, (live.get("budget") or {}).get(reg.name) or {}) or None
    results.figures = files
    results.plot_hint = hint
    write_results(results, out / "results.json")
    public = results.to_json()
    write_text(out / "report.md", report_markdown(public))
    public["files"] = ["report.md", "results.json"] + files
    return public
