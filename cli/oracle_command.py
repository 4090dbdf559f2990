"""``coalitions oracle``: the exact game of a dataset, a model trained on every subset of its clients."""

from __future__ import annotations

import click

import coalitions as co
from coalitions import io as cio
from coalitions import options as option_checks
from coalitions.cli import data_options
from coalitions.cli.data_options import (
    DATASETS,
    TRAINING_FLAG_OF,
    SectionedCommand,
    apply_threads,
    dataset_options,
    training_given,
    training_options,
)
from coalitions.cli.output import flag_errors, progress
from coalitions.cli.params import OUTPUT, Finite, backend_options, device_option, ray_address, threads_option

__all__ = ["oracle"]


@click.command(cls=SectionedCommand)
@click.argument("dataset", type=click.Choice(DATASETS))
@dataset_options
@training_options
@click.option("--chunk-size", type=click.IntRange(1), default=None,
              help="Subset models trained together [as many as fit --memory-mb].")
@click.option("--memory-mb", type=Finite(1.0), default=512.0, show_default=True)
@device_option
@threads_option
@click.option("--checkpoint", type=OUTPUT, default=None,
              help="Record finished chunks here; a rerun resumes from it.")
@click.option("--replicates", type=click.IntRange(0), default=200, show_default=True,
              help="Bootstrap replicates of the validation sets (seeded by --seed; no retraining): the measured "
                   "game's standard errors, so that it is solved at a significance level; 0 for an exact game.")
@click.option("--heads", type=click.Choice(["shared", "personal"]), default="shared", show_default=True,
              help="personal: each subset trains one body and an output layer per member (FedPer's split); "
                   "v_i(S) uses i's own head.")
@backend_options
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="Game file: coalitions/game@1 JSON, or .npz by the ending.")
def oracle(dataset, chunk_size, memory_mb, device, threads, checkpoint, replicates, heads, backend, address, output,
           **opts):
    """Train a model on every subset of DATASET's clients: the exact game (docs/concepts.md §5).

    v_i(S) is the metric on client i's validation data of the model trained on
    the training data of S.  Linear regression is solved in closed form; other
    models train all subset models at once, chunked, with --checkpoint to resume.
    Every subset model trains under one training protocol: the dataset's default
    protocol with the training flags given changed (the same flags as learn).
    """
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.training.protocol import FLAG_FIELDS, protocol_with

    option_checks.distinct_outputs(output=output, checkpoint=checkpoint)
    training = training_given(opts)
    for key, why in (("local_steps", "has no communication rounds"),):
        if key in training:
            raise co.InputError(f"--{key.replace('_', '-')}: the exact game {why}")
    data_opts = opts
    apply_threads(threads)
    fed = data_options.load_federation(dataset, data_opts)
    cio.check_game_output(fed.n, output, replicates)  # before hours of training, not after
    with flag_errors(TRAINING_FLAG_OF):
        protocol = protocol_with(fed.task, fed.input_shape, {FLAG_FIELDS[k]: v for k, v in training.items()})
    est = ExhaustiveOracle(protocol=protocol, chunk_size=chunk_size, memory_mb=memory_mb, device=device,
                           seed=data_opts.get("seed") or 0, checkpoint=checkpoint, threads=threads,
                           progress=progress(f"training {(1 << fed.n) - 1} subset models"), replicates=replicates,
                           backend=backend, address=ray_address(backend, address), heads=heads)
    with flag_errors(TRAINING_FLAG_OF):
        est.fit(fed)
    if fed.n >= 16 and not str(output).endswith(".npz"):
        click.echo(f"note: {fed.n} clients make a large JSON game; a name ending in .npz writes the "
                   "compact binary form", err=True)
    co.write_game(est.game_, output, est.replicates_)
    resumed = f", {est.chunks_resumed_} chunk(s) from checkpoint" if est.chunks_resumed_ else ""
    boot = f", {replicates} bootstrap replicates" if replicates else ""
    click.echo(f"wrote {output}: {fed.n} clients, {(1 << fed.n) - 1} subset models{boot}, "
               f"{est.config_['model']}{', personal heads' if heads == 'personal' else ''} "
               f"({est.method_}, {est.device_}{resumed}), {est.elapsed_:.2f} s", err=True)
