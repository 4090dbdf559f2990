"""Exact Pareto Optimal search's linear program (Mahapatra & Rajan 2020).

SPO's ``epo=True`` weights each training direction's losses by ``N·α`` from this
program instead of by the direction itself (PHN-EPO, Navon et al. 2021); the
paper's variant (:mod:`.paper`) weighs each target's hypernetwork the same way.
:func:`epo_lp` solves one program with cvxpy; :func:`epo_lp_batch` solves many
at once as one block-diagonal linear program (SciPy's HiGHS), which is what
makes a step of the paper's variant, one program per searched row, affordable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["epo_lp", "epo_lp_batch", "epo_program"]


def epo_program(losses, gram, ray, eps: float = 1e-4):
    """One EPO step's linear program (``EPO_LP.get_alpha``) as ``max c·α`` s.t. ``Aα ≥ b``, ``α ∈ Δ``.

    Given the losses ``l`` (m,), the gradients' Gram matrix ``C = G Gᵀ`` (m, m)
    and the preference ``r`` (m,), with ``l̂ = r⊙l / Σ r⊙l``,
    ``μ = Σ l̂ log(m l̂)`` (the non-uniformity) and ``a = r ⊙ (log(m l̂) − μ)``:

    * **balance** (``μ > eps``): maximise ``αᵀCa`` over the simplex subject to
      ``(Cα)_j ≥ (Ca)_j`` for ``j ∉ J = {j : (Ca)_j > 0}``, and ``(Cα)_j ≥ 0``
      for the clients with the largest ``r_j l_j`` (all of them ``0`` when ``J`` is empty);
    * **descent** (``μ ≤ eps``): maximise ``Σ_j (Cα)_j`` over the simplex subject
      to ``αᵀCa ≥ min(max_j (Ca)_j, 0)`` and ``Cα ≥ 0``.

    Returns ``(c, A, b)``, or ``None`` when ``r⊙l`` has no positive mass.
    """
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
        return Ca, C[rows], rhs[rows]
    return C.sum(axis=0), np.vstack([Ca[None], C]), np.concatenate([[min(float(Ca.max()), 0.0)], np.zeros(m)])


def _normalised(alpha) -> np.ndarray:
    out = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, None)
    return out / out.sum()


def epo_lp(losses, gram, ray, eps: float = 1e-4) -> np.ndarray | None:
    """Solve :func:`epo_program` with cvxpy: ``α`` (m,) on the simplex, or ``None``.

    ``None`` when the solver fails (the caller then falls back to ``r``, as PHN-EPO does).
    """
    import cvxpy as cp

    prog = epo_program(losses, gram, ray, eps)
    if prog is None:
        return None
    c, A, b = prog
    alpha = cp.Variable(c.size)
    cons = [alpha >= 0, cp.sum(alpha) == 1]
    if len(b):
        cons.append(A @ alpha >= b)
    prob = cp.Problem(cp.Maximize(c @ alpha), cons)
    try:
        prob.solve(solver=cp.CLARABEL if "CLARABEL" in cp.installed_solvers() else None)
    except cp.error.SolverError:
        return None
    if prob.status not in ("optimal", "optimal_inaccurate") or alpha.value is None:
        return None
    return _normalised(alpha.value)


def epo_lp_batch(losses, grams, rays, eps: float = 1e-4) -> list[np.ndarray | None]:
    """Many EPO programs at once: one block-diagonal linear program solved by SciPy's HiGHS.

    ``losses[k]``, ``grams[k]``, ``rays[k]`` are program ``k``'s (sizes may differ).
    The blocks share no variable, so the joint optimum is every block's optimum.
    If the joint program fails (one block infeasible), every block is solved alone;
    a block that still fails gives ``None`` (the caller falls back to its ray).
    """
    from scipy.optimize import linprog
    from scipy.sparse import block_diag, csr_matrix

    progs = [epo_program(l, C, r, eps) for l, C, r in zip(losses, grams, rays, strict=True)]
    out: list[np.ndarray | None] = [None] * len(progs)
    live = [k for k, p in enumerate(progs) if p is not None]

    def solve(ks):
        sizes = [progs[k][0].size for k in ks]  # type: ignore[index]
        c = -np.concatenate([progs[k][0] for k in ks])  # type: ignore[index]
        A = block_diag([csr_matrix(progs[k][1].reshape(-1, s)) for k, s in zip(ks, sizes, strict=True)])  # type: ignore[index]
        b = np.concatenate([progs[k][2] for k in ks])  # type: ignore[index]
        E = block_diag([csr_matrix(np.ones((1, s))) for s in sizes])
        res = linprog(c, A_ub=-A if A.shape[0] else None, b_ub=-b if A.shape[0] else None, A_eq=E,
                      b_eq=np.ones(len(ks)), bounds=(0, None), method="highs")
        if res.status != 0:
            return None
        return np.split(res.x, np.cumsum(sizes)[:-1])

    if live:
        parts = solve(live)
        if parts is not None:
            for k, x in zip(live, parts, strict=True):
                out[k] = _normalised(x)
        else:
            for k in live:
                one = solve([k])
                out[k] = None if one is None else _normalised(one[0])
    return out
