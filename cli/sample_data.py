"""The data sources of ``coalitions sample-ce``: a dataset's federation, one subset model trained per coalition asked.

``coalitions sample-ce DATASET`` measures ``v_i(S)`` with the exhaustive oracle's subset models
(:class:`coalitions.learners.game.source.SubsetSource`): the dataset's options, the one set of
training flags and the oracle's own settings (bootstrap replicates, heads, precision, device,
threads, Ray) are those of ``coalitions oracle``, so that a coalition's value is the one the
exhaustive game would have given it.  Only what :func:`data_source` needs is imported here;
PyTorch loads when the first coalition trains.
"""

from __future__ import annotations

import click

import coalitions as co
from coalitions.cli.data_options import (
    DATASET_OPTIONS,
    LOADER_OPTIONS,
    TRAINING_FLAG_OF,
    TRAINING_KEYS,
    _loader_option,
    apply_threads,
    load_federation,
    training_given,
)
from coalitions.cli.output import flag_errors
from coalitions.cli.params import Finite, ray_address

__all__ = ["DATA_ONLY", "data_options_except", "oracle_settings", "data_source", "federated_options",
           "federated_source", "FEDERATED_KEYS", "SUBSET_ONLY"]

#: The options only a dataset source takes (the generators' and a game file's refuse them).
ORACLE_KEYS = ("replicates", "heads", "game", "memory_mb", "device", "threads", "backend", "address")


def data_options_except(*names: str):
    """The dataset options of :mod:`coalitions.cli.data_options` but ``names`` (which the command declares itself)."""
    def add(f):
        for o in reversed(LOADER_OPTIONS):
            if o.name not in names:
                f = _loader_option(o)(f)
        return f
    return add


def oracle_settings(f):
    """The subset models' own settings, as ``coalitions oracle`` takes them."""
    from coalitions.cli.params import backend_options, device_option, threads_option

    f = backend_options(f)
    f = threads_option(f)
    f = device_option(f)
    f = click.option("--memory-mb", type=Finite(1.0), default=512.0, show_default=True,
                     help="dataset: memory for the subset models trained together.")(f)
    f = click.option("--game", type=click.Choice(["metric", "loss"]), default="metric", show_default=True,
                     help="dataset: the value of a coalition, its metric on validation data or (classification) "
                          "its mean validation loss.")(f)
    f = click.option("--heads", type=click.Choice(["shared", "personal"]), default="shared", show_default=True,
                     help="dataset: personal trains one body and an output layer per member (FedPer's split).")(f)
    return click.option("--replicates", type=click.IntRange(0), default=200, show_default=True,
                        help="dataset: bootstrap replicates of the validation sets (the values' standard "
                             "errors); 0 for point values.")(f)


#: The options of a federated dataset source (``--federated``).
FEDERATED_KEYS = ("federated", "superlink", "insecure", "root_certificates", "manifest", "schemas")
#: The subset models' own settings, which a federated source (FedOpt within each coalition, over Flower) has not.
SUBSET_ONLY = ("heads", "game", "memory_mb", "device", "backend", "address")

#: Options of a dataset source: its loader's, the training flags, the oracle's settings and the federated ones.
DATA_ONLY = (tuple(k for k in DATASET_OPTIONS if k not in ("groups", "noise", "seed")) + TRAINING_KEYS + ORACLE_KEYS
             + FEDERATED_KEYS)


def federated_options(f):
    """``--federated simulation|superlink|in-process``, the SuperLink's connection and the CSV sites (as ``coalitions federate``)."""
    f = click.option("--site-schema", "schemas", multiple=True, type=click.Path(dir_okay=False),
                     help="SOURCE csv with --federated simulation or in-process: a site's schema file (repeat per "
                          "site; a rehearsal, this machine reads them).")(f)
    f = click.option("--manifest", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="--federated superlink: the consortium manifest (coalitions/consortium@1), each site's "
                          "name bound to its SuperNode key; SOURCE csv there needs it, with the shared task and "
                          "metric.")(f)
    f = click.option("--root-certificates", "root_certificates", type=click.Path(dir_okay=False), default=None,
                     help="--federated superlink over TLS: the PEM file of the CA that signed the SuperLink's "
                          "certificate [the system's trust store].")(f)
    f = click.option("--insecure", is_flag=True,
                     help="--federated superlink without TLS (prints a warning): only for a rehearsal on loopback.")(f)
    f = click.option("--superlink", default=None, metavar="ADDR",
                     help="--federated superlink: the SuperLink's Control API (e.g. 127.0.0.1:9093); its SuperNodes "
                          "load the dataset by partition-id, or (SOURCE csv) read their own site schemas.")(f)
    return click.option("--federated", type=click.Choice(["simulation", "superlink", "in-process"]), default=None,
                        help="dataset: measure each batch of coalitions as one federated exact game over them "
                             "(coalitions federate's FedOpt within each coalition), in Flower's simulation engine, "
                             "on a SuperLink, or in process (the reference) [default: the oracle's subset models].")(f)


def federated_source(dataset: str, opts: dict, settings: dict):
    """The federated lazy game of ``dataset``: one federated game per batch, the training flags as ``federate``'s.

    ``opts``: the dataset options and training flags (click keys); ``settings``: ``replicates``,
    ``threads`` and :data:`FEDERATED_KEYS`.
    """
    from coalitions.learners.federated.source import FederatedSource
    from coalitions.learners.training.protocol import FLAG_FIELDS

    opts = dict(opts)
    training = {FLAG_FIELDS[k]: v for k, v in training_given(opts).items()}
    mode, address = settings["federated"], settings["superlink"]
    if (mode == "superlink") != (address is not None):
        raise co.InputError("--superlink ADDR goes with --federated superlink" if address is not None else
                            "--federated superlink needs --superlink ADDR (the SuperLink's Control API)")
    for key in ("insecure", "root_certificates", "manifest"):
        if mode != "superlink" and settings[key]:
            raise co.InputError(f"--{key.replace('_', '-')} is for --federated superlink")
    options = {k: v for k, v in opts.items() if k in DATASET_OPTIONS and v is not None}
    schemas = list(settings["schemas"] or ())
    if dataset == "csv":
        options.pop("seed", None)      # the run's seed, not a loader's
        if options:
            raise co.InputError(f"SOURCE csv takes no loader options (got --{', --'.join(options)}): each site's "
                                "schema says what its data is")
        if mode == "superlink" and schemas:
            raise co.InputError("--site-schema is for --federated simulation or in-process; on a SuperLink each "
                                "SuperNode names its own with --node-config \"site-schema='...'\"")
        if mode != "superlink" and not schemas:
            raise co.InputError(f"SOURCE csv with --federated {mode} needs --site-schema, once per site")
        options = {"schemas": schemas} if schemas else {}
    elif schemas:
        raise co.InputError(f"--site-schema goes with SOURCE csv, not {dataset}")
    with flag_errors(TRAINING_FLAG_OF):
        return FederatedSource(dataset, options, training, seed=opts.get("seed") or 0,
                               replicates=settings["replicates"], backend=mode, superlink=address,
                               manifest=settings["manifest"], threads=settings["threads"] or 1,
                               insecure=settings["insecure"], root_certificates=settings["root_certificates"])


def data_source(dataset: str, opts: dict, settings: dict):
    """The lazy game of ``dataset``: its federation with ``opts`` (dataset options), trained as the oracle would.

    ``opts`` holds the dataset options and the training flags (click keys, ``None`` = not
    given); ``settings`` the oracle's (:data:`ORACLE_KEYS`).
    """
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.game.source import SubsetSource
    from coalitions.learners.training.protocol import FLAG_FIELDS, protocol_with

    opts = dict(opts)
    training = training_given(opts)
    if "local_steps" in training:
        raise co.InputError("--local-steps: the subset models of a lazy game have no communication rounds")
    apply_threads(settings["threads"])
    fed = load_federation(dataset, opts)
    with flag_errors(TRAINING_FLAG_OF):
        protocol = protocol_with(fed.task, fed.input_shape, {FLAG_FIELDS[k]: v for k, v in training.items()})
        oracle = ExhaustiveOracle(protocol=protocol, memory_mb=settings["memory_mb"], device=settings["device"],
                                  seed=opts.get("seed") or 0, threads=settings["threads"],
                                  replicates=settings["replicates"], heads=settings["heads"],
                                  backend=settings["backend"],
                                  address=ray_address(settings["backend"], settings["address"]))
        return SubsetSource(fed, oracle, game=settings["game"])
