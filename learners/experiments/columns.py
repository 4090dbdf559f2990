"""Train one piece of a reproduction: the exact games or one learner column, with the report's records.

A column is fitted once per rate of the protocol's ``lr_grid`` and keeps the rate whose kept models
have the lowest mean tuning loss (:func:`~coalitions.learners.training.tuning.fit_on_grid`; Local
chooses per client); its estimate carries
``extra.test_outputs``, ``extra.sensitivity``, ``extra.lr_tuning`` and ``extra.stopping``
(docs/formats.md).  Pure computation, no files: the local loop and the Ray tasks both call it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.exact import DEFAULT_REPLICATES
from coalitions.learners.experiments.catalogue import Experiment, get_experiment, method_of
from coalitions.learners.experiments.spo_column import fit_spo
from coalitions.learners.experiments.statistics import separate_seeds

__all__ = ["compute_piece", "compute_named_piece", "with_records", "learner_outputs", "lr_tuning", "stopping_record",
           "oracle_settings", "REPLICATES"]

#: Bootstrap replicates of the validation sets recorded with every exact game: its standard errors
#: and the CE's support (the oracle's default).
REPLICATES = DEFAULT_REPLICATES


def oracle_settings(exp: Experiment, quick: bool = False, regime=None) -> dict:
    """``exp``'s exhaustive-oracle keywords (:meth:`Experiment.oracle_options`: its protocol with the oracle's
    protocol fields folded in); an experiment without an exact game has none to give."""
    if exp.oracle is None:
        raise InputError(f"experiment {exp.name!r} has no exact game (its oracle settings are None)")
    return exp.oracle_options(quick, regime)


def compute_piece(fed, exp: Experiment, what: str, options: dict, seed: int, device: str, progress=None):
    """Train one piece: the exact games ``(validation, test, method, replicates, loss game, loss replicates)``
    (the last two None without the oracle's ``loss_game``), or learner ``what``'s estimate.

    ``options``: the exhaustive oracle's keywords (:meth:`Experiment.oracle_options`:
    ``exp.oracle``, the ``--quick`` overrides and the experiment's ``protocol``), or the
    learner's options (:func:`~coalitions.learners.experiments.catalogue.budgeted_options`;
    a ``protocol`` among them goes to the estimator as its ``protocol`` parameter).

    Pure computation (no files): the local loop and the Ray tasks of
    :mod:`coalitions.learners.distributed` both call it, so they agree.
    ``progress(done, total)`` follows the training (subset model-epochs, rounds or steps).
    """
    if what == "exact":
        from coalitions.learners.exact import ExhaustiveOracle

        # ``options`` are the oracle's (Experiment.oracle_options: its own keywords and the protocol, the oracle's
        # protocol fields folded into it), so exp.oracle's protocol fields never reach the oracle twice
        o = ExhaustiveOracle(device=device, seed=seed, progress=progress,
                             **{"replicates": REPLICATES, **options}).fit(fed)
        return o.game_, o.test_game_, o.method_, o.replicates_, o.loss_game_, o.loss_replicates_
    from coalitions.learners.methods.registry import create

    options = dict(options)
    protocol = options.pop("protocol", None)
    if what == "spo":   # SPO tunes its own rate on the protocol's grid and rule, and stops on its patience
        return with_records(fit_spo(fed, options, seed, device, progress, protocol=protocol), fed)
    from coalitions.learners.training.tuning import fit_on_grid

    method = method_of(what)   # a variant column (FedeRiCo's two loss scales) runs its method with its options
    learner, record = fit_on_grid(lambda lr: create(method, dict(options), device=device, seed=seed,
                                                    progress=progress),
                                  protocol, fed)
    est = with_records(learner, fed)
    return est if record is None else dataclasses.replace(est, extra={**est.extra, "lr_tuning": record})


def learner_outputs(learner, fed) -> list[np.ndarray]:
    """Each client's test outputs under the learner's own model: what its ``utilities_["test"]`` scores.

    Personalised learners: :meth:`~coalitions.learners.methods.base.PersonalizedLearner.client_outputs`.
    SPO: the target model at each client's direction (row ``i`` of ``weights_``), as SPO scores it.
    """
    if hasattr(learner, "client_outputs"):
        return learner.client_outputs("test")
    import torch

    params = learner.predict_params(learner.weights_)
    out = []
    with torch.no_grad():
        for i, c in enumerate(fed.clients):
            p = {k: torch.as_tensor(v[i]) for k, v in params.items()}
            o = learner.spec_.forward(p, torch.tensor(np.asarray(c.test.X, dtype=np.float32)))
            o = o.double().cpu().numpy()
            out.append(o[:, 0] if o.ndim == 2 and o.shape[1] == 1 else o)
    return out


def with_records(learner, fed):
    """The learner's estimate with what the report's statistics need in ``extra`` (docs/formats.md).

    ``test_outputs``: ``{client: outputs}`` (:func:`learner_outputs`, float32
    precision), for the bootstrap intervals over test samples; ``sensitivity``:
    the learned CE across the rule's threshold (``learner.sensitivity()``,
    :func:`coalitions.sensitivity.sensitivity_to_json`) for learners with
    weights (SPO: its ratio rule).
    """
    import dataclasses

    from coalitions.sensitivity import sensitivity_to_json

    est = learner.estimate_
    extra = dict(est.extra)
    outs = learner_outputs(learner, fed)
    extra["test_outputs"] = {c.name: np.asarray(o, dtype=np.float32).tolist() for c, o in zip(fed.clients, outs,
                                                                                                strict=True)}
    if getattr(learner, "has_weights", True) and hasattr(learner, "sensitivity"):
        rule, used, rows = learner.sensitivity()
        extra["sensitivity"] = sensitivity_to_json(list(fed.names), rows, rule, used)
    stop = stopping_record(learner)
    if stop is not None:
        extra["stopping"] = stop
    return dataclasses.replace(est, extra=extra)


def stopping_record(learner) -> dict | None:
    """Where a fitted column stopped: ``{"lr", "stopped_at", "hit_max"}`` , or None.

    A learner that stops per client (Local) adds ``lr_clients`` and ``stopped_at_clients`` (client
    order); its ``stopped_at`` is then the latest client's, and ``lr`` None when the clients chose
    their rates on a grid.

    Read from the fitted learner's ``lr_`` (the rate it trained at), ``stopped_at_`` (the local step
    at which its validation loss had not improved for the protocol's ``patience`` evaluations, or the
    maximum) and ``hit_max_`` (True: it never stopped, the budget did).  A learner without
    ``stopped_at_`` (no early stopping in its loop) gives None: nothing is recorded rather than a
    guess.
    """
    stopped = getattr(learner, "stopped_at_", None)
    if stopped is None:
        return None
    lr = getattr(learner, "lr_", None)
    out: dict[str, Any] = {"lr": None if lr is None else float(lr), "stopped_at": int(stopped),
           "hit_max": bool(getattr(learner, "hit_max_", False))}
    if getattr(learner, "stops_per_client", False):   # Local: each client's own rate and stopping step
        out["lr_clients"] = [float(v) for v in learner.lr_clients_]
        out["stopped_at_clients"] = [int(v) for v in learner.stopped_at_clients_]
    return out


def lr_tuning(estimate) -> dict | None:
    """The learning rate a column chose on validation (``{"grid", "val_loss", "chosen"}``), or None.

    Personalised learners: :func:`coalitions.learners.training.tuning.tune_lr`'s record
    (``extra["lr_tuning"]``); SPO tunes itself and records ``extra["training"]["lr_losses"]``.
    """
    extra = estimate.extra or {}
    if extra.get("lr_tuning") is not None:
        return extra["lr_tuning"]
    training = extra.get("training") or {}
    losses = training.get("lr_losses")
    if not losses or len(losses) < 2:
        return None
    grid = [float(k) for k in losses]
    return {"grid": grid, "val_loss": [losses[k] for k in losses], "chosen": float(training["lr"])}


def compute_named_piece(exp_name: str, quick: bool, regime_name: str, seed: int, what: str, device: str):
    """:func:`compute_piece` from names alone (what a Ray worker runs): ``(result, seconds, n_clients)``."""
    from coalitions.learners.data.datasets import load

    exp = get_experiment(exp_name)
    regime = next(r for r in exp.regimes if r.name == regime_name)
    seeds = separate_seeds(seed)
    fed = load(exp.dataset, seed=seeds.data, **regime.options)
    options = _options(exp, quick, what, fed, regime)
    t = time.perf_counter()
    result = compute_piece(fed, exp, what, options, seeds.init, device)
    return result, time.perf_counter() - t, fed.n


def _options(exp: Experiment, quick: bool, what: str, fed, regime=None) -> dict:
    """The options of piece ``what`` on ``fed`` in ``regime``: the oracle's, or the learner's with the matched budget."""
    from coalitions.learners.experiments.catalogue import budgeted_options

    if what == "exact":
        return exp.oracle_options(quick, regime)
    return budgeted_options(exp, quick, what, fed.sizes("train"), regime)
