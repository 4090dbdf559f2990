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

import time
from collections.abc import Callable
from pathlib import Path

import coalitions as co
from coalitions.errors import InputError
from coalitions.files import write_text
from coalitions.learners.data.roles import data_roles, with_roles
from coalitions.learners.experiments.catalogue import (
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
from coalitions.learners.experiments.pieces import (  # noqa: F401 (re-exported)
    _done_line,
    _files,
    _is_current,
    _piece,
    _read_piece,
    _read_timings,
    _record_time,
    store_piece,
)
from coalitions.learners.experiments.results import (
    RESULTS_FORMAT,
    RegimeResult,
    Reproduction,
    Run,
    read_results,
    write_results,
)
from coalitions.learners.experiments.seedstats import ALPHA, LEVEL, MAJORITY, N_BOOT  # noqa: F401 (re-exported)
from coalitions.learners.experiments.spo_column import ce_ours, ce_paper, rules_summary
from coalitions.learners.experiments.statistics import separate_seeds
from coalitions.learners.experiments.summaries import (  # noqa: F401 (re-exported)
    _method_summary,
    exact_outputs,
    exact_summary,
    regime_statistics,
    seed_record,
    sensitivity_summary,
    summarize,
)

__all__ = ["RESULTS_FORMAT", "reproduce", "run_experiment", "summarize", "exact_summary", "read_results", "ce_ours"]


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
    # what ran the pieces, not what was asked for: Ray's record when it ran any (results.json, "backend")
    ran: dict = {"name": "local", "workers": 1}
    if backend != "local":
        ran["requested"] = backend
    if backend == "ray":
        from coalitions.learners.distributed import reproduce_pieces

        todo = [(regime, seed, what) for regime in exp.regimes for seed in seeds
                for what in (["exact"] if exp.oracle is not None else []) + list(methods)
                if not all(f.exists() for f in _files(runs_dir / f"{regime.name}-seed{seed}", what,
                                                      what == "exact" and bool((exp.oracle or {}).get("loss_game"))))]
        fresh, record = reproduce_pieces(exp, quick, todo, runs_dir, device, log, compute_named_piece, store_piece,
                                         _done_line, address=address)
        if record is not None:
            ran = record
    from coalitions.learners.training.engine import resolve_device

    results = Reproduction(
        experiment=exp.name, title=exp.title, dataset=exp.dataset, quick=quick, device=str(resolve_device(device)),
        seeds=list(seeds), methods=list(methods), method_options={m: settings.options_for(m) for m in methods},
        oracle=({**exp.oracle, **(exp.quick_oracle if quick else {})} if exp.oracle is not None else None),
        published=exp.published,
        notes=exp.notes, regimes=[], backend=ran)
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
                if budgets[regime.name] is not None:   # the rows every column tuned on and was scored on
                    budgets[regime.name]["data_roles"] = data_roles(with_roles(fed, exp.protocol_for(quick, regime)))
            if exp.oracle is not None:
                game, test_game, reps, loss_game, loss_reps = _piece(
                    fed, exp, "exact", _options(exp, quick, "exact", fed, regime), pair.init, device, where, log,
                    progress, (where.name, "exact") in fresh)
                game, loss_game = _read_with_family(game, regime.family), _read_with_family(loss_game, regime.family)
                eq = co.solve(game)
                run.exact = exact_summary(game, test_game, metric, eq, reps)
                if loss_game is not None:  # the same models scored by validation loss (ExhaustiveOracle.loss_game)
                    loss = exact_summary(loss_game, test_game, "loss", replicates=loss_reps).to_json()
                    run.exact.loss = {k: loss[k] for k in ("metric", "partition", "certificate", "model_in_ce",
                                                           "val", "test", "support") if k in loss}
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
                    if game is not None and eq is not None:   # the paper's CE: the exact game's models of them
                        run.methods[m].ce_paper = ce_paper(est, game, test_game, eq.semantics)
                if seed != seeds[0]:
                    run.methods[m].estimate = None
            if game is not None and eq is not None and run.exact is not None:   # the models each column is scored with
                paper = run.methods["spo"].ce_paper if "spo" in run.methods else None
                extra = {} if paper is None else {"ce_paper": _masks(fed, paper["models"])}
                if run.exact.loss is not None:   # the loss game's CE: its models' outputs
                    extra["ce_loss"] = _masks(fed, run.exact.loss["model_in_ce"])
                exact_out = exact_outputs(fed, exp, pair.init, game, eq, where, device,
                                          _options(exp, quick, "exact", fed, regime), extra=extra)
            records.append(seed_record(fed, run, exact_out, estimates))
            runs.append(run)
        runs_json = [r.to_json() for r in runs]
        summary = summarize({"runs": runs_json, "clients": clients}, methods)
        summary["statistics"] = regime_statistics(clients, str(metric), records, methods, regime.primary)
        summary["sensitivity"] = sensitivity_summary(runs_json, methods)
        summary["spo_rules"] = rules_summary(runs_json)
        results.regimes.append(RegimeResult(regime.name, regime.title, regime.options, runs, clients, metric,
                                            summary, primary=regime.primary, family=regime.family))
    results.budget = budgets if any(v is not None for v in budgets.values()) else None
    results.elapsed_s = time.perf_counter() - start
    pieces = [f"{r.name}-seed{k}-{suffix}" for r in results.regimes for k in seeds
              for suffix in (["game.json"] if exp.oracle is not None else []) + [f"{m}.json" for m in methods]]
    timings = _read_timings(runs_dir)
    recorded = [timings.get(p) for p in pieces]
    results.compute_s = float(sum(t for t in recorded if t is not None))
    results.compute_complete = all(t is not None for t in recorded)
    return results


def _masks(fed, models: dict[str, list[str]]) -> list[int]:
    """Each client's model coalition (``{client: [members]}``) as a bitmask, in the federation's client order."""
    index = {c: i for i, c in enumerate(fed.names)}
    return [sum(1 << index[m] for m in models[c]) for c in fed.names]


def _read_with_family(game, family: str):
    """``game`` with its standard errors read for the regime's ``family`` of comparisons (None stays None)."""
    if game is None or game.uncertainty is None or family == game.uncertainty.family:
        return game
    return game.with_uncertainty(game.uncertainty.with_family(family))


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
    from coalitions.learners.experiments.figures import convergence_series
    from coalitions.learners.experiments.report import convergence_note

    for reg, reg_json in zip(results.regimes, live["regimes"], strict=True):
        budget = (live.get("budget") or {}).get(reg.name) or {}
        reg.convergence = convergence_note(reg_json, budget) or None
        curves = convergence_series(reg_json, budget.get("steps_per_client"))
        reg.curves = {label: {"x": x, "y": y} for label, (x, y) in curves.items()} or None
    results.figures = files
    results.plot_hint = hint
    write_results(results, out / "results.json")
    public = results.to_json()
    write_text(out / "report.md", report_markdown(public))
    public["files"] = ["report.md", "results.json"] + files
    return public
