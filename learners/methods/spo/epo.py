"""Exact Pareto Optimal search's linear program (Mahapatra & Rajan 2020), solved with cvxpy.

SPO's ``epo=True`` weights each training direction's losses by ``N·α`` from this
program instead of by the direction itself (PHN-EPO, Navon et al. 2021).
"""

from __future__ import annotations

import numpy as np

__all__ = ["epo_lp"]


def epo_lp(losses, gram, ray, eps: float = 1e-4) -> np.ndarray | None:
    """One EPO step's linear program (Mahapatra & Rajan 2020, ``EPO_LP.get_alpha``).

    Given the losses ``l`` (m,), the gradients' Gram matrix ``C = G Gᵀ`` (m, m)
    and the preference ``r`` (m,), with ``l̂ = r⊙l / Σ r⊙l``,
    ``μ = Σ l̂ log(m l̂)`` (the non-uniformity) and ``a = r ⊙ (log(m l̂) − μ)``:

    * **balance** (``μ > eps``): maximise ``αᵀCa`` over the simplex subject to
      ``(Cα)_j ≥ (Ca)_j`` for ``j ∉ J = {j : (Ca)_j > 0}``, and ``(Cα)_j ≥ 0``
      for the clients with the largest ``r_j l_j`` (all of them ``0`` when ``J`` is empty);
    * **descent** (``μ ≤ eps``): maximise ``Σ_j (Cα)_j`` over the simplex subject
      to ``αᵀCa ≥ min(max_j (Ca)_j, 0)`` and ``Cα ≥ 0``.

    Returns ``α`` (m,) on the simplex, or ``None`` when the solver fails (the
    caller then falls back to ``r``, as PHN-EPO does).
    """
    import cvxpy as cp

    l = np.asarray(losses, dtype=np.float64)
    C = np.asarray(gram, dtype=np.float64)
    r = np.asarray(ray, dtype=np.float64)
    m = l.size
    rl = np.maximum(r * l, 0.0)
    if rl.sum() <= 0:
        return None
    l_hat = rl / rl.sum()
    keep = l_hat > eps
    mu = float(np.sum(l_hat[keep] * np.log(l_hat[keep] * m)))
    a = r * (np.log(np.maximum(l_hat, 1e-300) * m) - mu)
    Ca = C @ a
    alpha = cp.Variable(m)
    cons = [alpha >= 0, cp.sum(alpha) == 1]
    if mu > eps:
        J = Ca > 0
        rhs = Ca.copy()
        active = np.ones(m, dtype=bool)
        if J.any():
            star = rl == rl.max()
            active[J] = False
            active[star] = True
            rhs[star] = 0.0
        else:
            rhs[:] = 0.0
        rows = np.flatnonzero(active)
        if rows.size:
            cons.append(C[rows] @ alpha >= rhs[rows])
        prob = cp.Problem(cp.Maximize(Ca @ alpha), cons)
    else:
        cons += [Ca @ alpha >= min(float(Ca.max()), 0.0), C @ alpha >= 0]
        prob = cp.Problem(cp.Maximize(cp.sum(C @ alpha)), cons)
    try:
        prob.solve(solver=cp.CLARABEL if "CLARABEL" in cp.installed_solvers() else None)
    except cp.error.SolverError:
        return None
    if prob.status not in ("optimal", "optimal_inaccurate") or alpha.value is None:
        return None
    out = np.clip(np.asarray(alpha.value, dtype=np.float64), 0.0, None)
    return out / out.sum()
