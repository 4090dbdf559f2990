"""SuPerFed: a federated and a local model mixed along a low-loss line (Hahn et al., KDD 2022; docs/concepts.md §5).

Every client holds a copy ``W_f`` of the global model and its own local model
``W_l`` (drawn from a different random initialisation).  A training step uses
the mixed model ``W(λ) = (1 − λ)·W_f + λ·W_l`` with a fresh ``λ ~ U(0, 1)``:

* **model mixing** (``superfed-mm``): one ``λ`` per client and minibatch;
* **layer mixing** (``superfed-lm``): one ``λ`` per layer, per client and
  minibatch (a layer's bias shares its weight's ``λ``).

The local loss (paper Eq. 3) is

``ℓ(W(λ); batch) + μ·‖W_f − W_g‖² + ν·cos²(W_f, W_l)``

with ``W_g`` the global model of the round (proximity, FedProx-like) and the
cosine taken over all parameters flattened (orthogonality makes the line
between the two endpoints a low-loss subspace).  For the first
``⌊start·rounds⌋`` rounds (phase I, federation) only ``W_f`` trains, on
``ℓ(W_f) + μ·‖W_f − W_g‖²``; afterwards (phase II, personalisation) both do.
After every round the server averages ``W_g ← Σ_i n_i W_f,i / Σ_i n_i``; local
models never leave their clients.

After training each client picks its ``λ*`` from ``lambda_grid`` by its
**validation** metric (ties: lower validation loss, then smaller ``λ``) and
predicts with ``W(λ*)`` — the reference code picks ``λ`` on the test data.  Under a
protocol's ``tune_split`` "validation" here is the client's tuning rows
(:mod:`coalitions.learners.data.roles`): the validation rows then only score.
``μ = 0``, ``ν = 0``, ``start = 1`` (no phase II) and ``lambda_grid = (0,)``
make the method FedAvg exactly.

SuPerFed has no pairwise weights: the estimate carries utilities and the
structural graph of its shared global model (everybody), like FedAvg.

Defaults: ``μ = 0.01``, ``ν = 1``, ``start = 0.4`` (personalisation from 40 %
of the rounds); the paper's optimiser is SGD with momentum 0.9, ours the training
protocol's, as for every column; our text copy
of the paper lost its numbers, so ``μ``, ``ν`` and ``start`` are values from
its ablation ranges, not a verified transcription.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step
from coalitions.learners.training.engine import Padded
from coalitions.params import ParameterError, check_param

__all__ = ["SuPerFed", "SuPerFedMM", "SuPerFedLM", "layer_index", "mix", "LAMBDA_GRID"]

#: Default candidates for each client's ``λ*``: ``0, 0.1, …, 1``.
LAMBDA_GRID = tuple(float(x) for x in np.round(np.linspace(0, 1, 11), 2))


def layer_index(params: dict) -> dict:
    """Layer number of each parameter: a tensor of ≥ 2 dims starts a layer, a bias joins the previous one."""
    out, layer = {}, -1
    for k, v in params.items():
        if v.dim() >= 2 or layer < 0:
            layer += 1
        out[k] = layer
    return out


def mix(f: dict, l: dict, lam: torch.Tensor, layers: dict | None) -> dict:
    """``(1 − λ)·f + λ·l`` for one model; ``lam`` a scalar, or one value per layer when ``layers`` is given."""
    if layers is None:
        return {k: (1 - lam) * f[k] + lam * l[k] for k in f}
    return {k: (1 - lam[layers[k]]) * f[k] + lam[layers[k]] * l[k] for k in f}


class SuPerFed(PersonalizedLearner):
    """SuPerFed (module docstring); use :class:`SuPerFedMM` or :class:`SuPerFedLM`.

    Parameters
    ----------
    mu : float
        Proximity weight ``μ`` (0.01).
    nu : float
        Orthogonality weight ``ν`` on ``cos²(W_f, W_l)`` (1.0).
    start : float
        Fraction of the rounds before personalisation starts, in ``[0, 1]`` (0.4).
    lambda_grid : sequence of float
        Candidates for each client's ``λ*`` (``0, 0.1, …, 1``).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
        Final global model ``W_g``.
    local_ : dict
        Final local models ``W_l`` (stacked).
    lambda_ : ndarray (N,)
        Each client's ``λ*`` (chosen on its tuning rows: the validation rows without a ``tune_split``).
    val_curve_ : ndarray (N, G)
        Tuning-row metric of each client along ``lambda_grid``.
    """

    method = "superfed"
    layer_mixing = False
    has_weights = False
    shares_model = True

    mu: float = 0.01
    nu: float = 1.0
    start: float = 0.4
    lambda_grid: tuple[float, ...] = LAMBDA_GRID

    def check_params(self):
        super().check_params()
        check_param("mu", self.mu, "number", low=0)
        check_param("nu", self.nu, "number", low=0)
        check_param("start", self.start, "number", low=0, high=1)
        grid = self.lambda_grid
        if isinstance(grid, (str, bytes)) or not hasattr(grid, "__len__") or len(grid) == 0:
            raise ParameterError("lambda_grid", "{name} must be a non-empty sequence of numbers in [0, 1], got "
                                 + repr(grid).replace("{", "{{").replace("}", "}}"))
        for x in grid:
            check_param("lambda_grid", x, "number", low=0, high=1)

    # -- losses
    def _phase1_loss(self, f, X, y, m, g):
        prox = sum(((f[k] - g[k]) ** 2).sum() for k in f)
        return self._task_loss(f, X, y, m) + self.mu * prox

    def _phase2_loss(self, p, X, y, m, g, lam):
        f = {k[2:]: v for k, v in p.items() if k.startswith("f.")}
        l = {k[2:]: v for k, v in p.items() if k.startswith("l.")}
        mixed = mix(f, l, lam, self._layers if self.layer_mixing else None)
        prox = sum(((f[k] - g[k]) ** 2).sum() for k in f)
        ff = torch.cat([v.reshape(-1) for v in f.values()])
        ll = torch.cat([v.reshape(-1) for v in l.values()])
        cos = (ff * ll).sum() / (ff.norm() * ll.norm()).clamp(min=1e-12)
        return self._task_loss(mixed, X, y, m) + self.mu * prox + self.nu * cos ** 2

    # -- rounds
    def init_state(self, fed, gen, device):
        glob = self.init_params(gen, device, 1)
        local = {k: v.to(device) for k, v in self.spec_.init(gen, fed.n).items()}
        return {"global": glob, "local": local}

    up, down, kept = ("model",), ("global",), ("local",)
    model_prefixes = ("f.", "l.")   # phase II trains the federated and the local model in one dict
    step_draws = {1: 1}     # phase 2: one mixing coefficient per client and local step

    def _phase1_rounds(self) -> int:
        """Rounds of phase I, ``⌊start·rounds⌋``: phase II starts at round index :meth:`_phase1_rounds`."""
        return int(math.floor(float(self.start) * int(self.rounds_)))

    def warmup_rounds(self) -> int:
        """Phase I's rounds, when a phase II follows: the early stop counts personalised rounds only (else 0)."""
        first = self._phase1_rounds()
        return first if first < int(self.rounds_) else 0

    def site_step(self, state, r, rng):
        """Each site: phase 1 trains the federated model alone, phase 2 both models mixed by a random λ;
        uploads the federated model (its local model stays)."""
        n = self.federation_.n
        self._layers = layer_index(state["global"])
        g = {k: v.expand(n, *v.shape[1:]).clone() for k, v in state["global"].items()}
        phase2 = r >= self._phase1_rounds()
        if not phase2:   # the sites' optimiser states persist within each phase (the phases train different parts)
            f = {k: v.clone() for k, v in g.items()}
            f, kept, loss = self._site_steps(state, f, self._phase1_loss, rng(0), key="site_opt1", args=(g,))
            local = state["local"]
        else:
            p = {**{"f." + k: v.clone() for k, v in g.items()}, **{"l." + k: v for k, v in state["local"].items()}}
            draw = rng(1)
            n_lam = (max(self._layers.values()) + 1) if self.layer_mixing else None
            dev, dtype = g[next(iter(g))].device, g[next(iter(g))].dtype

            def lam(step):
                shape = (n,) if n_lam is None else (n, n_lam)
                return (torch.as_tensor(draw.random(shape), dtype=dtype, device=dev),)

            p, kept, loss = self._site_steps(state, p, self._phase2_loss, rng(0), key="site_opt2", args=(g,),
                                             step_args=lam)
            f = {k[2:]: v for k, v in p.items() if k.startswith("f.")}
            local = {k[2:]: v for k, v in p.items() if k.startswith("l.")}
        return ({**state, "model": f, "local": local, **kept},
                {"loss": float(np.mean(loss)), "phase": 2 if phase2 else 1})

    def server_step(self, state, r):
        """FedAvg's average of the uploaded federated models."""
        return average_step(state, self.train_sizes_)

    def finish(self, state):
        n = self.federation_.n
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.local_ = {k: v.detach().cpu() for k, v in state["local"].items()}
        self.weights_ = None
        self.weights_history_ = []
        self.lambda_, self.val_curve_ = self._choose_lambda()
        lam = torch.as_tensor(self.lambda_, dtype=next(iter(self.global_.values())).dtype)
        g = {k: v.expand(n, *v.shape[1:]) for k, v in self.global_.items()}
        self.params_ = {k: (1 - lam.view(-1, *([1] * (v.dim() - 1)))) * g[k]
                        + lam.view(-1, *([1] * (v.dim() - 1))) * self.local_[k] for k, v in g.items()}

    def _choose_lambda(self):
        """Each client's ``λ*`` on its tuning rows (metric, then loss, then smaller ``λ``).

        A choice, so it reads the rows that choose: the validation rows, or the rows held out of
        training under the protocol's ``tune_split`` (:mod:`coalitions.learners.data.roles`).
        """
        from coalitions.learners.data.metrics import evaluate_batch

        fed = self.federation_
        dev = self.engine_.device_
        data = Padded(fed, "tuning", dev)
        grid = torch.as_tensor(self.lambda_grid, dtype=torch.float32, device=dev)
        n, G = fed.n, len(self.lambda_grid)
        cli = torch.arange(n, device=dev).repeat_interleave(G)
        lam = grid.repeat(n)
        shape = lambda v: lam.view(-1, *([1] * (v.dim() - 1)))
        params = {k: (1 - shape(v)) * v.to(dev)[0].expand(n * G, *v.shape[1:])
                  + shape(v) * self.local_[k].to(dev)[cli] for k, v in self.global_.items()}
        out = self.engine_.map(self.spec_.forward, params, (data.X[cli],))
        per = self.per_sample_loss_(out, data.y[cli])
        m = data.m[cli]
        loss = ((per * m).sum(1) / m.sum(1)).view(n, G).double().cpu().numpy()
        scores = out.detach().double().cpu().numpy()
        curve = np.zeros((n, G))
        for i in range(n):
            k = int(data.sizes[i])
            curve[i] = evaluate_batch(fed.metric, data.raw_y[i], scores[i * G:(i + 1) * G, :k])
        sign = 1.0 if fed.sense == "max" else -1.0
        best = np.zeros(n)
        for i in range(n):
            key = [(-sign * np.nan_to_num(curve[i, a], nan=-np.inf * sign), loss[i, a], self.lambda_grid[a])
                   for a in range(G)]
            best[i] = self.lambda_grid[min(range(G), key=lambda a: key[a])]
        return best, curve

    def estimate_extra(self, peeling):
        names = self.federation_.names
        return {**super().estimate_extra(peeling), "lambda": {names[i]: float(self.lambda_[i]) for i in range(len(names))},
                "lambda_grid": list(self.lambda_grid),
                "val_curve": {names[i]: [float(x) for x in self.val_curve_[i]] for i in range(len(names))}}


class SuPerFedMM(SuPerFed):
    """SuPerFed with model mixing: one ``λ`` per client and minibatch (``superfed-mm``)."""

    method = "superfed-mm"
    layer_mixing = False


class SuPerFedLM(SuPerFed):
    """SuPerFed with layer mixing: one ``λ`` per layer, client and minibatch (``superfed-lm``)."""

    method = "superfed-lm"
    layer_mixing = True
