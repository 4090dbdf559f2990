"""Metrics that turn a model's scores on a client's data into a game value.

docs/concepts.md §1, §5: ``v_i(S)`` is a metric of the model trained on ``S`` measured on
client ``i``'s validation data.  Three metrics:

* ``"mse"``: mean squared error ``mean((s - y)^2)``; a loss, sense ``"min"``.
* ``"accuracy"``: share of correct predictions; binary scores are logits
  (predict 1 when ``s > 0``), multiclass scores are ``(n, C)`` logits (argmax).
* ``"auc"``: area under the ROC curve, the Mann–Whitney statistic
  ``(R_+ - P(P+1)/2) / (P·Q)`` with ``R_+`` the sum of the positives' ranks
  among all scores (ties get their average rank, i.e. count one half), ``P``
  positives and ``Q`` negatives.  For ``(n, C)`` scores: macro average of the
  one-vs-rest AUCs over the classes present.  Undefined (NaN) when ``y`` has a
  single class.

:func:`evaluate` scores one model; :func:`evaluate_batch` scores many models on
the same data at once (``scores`` with a leading model axis), vectorised.
:func:`loss_function` gives the per-sample training loss of a task in torch.

Examples
--------
>>> import numpy as np
>>> evaluate("auc", np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
0.75
>>> evaluate("mse", np.array([1.0, 2.0]), np.array([1.0, 0.0]))
2.0
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import METRIC_SENSE

__all__ = ["evaluate", "evaluate_batch", "sense", "loss_function", "METRIC_SENSE", "mean_loss_batch"]


def sense(metric: str) -> str:
    """``"min"`` for a loss (MSE), ``"max"`` for accuracy and AUC."""
    if metric not in METRIC_SENSE:
        raise InputError(f"unknown metric {metric!r}: choose one of {', '.join(METRIC_SENSE)}")
    return METRIC_SENSE[metric]


def _auc_binary(pos: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """AUC of every row of ``scores`` (M, n) against the boolean ``pos`` (n,)."""
    p = int(pos.sum())
    q = pos.size - p
    if p == 0 or q == 0:
        return np.full(scores.shape[0], np.nan)
    from scipy.stats import rankdata  # here: scipy.stats costs ~0.9 s to import, and most runs score no AUC

    ranks = rankdata(scores, axis=1, method="average")
    return (ranks[:, pos].sum(axis=1) - p * (p + 1) / 2.0) / (p * q)


def _batch(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    """Targets and float64 scores ``(M, n)`` or ``(M, n, C)`` (a trailing axis of one dropped), checked."""
    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 3 and s.shape[2] == 1:
        s = s[:, :, 0]
    if s.ndim not in (2, 3) or s.shape[1] != y.shape[0]:
        raise InputError(f"scores of shape {s.shape} do not match {y.shape[0]} targets")
    return y, s


def evaluate_batch(metric: str, y_true, scores) -> np.ndarray:
    """The metric of many models on the same data.

    Parameters
    ----------
    metric : {"mse", "accuracy", "auc"}
    y_true : array of shape (n,)
        Targets (floats for MSE, class ids otherwise).
    scores : array of shape (M, n) or (M, n, C)
        Predictions (MSE), logits of class 1 (binary) or class logits (multiclass).

    Returns
    -------
    ndarray of shape (M,), float64
    """
    sense(metric)
    y, s = _batch(y_true, scores)
    if metric == "mse":
        if s.ndim != 2:
            raise InputError("mse takes one prediction per sample")
        return np.mean((s - y.astype(np.float64)) ** 2, axis=1)
    y = y.astype(np.int64)
    if metric == "accuracy":
        pred = (s > 0).astype(np.int64) if s.ndim == 2 else np.argmax(s, axis=2)
        return np.mean(pred == y, axis=1)
    if s.ndim == 2:
        return _auc_binary(y == 1, s)
    aucs = [_auc_binary(y == c, s[:, :, c]) for c in range(s.shape[2]) if 0 < np.sum(y == c) < y.size]
    if not aucs:
        return np.full(s.shape[0], np.nan)
    return np.mean(aucs, axis=0)


def mean_loss_batch(task: str, y_true, scores) -> np.ndarray:
    r"""The mean training loss (:func:`loss_function`) of many models on the same data, in NumPy.

    Cross-entropy ``−(1/n) Σ_k log softmax(s_k)[y_k]`` of class logits
    ``(M, n, C)`` (``"multiclass"``), ``(1/n) Σ_k log(1 + e^{s_k}) − y_k s_k`` of one
    logit ``(M, n)`` (``"binary"``), squared error (``"regression"``).  The
    *validation-loss game* of a classification federation scores its subset
    models with it (sense ``"min"``): unlike accuracy it moves with every sample's
    confidence, so it is not quantised to steps of ``1/n``.

    Returns
    -------
    ndarray of shape (M,), float64
    """
    y, s = _batch(y_true, scores)
    if task == "regression":
        return np.mean((s - y.astype(np.float64)) ** 2, axis=1)
    y = y.astype(np.int64)
    if task == "binary" and s.ndim == 2:
        return np.mean(np.logaddexp(0.0, s) - y * s, axis=1)
    if task == "multiclass" and s.ndim == 3:
        top = s.max(axis=2, keepdims=True)
        logz = top[..., 0] + np.log(np.exp(s - top).sum(axis=2))
        return np.mean(logz - np.take_along_axis(s, y[None, :, None], axis=2)[..., 0], axis=1)
    raise InputError(f"scores of shape {s.shape} do not fit task {task!r}")


def evaluate(metric: str, y_true, scores) -> float:
    """The metric of one model: ``scores`` of shape (n,) or (n, C)."""
    return float(evaluate_batch(metric, y_true, np.asarray(scores)[None])[0])


def loss_function(task: str, logsumexp: bool = False):
    """Per-sample training loss ``l(outputs, y)`` (torch) for a task.

    ``outputs`` has shape (..., n, k): squared error on ``k = 1`` output for
    regression, binary cross-entropy on one logit for ``"binary"``, softmax
    cross-entropy on ``k`` logits for ``"multiclass"``.  Returns shape (..., n).

    ``logsumexp``: the multiclass loss as ``logsumexp(out) − out_y`` instead of
    ``−log_softmax(out)_y``: the same function, rounded differently in the last bits, and
    about 5× faster forward and 3× with its backward pass on one CPU thread where ``k`` is
    small (PyTorch's ``log_softmax`` over a short last axis takes a slow path; ten classes:
    25 ns a row).  SPO's direction search uses it; every training keeps ``log_softmax`` (the
    exhaustive games are pinned to stored values).
    """
    import torch
    import torch.nn.functional as F

    if task == "regression":
        return lambda out, y: (out[..., 0] - y) ** 2
    if task == "binary":
        # log(1 + e^z) − y·z, the binary cross-entropy of logit z (broadcasts over models)
        return lambda out, y: F.softplus(out[..., 0]) - y.to(out.dtype) * out[..., 0]
    if task == "multiclass" and logsumexp:
        def lse(out, y):
            return torch.logsumexp(out, dim=-1) - torch.gather(out, -1, y.expand(out.shape[:-1]).unsqueeze(-1))[..., 0]
        return lse
    if task == "multiclass":
        def ce(out, y):
            logp = torch.log_softmax(out, dim=-1)
            return -torch.gather(logp, -1, y.expand(out.shape[:-1]).unsqueeze(-1))[..., 0]
        return ce
    raise InputError(f"unknown task {task!r}")
