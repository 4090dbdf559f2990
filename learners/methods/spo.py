r"""Specific Pareto Optimization (SPO): a learned benefit oracle (Cui et al. 2022; SPEC §5).

One **Pareto hypernetwork** ``h(d)`` maps a direction ``d`` on the simplex
``Δ = {d ≥ 0, Σ_j d_j = 1}`` to the parameters of the target model (linear for
regression, logistic for classification).  It is trained with linearly
scalarised losses over Dirichlet-sampled directions (Navon et al. 2021, PHN-LS)

.. math::  \min_\phi\; \mathbb{E}_{d}\; \log\Big(\sum_j d_j\, L_j(h_\phi(d))
           + \tfrac{\lambda}{2}\lVert W(h_\phi(d))\rVert^2\Big),

``L_j`` being client ``j``'s mean training loss and ``W`` the target's weights
(biases not decayed).  Each step draws a batch of directions — ``Dir(α)`` on the
whole simplex, or, with probability ``faces``, on a random face — and
evaluates every client's loss for every direction in one batched call
(``torch.func.vmap``, no loop over clients).  Three choices make the learned
front faithful on the faces that the searches visit (measured in
``docs/learners-spo.md``):

* the **logarithm** (``log_loss``) does not move any direction's minimiser
  (it is monotone per direction) but weighs directions by relative rather than
  absolute error, so faces with small losses (a client alone with much data)
  are fitted as precisely as conflicting mixtures with large ones;
* the **ridge** ``λ`` (``l2``; 0.01 for regression, 0.001 otherwise) makes the
  Pareto model ``argmin Σ d_j L_j + λ/2‖W‖²`` unique and smooth in ``d`` even
  where a client's data cannot determine the model alone (``n < d``), so the
  network's value on a face is the sub-coalition's own regularised model
  rather than an extrapolation from nearby directions;
* **face sampling** (``faces``) trains on the sub-simplices themselves.

With ``epo=True`` each direction's weights come instead from the Exact Pareto
Optimal search's linear program (Mahapatra & Rajan 2020; PHN-EPO), solved with
cvxpy: ``N·α`` replaces ``d`` in the sum (about 8 ms per direction and step).

**Direction search.**  For client ``i`` within a remaining set ``R``, SPO looks
for the point of the face ``Δ_R = {d ∈ Δ : d_j = 0 for j ∉ R}`` whose model has
the lowest validation loss of ``i`` (the paper's Eq. 7, Appendix B.2), by
projected gradient descent

.. math::  d \leftarrow \Pi_{\Delta_R}\big(d - t\, \hat g\big),\qquad
           \hat g = \frac{g - \bar g}{\lVert g - \bar g \rVert},\; g = \nabla_d L_i^{val}(h(d)),

with the exact Euclidean projection onto the face (:func:`project_simplex`)
and the step ``t`` chosen by a batched line search over ``1, 1/2, 1/4, …`` (a
step is taken only when it lowers the loss, so every start descends
monotonically).  Several starts per client (the face's barycentre, the vertex
``e_i`` and random points of the face), all clients and all starts run as one
batch; the best end point wins.

**Collaborators** of ``i`` within ``R`` (SPEC §5):

* ``rule="ratio"``: the paper's threshold, ``j`` with ``d_j / d_i ≥ threshold``
  (0.7) at ``i``'s best direction ``d`` (every ``j`` with ``d_j > 0`` when ``d_i = 0``);
* ``rule="elimination"`` (default): backward elimination.  Start from
  ``S = R``; first drop every ``j`` whose weight at the best direction is at
  most ``min_weight`` (1 %: the paper notes that the searched direction is
  rarely exactly sparse but has "significantly small" entries; exact zeros cost
  nothing, since the optimum already lies on the smaller face); then, while
  some ``j ∈ S∖{i}`` has a best loss on the face ``Δ_{S∖{j}}`` no worse than
  the best loss found so far (over ``R``) within the relative tolerance
  ``tol`` — ``L ≤ (1 + tol)·L_best`` — drop the ``j`` whose removal costs least,
  together with any weight that the new best direction puts at or below
  ``min_weight``.  Comparing with the best over ``R`` (not with the current
  face) keeps repeated drops from drifting, like the OCS condition
  ``v_i(S) ≥ MAU_i(R) − tol``.  All clients' candidate faces of one round are
  searched as one batch.

:class:`SPOOracle` answers ``BG(R)`` for any ``R`` from the one trained
hypernetwork (no retraining), cached per ``R``, so the core's peeling runs on it
unchanged; :class:`SPO` is the estimator that trains, searches and peels.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch
from torch.func import functional_call, jacrev, vmap

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.estimate import Estimate
from coalitions.graph import BenefitGraph
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch, loss_function
from coalitions.learners.training.engine import resolve_device
from coalitions.learners.training.models import ModelSpec, make_model
from coalitions.learners.training.threads import applied, step_macs
from coalitions.peeling import peel_oracle

__all__ = ["SPO", "SPOOracle", "ParetoHypernetwork", "project_simplex", "epo_lp", "resolve_device",
           "RULES"]

RULES = ("ratio", "elimination")


# --------------------------------------------------------------------------- helpers
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


# --------------------------------------------------------------------------- hypernetwork
class ParetoHypernetwork(torch.nn.Module):
    """``h(d)``: an MLP from a direction on the N-simplex to a target model's parameters.

    ``φ(d) → Linear(·, embed) → [ReLU → Linear(·, hidden)] × layers → ReLU →
    Linear(hidden, P)``, split into the target's parameter tensors (Navon et
    al. 2021).  The input features are ``φ(d) = (d, log(d + ε))`` (``ε = log_eps``;
    just ``d`` when ``log_eps`` is None): the logarithm is steep near 0, so the
    network can tell a face of the simplex (``d_j = 0``, client ``j`` absent)
    from points close to it, where the Pareto model can change quickly.  The output layer's bias starts at one draw of the target's own
    initialisation and its weight is scaled down, so ``h`` starts near an
    ordinary initial model for every ``d``.
    """

    def __init__(self, n_clients: int, spec: ModelSpec, hidden: int = 100, embed: int = 16, layers: int = 2,
                 log_eps: float | None = 1e-3):
        super().__init__()
        self.log_eps = log_eps
        self.spec = spec
        self.names = tuple(spec.shapes)
        self.shapes = tuple(tuple(spec.shapes[k]) for k in self.names)
        self.sizes = tuple(math.prod(s) for s in self.shapes)
        n_in = n_clients if log_eps is None else 2 * n_clients
        mods: list[torch.nn.Module] = [torch.nn.Linear(n_in, embed)]
        width = embed
        for _ in range(layers):
            mods += [torch.nn.ReLU(), torch.nn.Linear(width, hidden)]
            width = hidden
        mods.append(torch.nn.ReLU())
        self.body = torch.nn.Sequential(*mods)
        self.head = torch.nn.Linear(width, sum(self.sizes))
        with torch.no_grad():
            init = spec.init(None, 1)
            self.head.bias.copy_(torch.cat([init[k].reshape(-1) for k in self.names]))
            self.head.weight.mul_(0.1)

    def forward(self, d: torch.Tensor) -> dict:
        """Parameters for each direction: ``{name: (B, *shape)}`` for ``d`` of shape (B, N)."""
        feats = [d]
        if self.log_eps is not None:
            feats.append(torch.log(d.clamp(min=0) + self.log_eps))
        x = torch.cat(feats, dim=-1)
        flat = self.head(self.body(x))
        parts = torch.split(flat, self.sizes, dim=-1)
        return {k: p.reshape(*d.shape[:-1], *s) for k, p, s in zip(self.names, parts, self.shapes)}


# --------------------------------------------------------------------------- data
class _Padded:
    """One split of every client, padded to a common length, on a device."""

    def __init__(self, fed: Federation, part: str, device, dtype):
        splits = [getattr(c, part) for c in fed.clients]
        self.sizes = np.array([len(s) for s in splits], dtype=np.int64)
        n_max = int(self.sizes.max())
        shape = splits[0].X.shape[1:]
        X = np.zeros((fed.n, n_max, *shape), dtype=np.float32)
        ydt = np.float32 if fed.task == "regression" else np.int64
        y = np.zeros((fed.n, n_max), dtype=ydt)
        m = np.zeros((fed.n, n_max), dtype=np.float32)
        for j, s in enumerate(splits):
            X[j, :len(s)] = s.X
            y[j, :len(s)] = s.y
            m[j, :len(s)] = 1.0
        self.X = torch.as_tensor(X, device=device, dtype=dtype)
        self.y = torch.as_tensor(y, device=device)
        if fed.task == "regression":
            self.y = self.y.to(dtype)
        self.m = torch.as_tensor(m, device=device, dtype=dtype)
        self.raw = [(s.X, s.y) for s in splits]

    def sample(self, batch: int | None, rng: np.random.Generator):
        """A minibatch of ``batch`` samples per client (with replacement), or the whole split."""
        if batch is None or batch >= self.X.shape[1]:
            return self.X, self.y, self.m
        idx = np.floor(rng.random((len(self.sizes), batch)) * self.sizes[:, None]).astype(np.int64)
        idx = torch.as_tensor(idx, device=self.X.device)
        rows = torch.arange(len(self.sizes), device=self.X.device)[:, None]
        return self.X[rows, idx], self.y[rows, idx], torch.ones_like(idx, dtype=self.m.dtype)


# --------------------------------------------------------------------------- the oracle
class SPOOracle:
    """Benefit oracle answering ``BG(R)`` from one trained Pareto hypernetwork (SPEC §5).

    Implements the core's benefit-oracle protocol (``clients``,
    ``benefit_graph(within)``); every ``BG(R)`` and every best direction is
    cached per ``R``.  Built by :meth:`SPO.fit`.
    """

    def __init__(self, model: SPO, fed: Federation):
        self._m = model
        self.clients = fed.names
        self.rule = model.rule
        self._graphs: dict[int, BenefitGraph] = {}
        self._best: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # -- searches
    def best_directions(self, within: int) -> tuple[np.ndarray, np.ndarray]:
        """Best direction on the face of ``R`` for each member: ``(D, loss)``.

        ``D`` is (N, N) with row ``i`` the direction found for client ``i``
        (zero rows for clients outside ``R``); ``loss`` (N,) its validation loss
        (NaN outside ``R``).
        """
        within = int(within)
        if within not in self._best:
            n = len(self.clients)
            idx = list(members(within))
            face = torch.zeros((len(idx), n), dtype=torch.bool)
            face[:, idx] = True
            d, loss = self._m._search(torch.tensor(idx), face, seed_key=("face", within))
            D = np.zeros((n, n))
            L = np.full(n, np.nan)
            D[idx] = d
            L[idx] = loss
            self._best[within] = (D, L)
        return self._best[within]

    def benefit_graph(self, within: int) -> BenefitGraph:
        """``BG(R)``: each member's collaborators by the configured rule."""
        within = int(within)
        graph = self._graphs.get(within)
        if graph is None:
            D, L = self.best_directions(within)
            idx = members(within)
            if self.rule == "ratio":
                collab = tuple((i, self._ratio(D[i], i, within)) for i in idx)
            else:
                collab = self._eliminate(within, D, L)
            graph = self._graphs[within] = BenefitGraph(tuple(self.clients), within, collab)
        return graph

    def _ratio(self, d: np.ndarray, i: int, within: int) -> int:
        thr = self._m.threshold
        others = [j for j in members(within) if j != i]
        if d[i] > 0:
            return mask_of(j for j in others if d[j] >= thr * d[i])
        return mask_of(j for j in others if d[j] > 0)

    def _eliminate(self, within: int, D: np.ndarray, L: np.ndarray):
        """Backward elimination for every member of ``R`` at once (see the module docstring)."""
        n = len(self.clients)
        tol = self._m.tol
        idx = list(members(within))
        floor = self._m.min_weight
        keep = {i: {j for j in idx if j == i or D[i, j] > floor} for i in idx}
        best = {i: float(L[i]) for i in idx}
        point = {i: D[i].copy() for i in idx}
        active = set(idx)
        rnd = 0
        while active:
            rows = [(i, j) for i in sorted(active) for j in sorted(keep[i]) if j != i]
            if not rows:
                break
            rnd += 1
            targets = torch.tensor([i for i, _ in rows])
            face = torch.zeros((len(rows), n), dtype=torch.bool)
            warm = np.zeros((len(rows), n))
            for r, (i, j) in enumerate(rows):
                S = sorted(keep[i] - {j})
                face[r, S] = True
                w = point[i].copy()
                w[[k for k in range(n) if k not in S]] = 0.0
                warm[r] = w / w.sum() if w.sum() > 0 else face[r].numpy() / len(S)
            d, loss = self._m._search(targets, face, seed_key=("elim", within, rnd), warm=warm)
            done = set(active)
            for i in sorted(active):
                cand = [(loss[r], j, r) for r, (ii, j) in enumerate(rows) if ii == i]
                if not cand:
                    continue
                lj, j, r = min(cand)
                if lj <= best[i] * (1 + tol) + 1e-12:
                    keep[i].discard(j)
                    point[i] = d[r]
                    best[i] = min(best[i], float(lj))
                    # anything now at exactly zero weight also goes, at no cost
                    keep[i] = {k for k in keep[i] if k == i or d[r][k] > floor}
                    done.discard(i)
            active -= done
        return tuple((i, mask_of(keep[i] - {i})) for i in idx)


# --------------------------------------------------------------------------- the estimator
class SPO:
    """Specific Pareto Optimization: a benefit oracle from one Pareto hypernetwork (SPEC §5).

    Parameters
    ----------
    hidden : int
        Width of the hypernetwork's hidden layers.
    embed : int
        Width of the direction embedding.
    layers : int
        Hidden layers of the hypernetwork.
    steps : int
        Training steps of the hypernetwork.
    lr : float
        Adam learning rate (cosine-decayed to 1 % over the steps).
    directions : int
        Directions drawn per training step.
    alpha : float
        Dirichlet concentration of the training directions (below 1 favours
        sparse directions near the faces, which the searches visit).
    faces : float
        Share of training directions drawn on a random face (:func:`sample_directions`).
    log_loss : bool
        Minimise the log of each direction's scalarised loss (module docstring).
    l2 : float or None
        Ridge on the target's weights (``None``: 0.01 for regression, 0.001 otherwise).
    log_eps : float or None
        ``ε`` of the ``log(d + ε)`` input features (``None``: ``d`` alone).
    batch_size : int or None
        Training samples per client per step (``None``: the whole split).
    rule : {"ratio", "elimination"}
        How collaborators are read off the search (module docstring).
    threshold : float
        Ratio rule: ``d_j / d_i ≥ threshold`` (the paper's 0.7).
    tol : float
        Elimination rule: relative loss tolerance for dropping a client.
    min_weight : float
        Elimination rule: weights at or below this count as zero.
    epo : bool
        Weight each direction's losses by the EPO linear program instead of ``d``.
    search_steps : int
        Projected-gradient iterations of each direction search.
    starts : int
        Starts per search (barycentre, vertex ``e_i``, then random points; ≥ 2).
    line_search : int
        Step lengths tried per iteration (``1, 1/2, …, 2^{1-line_search}``).
    model : str or None
        Target model kind (``None``: ``"linear"`` for regression, ``"logistic"`` otherwise).
    device : {"auto", "cpu", "cuda"}
    seed : int
    progress : callable, optional
        ``progress(done, total)`` during training.

    Attributes
    ----------
    hypernet_ : ParetoHypernetwork
    oracle_ : SPOOracle
    weights_ : ndarray (N, N)
        Row ``i``: client ``i``'s best direction within all clients (rows sum to 1).
    utilities_ : dict
        ``{"val": {name: metric}, "test": {name: metric}}`` at each client's best direction.
    ce_utilities_ : dict
        The same at each client's best direction on the face of its learned coalition.
    estimate_ : Estimate
    history_ : list of float
        Mean scalarised training loss every 50 steps.
    fit_seconds_ : float
    timings_ : dict
        Seconds spent training, on ``BG(all)`` (searches and rule), on the rest of
        the peeling (the other ``BG(R)``), and in total.
    """

    def __init__(self, hidden: int = 200, embed: int = 64, layers: int = 3, steps: int = 3000,
                 lr: float = 0.01, directions: int = 64, alpha: float = 0.5, faces: float = 0.5,
                 log_loss: bool = True, l2: float | None = None, log_eps: float | None = 1e-3,
                 batch_size: int | None = 256, rule: str = "elimination",
                 threshold: float = 0.7, tol: float = 0.02, min_weight: float = 0.01, epo: bool = False,
                 search_steps: int = 100, starts: int = 4, line_search: int = 16, model: str | None = None,
                 device: str = "auto", seed: int = 0, progress: Callable | None = None):
        self.hidden, self.embed, self.layers = hidden, embed, layers
        self.steps, self.lr, self.directions, self.alpha = steps, lr, directions, alpha
        self.faces = faces
        self.log_loss = log_loss
        self.l2 = l2
        self.log_eps = log_eps
        self.batch_size = batch_size
        self.rule, self.threshold, self.tol, self.epo = rule, threshold, tol, epo
        self.min_weight = min_weight
        self.search_steps, self.starts, self.line_search = search_steps, starts, line_search
        self.model, self.device, self.seed, self.progress = model, device, seed, progress

    # -- configuration
    def get_params(self) -> dict:
        """The constructor's settings (JSON-ready), as written to the estimate."""
        keys = ("hidden", "embed", "layers", "steps", "lr", "directions", "alpha", "faces", "log_loss", "l2",
                "log_eps", "batch_size", "rule", "threshold", "tol", "min_weight", "epo", "search_steps", "starts",
                "line_search", "model", "device", "seed")
        return {k: getattr(self, k) for k in keys}

    def _check(self) -> None:
        ints = dict(hidden=1, embed=1, layers=0, steps=0, directions=1, search_steps=0, starts=2, line_search=1)
        for k, lo in ints.items():
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise InputError(f"--{k.replace('_', '-')} must be an integer >= {lo}, got {v!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, (int, np.integer)) or self.batch_size < 1):
            raise InputError(f"--batch-size must be an integer >= 1, got {self.batch_size!r}")
        for k in ("lr", "alpha"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"--{k} must be a number > 0, got {v!r}")
        for k, hi in (("faces", 1.0), ("min_weight", 0.999)):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and 0 <= v <= hi):
                raise InputError(f"--{k.replace('_', '-')} must be a number in [0, {hi:g}], got {v!r}")
        if self.l2 is not None and not (isinstance(self.l2, (int, float)) and math.isfinite(self.l2)
                                        and self.l2 >= 0):
            raise InputError(f"--l2 must be a number >= 0, got {self.l2!r}")
        if self.log_eps is not None and not (isinstance(self.log_eps, (int, float)) and math.isfinite(self.log_eps)
                                             and self.log_eps > 0):
            raise InputError(f"--log-eps must be a number > 0, got {self.log_eps!r}")
        for k in ("threshold", "tol"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InputError(f"--{k} must be a number >= 0, got {v!r}")
        if self.rule not in RULES:
            raise InputError(f"--rule must be one of {', '.join(RULES)}, got {self.rule!r}")

    # -- training
    def _step_macs(self, fed: Federation) -> float:
        """Work of one training step: the hypernetwork and the target model, for every direction."""
        spec = make_model(self.model or ("linear" if fed.task == "regression" else "logistic"),
                          fed.input_shape, fed.n_outputs)
        batch = int(fed.sizes("train").max()) if self.batch_size is None else int(self.batch_size)
        hyper = self.hidden * (self.embed + self.hidden * (self.layers - 1) + spec.n_params)
        return self.directions * (hyper + step_macs(spec, batch, fed.n))

    @applied
    def fit(self, federation: Federation) -> SPO:
        """Train the hypernetwork, search every client's best direction, peel the learned graph."""
        self._check()
        t0 = time.perf_counter()
        fed = federation
        self.federation_ = fed
        self.device_ = resolve_device(self.device)
        dtype = torch.float32
        kind = self.model or ("linear" if fed.task == "regression" else "logistic")
        if kind not in ("linear", "logistic", "mlp"):
            raise InputError(f"--model {kind!r}: SPO's target model must be linear, logistic or mlp")
        self.spec_ = make_model(kind, fed.input_shape, fed.n_outputs)
        self.l2_ = float(self.l2) if self.l2 is not None else (1e-2 if fed.task == "regression" else 1e-3)
        self._decay = tuple(k for k, s in self.spec_.shapes.items() if len(s) > 1)
        self.loss_ = loss_function(fed.task)
        self.train_ = _Padded(fed, "train", self.device_, dtype)
        self.val_ = _Padded(fed, "val", self.device_, dtype)
        self.test_ = _Padded(fed, "test", self.device_, dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = ParetoHypernetwork(fed.n, self.spec_, self.hidden, self.embed, self.layers, self.log_eps)
        self.hypernet_ = net.to(self.device_)
        self.epo_fallbacks_ = 0
        t_train = time.perf_counter()
        self.history_ = self._train(fed)
        t_train = time.perf_counter() - t_train
        self.hypernet_.eval()
        for p in self.hypernet_.parameters():
            p.requires_grad_(False)

        self.oracle_ = SPOOracle(self, fed)
        grand = (1 << fed.n) - 1
        t_graph = time.perf_counter()
        D, L = self.oracle_.best_directions(grand)
        self.oracle_.benefit_graph(grand)
        t_graph = time.perf_counter() - t_graph
        W = np.clip(D, 0, None)
        self.weights_ = W / W.sum(axis=1, keepdims=True)
        self.utilities_ = self._utilities(self.weights_)
        t_peel = time.perf_counter()
        peeling = peel_oracle(self.oracle_)
        t_peel = time.perf_counter() - t_peel
        ce_dirs = np.zeros_like(self.weights_)
        for k in peeling.partition:
            Dk, _ = self.oracle_.best_directions(k)
            for i in members(k):
                ce_dirs[i] = Dk[i]
        self.ce_utilities_ = self._utilities(ce_dirs)
        self.fit_seconds_ = time.perf_counter() - t0
        self.timings_ = {"train": t_train, "graph_all": t_graph, "peeling": t_peel, "total": self.fit_seconds_}
        names = fed.names
        extra = {
            "model": kind,
            "val_loss": {names[i]: float(L[i]) for i in range(fed.n)},
            "ce_directions": {names[i]: [float(x) for x in ce_dirs[i]] for i in range(fed.n)},
            "ce_utilities": self.ce_utilities_,
            "graphs": [{"within": [names[i] for i in members(r.within)],
                        "ocs": {names[i]: [names[j] for j in members(c)] for i, c in r.graph.collaborators}}
                       for r in peeling.rounds],
            "train_loss": [float(x) for x in self.history_],
            "epo_fallbacks": self.epo_fallbacks_,
        }
        config = {"method": "spo", **self.get_params(), "dataset": fed.name, "data_options": dict(fed.options),
                  "device_used": str(self.device_)}
        self.estimate_ = Estimate(
            clients=names, method="spo", config=config, weights=self.weights_, utilities=self.utilities_,
            metric=fed.metric, sense=fed.sense, benefit_graph=self.oracle_.benefit_graph(grand),
            partition=peeling.partition, rounds=tuple(r.stable for r in peeling.rounds if r.stable),
            planted_groups=fed.planted_groups, extra=extra)
        return self

    def _client_losses(self, params: dict, X, y, m) -> torch.Tensor:
        """Mean loss of one model (unstacked params) on every client's padded data: (N,)."""
        out = vmap(self.spec_.forward, in_dims=(None, 0))(params, X)
        per = self.loss_(out, y)
        return (per * m).sum(-1) / m.sum(-1)

    def _loss_matrix(self, params: dict, X, y, m) -> torch.Tensor:
        """``L[b, j]``: client ``j``'s mean loss under the ``b``-th stacked model, (B, N)."""
        return vmap(self._client_losses, in_dims=(0, None, None, None))(params, X, y, m)

    def _train(self, fed: Federation) -> list[float]:
        net = self.hypernet_
        dev = self.device_
        rng = np.random.default_rng(self.seed)
        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * min(s, self.steps) / max(self.steps, 1))))
        history, running = [], []
        for step in range(self.steps):
            D = torch.as_tensor(sample_directions(rng, fed.n, self.directions, self.alpha, self.faces),
                                dtype=torch.float32, device=dev)
            X, y, m = self.train_.sample(self.batch_size, rng)
            params = net(D)
            L = self._loss_matrix(params, X, y, m)
            weights = self._epo_weights(D, X, y, m, L) if self.epo else D
            f = (weights * L).sum(dim=1)
            if self.l2_ > 0:
                f = f + 0.5 * self.l2_ * sum((v ** 2).flatten(1).sum(1) for k, v in params.items()
                                            if k in self._decay)
            loss = torch.log(f).mean() if self.log_loss else f.mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running.append(float((D * L.detach()).sum(dim=1).mean()))
            if (step + 1) % 50 == 0 or step + 1 == self.steps:
                history.append(float(np.mean(running)))
                running = []
                if self.progress is not None:
                    self.progress(step + 1, self.steps)
        return history

    def _epo_weights(self, D, X, y, m, L) -> torch.Tensor:
        """Per-direction EPO weights ``N·α`` (PHN-EPO), from gradients w.r.t. the hypernetwork."""
        net = self.hypernet_
        hp = {k: v.detach() for k, v in net.named_parameters()}

        def loss_vec(p, d):
            params = functional_call(net, p, (d[None],))
            return self._client_losses({k: v[0] for k, v in params.items()}, X, y, m)

        jac = vmap(jacrev(loss_vec), in_dims=(None, 0))(hp, D)
        G = torch.cat([g.reshape(g.shape[0], g.shape[1], -1) for g in jac.values()], dim=-1)
        gram = (G @ G.transpose(1, 2)).double().cpu().numpy()
        losses = L.detach().double().cpu().numpy()
        rays = D.double().cpu().numpy()
        out = np.empty_like(rays)
        for b in range(rays.shape[0]):
            a = epo_lp(losses[b], gram[b], rays[b])
            if a is None:
                self.epo_fallbacks_ += 1
                a = rays[b] / rays[b].sum()
            out[b] = a * rays.shape[1]
        return torch.as_tensor(out, dtype=L.dtype, device=L.device)

    # -- direction search
    def _own_loss(self, d: torch.Tensor, targets: torch.Tensor, split: _Padded) -> torch.Tensor:
        """Validation loss of client ``targets[r]`` under ``h(d[r])``, for every row; chunked."""
        out = []
        chunk = 2048
        for s in range(0, d.shape[0], chunk):
            dd, tt = d[s:s + chunk], targets[s:s + chunk]
            params = self.hypernet_(dd)
            out.append(vmap(self._single_loss)(params, split.X[tt], split.y[tt], split.m[tt]))
        return torch.cat(out)

    def _single_loss(self, params, X, y, m):
        per = self.loss_(self.spec_.forward(params, X), y)
        return (per * m).sum() / m.sum()

    def _search(self, targets: torch.Tensor, face: torch.Tensor, seed_key, warm: np.ndarray | None = None):
        """Best direction on each row's face for each row's target client (projected gradient).

        Returns ``(d, loss)`` as numpy arrays of shapes (B, N) and (B,).
        """
        dev = self.device_
        B, n = face.shape
        faceg = face.to(dev)
        tg = targets.to(dev)
        ent = [int(self.seed)] + [x if isinstance(x, int) else sum(map(ord, x)) for x in seed_key]
        rng = np.random.default_rng(ent)
        fnp = face.numpy().astype(np.float64)
        starts = [fnp / fnp.sum(1, keepdims=True)]
        own = np.zeros((B, n))
        own[np.arange(B), targets.numpy()] = 1.0
        own = np.where(fnp > 0, own, 0.0)
        # the vertex e_i when i is on the face (else the barycentre again)
        starts.append(np.where(own.sum(1, keepdims=True) > 0, own, starts[0]))
        if warm is not None:
            starts.append(np.asarray(warm, dtype=np.float64))
        while len(starts) < self.starts:
            g = rng.gamma(1.0, size=(B, n)) * fnp
            starts.append(g / g.sum(1, keepdims=True))
        K = len(starts)
        d = torch.as_tensor(np.stack(starts, axis=1).reshape(B * K, n), dtype=torch.float32, device=dev)
        fk = faceg.repeat_interleave(K, dim=0)
        tk = tg.repeat_interleave(K)
        T = self.line_search
        steps = torch.tensor([2.0 ** -k for k in range(T)], dtype=torch.float32, device=dev)
        with torch.no_grad():
            loss = self._own_loss(d, tk, self.val_)
        for _ in range(self.search_steps):
            dd = d.clone().requires_grad_(True)
            with torch.enable_grad():
                g, = torch.autograd.grad(self._own_loss(dd, tk, self.val_).sum(), dd)
            g = torch.where(fk, g, torch.zeros_like(g))
            cnt = fk.sum(1, keepdim=True)
            g = torch.where(fk, g - g.sum(1, keepdim=True) / cnt, torch.zeros_like(g))
            norm = g.norm(dim=1, keepdim=True)
            g = torch.where(norm > 0, g / norm.clamp(min=1e-30), torch.zeros_like(g))
            with torch.no_grad():
                cand = project_simplex(d[:, None, :] - steps[None, :, None] * g[:, None, :], fk[:, None, :])
                lc = self._own_loss(cand.reshape(-1, n), tk.repeat_interleave(T), self.val_).reshape(-1, T)
                lc = torch.nan_to_num(lc, nan=math.inf)
                lbest, kbest = lc.min(dim=1)
                better = lbest < loss
                if not bool(better.any()):
                    break
                d = torch.where(better[:, None], cand[torch.arange(d.shape[0], device=dev), kbest], d)
                loss = torch.where(better, lbest, loss)
        loss = loss.reshape(B, K)
        which = torch.argmin(torch.nan_to_num(loss, nan=math.inf), dim=1)
        best_d = d.reshape(B, K, n)[torch.arange(B, device=dev), which]
        best_l = loss[torch.arange(B, device=dev), which]
        return best_d.double().cpu().numpy(), best_l.double().cpu().numpy()

    # -- evaluation
    def _scores(self, D: np.ndarray, split: _Padded) -> list[np.ndarray]:
        with torch.no_grad():
            params = self.hypernet_(torch.as_tensor(D, dtype=torch.float32, device=self.device_))
            out = []
            for i, (X, _) in enumerate(split.raw):
                p = {k: v[i] for k, v in params.items()}
                s = self.spec_.forward(p, torch.tensor(X, device=self.device_))
                out.append(s.double().cpu().numpy())
        return out

    def _utilities(self, D: np.ndarray) -> dict:
        """The federation's metric of each client at its direction (row of ``D``), val and test."""
        names = self.federation_.names
        res = {}
        for part, split in (("val", self.val_), ("test", self.test_)):
            scores = self._scores(D, split)
            res[part] = {names[i]: float(evaluate_batch(self.federation_.metric, split.raw[i][1], s[None])[0])
                         for i, s in enumerate(scores)}
        return res

    def predict_params(self, d) -> dict:
        """The target model's parameters at direction(s) ``d`` (numpy, (B, N) or (N,))."""
        d = np.atleast_2d(np.asarray(d, dtype=np.float64))
        with torch.no_grad():
            p = self.hypernet_(torch.as_tensor(d, dtype=torch.float32, device=self.device_))
        return {k: v.cpu().numpy() for k, v in p.items()}
