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
from coalitions.learners.methods.phases import Phase
from coalitions.learners.training.decay import decay_gradient, with_decay
from coalitions.learners.training.engine import Padded, epoch_plan, epoch_steps_of, stack_select
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


def sample_neighbours(w: np.ndarray, k: int, eps: float, rng, rows: np.ndarray | None = None) -> np.ndarray:
    """ε-greedy choice of ``k`` other clients for every row of ``w``: (M, k) int array.

    ``w`` holds posterior rows (M, N) of the clients ``rows`` (their indices in the federation;
    default: all ``N``, in order).  Per client, with probability ``eps`` a uniform sample without
    replacement of the others, otherwise the ``k`` others of highest ``w_ij`` (ties to the lower
    index).  ``rng`` draws one row per client (``random((M, 1))``, then ``random((M, N))``), so a
    site drawing its own row from ``SiteGenerator`` (``coalitions.learners.federated.personal``)
    gets what the in-process draw gives it.
    """
    w = np.asarray(w)
    m, n = w.shape
    rows = np.arange(m) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.zeros((m, k), dtype=np.int64)
    explore = np.asarray(rng.random((m, 1)))[:, 0] < eps
    keys = np.asarray(rng.random((m, n)))
    for a, i in enumerate(rows):  # N small rows of bookkeeping, not training
        others = np.delete(np.arange(n), i)
        if explore[a]:
            order = others[np.argsort(np.delete(keys[a], i), kind="stable")]
        else:
            order = others[np.lexsort((others, -w[a, others]))]
        out[a] = order[:k]
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

    # Its own parameters (PersonalizedLearner adds the common ones after them).
    neighbours: int = 3
    eps: float = 0.3
    beta: float = 0.6
    accumulate: bool = False
    weights: str = "data"
    likelihood: str = "mean"

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

    # -- the rounds: a neighbour sampling, then one exchange per minibatch step
    #: What a site keeps between exchanges: its rows of the tracked losses, prior and posterior, its
    #: neighbours and its index in the federation.  The final evaluation sends every model down.
    kept = ("row", "nb", "index")
    down = ("phi",)

    def init_params(self, gen, device, copies: int) -> dict:
        """Each client's model its own draw (the other learners start every client alike).

        The models are EM's mixture components: identical ones stay identical (every E-step's losses tie
        across models, the posterior stays uniform, and every model takes the same update), the symmetric
        fixed point of EM.  In the paper's decentralised setting each client initialises its own model.
        """
        return {k: v.to(device) for k, v in self.spec_.init(gen, copies).items()}

    def init_state(self, fed, gen, device):
        """Models, the server's optimiser state over them, uniform prior and posterior, ``L̂`` of the initial models.

        Without data (the server of a federated run) ``L̂`` starts unknown (NaN): each site
        measures its row on its first E-step, where every model is still the initial one.
        """
        n = fed.n
        phi = self.init_params(gen, device, n)
        own = torch.arange(n, device=device)
        l0 = (self.full_losses(phi, own, own).to(torch.float64) if getattr(self, "train_data_", None) is not None
              else torch.full((n,), math.nan, dtype=torch.float64, device=device))
        k = min(int(self.neighbours), n - 1)
        return {"phi": phi, "opt": self.make_optimizer().init(phi),
                "row": {"ema": l0[:, None].expand(n, n).clone(),
                        "log_prior": torch.full((n, n), -math.log(n), dtype=torch.float64, device=device),
                        "w": torch.full((n, n), 1.0 / n, dtype=torch.float64, device=device)},
                "nb": {"nb": torch.zeros((n, k), dtype=torch.int64, device=device)},
                "index": {"i": own.clone()},
                "history": [], "ema_history": [], "neighbours": []}

    def _k(self) -> int:
        return min(int(self.neighbours), len(self.train_sizes_) - 1)

    def phases(self, r):
        """``sample`` (each site names its neighbours), then a ``step`` per minibatch step of each local epoch.

        The round's first step also runs the E-step and uploads the site's rows (``row``).  Under early
        stopping the sampling exchange also brings every model down, so that a site scores what it
        would predict with after the previous round (its posterior mixture) before it samples.
        """
        steps = int(epoch_steps_of(self.train_sizes_, self.minibatch_size()).max())
        out = [Phase(up=("nb",), down=() if self.patience_rounds() is None else ("phi",), name="sample")]
        for e in range(int(self.epochs_per_round(self.federation_))):
            out += [Phase(up=("grads", "active", "row") if e == s == 0 else ("grads", "active"), down=("models",),
                          name="step", epoch=e, step=s) for s in range(steps)]
        return tuple(out)

    def e_step(self, ema: torch.Tensor, log_prior: torch.Tensor, cli_t, mod_t, losses: torch.Tensor):
        """``L̂_ij ← (1 − β)·L̂_ij + β·ℓ_ij`` for the pairs ``(cli_t, mod_t)``, then the posterior.

        Returns ``(ema, w, log_prior)`` (``log_prior ← log w`` with ``accumulate``).
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

    def _pairs(self, state: dict):
        """``(cli_t, mod_t)``: each row's client (in the state) and model (in the federation), own model first."""
        rows = state["index"]["i"]
        cli_t = torch.arange(rows.shape[0], device=rows.device).repeat_interleave(self._k() + 1)
        return cli_t, torch.cat([rows[:, None], state["nb"]["nb"]], dim=1).reshape(-1)

    def site_phase(self, state, r, rng, phase):
        """A site's share of a phase, on its rows of the state (all ``N`` in process, its own over Flower).

        ``sample``: its ε-greedy neighbours from its posterior row (:func:`sample_neighbours`, stream 1).
        ``step`` (epoch ``e``, step ``s``): ``state["models"]`` holds, per row, the row's own model and
        its neighbours' as they stand; on the round's first step the E-step on them (loss on the whole
        training split); then ``∇ w_ij·ℓ(φ_j; batch_i)`` for each (:meth:`pair_gradients`), which the
        server sums per model.  The minibatches are epoch ``e`` of the round's stream 0.
        """
        row = state["row"]
        if phase.name == "sample":
            rows = state["index"]["i"]
            nb = sample_neighbours(row["w"].cpu().numpy(), self._k(), float(self.eps), rng(1), rows.cpu().numpy())
            return {**state, "nb": {"nb": torch.as_tensor(nb, device=rows.device)}}, {"loss": 0.0, "count": 0}
        models = state["models"]
        cli_t, mod_t = self._pairs(state)
        dev = cli_t.device
        info: dict = {}
        if phase.epoch == 0 and phase.step == 0:    # the E-step, on the models as the round starts
            losses = self.full_losses(models, cli_t, torch.arange(cli_t.shape[0], device=dev)).to(torch.float64)
            own = losses.view(-1, self._k() + 1)[:, :1]
            ema = torch.where(torch.isnan(row["ema"]), own, row["ema"])   # a site's first: every model the initial one
            ema, w, log_prior = self.e_step(ema, row["log_prior"], cli_t, mod_t, losses)
            row = {"ema": ema, "log_prior": log_prior, "w": w}
            info["self_weight"] = float(w[cli_t[::self._k() + 1], mod_t[::self._k() + 1]].mean())
        weight = row["w"][cli_t, mod_t].to(next(iter(models.values())).dtype)
        data = self.train_data_
        gen = rng(0)
        for _ in range(phase.epoch + 1):
            idx, mask, active = epoch_plan(data.sizes, self.minibatch_size(), gen)
        if phase.step < idx.shape[0]:
            idx_t = torch.as_tensor(idx[phase.step], device=dev)
            X, y = data.gather(idx_t[cli_t], cli_t)
            mb = torch.as_tensor(mask[phase.step], device=dev)[cli_t]
            act_pair = torch.as_tensor(active[phase.step], device=dev)[cli_t]
            grads, values = self.pair_gradients(models, X, y, mb, weight, act_pair)
            own_pair = act_pair & (torch.arange(cli_t.shape[0], device=dev) % (self._k() + 1) == 0)
            count = int(own_pair.sum())
            total = float((values / weight.clamp(min=1e-30))[own_pair].sum())
        else:   # this site's epoch is over; larger sites still step
            grads = {key: torch.zeros_like(v) for key, v in models.items()}
            act_pair = torch.zeros(cli_t.shape[0], dtype=torch.bool, device=dev)
            count, total = 0, 0.0
        return ({**state, "row": row, "grads": grads, "active": {"a": act_pair.to(torch.int64)}},
                {**info, "loss": total / count if count else 0.0, "count": count})

    def server_phase(self, state, r, phase):
        """``sample``: each site's models gathered (``models``).  ``step``: Eq. 8's update of every model
        (:meth:`apply_gradients`) and the models gathered again; the round's first step records the sites'
        rows (the weights' history), its last drops what only the round needed."""
        n = next(iter(state["phi"].values())).shape[0]
        mod_t = torch.cat([torch.arange(n, device=state["nb"]["nb"].device)[:, None], state["nb"]["nb"]],
                          dim=1).reshape(-1)
        if phase.name == "sample":
            return {**state, "models": stack_select(state["phi"], mod_t)}
        out = dict(state)
        if phase.epoch == 0 and phase.step == 0:
            out.update(history=[*state["history"], state["row"]["w"].cpu()],
                       ema_history=[*state["ema_history"], state["row"]["ema"].cpu()],
                       neighbours=[*state["neighbours"], state["nb"]["nb"].cpu()])
        phi, opt_state = self.apply_gradients(state["phi"], self.make_optimizer(), state["opt"], mod_t,
                                              state["active"]["a"].bool(), state["grads"])
        out.update(phi=phi, opt=opt_state, models=stack_select(phi, mod_t))
        if phase == self.phases(r)[-1]:
            for key in ("models", "grads", "active"):
                out.pop(key)
        return out

    # -- what travels over Flower
    def share(self, key, value, i, n):
        """``models``: site ``i``'s own model and its neighbours' (its block of ``K + 1`` rows); ``phi``: every model."""
        if key == "phi":
            return dict(value)
        if key == "models":
            b = self._k() + 1
            return {name: v[i * b:(i + 1) * b] for name, v in value.items()}
        return super().share(key, value, i, n)

    def record_rows(self, key):
        return self._k() + 1 if key in ("grads", "active") else 1

    def record_shapes(self, key):
        n = len(self.train_sizes_)
        return {"nb": {"nb": (self._k(),)}, "active": {"a": ()},
                "row": {"ema": (n,), "log_prior": (n,), "w": (n,)}}.get(key) or super().record_shapes(key)

    def record_dtype(self, key):
        return {"nb": "int64", "active": "int64", "row": "float64"}.get(key, "float32")

    def check_upload(self, key, value, site):
        n, k = len(self.train_sizes_), self._k()
        if key == "nb":
            nb = [int(j) for j in value["nb"][0]]
            if len(set(nb)) != k or not all(0 <= j < n and j != site for j in nb):
                return f"neighbours {nb!r} are not {k} distinct other sites of 0..{n - 1}"
        if key == "active" and not np.isin(value["a"], (0, 1)).all():
            return "its active flags are not 0 or 1"
        if key == "row":
            w = value["w"][0]
            if (w < 0).any() or (w > 1).any() or abs(float(w.sum()) - 1.0) > 1e-4:
                return "its posterior row is not a probability vector"
            if (value["ema"] < 0).any() or (value["log_prior"] > 0).any():
                return "its tracked losses are negative or its log-prior positive"
        return None

    def finish(self, state):
        self.params_ = {k: v.detach().cpu() for k, v in state["phi"].items()}
        w = state["row"]["w"].cpu().numpy().astype(np.float64)
        self.posterior_ = w / w.sum(axis=1, keepdims=True)
        convert = data_weights if self.weights == "data" else (lambda x: x / x.sum(axis=1, keepdims=True))
        self.weights_ = convert(self.posterior_)
        self.posterior_history_ = [np.asarray(h, dtype=np.float64) for h in state.get("history", [])]
        self.weights_history_ = [convert(h) for h in self.posterior_history_]
        self.ema_loss_ = state["row"]["ema"].cpu().numpy()
        self.ema_history_ = [np.asarray(x) for x in state.get("ema_history", [])]
        self.neighbours_history_ = [np.asarray(x) for x in state.get("neighbours", [])]

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
