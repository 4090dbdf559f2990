"""FedeRiCo: federating with the right collaborators (Sui, Wen et al. 2022; docs/concepts.md §5).

No public code exists; this follows the paper's EM derivation (§3.2–3.3,
Appendix A).  Client ``i`` owns a model ``φ_i`` and keeps, for every model
``φ_j``, an exponential moving average ``L̂_ij`` of that model's loss on its own
training data, a prior ``π_i·`` and a posterior ``w_i·`` over which model
explains its data.  Each round ``t``:

1. **Neighbour sampling** (ε-greedy): with probability ``ε`` client ``i``
   samples ``K`` other clients uniformly, otherwise it takes the ``K`` others
   with the highest posterior ``w_ij`` (ties to the lower index).
2. **E-step**: for the sampled ``j`` and itself, ``ℓ_ij = ℓ(φ_j; D_i)``, the loss of
   model ``j`` on client ``i``'s whole training split, ``p(D_i | φ_j) ∝ exp(−ℓ_ij)``:
   the *mean* of the per-sample losses (``likelihood="mean"``, the default, chosen on held-out
   federations: docs/learners-personalized.md#methods) or their *sum* (``"sum"``, the data's
   negative log-likelihood, ``n_i`` times sharper), and
   ``L̂_ij ← (1 − β)·L̂_ij + β·ℓ_ij``;
   then, by default (``accumulate=False``), the prior stays uniform and
   ``w_i· = softmax(−L̂_i·)``: the paper's §3.3 and §4.4, where the EMA *replaces*
   the accumulated loss (docs/concepts.md §5).  With ``accumulate=True`` the
   posterior is fed back as the prior, ``w_ij ∝ π_ij · exp(−L̂_ij)`` and
   ``π_i· ← w_i·``: the accumulated loss, which the paper shows collapsing to a
   one-hot posterior (on ``digits`` it turned the learned grand coalition into
   one-hot pairs).  Computed in the log domain.
3. **M-step**: a round's passes over the clients' data; at every step
   client ``i`` computes, on its minibatch, the gradient of
   ``w_ij · ℓ(φ_j; batch_i)`` for each sampled ``j`` and itself, and model
   ``φ_j`` moves along the sum it receives, ``Σ_i w_ij ∇ℓ(φ_j; batch_i)`` (Eq. 8:
   a model is trained by the clients that use it).  All (client, model) pairs
   of a step are one batched call; gradients are summed per model with
   ``index_add``.  Each model keeps its optimiser state across rounds (it
   never leaves its owner).

Before the first round every model is the common initial model, so
``L̂_ij = ℓ(φ_0; D_i)`` for all ``j`` exactly, and ``π``, ``w`` are uniform.

Weights.  ``w_ij`` is how much client ``i`` relies on *model* ``j``; model
``j`` is trained by whoever relies on it, so EM freely lets a whole group of
clients adopt one model — often not one of their own (label switching: on
``digits`` the three clients of a group all ended on client 3's model while
client 3 itself moved to client 4's).  The posterior then misreports who
learns from whom.  By default the estimate's weight matrix is therefore
:func:`data_weights`, how much client ``i`` draws on client ``k``'s *data*
through the models, ``A_ik = Σ_j w_ij w_kj / Σ_l w_lj`` (row-stochastic; equal
to ``w`` when every client keeps its own model); ``weights="posterior"`` writes
``w`` itself, as the learner contract (docs/concepts.md §5) literally reads.  The posterior is always in the
estimate's ``extra``.

Prediction: client ``i`` mixes the models by its posterior,
``p_i(y|x) = Σ_j w_ij p(y|x; φ_j)`` (class probabilities; for regression the
weighted mean prediction), scored as log-probabilities / logits.  The weight
matrix of the estimate is the final posterior ``w``; ``weights_history_[t]`` is
the posterior after round ``t``'s E-step.

Defaults follow the paper: ``K = 3`` neighbours, ``ε = 0.3``, ``β = 0.6``, Adam
(learning rate 1e-3).  (Our text copy of the paper lost its numbers; these are
the values of its experimental section as we read them.)
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.training.decay import decay_gradient, with_decay
from coalitions.learners.training.engine import Padded, epoch_plan, stack_select
from coalitions.params import MAX_STEPS, check_param

__all__ = ["FedeRiCo", "posterior", "sample_neighbours", "data_weights", "WEIGHTS", "LIKELIHOODS"]

#: What the estimate's weight matrix is (see :func:`data_weights`).
WEIGHTS = ("posterior", "data")
#: What ``ℓ_ij`` is: the sum of client ``i``'s per-sample losses (its data's negative log-likelihood) or the mean.
LIKELIHOODS = ("sum", "mean")


def data_weights(w: np.ndarray) -> np.ndarray:
    """How much client ``i`` draws on client ``k``'s *data* through the models it uses.

    Model ``φ_j`` is trained on the clients' data in proportion ``w_kj`` (its
    gradient is ``Σ_k w_kj ∇ℓ(φ_j; D_k)``) and client ``i`` predicts with
    ``Σ_j w_ij φ_j``, so ``A_ik = Σ_j w_ij · w_kj / Σ_l w_lj`` — row-stochastic.
    Unlike ``w`` it does not assume that model ``j`` stands for client ``j``:
    EM may let a group of clients adopt any one model (label switching).
    """
    w = np.asarray(w, dtype=np.float64)
    col = w.sum(axis=0)
    a = (w / np.where(col > 0, col, 1.0)) @ w.T
    return a / a.sum(axis=1, keepdims=True)


def posterior(log_prior: torch.Tensor, ema_loss: torch.Tensor) -> torch.Tensor:
    """``w_ij ∝ π_ij·exp(−L̂_ij)``, rows normalised, from ``log π`` (N, N) and ``L̂`` (N, N)."""
    return torch.softmax(log_prior - ema_loss, dim=1)


def sample_neighbours(w: np.ndarray, k: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """ε-greedy choice of ``k`` other clients for every client: (N, k) int array.

    Per client, with probability ``eps`` a uniform sample without replacement of
    the others, otherwise the ``k`` others of highest ``w_ij`` (ties to the lower index).
    """
    n = w.shape[0]
    out = np.zeros((n, k), dtype=np.int64)
    explore = np.asarray(rng.random(n) < eps)
    keys = rng.random((n, n))
    for i in range(n):  # N small rows of bookkeeping, not training
        others = np.delete(np.arange(n), i)
        if explore[i]:
            order = others[np.argsort(np.delete(keys[i], i), kind="stable")]
        else:
            order = others[np.lexsort((others, -w[i, others]))]
        out[i] = order[:k]
    return out


class FedeRiCo(PersonalizedLearner):
    """FedeRiCo (module docstring).

    Parameters
    ----------
    neighbours : int
        ``K``, other clients sampled per round (3).
    eps : float
        ``ε`` of the ε-greedy sampling (0.3).
    beta : float
        ``β``, EMA momentum of the tracked losses (0.6).
    accumulate : bool
        ``π ← w`` after every E-step (the accumulated variant); False (default, the
        paper's EMA posterior ``w = softmax(−L̂)``, docs/concepts.md §5) keeps a uniform prior.
    weights : {"data", "posterior"}
        The estimate's weight matrix: :func:`data_weights`
        ``A = w·diag(1/Σ_l w_lj)·wᵀ`` (default), or the posterior ``w`` itself
        (the literal reading of docs/concepts.md §5, which assumes model ``j`` stays client
        ``j``'s: EM breaks that, see the module docstring).
    likelihood : {"sum", "mean"}
        ``ℓ_ij`` is the mean of client ``i``'s per-sample losses under ``φ_j`` (default: the scale whose
        equilibrium equals the exact CE on more held-out federations, ``benchmarks/federico_scale.py``) or their
        sum (its data's negative log-likelihood, which makes the posterior ``n_i`` times sharper: one-hot after a
        round on hundreds of rows).
    optimizer, lr : str, float
        Adam, 1e-3 by default (the paper's).
    rule : str
        ``"relative"`` (the common default): on the posterior, ``w_ij / w_ii =
        e^{L̂_ii − L̂_ij}`` compares model ``j``'s tracked loss on client ``i``'s
        data with client ``i``'s own model's (the null reference: ``i`` alone), so it
        gives no edge when every client's own model fits best and every edge when
        all models fit alike; the data weights inherit this (``A = I`` when
        ``w = I``, uniform within a group that shares its models).  The former
        default ``"mass"`` gives everyone a collaborator whenever any off-diagonal
        weight is positive (``docs/concepts.md`` §5).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    posterior_ : ndarray (N, N)
        Final posterior ``w``.
    weights_ : ndarray (N, N)
        The estimate's weights (``posterior_`` or its :func:`data_weights`).
    posterior_history_ : list of ndarray
        The posterior after each round's E-step.
    weights_history_ : list of ndarray
        The estimate's weights after each round.
    ema_loss_ : ndarray (N, N)
        ``L̂`` at the end.
    ema_history_ : list of ndarray
        ``L̂`` after each round's E-step.
    neighbours_history_ : list of ndarray
        The sampled neighbours of each round, (N, K).
    """

    method = "federico"

    # Its own parameters (kept by __init__ under their own names), declared for the type checker.
    neighbours: int
    eps: float
    beta: float
    accumulate: bool
    weights: str
    likelihood: str

    def __init__(self, neighbours: int = 3, eps: float = 0.3, beta: float = 0.6, accumulate: bool = False,
                 weights: str = "data", likelihood: str = "mean", *, protocol=None, rule="relative", threshold=None,
                 refit=False, device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    def check_params(self):
        super().check_params()
        check_param("neighbours", self.neighbours, "int", low=0, high=MAX_STEPS)
        check_param("eps", self.eps, "number", low=0, high=1)
        check_param("beta", self.beta, "number", low=0, high=1)
        check_param("weights", self.weights, "choice", choices=WEIGHTS)
        check_param("accumulate", self.accumulate, "bool")
        check_param("likelihood", self.likelihood, "choice", choices=LIKELIHOODS)

    # -- pieces
    def _pair_loss(self, params, X, y, m, weight):
        return weight * self._task_loss(params, X, y, m)

    def _pair_eval(self, params, X, y, m):
        return self._task_loss(params, X, y, m)

    def full_losses(self, phi: dict, clients: torch.Tensor, models: torch.Tensor) -> torch.Tensor:
        """``ℓ(φ_models[p]; D_clients[p])`` on whole training splits, for every pair ``p``.

        The sum of the per-sample losses (``likelihood="sum"``) or their mean.
        """
        d = self.train_data_
        mean = self.engine_.map(self._pair_eval, stack_select(phi, models),
                                (d.X[clients], d.y[clients], d.m[clients]))
        if self.likelihood == "mean":
            return mean
        return mean * d.m[clients].sum(1).to(mean.dtype)

    # -- the rounds
    def init_params(self, gen, device, copies: int) -> dict:
        """Each client's model its own draw (the other learners start every client alike).

        The models are EM's mixture components: identical ones stay identical (every E-step's losses tie
        across models, the posterior stays uniform, and every model takes the same update), the symmetric
        fixed point of EM.  In the paper's decentralised setting each client initialises its own model.
        """
        return {k: v.to(device) for k, v in self.spec_.init(gen, copies).items()}

    def init_state(self, fed, gen, device):
        phi = self.init_params(gen, device, fed.n)
        opt = self.make_optimizer()
        own = torch.arange(fed.n, device=device)
        l0 = self.full_losses(phi, own, own).to(torch.float64)
        n = fed.n
        return {"phi": phi, "opt": opt.init(phi), "ema": l0[:, None].expand(n, n).clone(),
                "log_prior": torch.full((n, n), -math.log(n), dtype=torch.float64, device=device),
                "w": torch.full((n, n), 1.0 / n, dtype=torch.float64, device=device),
                "history": [], "ema_history": [], "neighbours": []}

    def e_step(self, ema: torch.Tensor, log_prior: torch.Tensor, cli_t, mod_t, losses: torch.Tensor):
        """``L̂_ij ← (1 − β)·L̂_ij + β·ℓ_ij`` for the pairs ``(cli_t, mod_t)``, then the posterior.

        Returns ``(ema, w, log_prior)`` (``log_prior ← log w`` with ``accumulate``).
        Public so that a site of the federated strategy runs it on its own row.
        """
        ema = ema.clone()
        ema[cli_t, mod_t] = (1 - self.beta) * ema[cli_t, mod_t] + self.beta * losses
        w = posterior(log_prior, ema)
        if self.accumulate:
            log_prior = torch.log(w.clamp(min=1e-300))
        return ema, w, log_prior

    def pair_gradients(self, models: dict, X, y, mb, weight: torch.Tensor, act_pair: torch.Tensor):
        """Each pair's ``∇ w_ij·ℓ(φ_j; batch_i)`` (zero for inactive pairs) and its value, one batched call."""
        grads, values = self.engine_.value_and_grad(self._pair_loss, models, (X, y, mb, weight), active=act_pair)
        return {name: g * act_pair.view(-1, *([1] * (g.dim() - 1))).to(g.dtype) for name, g in grads.items()}, values

    def apply_gradients(self, phi: dict, opt, opt_state: dict, mod_t, act_pair, grads: dict):
        """Model ``φ_j`` moves along ``Σ_i w_ij ∇ℓ(φ_j; batch_i)`` (Eq. 8), summed over the pairs; unused models wait."""
        n = next(iter(phi.values())).shape[0]
        summed = {name: torch.zeros_like(phi[name]).index_add_(0, mod_t, g) for name, g in grads.items()}
        # the protocol's decay, once per model
        summed = with_decay(summed, decay_gradient(phi, self._decay_names(), float(self.protocol_.weight_decay)))
        used = torch.zeros(n, dtype=torch.bool, device=mod_t.device)
        used[mod_t[act_pair]] = True
        return opt.step(phi, summed, opt_state, used)

    def train_round(self, state, r, rng):
        n = self.federation_.n
        dev = self.engine_.device_
        k = min(int(self.neighbours), n - 1)
        phi, w = state["phi"], state["w"]
        nb = sample_neighbours(w.cpu().numpy(), k, float(self.eps), rng(1))
        # pairs (client i, model j): each client's own model first, then its neighbours
        cli = np.repeat(np.arange(n), k + 1)
        mod = np.concatenate([np.arange(n)[:, None], nb], axis=1).reshape(-1)
        cli_t, mod_t = torch.as_tensor(cli, device=dev), torch.as_tensor(mod, device=dev)
        # E-step
        losses = self.full_losses(phi, cli_t, mod_t).to(torch.float64)
        ema, w, log_prior = self.e_step(state["ema"], state["log_prior"], cli_t, mod_t, losses)
        # M-step
        opt = self.make_optimizer()
        opt_state = state["opt"]
        weight = w[cli_t, mod_t].to(next(iter(phi.values())).dtype)
        data = self.train_data_
        total, count = 0.0, 0
        for _ in range(self.epochs_per_round(self.federation_)):
            idx, mask, active = epoch_plan(data.sizes, self.minibatch_size(), rng(0))
            for s in range(idx.shape[0]):
                idx_t = torch.as_tensor(idx[s], device=dev)
                X, y = data.gather(idx_t[cli_t], cli_t)
                mb = torch.as_tensor(mask[s], device=dev)[cli_t]
                act_pair = torch.as_tensor(active[s], device=dev)[cli_t]
                grads, values = self.pair_gradients(stack_select(phi, mod_t), X, y, mb, weight, act_pair)
                phi, opt_state = self.apply_gradients(phi, opt, opt_state, mod_t, act_pair, grads)
                own = act_pair & (cli_t == mod_t)
                total += float((values / weight.clamp(min=1e-30))[own].sum())
                count += int(own.sum())
        info = {"loss": total / max(count, 1), "self_weight": float(torch.diagonal(w).mean())}
        return {"phi": phi, "opt": opt_state, "ema": ema, "log_prior": log_prior, "w": w,
                "history": list(state["history"]) + [w.cpu()],
                "ema_history": list(state["ema_history"]) + [ema.cpu()],
                "neighbours": list(state["neighbours"]) + [torch.as_tensor(nb)]}, info

    def finish(self, state):
        self.params_ = {k: v.detach().cpu() for k, v in state["phi"].items()}
        w = state["w"].cpu().numpy().astype(np.float64)
        self.posterior_ = w / w.sum(axis=1, keepdims=True)
        convert = data_weights if self.weights == "data" else (lambda x: x / x.sum(axis=1, keepdims=True))
        self.weights_ = convert(self.posterior_)
        self.posterior_history_ = [np.asarray(h, dtype=np.float64) for h in state["history"]]
        self.weights_history_ = [convert(h) for h in self.posterior_history_]
        self.ema_loss_ = state["ema"].cpu().numpy()
        self.ema_history_ = [np.asarray(x) for x in state["ema_history"]]
        self.neighbours_history_ = [np.asarray(x) for x in state["neighbours"]]

    def client_scores(self, data: Padded) -> torch.Tensor:
        """Mixture prediction ``Σ_j w_ij p(·|x; φ_j)`` for each client, as log-probabilities / logits."""
        n = len(data)
        dev = data.X.device
        w = torch.as_tensor(self.posterior_, device=dev)
        cli, mod = torch.nonzero(w > 1e-12 * w.amax(dim=1, keepdim=True), as_tuple=True)
        phi = {k: v.to(dev) for k, v in self.params_.items()}
        out = self.engine_.map(self.spec_.forward, stack_select(phi, mod), (data.X[cli],)).to(torch.float64)
        task = self.federation_.task
        if task == "regression":
            probs = out
        elif task == "binary":
            probs = torch.sigmoid(out)
        else:
            probs = torch.softmax(out, dim=-1)
        mix = torch.zeros((n, *probs.shape[1:]), dtype=torch.float64, device=dev)
        mix.index_add_(0, cli, probs * w[cli, mod].view(-1, 1, 1))
        if task == "regression":
            return mix
        mix = mix.clamp(min=1e-300)
        if task == "binary":
            return torch.log(mix) - torch.log1p(-mix.clamp(max=1 - 1e-16))
        return torch.log(mix)

    def estimate_extra(self, peeling):
        names = self.federation_.names
        return {**super().estimate_extra(peeling), "ema_loss": np.round(self.ema_loss_, 8).tolist(),
                "posterior": np.round(self.posterior_, 10).tolist(),
                "neighbours_history": [[[names[j] for j in row] for row in nb] for nb in self.neighbours_history_]}
