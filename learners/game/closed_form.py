"""The closed-form exact game of a linear regression (the module docstring of
:mod:`coalitions.learners.exact`, "Closed form"): every subset's ridge fit and its quadratic-form loss.
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.data.federation import Federation
from coalitions.learners.game.masks import membership, subset_sums


def _aug(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    return np.hstack([X, np.ones((len(X), 1))])


def closed_form_weights(fed: Federation, ridge: float = 1e-10, masks=None) -> np.ndarray:
    """Least-squares weights ``(2^N, d+1)`` (bias last) of every subset; row 0 is zero.

    Solves ``(G_S + ridge·n_S·I) w_S = b_S`` for all masks in one batched call.  With ``masks``
    (``(k,)`` non-empty coalitions) only those: ``(k, d+1)``, the sums ``G_S`` taken as
    ``membership @ G`` (the same systems; the sums add in another order, so the last bits may differ).
    """
    G1 = [_aug(c.train.X).T @ _aug(c.train.X) for c in fed.clients]
    b1 = [_aug(c.train.X).T @ c.train.y.astype(np.float64) for c in fed.clients]
    n1 = fed.sizes("train").astype(np.float64)
    if masks is not None:
        member = membership(masks, fed.n).astype(np.float64)            # (k, N)
        G, b, n_s = np.einsum("kn,nde->kde", member, np.stack(G1)), member @ np.stack(b1), member @ n1
        eye = np.eye(G.shape[1])
        return np.linalg.solve(G + (ridge * n_s)[:, None, None] * eye, b[:, :, None])[..., 0]
    G, b, n_s = subset_sums(G1), subset_sums(b1), subset_sums(n1)
    eye = np.eye(G.shape[1])
    W = np.zeros(b.shape)
    W[1:] = np.linalg.solve(G[1:] + (ridge * n_s[1:])[:, None, None] * eye, b[1:, :, None])[..., 0]
    return W


def _masks_and_rows(n: int, masks, W: np.ndarray):
    """All ``2^N`` masks with ``W`` indexed by mask, or the given ``masks`` with ``W`` one row per mask."""
    if masks is None:
        return np.arange(1 << n), W, 1 << n
    ms = np.asarray(masks, dtype=np.int64)
    return ms, W, len(ms)


def closed_form_mse(fed: Federation, W: np.ndarray, part: str = "val", masks=None) -> np.ndarray:
    """``(N, 2^N)`` MSE of each subset model ``W[mask]`` on each member's ``part`` split (NaN outside).

    With ``masks`` (and ``W`` from :func:`closed_form_weights` with the same ``masks``): ``(N, k)``.
    """
    n = fed.n
    masks, W, width = _masks_and_rows(n, masks, W)
    out = np.full((n, width), np.nan)
    for i, c in enumerate(fed.clients):
        s = getattr(c, part)
        A = _aug(s.X)
        y = s.y.astype(np.float64)
        inside = ((masks >> i) & 1).astype(bool)
        w = W[inside]
        quad = np.einsum("md,de,me->m", w, A.T @ A, w) - 2 * w @ (A.T @ y) + y @ y
        out[i, inside] = np.maximum(quad, 0.0) / len(s)
    return out


def replicate_moments(fed: Federation, draws) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each client's resampled validation moments ``(A^b, c^b, e^b)``: ``(B, d, d)``, ``(B, d)``, ``(B,)``.

    ``A^b = X̃ᵀ diag(w^b) X̃``, ``c^b = X̃ᵀ diag(w^b) y``, ``e^b = Σ w^b y²`` with ``w^b`` the row
    multiplicities of resample ``b`` (``draws[i]``): what :func:`closed_form_replicates` reads,
    computed once for a source that is asked many times (:mod:`~coalitions.learners.game.source`).
    """
    out = []
    for i, c in enumerate(fed.clients):
        A = _aug(c.val.X)
        y = c.val.y.astype(np.float64)
        counts = np.stack([np.bincount(r, minlength=len(y)) for r in draws[i]]).astype(np.float64)  # (B, n_i)
        out.append(((counts[:, None, :] * A.T) @ A, (counts * y) @ A, counts @ (y * y)))
    return out


def closed_form_replicates(fed: Federation, W: np.ndarray, draws, masks=None, moments=None) -> np.ndarray:
    """``(B, N, 2^N)`` validation MSE of each subset model on each bootstrap resample (NaN outside).

    With ``masks`` (and ``W`` from :func:`closed_form_weights` with the same ``masks``): ``(B, N, k)``;
    ``moments``: ``replicate_moments(fed, draws)`` of these ``draws``, computed once.

    ``draws[i]`` is a ``(B, n_i)`` array of row indices of client ``i``'s
    validation set; a resample is the quadratic form of :func:`closed_form_mse`
    with the rows counted by their multiplicity.
    """
    n = fed.n
    b = len(draws[0]) if n else 0
    masks, W, width = _masks_and_rows(n, masks, W)
    out = np.full((b, n, width), np.nan)
    for i, (c, (gram, cross, energy)) in enumerate(zip(fed.clients, moments or replicate_moments(fed, draws),
                                                       strict=True)):
        inside = ((masks >> i) & 1).astype(bool)
        if not inside.any():
            continue
        w = W[inside]
        quad = ((w @ gram) * w).sum(-1) - 2 * cross @ w.T + energy[:, None]  # (B, M)
        out[:, i, inside] = np.maximum(quad, 0.0) / len(c.val.y)
    return out


def personal_from_singletons(values: np.ndarray) -> np.ndarray:
    """A game of bodyless personal-head models: ``out[..., i, S] = values[..., i, {i}]`` for every ``S ∋ i``.

    With an affine model the whole model is the head, so each member of ``S``
    trains alone on its own data: its value in ``S`` is its value alone.
    ``values`` has the clients on the second-to-last axis and the ``2^N``
    masks on the last; NaN stays outside the members.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-2]
    out = np.full(values.shape, np.nan)
    masks = np.arange(values.shape[-1])
    for i in range(n):
        inside = ((masks >> i) & 1).astype(bool)
        out[..., i, inside] = values[..., i, 1 << i, None]
    return out
