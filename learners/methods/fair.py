"""Fair federated learning: q-FFL and AFL, one global model trained for the worse-off clients (docs/learners-baselines.md).

Both train one global model ``w`` for all clients (full participation) and
differ from FedAvg only in how the server combines the clients' work.  With
``p_k = n_k / n`` and ``F_k`` client ``k``'s mean training loss:

**q-FFL** (Li, Sanjabi, Beirami, Smith, "Fair resource allocation in federated
learning", ICLR 2020) minimises ``f_q(w) = Σ_k p_k F_k(w)^{q+1} / (q+1)``; large
``q`` weights the clients with large losses more.  q-FedAvg, every round ``t``:
each client runs ``local_epochs`` epochs of descent from ``w^t`` to ``w̄_k`` and
reports, with ``L = 1/lr`` (the paper's estimate of the Lipschitz constant),

``Δw_k = L (w^t − w̄_k)``,  ``Δ_k = F_k(w^t)^q Δw_k``,
``h_k = q F_k(w^t)^{q−1} ‖Δw_k‖² + L F_k(w^t)^q``,

and the server steps ``w^{t+1} = w^t − Σ_k p_k Δ_k / Σ_k p_k h_k``.  With
``q = 0`` this is ``Σ_k p_k w̄_k``, FedAvg exactly.  (The paper samples clients
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

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import broadcast, weighted_average
from coalitions.learners.training.engine import train_epochs
from coalitions.params import check_param

__all__ = ["QFFL", "AFL", "project_simplex", "qffl_step"]


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

    def _local(self, w: dict, rng) -> tuple[dict, np.ndarray]:
        p = broadcast(w, self.federation_.n)
        opt = self._make_optimizer()
        p, _, loss = train_epochs(self.engine_, self._task_loss, p, opt, opt.init(p), self.train_data_,
                                  self.local_epochs, self.batch_size, rng(0))
        return p, loss

    def init_state(self, fed, gen, device):
        return {"global": self._init_params(gen, device, 1)}

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
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`; ``L = 1/lr``.

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1).
    """

    method = "qffl"

    def __init__(self, q: float = 1.0, *, model=None, hidden=64, rounds=50, local_epochs=1, batch_size=32,
                 optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.0, rule="relative", threshold=None,
                 refit=False, device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    def check_params(self):
        super().check_params()
        check_param("q", self.q, "number", low=0)

    def train_round(self, state, r, rng):
        w = state["global"]
        F = self._losses(w)
        local, loss = self._local(w, rng)
        sizes = self.train_data_.sizes
        new = qffl_step(w, local, F, sizes / sizes.sum(), float(self.q), 1.0 / float(self.lr))
        return {"global": new}, {"loss": float(np.mean(loss))}


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

    def __init__(self, lambda_lr: float = 0.1, *, model=None, hidden=64, rounds=50, local_epochs=1, batch_size=32,
                 optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.0, rule="relative", threshold=None,
                 refit=False, device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    def check_params(self):
        super().check_params()
        check_param("lambda_lr", self.lambda_lr, "number", low=0)

    def init_state(self, fed, gen, device):
        return {**super().init_state(fed, gen, device), "lam": np.full(fed.n, 1.0 / fed.n),
                "lam_history": []}

    def train_round(self, state, r, rng):
        w, lam = state["global"], np.asarray(state["lam"], dtype=np.float64)
        F = self._losses(w)
        local, loss = self._local(w, rng)
        new = weighted_average(local, lam)
        nxt = project_simplex(lam + float(self.lambda_lr) * F)
        return ({"global": new, "lam": nxt, "lam_history": [*state["lam_history"], lam]},
                {"loss": float(np.mean(loss)), "lambda": nxt.tolist()})

    def finish(self, state):
        super().finish(state)
        self.lambda_ = np.asarray(state["lam"], dtype=np.float64)
        self.lambda_history_ = [np.asarray(x, dtype=np.float64) for x in state["lam_history"]]

    def estimate_extra(self, peeling):
        names = self.federation_.names
        return {**super().estimate_extra(peeling), "lambda": {n: float(x) for n, x in zip(names, self.lambda_, strict=True)},
                "lambda_history": [np.round(x, 8).tolist() for x in self.lambda_history_]}
