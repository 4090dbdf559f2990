"""The round runner: a personalised learner's fit as communication rounds.

:class:`RoundBudget` turns the training protocol's budget into rounds, epochs and steps
(:meth:`TrainingProtocol.rounds_for
<coalitions.learners.training.protocol.TrainingProtocol.rounds_for>` counts the rounds);
:class:`RoundRunner` runs the rounds of a prepared learner: it resumes from a checkpoint, calls
the method's :meth:`~coalitions.learners.methods.base.PersonalizedLearner.train_round`, scores
the tuning loss after every round, stops early (:class:`EarlyStop` on the mean over clients,
:class:`ClientsEarlyStop` per client), saves the checkpoint and reports progress.  What it
learns about the run it sets on the learner (``loss_history_``, ``val_loss_history_``,
``best_round_``, ``stopped_at_``, ...: the attributes documented on
:class:`~coalitions.learners.methods.base.PersonalizedLearner`).

Randomness
    Everything random in round ``r`` comes from ``numpy.random.default_rng([seed, r, stream])``
    (stream 0: minibatch order; 1: the method's own draws), so a run resumed from the checkpoint
    of round ``r`` continues exactly as the uninterrupted run would.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from coalitions.learners.data.federation import Federation
from coalitions.learners.training.checkpoint import federation_arrays, fingerprint, load_state, save_state
from coalitions.learners.training.engine import Engine, Padded
from coalitions.learners.training.protocol import TrainingProtocol
from coalitions.learners.training.stopping import Patience

__all__ = ["EarlyStop", "ClientsEarlyStop", "RoundBudget", "RoundRunner", "NOT_RESULT", "takes_info"]

#: Settings that never change the result (left out of the checkpoint fingerprint).
NOT_RESULT = ("device", "checkpoint", "progress", "engine", "chunk", "rule", "threshold", "refit")


def takes_info(callback: Callable[..., Any]) -> bool:
    """Does ``callback`` accept a third positional argument (the round's ``info``)?"""
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


# --------------------------------------------------------------------------- early stopping
class EarlyStop:
    """Patience on a validation loss evaluated once per round (docs/learners-personalized.md#early-stopping-patience).

    The rule of :class:`~coalitions.learners.training.stopping.Patience` on one track, counted
    in rounds: ``update(loss)`` returns whether ``loss`` is the best so far (strictly lower);
    ``stopped`` turns true once ``patience`` consecutive evaluations have not improved on the
    best.  ``patience=None`` never stops.  The first ``warmup`` rounds are recorded but do not
    count (:meth:`RoundBudget.warmup_rounds`).  ``history`` replays the evaluations of a resumed run.

    Examples
    --------
    >>> s = EarlyStop(2)
    >>> [s.update(v) for v in (3.0, 2.0, 2.5, 2.1)], s.stopped, s.best_round
    ([True, True, False, False], True, 2)
    """

    def __init__(self, patience: int | None, history=(), warmup: int = 0):
        self.rule = Patience(patience, warmup=warmup)
        self.patience = self.rule.patience
        for v in history:
            self.update(v)

    def update(self, loss: float) -> bool:
        """Record one round's loss; whether it is the best so far."""
        return bool(self.rule.update(loss)[0])

    @property
    def stopped(self) -> bool:
        return self.rule.stopped

    @property
    def best(self) -> float:
        """The lowest loss so far (``inf`` before any)."""
        return float(self.rule.best[0])

    @property
    def best_round(self) -> int:
        """The round of the lowest loss (0 before any)."""
        return int(self.rule.best_step[0])

    @property
    def round(self) -> int:
        """The last round evaluated before the stop."""
        return int(self.rule.stopped_at[0])

    def update_clients(self, per_client) -> np.ndarray:
        """One evaluation of the clients' losses, read as their mean: which clients' models are now the best
        (all or none)."""
        return np.full(len(per_client), self.update(float(np.mean(per_client))))

    def best_rounds(self, n: int) -> list[int]:
        """The round each of ``n`` clients keeps: the one best round of the mean."""
        return [self.best_round] * n

    def stop_rounds(self, n: int) -> list[int]:
        """The round each of ``n`` clients stopped at: the last round run."""
        return [self.round] * n


class ClientsEarlyStop:
    """Patience per client, for clients whose models are independent (Local): each stops on its own loss.

    Client ``i``'s models are scored after every round by its own tuning loss; it stops when that
    loss has not improved for ``patience`` evaluations and keeps its best round, as the exhaustive
    game's model of ``{i}`` does (:mod:`coalitions.learners.game.stopping`): the rule of
    :class:`~coalitions.learners.training.stopping.Patience` with one track per client.
    ``update_clients`` returns which clients improved (a stopped client never does); ``stopped``
    is true once every client has stopped.  ``warmup`` rounds do not count, as for :class:`EarlyStop`.
    ``history`` (rounds × clients) replays a resumed run.

    Examples
    --------
    >>> s = ClientsEarlyStop(1, 2)
    >>> [s.update_clients(v).tolist() for v in ([3.0, 3.0], [2.0, 4.0], [2.5, 1.0])]
    [[True, True], [True, False], [False, False]]
    >>> s.stopped, s.best_rounds(2), s.stop_rounds(2)
    (True, [2, 1], [3, 2])
    """

    def __init__(self, patience: int | None, n: int, history=(), warmup: int = 0):
        self.rule = Patience(patience, tracks=n, warmup=warmup)
        for row in history:
            self.update_clients(row)

    def update_clients(self, per_client) -> np.ndarray:
        """Record one evaluation of every client's loss; which clients' models are now their best."""
        return self.rule.update(np.asarray(per_client, dtype=np.float64)).numpy()

    @property
    def stopped(self) -> bool:
        return self.rule.stopped

    def best_rounds(self, n: int) -> list[int]:
        """The round each client keeps."""
        return [int(r) for r in self.rule.best_step.tolist()]

    def stop_rounds(self, n: int) -> list[int]:
        """The round each client stopped at (its last evaluation)."""
        return [int(r) for r in self.rule.stopped_at.tolist()]


# --------------------------------------------------------------------------- the budget
class RoundBudget:
    """The protocol's budget as rounds, epochs per round and steps, for a learner set up on a federation.

    A round is the fewest whole epochs that give every client at least ``protocol.local_steps``
    steps (a method with its own floor overrides :meth:`epochs_per_round`); the rounds are the
    fewest that give the largest client ``protocol.steps`` local steps.  Read after
    :meth:`~coalitions.learners.methods.base.PersonalizedLearner.prepare` has set ``protocol_``,
    ``train_sizes_``, ``federation_`` and ``rounds_``.
    """

    protocol_: TrainingProtocol
    train_sizes_: np.ndarray
    federation_: Federation
    rounds_: int

    def minibatch_size(self) -> int | None:
        """Minibatch size per client (``None``: full batch)."""
        return self.protocol_.batch_size

    def _steps_per_epoch(self) -> int:
        """Steps of one epoch of the largest client: ``⌈n_max / batch⌉`` (1 in full batch)."""
        b = self.minibatch_size()
        n = int(self.train_sizes_.max())
        return 1 if b is None else max(1, math.ceil(n / int(b)))

    def _min_local_steps(self) -> int:
        """The fewest local steps a round gives every client (the protocol's ``local_steps``)."""
        return int(self.protocol_.local_steps)

    def epochs_per_round(self, fed: Federation) -> int:
        """Passes over the data per round: the fewest whole epochs that give the smallest client
        ``protocol.local_steps`` steps."""
        b = self.minibatch_size()
        per_epoch = min(1 if b is None else max(1, math.ceil(int(n) / int(b))) for n in self.train_sizes_)
        return max(1, math.ceil(self._min_local_steps() / per_epoch))

    def steps_per_round(self, fed: Federation) -> int:
        """Local gradient steps of the largest client in one round: epochs per round × its batches."""
        return int(self.epochs_per_round(fed)) * self._steps_per_epoch()

    def _rounds_for(self, fed: Federation) -> int:
        """Communication rounds: the fewest that give the largest client ``protocol.steps`` local steps."""
        return self.protocol_.rounds_for(int(self.train_sizes_.max()), steps_per_round=self.steps_per_round(fed))

    def _total_steps(self) -> int:
        """Optimiser steps of the whole run, the schedule's length: rounds × steps per round."""
        return int(self.rounds_) * self.steps_per_round(self.federation_)

    def patience_rounds(self) -> int | None:
        """Early-stopping patience in rounds, the protocol's."""
        patience = self.protocol_.patience
        return None if patience is None else int(patience)

    def warmup_rounds(self) -> int:
        """The first rounds whose tuning loss the early stop records but does not count (0).

        A method whose defining step starts after some rounds (SuPerFed's personalisation) neither
        stops nor keeps its model before that step acts.
        """
        return 0

    def _lr_for(self) -> float:
        """The (peak) learning rate trained with, the protocol's."""
        return float(self.protocol_.lr)


# --------------------------------------------------------------------------- the loop
class RoundRunner:
    """The rounds of one fit of a prepared learner (module docstring).

    Parameters
    ----------
    learner : PersonalizedLearner
        Set up on ``fed`` (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.prepare`,
        its ``train_data_`` set); the runner writes the run's record on it.
    fed : Federation
        The federation trained on (its data roles applied).
    device : torch.device
    """

    def __init__(self, learner: Any, fed: Federation, device: torch.device):
        self.learner, self.fed, self.device = learner, fed, device
        self.patience = learner.patience_rounds()
        self.best: dict | None = None
        self.key = fingerprint({k: v for k, v in learner.config().items() if k not in NOT_RESULT}
                               | {"method": learner.method, "model_": learner.model_, "clients": list(fed.names)},
                               federation_arrays(fed))

    def run(self) -> dict:
        """Train from the start or from the checkpoint until the budget is spent or the stop is due.

        Returns
        -------
        dict
            The state the learner keeps: the best round's under a patience, else the last round's.
        """
        learner = self.learner
        state = self._resume()
        if state is None:
            state = learner.init_state(self.fed, torch.Generator().manual_seed(int(learner.seed)), self.device)
        stopper = self._stopper()
        val_data = Padded(self.fed, "tuning", self.device)   # the rows that stop it (and choose its rate)
        for r in range(learner.resumed_from_, learner.rounds_):
            if stopper.stopped:
                break
            state = self._round(state, r, stopper, val_data)
        if learner.rounds_ == 0:
            self._report(1, 1, {})   # no rounds (Local's closed form): one unit of work, as the oracle reports
        return self._close(state, stopper, val_data)

    def _resume(self) -> dict | None:
        """Start the record; with a checkpoint of this run, load its state and its record (else ``None``)."""
        learner = self.learner
        learner.resumed_from_ = 0
        learner.loss_history_ = []
        learner.val_loss_history_ = []
        learner.val_loss_clients_ = []
        if learner.checkpoint is None:
            return None
        loaded = load_state(learner.checkpoint, self.key, self.device)
        if loaded is None:
            return None
        learner.resumed_from_, state, meta = loaded
        if self.patience is not None:  # the kept (best) models travel with the running state
            state, self.best = state["running"], state["best"]
        learner.loss_history_ = list(meta.get("loss_history", []))
        learner.val_loss_clients_ = [list(v) for v in meta.get("val_loss_clients", [])]
        learner.val_loss_history_ = [float(np.mean(v)) for v in learner.val_loss_clients_]
        if meta.get("engine") and learner.engine == "auto":
            path, chunk = meta["engine"]
            learner.engine_ = Engine(self.device, path, chunk)
        return state

    def _stopper(self) -> EarlyStop | ClientsEarlyStop:
        """The early stop (replaying a resumed run's evaluations): per client or on the mean over clients."""
        learner = self.learner
        if learner.stops_per_client:
            return ClientsEarlyStop(self.patience, self.fed.n, learner.val_loss_clients_, learner.warmup_rounds())
        return EarlyStop(self.patience, learner.val_loss_history_, learner.warmup_rounds())

    def _round(self, state: dict, r: int, stopper: EarlyStop | ClientsEarlyStop, val_data: Padded) -> dict:
        """Round ``r``: train, score the tuning loss, keep the best, save the checkpoint, report."""
        learner = self.learner
        seed = int(learner.seed)
        state, info = learner.train_round(state, r, lambda stream: np.random.default_rng([seed, r, stream]))
        learner.loss_history_.append(float(info.get("loss", float("nan"))))
        per_client = learner.val_losses(state, val_data)
        learner.val_loss_clients_.append(per_client)
        learner.val_loss_history_.append(float(np.mean(per_client)))
        improved = stopper.update_clients(per_client)
        if self.patience is not None and improved.any():
            self.best = learner._keep_best(self.best, state, improved)
        if learner.checkpoint is not None:
            self._save(state, r + 1)
        self._report(r + 1, learner.rounds_, info)
        return state

    def _save(self, state: dict, rounds: int) -> None:
        """The checkpoint after ``rounds`` rounds: the state (with the kept one under a patience) and the record."""
        learner = self.learner
        meta = {"loss_history": learner.loss_history_, "val_loss_clients": learner.val_loss_clients_,
                "engine": list(learner.engine_.choice_ or ("auto", None))}
        saved = state if self.patience is None else {"running": state, "best": state if self.best is None
                                                     else self.best}
        save_state(learner.checkpoint, self.key, rounds, saved, meta)

    def _report(self, done: int, total: int, info: dict) -> None:
        """``progress(done, total[, info])``, when the learner has a progress callback."""
        progress = self.learner.progress
        if progress is None:
            return
        if takes_info(progress):
            progress(done, total, info)
        else:
            progress(done, total)

    def _close(self, state: dict, stopper: EarlyStop | ClientsEarlyStop, val_data: Padded) -> dict:
        """Record where the run stopped and what it keeps; return the kept state."""
        learner, n = self.learner, self.fed.n
        run = learner.rounds_run_ = len(learner.val_loss_history_)
        learner.hit_max_ = run == learner.rounds_   # ran the whole budget (a stop due on the last round saves nothing)
        learner.best_round_clients_ = stopper.best_rounds(n) if self.patience is not None else [run] * n
        learner.best_round_ = max(learner.best_round_clients_)
        learner.steps_per_round_ = learner.steps_per_round(self.fed)
        learner.stopped_at_ = run * learner.steps_per_round_
        learner.stopped_at_clients_ = [r * learner.steps_per_round_ for r in stopper.stop_rounds(n)]
        learner.lr_ = learner._lr_for()
        if self.patience is not None and self.best is not None:
            state = self.best
        learner.state_ = state
        learner.best_val_loss_clients_ = (
            learner.val_losses(state, val_data) if not run else
            [learner.val_loss_clients_[r - 1][i] for i, r in enumerate(learner.best_round_clients_)])
        learner.best_val_loss_ = float(np.mean(learner.best_val_loss_clients_))
        return state
