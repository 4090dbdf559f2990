"""Patience on a validation loss: the one early-stopping rule of every column.

Every model the toolkit trains under a protocol's ``patience`` stops by the same rule: its
validation loss is evaluated now and then (once per round, per epoch, or every few steps); an
evaluation *improves* when its loss is strictly lower than the best one so far; the model stops
once ``patience`` evaluations in a row have not improved, and keeps the parameters of its best
evaluation.  :class:`Patience` is that rule over ``K`` independent tracks (one model, one per
client, one per stacked subset model), as tensors so that a track may live on the device of the
models it stops.  Its users add only what their callers need around it:

* the round runner's ``EarlyStop`` (one track, on the mean over clients) and ``ClientsEarlyStop``
  (one per client), in ``coalitions.learners.methods.runner``, and through the former the Flower
  server's ``ServerStopper`` (``coalitions.learners.federated.personal.stopping``);
* the exact and the federated game's :class:`~coalitions.learners.game.stopping.SubsetEarlyStop`
  (one track per stacked subset model, which also keeps each model's best parameters; the
  federated game's server feeds it in ``GameServer.record_losses``);
* SPO's training loop (one track: the hypernetwork's mean validation loss, every few steps).
"""

from __future__ import annotations

import math

__all__ = ["Patience"]


class Patience:
    """Patience on ``K`` independent validation-loss tracks (module docstring).

    An evaluation of an active track *improves* when its loss is strictly lower (``<``) than the
    track's best so far (ties and NaN do not improve); the track's count of evaluations without
    improvement then restarts at 0, else it grows by 1, and the track stops once that count
    reaches ``patience``.  A stopped track ignores later evaluations: its record stays where it
    stopped.  ``patience=None`` never stops a track (the record is still kept).  The first
    ``warmup`` evaluations are recorded (``stopped_at``, ``evaluations``) but do not count: none
    improves and none adds to a count, so no track stops or keeps a model before them (a method
    whose defining step starts later: SuPerFed's personalisation).

    Parameters
    ----------
    patience : int or None
        Evaluations without improvement that stop a track, at least 1; ``None``: never stop.
    tracks : int, default 1
        The number ``K`` of independent tracks.
    device : torch.device or str, optional
        Where the record's tensors live (default: the CPU).
    warmup : int, default 0
        Evaluations, from the first, that do not count (recorded only).

    Attributes
    ----------
    best : Tensor of float64 (K,)
        Each track's lowest loss so far (``inf`` before its first improvement).
    best_step : Tensor of int64 (K,)
        The step of each track's best evaluation (0 before any).
    bad : Tensor of int64 (K,)
        Evaluations since each track's last improvement.
    active : Tensor of bool (K,)
        Which tracks still run.
    stopped_at : Tensor of int64 (K,)
        The step of each track's last evaluation while active: where a stopped track stopped
        (0 before any).
    evaluations : int
        The evaluations :meth:`update` has recorded (the default step).

    Examples
    --------
    One track (a single model), steps counted by the rule:

    >>> rule = Patience(2)
    >>> [bool(rule.update(v)) for v in (3.0, 2.0, 2.5, 2.0)], rule.stopped
    ([True, True, False, False], True)
    >>> float(rule.best), int(rule.best_step), int(rule.stopped_at)
    (2.0, 2, 4)

    Two tracks at explicit steps; the second stops after one evaluation without improvement, and
    ignores what comes later:

    >>> rule = Patience(1, tracks=2)
    >>> evaluations = {10: [3.0, 3.0], 20: [2.0, 4.0], 30: [2.5, 1.0]}
    >>> [rule.update(losses, step=s).tolist() for s, losses in evaluations.items()]
    [[True, True], [True, False], [False, False]]
    >>> rule.best_step.tolist(), rule.stopped_at.tolist(), rule.stopped
    ([20, 10], [30, 20], True)

    A warm-up of two evaluations: the low loss of the first does not count, the third is the
    first that can improve:

    >>> rule = Patience(1, warmup=2)
    >>> [bool(rule.update(v)) for v in (1.0, 3.0, 2.0, 2.5)], int(rule.best_step), rule.stopped
    ([False, False, True, False], 3, True)
    """

    def __init__(self, patience: int | None, tracks: int = 1, device=None, warmup: int = 0):
        import torch

        if patience is not None:
            if isinstance(patience, bool) or int(patience) != patience or patience < 1:
                raise ValueError(f"patience must be an integer >= 1 or None, got {patience!r}")
            patience = int(patience)
        if isinstance(warmup, bool) or int(warmup) != warmup or warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
        self.patience = patience
        self.warmup = int(warmup)
        self.best = torch.full((tracks,), math.inf, dtype=torch.float64, device=device)
        self.bad = torch.zeros(tracks, dtype=torch.int64, device=device)
        self.active = torch.ones(tracks, dtype=torch.bool, device=device)
        self.stopped_at = torch.zeros(tracks, dtype=torch.int64, device=device)
        self.best_step = torch.zeros(tracks, dtype=torch.int64, device=device)
        self.evaluations = 0

    def update(self, loss, step: int | None = None):
        """Record one evaluation of every track; returns which tracks improved (a stopped one never does).

        Parameters
        ----------
        loss : float, sequence or Tensor (K,)
            Each track's loss (a number when ``K == 1``); compared as float64 on the record's device.
        step : int, optional
            What the record calls this evaluation (a round, a local step); default: the count of
            evaluations recorded so far, this one included.

        Returns
        -------
        Tensor of bool (K,)
            The tracks whose loss is strictly below their best so far: their models are now the ones to keep.
        """
        import torch

        self.evaluations += 1
        step = self.evaluations if step is None else int(step)
        loss = torch.as_tensor(loss, dtype=self.best.dtype, device=self.best.device)
        if loss.shape != self.best.shape:
            if loss.numel() != 1 or self.best.numel() != 1:
                raise ValueError(f"{tuple(loss.shape)} losses for {self.best.numel()} tracks")
            loss = loss.reshape(self.best.shape)
        counts = self.evaluations > self.warmup
        improved = self.active & (loss < self.best) & counts
        self.best = torch.where(improved, loss, self.best)
        self.best_step = torch.where(improved, torch.full_like(self.best_step, step), self.best_step)
        self.bad = torch.where(improved, torch.zeros_like(self.bad), self.bad + (self.active & counts).to(self.bad.dtype))
        self.stopped_at = torch.where(self.active, torch.full_like(self.stopped_at, step), self.stopped_at)
        if self.patience is not None:
            self.active = self.active & (self.bad < self.patience)
        return improved

    @property
    def stopped(self) -> bool:
        """Whether every track has stopped."""
        return not bool(self.active.any())

    def state_dict(self) -> dict:
        """The record as tensors (``active`` as int64, a checkpoint's array); :meth:`load_state_dict` restores it."""
        return {"best": self.best, "bad": self.bad, "active": self.active.to(self.bad.dtype),
                "stopped_at": self.stopped_at, "best_step": self.best_step}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s content (the tensors as given: their device and dtype)."""
        import torch

        self.best, self.bad = state["best"], state["bad"]
        self.stopped_at, self.best_step = state["stopped_at"], state["best_step"]
        self.active = state["active"].to(torch.bool)
