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
from coalitions.learners.experiments.catalogue import METHOD_LABELS, Experiment, get_experiment, select_methods
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
from coalitions.payoffs import models_in

__all__ = ["RESULTS_FORMAT", "reproduce", "run_experiment", "summarize", "exact_summary", "read_results"]


def _names(game: co.Game, mask: int) -> list[str]:
    return list(game.names(int(mask)))


def _blocks(game: co.Game, partition) -> list[list[str]]:
    return [_names(game, k) for k in sorted(partition, key=lambda k: k & -k)]


#: Bootstrap replicates of the validation sets recorded with every exact game (the CE's support).
REPLICATES = 50


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


def _is_ce(game: co.Game, estimate) -> bool:
    """Whether the learner's partition is a CE of the exact game (exhaustive certificate)."""
    index = {c: i for i, c in enumerate(game.clients)}
    partition = [sum(1 << index[estimate.clients[i]] for i in co.bitmask.members(k)) for k in estimate.partition]
    return bool(co.certify(game, partition).holds)


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
        compare=comparison, estimate=estimate)


def _read_timings(folder: Path) -> dict:
    """``{piece file name: seconds}`` of the pieces finished in ``folder`` (empty if none)."""
    path = folder / "timings.json"
    try:
        return read_json(path) if path.exists() else {}
    except InputError:  # an unreadable table only loses the timings of earlier invocations
        return {}


def _record_time(folder: Path, piece: str, seconds: float) -> None:
    """Remember how long a finished piece took, so that a resumed run still reports it."""
    table = _read_timings(folder)
    table[piece] = round(seconds, 3)
    write_json(table, folder / "timings.json")


def _files(where: Path, what: str) -> tuple[Path, ...]:
    """The files of one piece: ``what`` is ``"exact"`` (two games) or a learner's name."""
    if what == "exact":
        return where.with_name(where.name + "-game.json"), where.with_name(where.name + "-test-game.json")
    return (where.with_name(f"{where.name}-{what}.json"),)


def compute_piece(fed, exp: Experiment, what: str, options: dict, seed: int, device: str, progress=None):
    """Train one piece: the exact games ``(validation, test, method, replicates)``, or learner ``what``'s estimate.

    ``options``: the learner's, or for ``"exact"`` the oracle's overrides of ``exp.oracle``
    (:meth:`Experiment.oracle_options` under ``--quick``).

    Pure computation (no files): the local loop and the Ray tasks of
    :mod:`coalitions.learners.distributed` both call it, so they agree.
    ``progress(done, total)`` follows the training (subset model-epochs, rounds or steps).
    """
    if what == "exact":
        from coalitions.learners.exact import ExhaustiveOracle

        o = ExhaustiveOracle(device=device, seed=seed, progress=progress,
                             **{"replicates": REPLICATES, **exp.oracle, **options}).fit(fed)
        return o.game_, o.test_game_, o.method_, o.replicates_
    from coalitions.learners.methods.registry import create

    return create(what, options, device=device, seed=seed, progress=progress).fit(fed).estimate_


def compute_named_piece(exp_name: str, quick: bool, regime_name: str, seed: int, what: str, device: str):
    """:func:`compute_piece` from names alone (what a Ray worker runs): ``(result, seconds, n_clients)``."""
    from coalitions.learners.data.datasets import load

    exp = get_experiment(exp_name)
    regime = next(r for r in exp.regimes if r.name == regime_name)
    fed = load(exp.dataset, seed=seed, **regime.options)
    options = exp.oracle_options(quick) if what == "exact" else exp.settings(quick).options_for(what)
    t = time.perf_counter()
    result = compute_piece(fed, exp, what, options, seed, device)
    return result, time.perf_counter() - t, fed.n


def store_piece(where: Path, what: str, result, seconds: float) -> None:
    """Write a finished piece into the run folder (its last file marks it finished) with its time."""
    from coalitions.estimate import write_estimate

    files = _files(where, what)
    if what == "exact":
        co.write_game(result[1], files[1])
        co.write_game(result[0], files[0], result[3])  # last: its presence marks the pair finished
    else:
        write_estimate(result, files[0])
    _record_time(where.parent, files[0].name, seconds)


def _done_line(where: Path, what: str, result, n: int, seconds: float) -> str:
    if what == "exact":
        return f"{where.name}: exact game, {2 ** n - 1} subset models ({result[2]}), {seconds:.1f} s"
    return f"{where.name}: {what}, {seconds:.1f} s"


def _piece(fed, exp: Experiment, what: str, options: dict, seed: int, device: str, where: Path, log, progress,
           quiet: bool = False):
    """A piece read back from ``where`` when finished (said in ``log`` unless ``quiet``), else trained and written."""
    files = _files(where, what)
    if all(f.exists() for f in files):
        if not quiet:
            log(f"{where.name}: {'exact game' if what == 'exact' else what} read back from {files[0].name}")
        if what == "exact":
            from coalitions.io import read_game_replicates

            game, reps = read_game_replicates(files[0])
            return game, co.read_game(files[1]), reps
        from coalitions.estimate import read_estimate

        return read_estimate(files[0])
    t = time.perf_counter()
    tick = None if progress is None else (lambda done, total: progress(f"{where.name}: {what}", done, total))
    result = compute_piece(fed, exp, what, options, seed, device, tick)
    seconds = time.perf_counter() - t
    store_piece(where, what, result, seconds)
    log(_done_line(where, what, result, fed.n, seconds))
    return (result[0], result[1], result[3]) if what == "exact" else result


def _stats(values: list[float]) -> dict:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "n": int(x.size)}


def summarize(regime: dict, methods) -> dict:
    """Per-client test metric of every column (mean, sample std and count over seeds).

    Columns: each learner by its label, ``CE`` (the exact equilibrium) where the
    exact game was computed.  ``mean`` averages the clients of each seed first.
    """
    runs = regime["runs"]
    clients = regime["clients"]
    columns: dict[str, list[dict]] = {}
    for m in methods:
        columns[METHOD_LABELS.get(m, m)] = [r["methods"][m]["test"] for r in runs]
        if m == "spo" and all("exact" in r for r in runs):
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
                if not all(f.exists() for f in _files(runs_dir / f"{regime.name}-seed{seed}", what))]
        fresh = reproduce_pieces(exp, quick, todo, runs_dir, device, log, compute_named_piece, store_piece,
                                 _done_line, address=address)
    from coalitions.learners.training.engine import resolve_device

    results = Reproduction(
        experiment=exp.name, title=exp.title, dataset=exp.dataset, quick=quick, device=str(resolve_device(device)),
        seeds=list(seeds), methods=list(methods), method_options={m: settings.options_for(m) for m in methods},
        oracle=exp.oracle_options(quick) if exp.oracle is not None else None, published=exp.published, notes=exp.notes, regimes=[])
    for regime in exp.regimes:
        runs: list[Run] = []
        clients: list[str] = []
        metric = None
        for seed in seeds:
            fed = load(exp.dataset, seed=seed, **regime.options)
            clients = list(fed.names)
            metric = getattr(fed, "metric", None)
            where = runs_dir / f"{regime.name}-seed{seed}"
            run = Run(seed=seed, methods={})
            game = test_game = eq = None
            if exp.oracle is not None:
                game, test_game, reps = _piece(fed, exp, "exact", exp.oracle_options(quick), seed, device, where, log,
                                               progress, (where.name, "exact") in fresh)
                eq = co.solve(game)
                run.exact = exact_summary(game, test_game, metric, eq, reps)
                if seed != seeds[0]:
                    run.exact.equilibrium = None  # only the first seed's is drawn
            for m in methods:
                est = _piece(fed, exp, m, settings.options_for(m), seed, device, where, log, progress,
                             (where.name, m) in fresh)
                run.methods[m] = _method_summary(est, game, eq)
                if seed != seeds[0]:
                    run.methods[m].estimate = None
            runs.append(run)
        summary = summarize({"runs": [r.to_json() for r in runs], "clients": clients}, methods)
        results.regimes.append(RegimeResult(regime.name, regime.title, regime.options, runs, clients, metric,
                                            summary))
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
    files, hint = write_figures(_with_objects(results), out) if figures else ([], None)
    results.figures = files
    results.plot_hint = hint
    write_results(results, out / "results.json")
    public = results.to_json()
    write_text(out / "report.md", report_markdown(public))
    public["files"] = ["report.md", "results.json"] + files
    return public
