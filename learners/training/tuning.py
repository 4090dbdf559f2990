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

__all__ = ["tune_lr", "kept_val_loss", "fit_on_grid"]


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
        a non-finite score never wins.

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
    best, best_score, best_lr, losses = None, math.inf, None, []
    for lr in rates:
        fitted = fit_one(lr)
        s = float(score(fitted))
        losses.append(round(s, 12) if math.isfinite(s) else None)
        if best is None or (math.isfinite(s) and s < best_score):
            best, best_score, best_lr = fitted, (s if math.isfinite(s) else math.inf), lr
    return best, {"grid": rates, "val_loss": losses, "chosen": best_lr}


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
