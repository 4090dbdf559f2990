"""``coalitions learn``: a learner's estimate of who benefits from whom on a dataset."""

from __future__ import annotations

from typing import NoReturn

import click

import coalitions as co
from coalitions import options as option_checks
from coalitions.cli import data_options
from coalitions.cli.data_options import (
    DATASET_OPTIONS,
    DATASETS,
    TRAINING_FLAG_OF,
    MethodChoice,
    SectionedCommand,
    apply_threads,
    dataset_options,
    method_options,
    training_given,
    training_options,
)
from coalitions.cli.output import flag_errors, progress
from coalitions.cli.params import OUTPUT, device_option, threads_option
from coalitions.learners.methods.registry import METHODS

__all__ = ["learn"]


@click.command(cls=SectionedCommand)
@click.argument("dataset", type=click.Choice(DATASETS))
@click.option("--method", required=True, type=MethodChoice(),
              help="The learner (see docs/learners-spo.md).")
@training_options
@method_options
@dataset_options
@device_option
@threads_option
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="Estimate file (coalitions/estimate@1 JSON).")
@click.option("--sensitivity", is_flag=True, default=False,
              help="Print the learned equilibrium across the weight rule's threshold (also in the estimate's "
                   "extra.sensitivity).")
def learn(dataset, method, device, threads, output, sensitivity, **opts):
    """Learn who benefits from whom on DATASET: a coalitions/estimate@1 file (docs/concepts.md §5, docs/formats.md).

    The estimate holds the weights, each client's validation and test metric,
    the learned benefit graph and the equilibrium that peeling reaches on the
    learner's benefit oracle.  Options apply to the methods that take them.
    The training flags make one training protocol: the dataset's default
    protocol (its task and model) with the flags given changed; a personalised
    learner trains under it (with --lr-grid once per rate, keeping the lowest
    mean validation loss).  SPO trains its hypernetwork under the protocol's
    --steps, --batch-size, --patience and --lr-grid; --lr, --model,
    --mlp-hidden and --weight-decay set its own hypernetwork rate, target
    model, target hidden units and ridge (docs/learners-spo.md).
    """
    import dataclasses

    from coalitions.estimate import write_estimate
    from coalitions.learners.methods.learning import Learning
    from coalitions.sensitivity import sensitivity_table, sensitivity_to_json

    option_checks.distinct_outputs(output=output, checkpoint=opts.get("checkpoint"))
    training = training_given(opts)
    keys = {o.key for m in METHODS.values() for o in m.options}  # every method's flags; Learning checks
    given = {k: v for k, v in opts.items() if k in keys and k not in DATASET_OPTIONS and v is not None}
    data_opts = {k: v for k, v in opts.items() if k in DATASET_OPTIONS}
    run = Learning(method, given, training, device=device, seed=data_opts.get("seed") or 0, progress=progress)
    if sensitivity and not getattr(run.estimator, "has_weights", True):
        raise co.InputError(f"--sensitivity: --method {method} has no pairwise weights (its graph is structural)")
    fed = data_options.load_federation(dataset, data_opts)
    apply_threads(threads)
    flags = {**TRAINING_FLAG_OF, **{o.arg: f"--{o.flag}" for o in METHODS[method].options}}
    with flag_errors({**flags, "device": "--device", "seed": "--seed"}):
        try:
            e = run.fit(fed)
        except RuntimeError as err:  # torch's optimiser step: a rate or penalty beyond float32 (Adam's lr 1e308)
            if "overflow" not in str(err):
                raise
            _refuse_diverged(method, {**training, **given}, flags)
        sens = run.estimator.sensitivity() if sensitivity else None
    _check_finite(e, method, {**training, **given}, flags)
    if sens is not None:
        e = dataclasses.replace(e, extra={**e.extra, "sensitivity": sensitivity_to_json(e.clients, sens[2], *sens[:2])})
    write_estimate(e, output)
    click.echo(f"wrote {output}: {method} on {dataset} ({fed.n} clients), equilibrium "
               f"{' | '.join(','.join(b) for b in e.blocks())}", err=True)
    for name, rec in e.extra.get("rules", {}).items():  # SPO: the paper's ratio rule beside elimination
        click.echo(f"  {name} rule{' (used)' if rec['used'] else ''}: {rec['label']}; equilibrium "
                   f"{' | '.join(','.join(b) for b in rec['partition'])}", err=True)
    if run.paper_defaults:
        click.echo(f"  --variant {given['variant']}: the authors' settings where not given: " + " ".join(
            f"--{k.replace('_', '-')} {'full' if v is None else v}" for k, v in run.paper_defaults.items()), err=True)
    elif run.defaulted:
        click.echo(_defaults_line(e.extra), err=True)
    budget = _budget_line(e.extra, method)
    if budget:
        click.echo(budget, err=True)
    if sens is not None:
        click.echo(sensitivity_table(e.clients, sens[2], sens[0], sens[1]))


def _defaults_line(extra: dict) -> str:
    """What a run without training flags trained with: early stopping, and the rate its validation loss chose."""
    from coalitions.learners.training.protocol import DEFAULT_PATIENCE

    tuning = extra.get("lr_tuning")
    grid = ""
    if tuning:
        chosen = "per client" if isinstance(tuning["chosen"], dict) else f"{tuning['chosen']:g}"
        grid = f" and --lr-grid {','.join(f'{g:g}' for g in tuning['grid'])} (chosen: {chosen})"
    return (f"  no training flags: trained with --patience {extra.get('patience') or DEFAULT_PATIENCE}{grid}, on "
            "the data's default protocol; give any training flag to set the protocol yourself")


def _budget_line(extra: dict, method: str) -> str | None:
    """One line when the learner ran its whole budget: its result may be the budget's, not the method's.

    Without ``--patience`` every run does (and the line says how to stop on the validation
    loss); with it, the validation loss was still improving at the maximum.
    """
    if not extra.get("hit_max"):
        return None
    total = extra.get("max_rounds") or extra.get("max_steps")
    unit = ("round" if extra.get("max_rounds") else "step") + ("" if total == 1 else "s")
    size = f" ({total} {unit})" if total else ""
    if extra.get("patience") is None:
        return (f"  {method} ran its whole budget{size}: without --patience it always does; give --patience N to "
                "stop where its validation loss stops improving")
    return (f"  {method} ran its whole budget{size} without stopping on --patience {extra['patience']}: its validation "
            "loss was still improving; a larger --steps may change the result")


def _check_finite(e, method: str, settings: dict, flags: dict) -> None:
    """Refuse an estimate whose training diverged: a non-finite training loss, or no finite validation metric.

    A rate of ``1e308`` (or FedProx's ``--mu 1e308``) makes the loss non-finite
    in the first steps.  The models' predictions then still give numbers (an
    accuracy of NaN logits is the share of one class), so the estimate would be
    written from diverged models and exit 0; or every utility is ``null``.  One
    client's undefined metric (an AUC over one class) is not refused.
    """
    import math

    vals = [v for v in e.utilities.get("val", {}).values()]
    bad = [v for v in vals if v is None or not math.isfinite(v)]
    losses = e.extra.get("loss_history") or []
    diverged = any(x is None or not math.isfinite(float(x)) for x in losses)
    if diverged or (vals and (len(bad) == len(vals) or any(v is not None and math.isinf(v) for v in bad))):
        _refuse_diverged(method, settings, flags)


def _refuse_diverged(method: str, settings: dict, flags: dict) -> NoReturn:
    """The one line of a training run whose loss, or optimiser step, left the floating-point range."""
    shown = ", ".join(f"{flags.get(k, '--' + k.replace('_', '-'))} {v:g}" if isinstance(v, float)
                      else f"{flags.get(k, '--' + k.replace('_', '-'))} {v}" for k, v in sorted(settings.items()))
    raise co.InputError(f"--method {method}: the training loss became non-finite (NaN or inf), so every "
                        f"validation metric is undefined; with {shown or 'the default settings'}: lower the "
                        "learning rate or the method's penalty")
