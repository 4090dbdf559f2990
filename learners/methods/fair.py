"""Fair federated learning: q-FFL and AFL, one global model trained for the worse-off clients (docs/learners-baselines.md).

Both train one global model ``w`` for all clients (full participation) and
differ from FedAvg only in how the server combines the clients' work.  With
``p_k = n_k / n`` and ``F_k`` client ``k``'s mean training loss:

**q-FFL** (Li, Sanjabi, Beirami, Smith, "Fair resource allocation in federated
learning", ICLR 2020) minimises ``f_q(w) = Σ_k p_k F_k(w)^{q+1} / (q+1)``; large
``q`` weights the clients with large losses more.  q-FedAvg, every round ``t``:
each client takes a round's local steps of descent from ``w^t`` to ``w̄_k`` and
reports, with ``L`` the estimate of the Lipschitz constant,

``Δw_k = L (w^t − w̄_k)``,  ``Δ_k = F_k(w^t)^q Δw_k``,
``h_k = q F_k(w^t)^{q−1} ‖Δw_k‖² + L F_k(w^t)^q``,

and the server steps ``w^{t+1} = w^t − Σ_k p_k Δ_k / Σ_k p_k h_k``.  With
``q = 0`` this is ``Σ_k p_k w̄_k``, FedAvg exactly.

``L`` from the actual step.  The paper sets ``L = 1/lr``, which assumes the
local solver takes plain gradient steps: then ``L (w^t − w̄_k)`` *is* the
gradient ``∇F_k(w^t)`` after one step.  Under Adam (the protocol's optimiser)
``w^t − w̄_k`` is close to ``lr·sign(g)``, so ``1/lr`` makes ``‖Δw_k‖²`` the
parameter count, the server step collapses to about ``1e-4`` per coordinate and
the model never leaves its initialisation (13.7 % on fashion).  Here
``L`` is the ratio that makes the clients' averaged change the averaged
gradient at ``w^t``,

``L = ‖Σ_k p_k ∇F_k(w^t)‖ / ‖Σ_k p_k (w^t − w̄_k)‖``,

which is ``1/lr`` exactly under the paper's assumption (one full-batch SGD
step) and the same number for every client, so ``q = 0`` remains FedAvg with
any optimiser.  ``L_`` records each round's value.  (The paper samples clients
with probabilities ``p_k`` and averages uniformly; with every client taking
part each round the ``p_k`` weight the sums, the same estimator in expectation.)

**AFL** (Mohri, Sivek, Suresh, "Agnostic federated learning", ICML 2019)
minimises the worst mixture of the clients' losses,
``min_w max_{λ ∈ Δ} Σ_k λ_k F_k(w)``, by stochastic gradient descent–ascent:
each round the clients train from ``w^t`` as in FedAvg, the server combines
``w^{t+1} = Σ_k λ_k w_k`` (with one plain gradient step each this is the
descent step ``w^t − lr Σ_k λ_k ∇F_k(w^t)``), and the mixture ascends along its
gradient, the losses at ``w^t``: ``λ ← Π_Δ(λ + γ_λ F(w^t))``, projected onto
the simplex (:func:`project_simplex`).  ``λ`` starts uniform; ``γ_λ = 0``
keeps it there (uniform averaging).  The final ``λ`` is ``lambda_``, its path
``lambda_history_``.

Neither has pairwise weights (AFL's ``λ`` weighs clients, not pairs): utilities
and the structural graph of the one shared model (everybody).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import broadcast, weighted_average
from coalitions.params import check_param

__all__ = ["QFFL", "AFL", "project_simplex", "qffl_step", "lipschitz_estimate"]


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto the probability simplex ``{x ≥ 0, Σ x = 1}``.

    Sort ``u`` descending, ``ρ = max{j : u_j − (Σ_{i≤j} u_i − 1)/j > 0}``,
    ``τ = (Σ_{i≤ρ} u_i − 1)/ρ``, ``x = max(v − τ, 0)`` (Held, Wolfe, Crowder 1974;
    Duchi et al. 2008).
    """
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    j = np.arange(1, v.size + 1)
    rho = int(np.nonzero(u - css / j > 0)[0][-1]) + 1
    return np.maximum(v - css[rho - 1] / rho, 0.0)


def qffl_step(w: dict, local: dict, losses: np.ndarray, p: np.ndarray, q: float, L: float) -> dict:
    """q-FedAvg's server step (module docstring) from ``w`` (leading dim 1) and the clients' ``w̄_k`` (stacked)."""
    dev = next(iter(w.values())).device
    F = torch.as_tensor(np.asarray(losses, dtype=np.float64), device=dev)
    P = torch.as_tensor(np.asarray(p, dtype=np.float64), device=dev)
    dw = {k: (L * (w[k].double() - local[k].double())) for k in w}         # (N, ...)
    sq = sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in dw.values())  # ‖Δw_k‖²
    Fq = F.pow(q)
    h = (q * F.pow(q - 1) * sq if q != 0 else torch.zeros_like(F)) + L * Fq
    denom = (P * h).sum()
    out = {}
    for k, v in dw.items():
        num = torch.tensordot(P * Fq, v, dims=1)
        out[k] = (w[k].double()[0] - num / denom)[None].to(w[k].dtype)
    return out


def lipschitz_estimate(w: dict, local: dict, grads: dict, p: np.ndarray) -> float | None:
    """q-FedAvg's ``L`` from the actual step: ``‖Σ_k p_k ∇F_k(w)‖ / ‖Σ_k p_k (w − w̄_k)‖`` (module docstring).

    ``None`` when the clients did not move on average (nothing to step).
    """
    dev = next(iter(w.values())).device
    P = torch.as_tensor(np.asarray(p, dtype=np.float64), device=dev)
    g2 = sum(torch.tensordot(P, grads[k].double(), dims=1).pow(2).sum() for k in w)
    d2 = sum(torch.tensordot(P, w[k].double().expand_as(local[k]) - local[k].double(), dims=1).pow(2).sum()
             for k in w)
    g2, d2 = float(g2), float(d2)
    if d2 <= 0.0 or not np.isfinite(d2) or not np.isfinite(g2):
        return None
    return float(np.sqrt(g2 / d2))


class _OneGlobal(PersonalizedLearner):
    """Shared by q-FFL and AFL: one global model, client losses at it, local descent from it."""

    has_weights = False
    shares_model = True

    def _losses(self, w: dict) -> np.ndarray:
        """Every client's mean training loss ``F_k(w)`` (full training split)."""
        d = self.train_data_
        ws = {k: v.expand(len(d), *v.shape[1:]) for k, v in w.items()}
        vals = self.engine_.map(self._task_loss, ws, (d.X, d.y, d.m))
        return vals.detach().double().cpu().numpy()

    def _gradients(self, w: dict) -> dict:
        """Every client's full-training-split gradient ``∇F_k(w)``, stacked ``(N, ...)``."""
        d = self.train_data_
        ws = {k: v.expand(len(d), *v.shape[1:]).clone() for k, v in w.items()}
        grads, _ = self.engine_.value_and_grad(self._task_loss, ws, (d.X, d.y, d.m))
        return {k: g.detach() for k, g in grads.items()}

    def _local(self, state: dict, w: dict, rng) -> tuple[dict, dict, np.ndarray]:
        """Every site's local steps from ``w``, continuing the optimiser state it kept."""
        return self._site_steps(state, broadcast(w, self.federation_.n), self._task_loss, rng(0))

    up: ClassVar[tuple[str, ...]] = ("model", "stats")
    down = ("global",)

    def record_shapes(self, key: str) -> dict:
        return {"F": ()} if key == "stats" else dict(self.spec_.shapes)

    def site_step(self, state, r, rng):
        """Each site: its loss ``F_k(w)`` at the global model, then its local steps from it; uploads both."""
        F = self._losses(state["global"])
        local, kept, loss = self._local(state, state["global"], rng)
        stats = {"F": torch.as_tensor(F, dtype=next(iter(local.values())).dtype)}
        return {**state, "model": local, "stats": stats, **kept}, {"loss": float(np.mean(loss))}

    @staticmethod
    def _uploads(state: dict) -> tuple[dict, dict, np.ndarray]:
        """The state without the uploads, the uploaded models and the sites' losses ``F``."""
        rest = {k: v for k, v in state.items() if k not in ("model", "stats", "grads")}
        return rest, state["model"], state["stats"]["F"].detach().double().cpu().numpy()

    def init_state(self, fed, gen, device):
        return {"global": self.init_params(gen, device, 1)}

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = broadcast(self.global_, self.federation_.n)
        self.weights_ = None
        self.weights_history_ = []


class QFFL(_OneGlobal):
    """q-FFL trained by q-FedAvg (module docstring).

    Parameters
    ----------
    q : float
        Fairness exponent ``q ≥ 0`` (1.0; 0 is FedAvg).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`; ``L`` is
        derived from the actual step (module docstring).

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1).
    L_ : list of float
        ``L`` of every round.
    """

    method = "qffl"

    q: float = 1.0

    def check_params(self):
        super().check_params()
        check_param("q", self.q, "number", low=0)

    def init_state(self, fed, gen, device):
        return {**super().init_state(fed, gen, device), "L": []}

    up = ("model", "stats", "grads")

    def site_step(self, state, r, rng):
        """Each site: its loss ``F_k(w)``, its gradient ``∇F_k(w)`` and its local model ``w̄_k``; uploads the three."""
        g = self._gradients(state["global"])
        state, info = super().site_step(state, r, rng)
        return {**state, "grads": g}, info

    def server_step(self, state, r):
        """``L`` from the actual step, then q-FedAvg's update of the global model (module docstring)."""
        rest, local, F = self._uploads(state)
        w, sizes = state["global"], self.train_sizes_
        p = sizes / sizes.sum()
        L = lipschitz_estimate(w, local, state["grads"], p)
        new = w if L is None else qffl_step(w, local, F, p, float(self.q), L)
        return {**rest, "global": new, "L": [*state["L"], L if L is not None else float("nan")]}

    def finish(self, state):
        super().finish(state)
        self.server_finish(state)

    def server_finish(self, state):
        if "L" in state:    # the server's record (a Flower site has none)
            self.L_ = [float(x) for x in state["L"]]


class AFL(_OneGlobal):
    """Agnostic federated learning by stochastic gradient descent–ascent (module docstring).

    Parameters
    ----------
    lambda_lr : float
        Ascent step ``γ_λ ≥ 0`` of the mixture weights (0.1).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
    lambda_ : ndarray (N,)
        The final mixture weights on the simplex.
    lambda_history_ : list of ndarray
        The weights used in each round.
    """

    method = "afl"

    lambda_lr: float = 0.1

    def check_params(self):
        super().check_params()
        check_param("lambda_lr", self.lambda_lr, "number", low=0)

    def init_state(self, fed, gen, device):
        return {**super().init_state(fed, gen, device), "lam": np.full(fed.n, 1.0 / fed.n),
                "lam_history": []}

    def server_step(self, state, r):
        """The ``λ``-weighted average of the local models, then ``λ``'s projected ascent step on the losses."""
        rest, local, F = self._uploads(state)
        lam = np.asarray(state["lam"], dtype=np.float64)
        nxt = project_simplex(lam + float(self.lambda_lr) * F)
        return {**rest, "global": weighted_average(local, lam), "lam": nxt,
                "lam_history": [*state["lam_history"], lam]}

    def finish(self, state):
        super().finish(state)
        self.server_finish(state)

    def server_finish(self, state):
        if "lam" in state:  # the server's weights (a Flower site has none)
            self.lambda_ = np.asarray(state["lam"], dtype=np.float64)
            self.lambda_history_ = [np.asarray(x, dtype=np.float64) for x in state["lam_history"]]

    def estimate_extra(self, peeling):
        names = self.federation_.names
        return {**super().estimate_extra(peeling), "lambda": {n: float(x) for n, x in zip(names, self.lambda_, strict=True)},
                "lambda_history": [np.round(x, 8).tolist() for x in self.lambda_history_]}
