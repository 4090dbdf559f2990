"""Every column's learning rate chosen on validation from one fixed grid.

docs/learners-protocol.md#every-columns-learning-rate-chosen-on-validation-from-one-grid says why and how.

Personalised-FL benchmarks give every method the same tuning budget: the same
grid of learning rates, each rate trained once under the same step budget, and
the rate kept whose model does best on *validation* data (e.g. Chen & Chao,
"On bridging generic and personalized federated learning", ICLR 2022, and the
pFL-Bench protocol, Chen et al., NeurIPS 2022).  A method tuned on its own grid,
or not at all, wins or loses by its learning rate, not by what it does.

The rule here: train once per rate of the protocol's ``lr_grid``
(:class:`~coalitions.learners.training.protocol.TrainingProtocol`), score each
fit by the mean over clients of its *kept* models' tuning loss (:func:`kept_val_loss`: under a
patience the models early stopping keeps, not those of the last round run; the tuning rows are
the validation rows unless the protocol has a ``tune_split``), keep the lowest (ties: the
earlier rate of the grid).  Test data are never read.  The exhaustive game and SPO choose by
the same rule (their kept models' loss); :func:`fit_on_grid` applies it to a learner column, and
Local, whose clients' models are independent, applies it per client itself
(:class:`~coalitions.learners.methods.baselines.Local`), as the game does for its models of ``{i}``.

The rule itself lives in one place, :class:`RateChoice` (offered one rate at a time, for callers that
keep only the incumbent's fit) and :func:`choose_rate` (a whole table, rates × tracks): every tuned
place uses it.  They differ only in how a non-finite loss ranks and whether the grid's first rate is
the default, which :class:`RateChoice`'s two settings keep as each place had it:

============================  ===============  =========  ==================================================
caller                        ``finite_only``  ``first``  a non-finite loss
============================  ===============  =========  ==================================================
:func:`tune_lr`, Local        True             True       NaN and ±inf never win; none finite: the first rate
SPO (``_train_tuned``)        False            True       -inf wins, NaN and +inf never do; a NaN at the
                                                          first rate is kept (nothing is lower than NaN)
the exhaustive game (chunks)  False            False      -inf wins, NaN and +inf never do; none below +inf:
                                                          no rate (the first rate's model, rate NaN)
============================  ===============  =========  ==================================================

Examples
--------
>>> best, record = tune_lr(lambda lr: {"lr": lr}, (0.1, 0.01, 0.001), lambda fit: abs(fit["lr"] - 0.012))
>>> best, record["chosen"], record["val_loss"]
({'lr': 0.01}, 0.01, [0.088, 0.002, 0.011])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["RateChoice", "choose_rate", "tune_lr", "kept_val_loss", "fit_on_grid"]


class RateChoice:
    """The running choice of a learning rate per track: the one place the selection rule lives.

    A *track* is what keeps a rate of its own: a column (one track), a client of Local, a subset
    model of the exhaustive game.  The grid's rates are offered in grid order with every track's
    kept-model tuning loss (:meth:`offer`); a rate replaces a track's incumbent only where its loss
    is *strictly* lower, so ties keep the earlier rate of the grid.  Callers that keep each rate's
    fit only while it is the incumbent (a column, a hypernetwork, a chunk's scores) offer as they
    train; :func:`choose_rate` applies the rule to a whole table.

    Parameters
    ----------
    finite_only : bool, default True
        How non-finite losses rank.  True: a NaN or infinite loss counts as ``+inf``: it never wins,
        and an incumbent with one loses to any finite loss (:func:`tune_lr`, Local).  False: losses
        compare as IEEE floats: ``-inf`` wins, NaN and ``+inf`` never win, and an incumbent whose
        loss is NaN is never replaced (nothing is lower than NaN; SPO, the exhaustive game).
    first : bool, default True
        True: the grid's first rate is every track's incumbent from the start, with its own loss, so
        every track keeps a rate.  False: no incumbent (its loss ``+inf``): a rate is kept only where
        its loss is below ``+inf``, and a track that no rate reaches keeps index -1 (the exhaustive game).

    Attributes
    ----------
    index : ndarray of int
        Each track's chosen rate so far, an index into the grid (-1: none; shape: the losses').
    loss : ndarray of float
        The chosen rates' losses, as compared (under ``finite_only`` a non-finite one is ``+inf``).
    offered : int
        How many rates have been offered.

    Examples
    --------
    >>> choice = RateChoice()
    >>> choice.offer([0.5, 0.2, float("nan")]).tolist()
    [True, True, True]
    >>> choice.offer([0.3, 0.2, 0.9]).tolist()          # a tie keeps the earlier rate; NaN loses to 0.9
    [True, False, True]
    >>> choice.index.tolist(), choice.rates([0.1, 0.01]).tolist()
    ([1, 0, 1], [0.01, 0.1, 0.01])
    """

    def __init__(self, *, finite_only: bool = True, first: bool = True):
        self.finite_only, self.first = bool(finite_only), bool(first)
        self.offered = 0
        self.index: np.ndarray = np.full((), -1, dtype=np.intp)
        self.loss: np.ndarray = np.full((), np.inf)

    def offer(self, losses) -> np.ndarray:
        """Offer the next rate of the grid with each track's loss; where it is now the chosen rate.

        Parameters
        ----------
        losses : float or array_like of float
            Each track's kept-model tuning loss at this rate (the same shape at every rate).

        Returns
        -------
        ndarray of bool
            ``losses``' shape: the tracks that now keep this rate (their previous choice replaced).

        Raises
        ------
        ValueError
            ``losses`` not shaped like the first rate's.
        """
        loss = np.asarray(losses, dtype=np.float64)
        if self.finite_only:
            loss = np.where(np.isfinite(loss), loss, np.inf)
        if self.offered == 0:
            self.index = np.full(loss.shape, -1, dtype=np.intp)
            self.loss = np.full(loss.shape, np.inf)
            better = np.ones(loss.shape, dtype=bool) if self.first else loss < self.loss
        elif loss.shape != self.loss.shape:
            raise ValueError(f"losses of shape {loss.shape}, but the first rate's were {self.loss.shape}")
        else:
            better = loss < self.loss   # strict: a tie keeps the earlier rate
        self.index = np.where(better, self.offered, self.index)
        self.loss = np.where(better, loss, self.loss)
        self.offered += 1
        return better

    def rates(self, grid: Sequence[float]) -> np.ndarray:
        """Each track's chosen rate read from ``grid`` (float; NaN where none was chosen)."""
        values = np.asarray([float(r) for r in grid], dtype=np.float64)
        return np.where(self.index >= 0, values[np.clip(self.index, 0, None)], np.nan)


def choose_rate(losses, *, finite_only: bool = True, first: bool = True) -> np.ndarray:
    """Each track's rate from a table of kept-model tuning losses: :class:`RateChoice`'s rule at once.

    Parameters
    ----------
    losses : array_like of float, shape (rates, ...)
        ``losses[k]``: every track's loss at rate ``k`` of the grid (a 1-D table: one track).
    finite_only, first : bool
        How non-finite losses rank and whether the first rate is the default (:class:`RateChoice`).

    Returns
    -------
    ndarray of int, shape ``losses.shape[1:]``
        Each track's chosen rate, an index into the grid: its lowest loss, ties to the earlier rate
        (-1 where ``first=False`` and no loss is below ``+inf``).

    Raises
    ------
    ValueError
        An empty table (no rate).

    Examples
    --------
    >>> nan, inf = float("nan"), float("inf")
    >>> choose_rate([[0.3, nan, inf, 0.1], [0.2, nan, 0.5, 0.1], [0.2, nan, -inf, nan]]).tolist()
    [1, 0, 1, 0]
    >>> choose_rate([[0.3, nan, inf, 0.1], [0.2, nan, 0.5, 0.1], [0.2, nan, -inf, nan]],
    ...             finite_only=False, first=False).tolist()
    [1, -1, 2, 0]
    """
    table = np.asarray(losses, dtype=np.float64)
    if table.ndim == 0 or table.shape[0] == 0:
        raise ValueError("the learning-rate grid is empty")
    choice = RateChoice(finite_only=finite_only, first=first)
    for row in table:
        choice.offer(row)
    return choice.index


def tune_lr(fit_one: Callable[[float], Any], grid: Sequence[float], score: Callable[[Any], float]
            ) -> tuple[Any, dict]:
    """Fit once per learning rate of ``grid`` and keep the fit with the lowest validation score.

    Parameters
    ----------
    fit_one : callable
        ``fit_one(lr)`` trains the column at learning rate ``lr`` and returns the fitted estimator.
    grid : sequence of float
        The learning rates, in the order ties are broken.
    score : callable
        ``score(fitted)``: the fit's mean validation loss over clients (lower is better);
        a non-finite score never wins (:class:`RateChoice`'s default rule; if none is finite, the
        first rate is kept).

    Returns
    -------
    best : object
        The fitted estimator at the chosen rate.
    record : dict
        ``{"grid": [...], "val_loss": [...], "chosen": lr}`` (``val_loss`` rounded to 12 digits;
        a non-finite one is ``None``).

    Raises
    ------
    ValueError
        An empty grid.
    """
    rates = [float(lr) for lr in grid]
    if not rates:
        raise ValueError("the learning-rate grid is empty")
    best, choice, losses = None, RateChoice(), []
    for lr in rates:
        fitted = fit_one(lr)
        s = float(score(fitted))
        losses.append(round(s, 12) if math.isfinite(s) else None)
        if choice.offer(s):
            best = fitted
    return best, {"grid": rates, "val_loss": losses, "chosen": rates[int(choice.index)]}


def kept_val_loss(fitted) -> float:
    """The selection rule's score of a fitted learner: its kept models' mean tuning loss over clients.

    ``best_val_loss_`` (:class:`~coalitions.learners.methods.base.PersonalizedLearner`): under a
    patience the loss of the round early stopping keeps, the last round's without one.  The last
    round run (``val_loss_history_[-1]``) would score a stopped column by a model it does not keep.
    """
    return float(fitted.best_val_loss_)


def fit_on_grid(make: Callable[[float | None], Any], protocol, federation) -> tuple[Any, dict | None]:
    """Fit the column ``make`` builds under ``protocol``, its rate chosen on the protocol's ``lr_grid``.

    Parameters
    ----------
    make : callable
        ``make(lr)``: an unfitted learner (``lr`` a rate of the grid, ``None`` without one).
    protocol : TrainingProtocol or None
        The column's protocol (``None``: the learner's own default, no grid).
    federation : Federation

    Returns
    -------
    fitted : learner
        Without a grid, or for a learner that tunes itself (``tunes_own_rate``: Local, per
        client), fitted once under ``protocol``; else the fit at the rate :func:`tune_lr` keeps
        by :func:`kept_val_loss`.
    record : dict or None
        :func:`tune_lr`'s record (``None`` when the learner was fitted once).
    """
    learner = make(None)
    if protocol is None:
        return learner.fit(federation), None
    if not protocol.lr_grid or getattr(learner, "tunes_own_rate", False):
        return learner.set_params(protocol=protocol).fit(federation), None

    def fit_one(lr: float):
        return make(lr).set_params(protocol=protocol.with_(lr=lr, lr_grid=None)).fit(federation)

    return tune_lr(fit_one, protocol.lr_grid, kept_val_loss)
