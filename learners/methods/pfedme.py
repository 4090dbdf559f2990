"""pFedMe: personalised models as Moreau envelopes (T. Dinh, Tran, Nguyen, NeurIPS 2020; docs/learners-baselines.md).

Client ``k``'s personalised model is the proximal point of its loss around its
copy ``w_k`` of the global model,

``θ̂_k(w_k) = argmin_θ  h_k(θ; w_k) = f_k(θ; D) + (λ/2)·‖θ − w_k‖²``,

and the global problem is ``min_w Σ_k p_k F̃_k(w)`` over the Moreau envelopes
``F̃_k(w) = min_θ h_k(θ; w)``, whose gradient is ``∇F̃_k(w) = λ(w − θ̂_k(w))``.
Every round ``t`` (the paper's Algorithm 1, full participation):

1. each client copies ``w_k = w^t`` and, for every minibatch ``D`` of its
   round's local steps, solves the inner problem **to tolerance** — gradient
   descent on ``h_k`` from ``θ = w_k`` with step ``inner_lr`` until
   ``‖∇h_k(θ)‖ ≤ inner_tol`` or ``inner_steps`` iterations (``h_k`` is
   ``λ``-strongly convex where ``f_k`` is convex, so descent converges) —
   and then steps along the envelope's gradient,
   ``w_k ← w_k − η λ (w_k − θ̂_k)`` (``η = lr``; the engine's optimiser applies
   it, plain SGD with ``momentum = 0`` is the paper's step);
2. the server mixes ``w^{t+1} = (1 − β) w^t + β Σ_k p_k w_k`` with
   ``p_k = n_k / n`` (the paper averages the sampled clients uniformly; here
   every client takes part and the average is weighted by sample size, as for
   every federated baseline here).  ``β = 1`` is plain averaging.

After training each client predicts with ``θ̂_k(w)`` for the final global
``w``, solved on its whole training split to the same tolerance.  The largest
inner gradient norm left in the last round is ``inner_residual_`` (at most
``inner_tol`` unless ``inner_steps`` ran out), the iterations used
``inner_iterations_``.  With a smooth loss (the affine models) ``h_k`` is
smooth and ``λ``-strongly convex and descent with ``inner_lr < 2/(L_f + λ)``
reaches any tolerance; a ReLU network's ``h_k`` can have its minimiser on a
kink, where the gradient norm stalls above a small tolerance — the residual
then says how far the solve got.  No pairwise weights: utilities and the structural
graph of the shared model (everybody).  Defaults: ``λ = 15`` and ``β = 1``
(values from the paper's experiments), ``inner_lr = 0.05``, ``inner_tol =
1e-3``, ``inner_steps = 100`` (ours).  The outer step ``η`` is the training
protocol's learning rate; the envelope's gradient is ``λ``-Lipschitz, so it needs
``ηλ`` well below 1 (SGD at ``η = 0.1`` with momentum 0.9 gives ``ηλ = 1.5`` and
diverges): choose it on the protocol's ``lr_grid``.
"""

from __future__ import annotations

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step, broadcast
from coalitions.learners.methods.fedprox import proximal_term
from coalitions.learners.training.engine import epoch_plan, skip_schedule
from coalitions.params import MAX_STEPS, check_param

__all__ = ["PFedMe"]


class PFedMe(PersonalizedLearner):
    """pFedMe (module docstring).

    Parameters
    ----------
    lam : float
        Moreau-envelope weight ``λ > 0`` (15).
    beta : float
        Server mixing ``β`` in ``(0, 2]`` (1.0).
    inner_lr : float
        Step of the inner gradient descent (0.05).
    inner_steps : int
        Most inner iterations per local step (100).
    inner_tol : float
        The inner problem is solved when ``‖∇h_k‖ ≤ inner_tol`` (1e-3).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`; ``lr`` is ``η`` (default 0.01).

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1).
    params_ : dict
        Each client's personalised model ``θ̂_k(w)``.
    inner_residual_ : float
        Largest ``‖∇h_k‖`` left by an inner solve in the last round.
    inner_iterations_ : int
        Most inner descent steps one solve of the last round took.
    final_residual_ : float
        Largest ``‖∇h_k‖`` of the final personalised models.
    """

    method = "pfedme"
    has_weights = False
    shares_model = True

    # Its own parameters (PersonalizedLearner adds the common ones after them).
    lam: float = 15.0
    beta: float = 1.0
    inner_lr: float = 0.05
    inner_steps: int = 100
    inner_tol: float = 1e-3

    def check_params(self):
        super().check_params()
        check_param("lam", self.lam, "number", low=0, low_open=True)
        check_param("beta", self.beta, "number", low=0, low_open=True, high=2)
        check_param("inner_lr", self.inner_lr, "number", low=0, low_open=True)
        check_param("inner_steps", self.inner_steps, "int", low=1, high=MAX_STEPS)
        check_param("inner_tol", self.inner_tol, "number", low=0, low_open=True)

    def fit(self, federation):
        self.inner_residual_, self.inner_iterations_ = None, 0
        return super().fit(federation)

    def _inner_loss(self, theta, X, y, m, w):
        return self._task_loss(theta, X, y, m) + 0.5 * float(self.lam) * proximal_term(theta, w)

    def solve_inner(self, w: dict, X, y, m, active: torch.Tensor | None = None):
        """``θ̂_k(w_k)`` for every model by gradient descent to ``inner_tol``; ``(θ, residual (M,), iterations)``.

        ``active`` (bool, ``(M,)``): models to solve (the others return ``w`` unchanged, residual 0).
        """
        theta = {k: v.clone() for k, v in w.items()}
        n = next(iter(w.values())).shape[0]
        todo = torch.ones(n, dtype=torch.bool, device=X.device) if active is None else active.clone()
        resid = torch.zeros(n, dtype=torch.float64, device=X.device)
        steps = 0
        while True:
            g, _ = self.engine_.value_and_grad(self._decayed_loss(self._inner_loss), theta, (X, y, m, w), active=todo)
            norm = torch.sqrt(sum(v.reshape(n, -1).double().pow(2).sum(1) for v in g.values()))
            resid = torch.where(todo, norm, resid)
            todo = todo & (norm > float(self.inner_tol))
            if not bool(todo.any()) or steps == int(self.inner_steps):
                break
            theta = {k: torch.where(todo.view(-1, *([1] * (v.dim() - 1))), v - float(self.inner_lr) * g[k], v)
                     for k, v in theta.items()}
            steps += 1
        return theta, resid.cpu().numpy(), steps

    def init_state(self, fed, gen, device):
        return {"global": self.init_params(gen, device, 1)}

    up, down = ("model",), ("global",)

    def site_step(self, state, r, rng):
        """Each site: its local steps on the Moreau envelope from the global model; uploads its local model."""
        data = self.train_data_
        dev = data.X.device
        w = broadcast(state["global"], self.federation_.n)
        opt = self.make_optimizer()
        ost = state.get("site_opt") or opt.init(w)  # the site's optimiser state persists across rounds
        lam = float(self.lam)
        n = self.federation_.n
        total, count, resid, iters = np.zeros(n), np.zeros(n), 0.0, 0
        plan = rng(0)
        for _ in range(self.epochs_per_round(self.federation_)):
            idx, mask, active = epoch_plan(data.sizes, self.minibatch_size(), plan)
            for s in range(idx.shape[0]):
                X, y = data.gather(torch.as_tensor(idx[s], device=dev))
                mb = torch.as_tensor(mask[s], device=dev)
                act = torch.as_tensor(active[s], device=dev)
                theta, res, it = self.solve_inner(w, X, y, mb, act)
                resid, iters = max(resid, float(res.max())), max(iters, it)
                grads = {k: lam * (w[k] - theta[k]) for k in w}     # ∇ of the Moreau envelope
                w, ost = opt.step(w, grads, ost, act)
                with torch.no_grad():
                    vals = self.engine_.map(self._task_loss, theta, (X, y, mb))
                a = act.cpu().numpy()        # each client's mean over its own steps (as train_epochs)
                total += np.where(a, vals.detach().double().cpu().numpy(), 0.0)
                count += a
            ost = skip_schedule(ost, self._steps_per_epoch(), idx.shape[0])    # a Flower site alone: as in process
        self.inner_residual_, self.inner_iterations_ = resid, iters
        return {**state, "model": w, "site_opt": ost}, {"loss": float(np.mean(total / np.maximum(count, 1))),
                                                         "inner_residual": resid}

    def server_step(self, state, r):
        """``w ← (1 − β) w + β Σ_k n_k w_k / Σ_k n_k``: the server mixes its model with the sites' average."""
        beta = float(self.beta)
        rest = average_step(state, self.train_sizes_, down="average")
        avg = rest.pop("average")
        return {**rest, "global": {k: (1 - beta) * state["global"][k] + beta * avg[k] for k in avg}}

    def server_finish(self, state):
        """The server sees no inner problem (the sites solve it): its residuals are not recorded over Flower."""
        for name in ("final_residual_", "inner_residual_", "inner_iterations_"):
            if not hasattr(self, name):
                setattr(self, name, None)

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        d = self.train_data_
        theta, res, it = self.solve_inner(broadcast(state["global"], self.federation_.n), d.X, d.y, d.m)
        self.final_residual_ = float(res.max())
        self.params_ = {k: v.detach().cpu() for k, v in theta.items()}
        if getattr(self, "inner_residual_", None) is None:  # no round ran in this fit (or a Flower site)
            self.inner_residual_, self.inner_iterations_ = self.final_residual_, it
        self.weights_ = None
        self.weights_history_ = []

    def estimate_extra(self, peeling):
        return {**super().estimate_extra(peeling), "inner_residual": self.inner_residual_,
                "inner_iterations": self.inner_iterations_, "final_residual": self.final_residual_}
