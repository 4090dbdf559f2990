"""``coalitions federate``: the exact game or a learner over Flower, the data staying at the sites (docs/federated.md)."""

from __future__ import annotations

import json
import sys

import click

import coalitions as co
from coalitions import options as option_checks
from coalitions.cli.data_options import DATASETS, TRAINING_FLAG_OF, dataset_options, training_given, training_options
from coalitions.cli.output import Negative, flag_errors, progress
from coalitions.cli.params import NON_NEGATIVE, OUTPUT, OUTPUT_FOLDER, SEMANTICS, check_tol, threads_option
from coalitions.learners.methods.registry import federated

__all__ = ["federate"]


#: Deepest JSON value of a ``--method-option`` (a method's options are numbers, lists of numbers, short strings).
MAX_OPTION_DEPTH = 64


def _json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text`` outside strings, in one pass (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


@click.command()
@click.argument("dataset", type=click.Choice([*DATASETS, "csv"]))
@click.option("--simulation", is_flag=True,
              help="Rehearse in Flower's simulation engine, one virtual site per client [default].")
@click.option("--superlink", default=None, metavar="ADDR",
              help="Run on the SuperLink whose Control API listens at ADDR (e.g. 127.0.0.1:9093).")
@click.option("--method", type=click.Choice(["exact", "spo", *federated()]),
              default="exact",
              show_default=True,
              help="exact: the game (a model per coalition, trained among its members under the training protocol); spo: the Pareto "
                   "hypernetwork at the server, sites return losses and gradients; the others: that "
                   "personalised learner as a Flower strategy.  All but exact write estimate.json like `learn`.")
@click.option("--method-option", "method_option", multiple=True, metavar="KEY=VALUE",
              help="A personalised method's own parameter (constructor name, e.g. alpha_k=0.5; JSON values).")
@click.option("--root-certificates", "root_certificates", type=click.Path(dir_okay=False), default=None,
              help="--superlink over TLS: the PEM file of the CA that signed the SuperLink's certificate "
                   "[the system's trust store].")
@click.option("--insecure", is_flag=True,
              help="--superlink without TLS (prints a warning): only for a rehearsal on loopback.")
@click.option("--exclude-bad-sites", "exclude_bad_sites", is_flag=True,
              help="A site whose reply fails the server's checks is left out (the run starts again without it "
                   "and the outputs record it) instead of stopping the run.")
@click.option("--manifest", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="--superlink: the consortium manifest (coalitions/consortium@1): each site's name bound to its "
                   "SuperNode public key, and its signed training size, which weighs it in the game.  Without it "
                   "the sites' names and sizes are self-declared.")
@click.option("--equal-weights", "equal_weights", is_flag=True,
              help="--method exact: every site weighs the same in its coalitions' averages (instead of by its "
                   "training size).")
@click.option("--round-timeout", "round_timeout", type=NON_NEGATIVE, default=600.0, show_default=True,
              metavar="SECONDS",
              help="How long one attempt of a round waits for the sites' replies before the silent ones are asked "
                   "again (3 attempts; 0: no limit).")
@click.option("--replicates", type=click.IntRange(0), default=None,
              help="--method exact: bootstrap replicates of each site's validation rows, re-scored at the site, "
                   "that the game carries as its standard errors (coalitions/game@2; 0: none) [default: 200].")
@click.option("--sites", type=click.IntRange(1, 12), default=None,
              help="SuperNodes to wait for (--superlink) [the dataset's client count].")
@click.option("--site-schema", "schemas", multiple=True, type=click.Path(dir_okay=False),
              help="Dataset csv in the simulation engine: a site's schema file (repeat per site).")
@dataset_options
@training_options
@threads_option
@click.option("--wait", type=NON_NEGATIVE, default=120.0, show_default=True,
              help="Seconds to wait for the sites to connect.")
@click.option("--checkpoint", type=OUTPUT, default=None,
              help="Server state after every round [OUT/checkpoint.npz]; the same command again resumes.")
@click.option("--semantics", type=SEMANTICS, default="personalized", show_default=True)
@click.option("--tol", type=float, default=1e-9, show_default=True)
@click.option("-o", "--output", required=True, type=OUTPUT_FOLDER,
              help="Folder: game.json, game-test.json, equilibrium.json, run.json.")
def federate(dataset, simulation, superlink, method, method_option, root_certificates, insecure, exclude_bad_sites,
             manifest, equal_weights, round_timeout, replicates, sites, schemas, threads, wait, checkpoint, semantics,
             tol, output, **opts):
    """Measure DATASET's exact game with Flower, the data staying at the sites (docs/federated.md).

    For every coalition S, S's model is trained among S's members only: each
    takes local steps on its data, the server applies the training protocol's
    optimiser to the members' average change (FedOpt); each member reports its
    validation metric.  The training flags are learn's and oracle's: the sites'
    task's default protocol with the flags given changed.  The server writes
    the game with its sites' bootstrap replicates (coalitions/game@2), solves and
    certifies it at z = 1.96.  Dataset csv: each
    site reads its own CSV file described by a schema file.  With a
    personalised --method (local, fedavg, fedamp, superfed, ...) the server
    runs that learner's strategy under the same protocol and writes
    OUT/estimate.json.
    """
    from coalitions.learners.federated.run import federate as run_federate
    from coalitions.learners.training.protocol import FLAG_FIELDS

    if simulation and superlink:
        raise co.InputError("--simulation and --superlink exclude each other")
    option_checks.distinct_outputs(output=output, checkpoint=checkpoint)
    training = {FLAG_FIELDS[k]: v for k, v in training_given(opts).items()}
    data_opts = opts
    given = {k: v for k, v in data_opts.items() if v is not None}
    options = {}
    for item in method_option:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise co.InputError(f"--method-option {item!r}: write KEY=VALUE, e.g. alpha_k=0.5")
        if _json_depth(raw) > MAX_OPTION_DEPTH:
            raise co.InputError(f"--method-option {key.strip()}: its JSON value is nested deeper than "
                                f"{MAX_OPTION_DEPTH} levels")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    with flag_errors(TRAINING_FLAG_OF):
        rec = run_federate(dataset, given, training, output, seed=data_opts.get("seed") or 0, superlink=superlink,
                           sites=sites, schemas=schemas, checkpoint=checkpoint, semantics=semantics, tol=check_tol(tol),
                           threads=threads or 1, wait_s=wait,
                           progress=progress("rounds, all coalitions at once") if sys.stderr.isatty() else None,
                           method=method, method_options=options, insecure=insecure,
                           root_certificates=root_certificates, exclude_bad_sites=exclude_bad_sites,
                           replicates=replicates, manifest=manifest, equal_weights=equal_weights,
                           round_timeout_s=round_timeout)
    if method != "exact":
        eq = " | ".join(",".join(b) for b in rec["equilibrium"])
        unit = "hypernetwork steps" if method == "spo" else "rounds"
        click.echo(f"wrote {output}/estimate.json: {method} over Flower, {len(rec['sites'])} sites, {rec['rounds']} {unit} "
                   f"({rec['communication_rounds']} exchanges), "
                   f"{rec['bytes_sent'] + rec['bytes_received']:,} bytes, equilibrium {eq}", err=True)
        return
    eq = " | ".join(",".join(b) for b in rec["equilibrium"]) if rec.get("equilibrium") else "none"
    click.echo(f"wrote {output}/: {len(rec['sites'])} sites, {rec['rounds']} rounds "
               f"({rec['communication_rounds']} exchanges), {rec['bytes_sent'] + rec['bytes_received']:,} bytes, "
               f"equilibrium {eq}", err=True)
    if rec.get("equilibrium") is None:
        raise Negative(f"{output}: {rec.get('no_equilibrium', 'no collaboration equilibrium')}")
    if rec.get("certificate_holds") is False:
        raise Negative(f"{output}: the partition fails its certificate (see equilibrium.json)")
