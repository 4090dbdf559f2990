"""The simplex of directions: exact projection onto a face, and training directions.

A direction ``d`` lies on the simplex ``Δ = {d ≥ 0, Σ_j d_j = 1}``; the face of a
remaining set ``R`` is ``Δ_R = {d ∈ Δ : d_j = 0 for j ∉ R}`` (package docstring).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["project_simplex", "sample_directions"]


def project_simplex(v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Exact Euclidean projection of each row of ``v`` onto the simplex (or a face of it).

    Solves ``argmin_w ‖w − v‖²`` s.t. ``w ≥ 0``, ``Σ w = 1`` and ``w_j = 0`` where
    ``mask`` is False, by the sorting algorithm (Held, Wolfe & Crowder 1974;
    Duchi et al. 2008): sort the free coordinates ``u_1 ≥ u_2 ≥ …``, take the
    largest ``ρ`` with ``u_ρ − (Σ_{k≤ρ} u_k − 1)/ρ > 0`` and
    ``θ = (Σ_{k≤ρ} u_k − 1)/ρ``; then ``w = max(v − θ, 0)`` on the free coordinates.

    Parameters
    ----------
    v : tensor of shape (..., n)
    mask : bool tensor broadcastable to ``v``, optional
        The face: coordinates allowed to be non-zero (each row needs one).
    """
    if mask is None:
        mask = torch.ones_like(v, dtype=torch.bool)
    mask = mask.expand_as(v)
    neg_inf = torch.tensor(-math.inf, dtype=v.dtype, device=v.device)
    u, _ = torch.sort(torch.where(mask, v, neg_inf), dim=-1, descending=True)
    free = torch.isfinite(u)
    u0 = torch.where(free, u, torch.zeros_like(u))
    css = torch.cumsum(u0, dim=-1) - 1
    k = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype, device=v.device)
    cond = free & (u0 - css / k > 0)
    rho = torch.where(cond, k, torch.zeros_like(k)).amax(dim=-1, keepdim=True).clamp(min=1)
    theta = torch.gather(css, -1, rho.long() - 1) / rho
    return torch.where(mask, torch.clamp(v - theta, min=0), torch.zeros_like(v))


def sample_directions(rng: np.random.Generator, n: int, size: int, alpha: float, faces: float) -> np.ndarray:
    """Training directions: ``Dir(α)`` on the simplex, or on a random face with probability ``faces``.

    A face is drawn by its size ``k ~ U{1..n}`` and then ``k`` members uniformly;
    the direction is ``Dir(α)`` over those members (a vertex when ``k = 1``).
    Sampling faces trains the hypernetwork on exactly the sub-simplices that
    the direction searches visit (``Δ_R`` for every remaining set ``R``).
    Drawn as normalised Gamma variates, vectorised.
    """
    g = rng.gamma(alpha, size=(size, n))
    on_face = rng.random(size) < faces
    k = rng.integers(1, n + 1, size=size)
    rank = np.argsort(rng.random((size, n)), axis=1).argsort(axis=1)
    keep = np.where(on_face[:, None], rank < k[:, None], True)
    g = np.where(keep, np.maximum(g, 1e-300), 0.0)
    return g / g.sum(axis=1, keepdims=True)
