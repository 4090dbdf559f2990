"""``coalitions reproduce``: one of the paper's experiments end to end into a folder."""

from __future__ import annotations

import sys

import click

import coalitions as co
from coalitions import options as option_checks
from coalitions.cli.data_options import apply_threads
from coalitions.cli.output import emit, flag_errors
from coalitions.cli.params import (
    OUTPUT_FOLDER,
    SEED,
    backend_options,
    device_option,
    numbers,
    ray_address,
    threads_option,
)
from coalitions.learners.experiments.catalogue import EXPERIMENTS

__all__ = ["reproduce_cmd"]


@click.command("reproduce")
@click.argument("experiment", type=click.Choice(list(EXPERIMENTS)))
@click.option("--quick", is_flag=True, help="Short settings: one seed, fewer rounds and steps.")
@device_option
@click.option("--seeds", default=None, help="Comma-separated seeds, instead of the experiment's.")
@click.option("--methods", default=None,
              help="Comma-separated learners to run instead of the experiment's (e.g. local,fedavg,fedprox).")
@threads_option
@backend_options
@click.option("-o", "--output", "out", required=True, type=OUTPUT_FOLDER,
              help="Folder for report.md, results.json and the figures (created if missing).")
def reproduce_cmd(experiment, quick, device, seeds, methods, threads, backend, address, out):
    """Rebuild one of the paper's experiments end to end into a folder.

    The exact game (exhaustive oracle) and its certified equilibrium, every
    learner's estimate scored against it, a per-client utility table over
    seeds, the paper's numbers beside ours, and figures (PNG with matplotlib,
    DOT always).  Finished pieces are kept in the output folder's runs/:
    rerunning the same command after an interruption resumes where it stopped.
    """
    from coalitions.learners.experiments.progress import PieceProgress
    from coalitions.learners.experiments.runner import reproduce

    seed_list = None if seeds is None else numbers(seeds, "--seeds", int)
    if seed_list is not None and any(x not in range(SEED.min, SEED.max + 1) for x in seed_list):
        raise co.InputError(f"--seeds: every seed must be an integer in [{SEED.min}, {SEED.max}], got {seeds!r}")
    if seed_list is not None:
        option_checks.distinct_seeds(seed_list)
    method_list = None
    if methods is not None:
        from coalitions.learners.experiments.catalogue import get_experiment, select_methods

        try:
            method_list = select_methods(get_experiment(experiment), [m.strip() for m in methods.split(",") if m.strip()])
        except co.InputError as e:
            raise co.InputError(f"--methods: {e}") from None
    apply_threads(threads)
    show = PieceProgress(f"[{experiment}] ", sys.stderr)
    try:
        with flag_errors({"device": "--device"}):
            res = reproduce(experiment, out, quick=quick, device=device, seeds=seed_list, methods=method_list,
                            log=show.line, progress=show.progress, backend=backend,
                            address=ray_address(backend, address))
    except KeyboardInterrupt:
        show.clear()
        click.echo(f"coalitions: finished pieces are kept in {out}/runs/; run the same command again "
                   "to resume", err=True)
        raise
    for reg in res["regimes"]:
        ex = reg["runs"][0].get("exact")
        if ex is not None:
            emit(f"{experiment} {reg['name']}: exact CE "
                  f"{' | '.join(','.join(b) for b in ex['partition'])} (seed {reg['runs'][0]['seed']}, "
                  f"certificate {'holds' if ex['certificate'] else 'FAILS'})", None)
    if res.get("plot_hint"):
        click.echo(res["plot_hint"], err=True)
    click.echo(f"wrote {out}/: " + ", ".join(res["files"]) + f" ({res['elapsed_s']:.0f} s)", err=True)
