r"""The exact Pareto front of linear least squares: what a perfect hypernetwork would output.

For the ``linear`` target on a regression task, the model that SPO's training
asks the hypernetwork to produce at direction ``d`` has a closed form.  With
the bias folded in (``x̃ = (x, 1)``), ``A_j = X̃_jᵀX̃_j / n_j`` and
``b_j = X̃_jᵀy_j / n_j`` from client ``j``'s training data,

.. math::  h^*(d) = \arg\min_w \sum_j d_j L_j(w) + \tfrac{\lambda}{2}\lVert W\rVert^2
           = \Big(\sum_j d_j A_j + \tfrac{\lambda}{2} P\Big)^{-1} \sum_j d_j b_j,

``P`` the identity without its bias entry (the bias is not decayed, as in
:class:`~coalitions.learners.methods.spo.SPO`).  :class:`ExactParetoFront` has the
hypernetwork's call signature (directions in, the target's parameter dict
out), so a :class:`~coalitions.learners.methods.spo.DirectionSearch` and an
:class:`~coalitions.learners.methods.spo.SPOOracle` run on it unchanged.  That
separates SPO's two sources of error (``docs/learners-spo.md``, "Agreement with
the exact benefit graph"): the front's accuracy (hypernetwork against ``h^*``)
and the method itself (search and rule on ``h^*``, a perfect front).

Read at a coalition's **pooled direction** ``d_S ∝ n`` on ``S`` (client ``j``'s weight
its share of ``S``'s training samples), ``Σ_j d_j A_j = X̃_SᵀX̃_S / n_S``, so ``h*(d_S)``
is the ridge fit of ``S``'s pooled data; with the bias decayed too (``bias_decay=True``)
and ``λ/2`` equal to the exhaustive oracle's relative ridge it *is* that oracle's subset
model, and as ``λ → 0`` the exact game's (:func:`pooled_front_game`).  So the front
contains the exact game; SPO differs from it by searching the best direction of a face
instead of reading the pooled one (``docs/learners-spo.md``).

Only a diagnostic: it needs every client's raw training data in one place and
exists only for the linear model.
"""

from __future__ import annotations

import numpy as np
import torch

from coalitions.errors import InputError
from coalitions.learners.data.federation import Federation

__all__ = ["ExactParetoFront", "pooled_directions", "pooled_front_game"]


class ExactParetoFront(torch.nn.Module):
    """``h*(d)``: the ridge-regularised weighted least-squares model of each direction.

    Parameters
    ----------
    federation : Federation
        A regression federation with flat features.
    l2 : float
        The ridge ``λ`` on the weights (SPO's ``l2``; ``0`` needs every face to
        determine the model).
    device : torch.device or str
    bias_decay : bool
        Decay the bias too (the exhaustive oracle's closed form does; SPO does not).

    Notes
    -----
    Solved in float64 and returned in float32 like the hypernetwork's output:
    ``{"weight": (B, dim, 1), "bias": (B, 1)}`` for ``d`` of shape (B, N).
    Differentiable in ``d`` (``torch.linalg.solve``), so the direction search's
    gradients are exact.
    """

    # Buffers registered in __init__ (register_buffer), declared for the type checker.
    A: torch.Tensor
    b: torch.Tensor
    P: torch.Tensor

    def __init__(self, federation: Federation, l2: float, device="cpu", bias_decay: bool = False):
        super().__init__()
        if federation.task != "regression":
            raise InputError(f"ExactParetoFront: needs a regression federation, got task {federation.task!r}")
        if not l2 >= 0:
            raise InputError(f"ExactParetoFront: l2 must be >= 0, got {l2!r}")
        A, b = [], []
        for c in federation.clients:
            X = np.asarray(c.train.X, dtype=np.float64).reshape(len(c.train.X), -1)
            X = np.hstack([X, np.ones((len(X), 1))])
            A.append(X.T @ X / len(X))
            b.append(X.T @ np.asarray(c.train.y, dtype=np.float64) / len(X))
        self.register_buffer("A", torch.as_tensor(np.stack(A), device=device))
        self.register_buffer("b", torch.as_tensor(np.stack(b), device=device))
        P = np.eye(self.A.shape[1])
        P[-1, -1] = 1.0 if bias_decay else 0.0
        self.register_buffer("P", torch.as_tensor(P * l2 / 2, device=device))
        self.l2 = float(l2)

    def forward(self, d: torch.Tensor) -> dict:
        """Parameters for each direction: ``{"weight": (B, dim, 1), "bias": (B, 1)}``."""
        dd = d.to(self.A.dtype)
        M = torch.einsum("bn,nij->bij", dd, self.A) + self.P
        r = torch.einsum("bn,ni->bi", dd, self.b)
        w = torch.linalg.solve(M, r[..., None])[..., 0].to(d.dtype)
        return {"weight": w[:, :-1, None], "bias": w[:, -1:]}


def pooled_directions(federation: Federation) -> np.ndarray:
    """``d_S ∝ n`` on ``S`` for every non-empty coalition: row ``S`` (bitmask), ``(2**N, N)`` (row 0 zero)."""
    n = federation.sizes("train").astype(np.float64)
    N = len(n)
    masks = np.arange(1 << N)
    member = (masks[:, None] >> np.arange(N)[None, :]) & 1
    w = member * n[None, :]
    tot = w.sum(1, keepdims=True)
    return np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)


def pooled_front_game(federation: Federation, l2: float, bias_decay: bool = False, part: str = "val"):
    r"""The game read off the perfect front at each coalition's pooled direction.

    ``v_i(S)`` is client ``i``'s mean squared error on its ``part`` split under
    ``h*(d_S)``, ``d_S`` from :func:`pooled_directions`: the ridge fit of ``S``'s pooled
    training data.  With ``bias_decay=True`` and ``l2 = 2·ridge`` it equals the exhaustive
    oracle's closed-form game of relative ridge ``ridge`` (``tests/test_spo_agreement.py``).
    Returns a :class:`coalitions.Game` (sense ``"min"``).
    """
    from coalitions.game import Game

    front = ExactParetoFront(federation, l2, bias_decay=bias_decay)
    D = torch.as_tensor(pooled_directions(federation)[1:])
    with torch.no_grad():
        p = front(D.to(torch.float64))
    W = np.concatenate([p["weight"][:, :, 0].numpy(), p["bias"].numpy()], axis=1)   # (2**N - 1, dim + 1)
    N = federation.n
    values = np.full((N, 1 << N), np.nan)
    for i, c in enumerate(federation.clients):
        split = getattr(c, part)
        X = np.hstack([np.asarray(split.X, dtype=np.float64).reshape(len(split.X), -1), np.ones((len(split.X), 1))])
        mse = ((X @ W.T - np.asarray(split.y, dtype=np.float64)[:, None]) ** 2).mean(0)
        rows = [S for S in range(1, 1 << N) if S >> i & 1]
        values[i, rows] = mse[np.array(rows) - 1]
    return Game.from_array(values, federation.names, "min")
