"""The Flower app: a ClientApp per site, a ServerApp that never sees raw data.

``client_app``
    Runs on each site's SuperNode.  It finds the site's data from its node
    config (``site-schema``, or ``partition-id`` with the loader the server
    names; :mod:`coalitions.learners.federated.sites`) and answers three
    message types: ``query`` (describe the site), ``train`` (local steps on
    the site's coalition models, :func:`~coalitions.learners.federated.protocol.local_round`,
    after scoring them on validation data under patience) and ``evaluate``
    (the metric of each coalition model on the site's validation and test
    splits, and its validation loss).  For the game it keeps no state between
    messages (the protocol's optimiser runs at the server).
``server_app``
    The ``flwr run`` entry (``[tool.flwr.app.components]`` in pyproject.toml):
    reads its settings from the run config (:data:`RUN_CONFIG`, overridable
    with ``flwr run --run-config``), measures the game
    (:func:`~coalitions.learners.federated.server.measure_game`) and writes
    the game, its equilibrium and the run record to the ``output`` folder
    (:func:`~coalitions.learners.federated.run.write_outputs`).
:func:`make_server_app`
    A ServerApp with explicit settings (``coalitions federate --simulation``).
"""

from __future__ import annotations

import json
from typing import cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from coalitions.errors import InputError
from coalitions.learners.federated.protocol import evaluate_models, evaluate_replicates, local_round, validation_losses
from coalitions.learners.federated.server import Settings, measure_game
from coalitions.learners.federated.sites import SiteData, describe, from_loader, from_schema
from coalitions.learners.game.bootstrap import DEFAULT_REPLICATES, site_draws

__all__ = ["client_app", "server_app", "make_server_app", "RUN_CONFIG", "settings_from_run_config"]

#: The run config of the ``flwr run`` entry, with its defaults (the same as ``[tool.flwr.app.config]``).
RUN_CONFIG = {"sites": 4, "dataset": "heart", "data-options": "{}", "output": "federated-game",
              "checkpoint": "", "semantics": "personalized", "tol": 1e-9, "wait-s": 120.0,
              "round-timeout-s": 600.0, "retries": 2, "threads": 1, "method": "exact", "method-options": "{}",
              "exclude-bad-sites": False, "training": "{}", "seed": 0, "replicates": DEFAULT_REPLICATES,
              "masks": "", "manifest": "", "equal-weights": False}


# --------------------------------------------------------------------------- the site
def _site(context: Context, cfg) -> SiteData:
    node = context.node_config
    if "site-schema" in node and str(node["site-schema"]):
        return from_schema(str(node["site-schema"]))
    dataset = str(cfg.get("dataset", ""))
    if not dataset:
        raise InputError("this SuperNode has no site-schema in its node config and the server names no dataset")
    if "partition-id" not in node:
        raise InputError("this SuperNode has neither site-schema nor partition-id in its node config")
    return from_loader(dataset, json.loads(str(cfg.get("data-options", "{}"))), int(node["partition-id"]))


def _protocol(cfg):
    """The training protocol a server message carries (JSON), checked like any input."""
    from coalitions.learners.training.protocol import TrainingProtocol

    try:
        return TrainingProtocol.from_json(json.loads(str(cfg["protocol"])))
    except (KeyError, json.JSONDecodeError, TypeError) as e:
        raise InputError(f"the server's message holds no usable training protocol ({type(e).__name__})") from None


def _model(site: SiteData, protocol):
    from coalitions.learners.training.models import make_model

    return make_model(protocol.model, site.client.train.X.shape[1:], site.n_outputs, hidden=protocol.hidden)


def _threads(cfg):
    import torch

    torch.set_num_threads(max(1, int(cfg.get("threads", 1))))


def _params(spec, msg: Message) -> dict:
    arrays = msg.content.array_records["models"].to_numpy_ndarrays()
    if len(arrays) != len(spec.shapes) or any(a.shape[1:] != tuple(s) for a, s in zip(arrays, spec.shapes.values(),
                                                                                         strict=False)):
        raise InputError(f"the server sent models of shapes {[a.shape for a in arrays]}; this site's model "
                         f"{spec.kind} has {list(spec.shapes.values())}")
    return dict(zip(spec.shapes, arrays, strict=True))


client_app = ClientApp()


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    site = _site(context, msg.content["config"])
    return Message(RecordDict({"site": ConfigRecord({"json": json.dumps(describe(site))})}), reply_to=msg)


def _spo(msg: Message, context: Context) -> Message:
    """An SPO request at a site (:func:`coalitions.learners.federated.spo.spo_site`)."""
    from coalitions.learners.federated.spo import spo_site

    cfg = msg.content["config"]
    site = _site(context, cfg)
    _threads(cfg)
    keys = cast(list, msg.content["keys"]["keys"])
    arrays = dict(zip(keys, msg.content.array_records["arrays"].to_numpy_ndarrays(), strict=True))
    res = spo_site(site, dict(cfg), arrays)
    keys = [k for k, v in res.items() if isinstance(v, np.ndarray)]
    scalars = {k: v for k, v in res.items() if k not in keys}
    content = RecordDict({"result": ConfigRecord({"json": json.dumps({**scalars, "array-keys": keys})})})
    if keys:
        content["arrays"] = ArrayRecord([np.asarray(res[k]) for k in keys])
    return Message(content, reply_to=msg)


def _personal(msg: Message, context: Context, kind: str) -> Message:
    """A personalised method's site half (:mod:`coalitions.learners.federated.personal`)."""
    from coalitions.learners.federated.personal import site_finish, site_learner, site_train

    cfg = msg.content["config"]
    site = _site(context, cfg)
    method = str(cfg["method"])
    sizes = [int(x) for x in cast(list, cfg["sizes"])] if "sizes" in cfg else None
    learner = site_learner(method, json.loads(str(cfg["params"])), site, sizes)   # every site's sizes: the schedule
    _threads(cfg)
    names = {k: list(learner.spec_.shapes) for k in msg.content.array_records}
    if "record-names" in cfg:    # records that hold some of the parameters (FedPer's shared body) name them
        names.update(json.loads(str(cfg["record-names"])))
    received = {k: dict(zip(names[k], rec.to_numpy_ndarrays(), strict=True))
                for k, rec in msg.content.array_records.items()}
    kept_names = context.state.config_records.get("kept-names")
    kept = None
    if kept_names is not None:   # what the site kept from its previous messages of this run (Context.state)
        kept = {key: dict(zip(cast(list, keys), context.state.array_records[f"kept-{key}"].to_numpy_ndarrays(),
                              strict=True)) for key, keys in kept_names.items()}
    if kind == "train":
        reply, metrics, kept = site_train(method, learner, dict(cfg), received, kept)
        if kept:
            for key, arrays in kept.items():     # the site's own state stays at the site
                context.state[f"kept-{key}"] = ArrayRecord([np.asarray(a) for a in arrays.values()])
            context.state["kept-names"] = ConfigRecord({key: list(arrays) for key, arrays in kept.items()})
        content = RecordDict({"metrics": MetricRecord(metrics)})
        for key, arrays in reply.items():
            content[key] = ArrayRecord([np.asarray(a) for a in arrays.values()])
        return Message(content, reply_to=msg)
    result = site_finish(method, learner, received, kept, dict(cfg))
    return Message(RecordDict({"result": ConfigRecord({"json": json.dumps(result)})}), reply_to=msg)


@client_app.train()
def _train(msg: Message, context: Context) -> Message:
    cfg = msg.content["config"]
    if str(cfg.get("method", "")) == "spo":
        return _spo(msg, context)
    if "method" in cfg:
        return _personal(msg, context, "train")
    site = _site(context, cfg)
    protocol = _protocol(cfg)
    spec = _model(site, protocol)
    _threads(cfg)
    params = _params(spec, msg)
    c = site.client
    content = RecordDict()
    if bool(cfg.get("score-val", False)):    # patience: the models received, scored before the local steps
        losses = validation_losses(spec, site.task, params, c.val.X, c.val.y)
        content["metrics"] = MetricRecord({"val-loss": [float(x) for x in losses]})
    out = local_round(spec, site.task, params, c.train.X, c.train.y, protocol, int(str(cfg["round"])),
                      int(str(cfg["site-index"])), int(str(cfg["seed"])))
    content["models"] = ArrayRecord([out[k] for k in spec.shapes])
    return Message(content, reply_to=msg)


@client_app.evaluate()
def _evaluate(msg: Message, context: Context) -> Message:
    cfg = msg.content["config"]
    if "method" in cfg:
        return _personal(msg, context, "evaluate")
    site = _site(context, cfg)
    spec = _model(site, _protocol(cfg))
    _threads(cfg)
    params = _params(spec, msg)
    c = site.client
    val, val_loss = evaluate_models(spec, site.task, site.metric, params, c.val.X, c.val.y)
    test, _ = evaluate_models(spec, site.task, site.metric, params, c.test.X, c.test.y)
    for part, v in (("validation", val), ("test", test)):
        if not np.all(np.isfinite(v)):
            raise InputError(f"site {c.name!r}: the {site.metric} of its {part} split is undefined (a single class?)")
    values: dict[str, int | float | list[int] | list[float]] = {
        "val": [float(x) for x in val], "test": [float(x) for x in test], "val-loss": [float(x) for x in val_loss]}
    replicates = int(str(cfg.get("replicates", 0)))
    if replicates:      # the game's standard errors: the models re-scored on resampled rows
        draws = site_draws(c.val.y, site.metric, replicates, int(str(cfg["seed"])), int(str(cfg["site-index"])))
        values["val-replicates"] = [float(x) for x in
                                    evaluate_replicates(spec, site.metric, params, c.val.X, c.val.y, draws).ravel()]
    record = MetricRecord(values)
    return Message(RecordDict({"metrics": record}), reply_to=msg)


# --------------------------------------------------------------------------- the server
def _json_object(c: dict, key: str, what: str = "") -> dict:
    """Run-config value ``key``: a JSON object, or one line naming the key."""
    try:
        value = json.loads(str(c[key]))
    except json.JSONDecodeError as e:
        raise InputError(f"run config {key} is not JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise InputError(f"run config {key} must be a JSON object{what}")
    return value


def _masks(value) -> list | None:
    """Run-config ``masks``: ``""`` (every coalition) or a JSON list of coalition bitmasks; else one line."""
    text = str(value).strip()
    if not text:
        return None
    try:
        masks = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"run config masks is not JSON ({e.msg})") from None
    if not isinstance(masks, list) or not masks or not all(type(m) is int for m in masks):
        raise InputError("run config masks must be a non-empty JSON list of coalition bitmasks (integers)")
    return masks


def _manifest(value):
    """Run-config ``manifest``: ``""`` (names are self-declared) or the consortium manifest as JSON."""
    from coalitions.learners.federated.manifest import manifest_from_json

    text = str(value).strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise InputError("run config manifest is not JSON (the consortium manifest's content)") from None
    return manifest_from_json(data, "run config manifest")


def settings_from_run_config(rc) -> tuple[Settings, dict]:
    """Server settings and output options from a run config (missing keys take :data:`RUN_CONFIG`)."""
    c = {**RUN_CONFIG, **dict(rc)}
    options, method_options = _json_object(c, "data-options"), _json_object(c, "method-options")
    training = _json_object(c, "training", " (training protocol field -> value)")
    if isinstance(training.get("lr_grid"), list):
        training["lr_grid"] = tuple(training["lr_grid"])
    timeout = float(c["round-timeout-s"])
    masks = _masks(c["masks"])
    settings = Settings(training=training, seed=int(c["seed"]), sites=int(c["sites"]), dataset=str(c["dataset"]) or None,
                        data_options=options, checkpoint=str(c["checkpoint"]) or None, wait_s=float(c["wait-s"]),
                        round_timeout_s=timeout if timeout > 0 else None, retries=int(c["retries"]),
                        threads=int(c["threads"]), method=str(c["method"]), method_options=method_options,
                        exclude_bad_sites=bool(c["exclude-bad-sites"]), replicates=int(c["replicates"]),
                        masks=masks, manifest=_manifest(c["manifest"]), equal_weights=bool(c["equal-weights"]))
    return settings, {"output": str(c["output"]), "semantics": str(c["semantics"]), "tol": float(c["tol"])}


def _measure(grid: Grid, settings: Settings, output: str, semantics: str, tol: float, log, progress) -> list[str]:
    """The ServerApp's work for ``settings.method``; a site whose reply fails its check stops it.

    With :attr:`Settings.exclude_bad_sites` the site is left out instead
    (:meth:`Settings.exclude`) and the method starts again from the beginning
    without it (what the site sent so far is not used); the outputs record it.
    The other nodes' descriptions are checked again but not asked again
    (:attr:`Settings.described`).
    """
    from coalitions.learners.federated.replies import BadReply

    settings.described.clear()       # what the nodes told this run only: not a previous run's on the same ids
    while True:
        try:
            return _measure_once(grid, settings, output, semantics, tol, log, progress)
        except BadReply as fault:
            if not settings.exclude_bad_sites:
                raise
            settings.exclude(fault)
            log(f"excluded ({fault}); starting again with {settings.sites} site(s)")
            _set_aside_checkpoint(settings, log)


def _set_aside_checkpoint(settings: Settings, log) -> None:
    """Rename the checkpoint of the run with the excluded site (``….npz.before-exclusion``): it cannot be
    resumed by the run without it, and it keeps the rounds done should the site be readmitted."""
    from pathlib import Path

    ckpt = Path(settings.checkpoint) if settings.checkpoint else None
    if ckpt is not None and ckpt.exists():
        aside = ckpt.with_name(ckpt.name + ".before-exclusion")
        ckpt.replace(aside)
        log(f"the checkpoint of the run with it is kept as {aside}")


def _measure_once(grid: Grid, settings: Settings, output: str, semantics: str, tol: float, log,
                  progress) -> list[str]:
    """The ServerApp's work for ``settings.method``: the exact game, or a personalised learner's estimate."""
    from coalitions.learners.federated.outputs import write_measurement, write_outputs, write_personal_outputs

    if settings.masks is not None and settings.method != "exact":
        raise InputError(f"run config masks: the coalitions to train are for method exact, not {settings.method}")
    if settings.masks is not None and settings.exclude_bad_sites:
        raise InputError("run config masks: the coalitions name sites by their order; a site left out would "
                         "renumber them (exclude-bad-sites is for the game over all coalitions)")
    if settings.method == "exact":
        result = measure_game(grid, settings, log=log, progress=progress)
        if settings.masks is not None:     # some coalitions: their values, no game
            return write_measurement(result, settings, output)
        return write_outputs(result, settings, output, semantics, tol)
    if settings.method == "spo":
        from coalitions.learners.federated.spo import run_spo

        learner, record = run_spo(grid, settings, log=log)
        return write_personal_outputs(learner, record, settings, output)
    from coalitions.learners.federated.personal import PERSONAL, run_personal

    if settings.method not in PERSONAL:
        raise InputError(f"method {settings.method!r}: choose exact or one of {', '.join(PERSONAL)}")
    learner, record = run_personal(grid, settings, settings.method, None, log=log)
    return write_personal_outputs(learner, record, settings, output)


def make_server_app(settings: Settings, output: str, semantics: str = "personalized", tol: float = 1e-9,
                    outcome: dict | None = None, log=print, progress=None) -> ServerApp:
    """A ServerApp that measures the game with ``settings`` and writes it to ``output``.

    ``outcome`` (a dict), when given, receives ``"result"`` (the files written)
    or ``"error"`` (the exception), so a caller running the app in a thread
    (the simulation engine) can report it.
    """
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        try:
            files = _measure(grid, settings, output, semantics, tol, log, progress)
        except BaseException as e:
            if outcome is None:
                raise
            outcome["error"] = e
            return
        if outcome is not None:
            outcome["result"] = files

    return app


server_app = ServerApp()


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    settings, out = settings_from_run_config(context.run_config)
    _measure(grid, settings, out["output"], out["semantics"], out["tol"], print, None)
