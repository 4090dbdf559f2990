"""FedAMP and HeurFedAMP: attentive message passing (Huang et al., AAAI 2021; docs/concepts.md §5).

FedAMP minimises ``Σ_i F_i(w_i) + λ Σ_{i<j} A(‖w_i − w_j‖²)`` with
``A(x) = 1 − e^{−x/σ}`` by alternating two steps each round ``k``:

1. **Message passing** (server): the cloud model of client ``i`` is
   ``u_i = Σ_j ξ_ij w_j`` where, for ``j ≠ i``,

   * plain FedAMP: ``ξ_ij = α_k · A'(‖w_i − w_j‖²) = (α_k/σ) · e^{−‖w_i − w_j‖²/σ}``
     and ``ξ_ii = 1 − Σ_{j≠i} ξ_ij``;
   * HeurFedAMP (for deep networks):
     ``ξ_ij = (1 − ξ_ii) · e^{σ·cos(w_i, w_j)} / Σ_{h≠i} e^{σ·cos(w_i, w_h)}``
     with the self-attention ``ξ_ii`` a hyper-parameter.

   **Guard** (plain): when ``Σ_{j≠i} ξ_ij > 1`` (large ``α_k/σ``) ``ξ_ii`` would
   be negative and ``u_i`` no convex combination; the off-diagonal entries of
   that row are then scaled by ``1/Σ_{j≠i} ξ_ij`` so that ``ξ_ii = 0``: the
   relative attention between the others is kept and every row of ``ξ`` stays
   stochastic with a non-negative diagonal.  ``guarded_rows_`` counts how often.
2. **Proximal local step** (client): starting from ``u_i``, client ``i`` runs
   a round's local steps of minibatch descent on

   ``F_i(w) + λ/(2α_k) · ‖w − u_i‖²``,

   the squared distance computed on live tensors, so it *has* a gradient
   ``(λ/α_k)(w − u_i)`` that pulls ``w`` towards the cloud model (a popular
   re-implementation computes it on detached copies, where it has none and the
   method silently trains local-only).  ``α_k = 0`` switches message passing
   off: ``ξ = I`` and, since ``λ/(2α_k)`` would be infinite and freeze every
   model, the proximal term is dropped — exactly Local training.

The weight matrix of the estimate is ``ξ`` computed from the final models
(``weights_``); ``weights_history_[k]`` is the ``ξ`` used in round ``k``.
Distances and cosines use all parameters flattened, in float64.

Defaults.  Our text of the paper lost its numbers, so the defaults are ours,
chosen on ``digits`` with the common SGD settings (lr 0.1, momentum 0.9;
``docs/learners-personalized.md``): ``α_k = 0.5`` and ``λ = 0.2`` (a proximal
weight ``λ/(2α_k) = 0.2``; with ``λ = 1`` plain FedAMP diverged on a
pathological split); plain ``σ = 10``; HeurFedAMP ``σ = 200`` (models that
start from one common initialisation keep cosines near 1, so the temperature
must be high for their differences to matter) and ``ξ_ii = 0.3``.
"""

from __future__ import annotations

import math
from abc import abstractmethod

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner, unflatten
from coalitions.learners.training.engine import flatten
from coalitions.params import MAX_STEPS, check_param

__all__ = ["FedAMP", "FedAMPHeuristic", "attention_plain", "attention_heuristic", "proximal_loss",
           "affinity_plain", "affinity_heuristic", "local_epochs_for", "squared_distances", "GRAPHS", "DISTANCES"]

#: Which matrix the weight rule reads: the self-referenced affinity (default) or ``ξ`` itself.
GRAPHS = ("affinity", "xi")

#: What plain FedAMP's ``A`` reads: the paper's ``‖w_i − w_j‖²`` or that over the parameter count.
DISTANCES = ("sum", "mean")


def squared_distances(W: torch.Tensor, distance: str = "sum") -> torch.Tensor:
    """Pairwise ``‖w_i − w_j‖²`` of flattened models ``W`` (N, P), float64; over ``P`` when ``distance="mean"``.

    With ``"sum"`` (the paper's form) the distance of two models that differ by
    ``δ`` in every coordinate is ``P·δ²``: it grows with the parameter count, so
    that on a 25k-parameter MLP ``e^{−‖w_i − w_j‖²/σ}`` and with it every
    ``ξ_ij`` (``j ≠ i``) vanish and ``ξ`` is the identity unless ``σ`` is
    re-chosen per model.  ``"mean"`` reads ``‖w_i − w_j‖²/P`` (the mean squared
    coordinate difference): the same ``σ`` means the same thing on any model, and
    ``ξ`` is unchanged when every coordinate is repeated.
    """
    W = W.to(torch.float64)
    d = torch.cdist(W, W).pow(2)
    return d / max(W.shape[1], 1) if distance == "mean" else d


def attention_plain(W: torch.Tensor, alpha: float, sigma: float, distance: str = "sum") -> tuple[torch.Tensor, int]:
    """FedAMP's ``ξ`` from flattened models ``W`` (N, P), with the guard of the module docstring.

    ``distance`` is the argument of ``A`` (:func:`squared_distances`).

    Returns ``(ξ, guarded)``: ``ξ`` (N, N) float64 with stochastic rows and a
    non-negative diagonal, and how many rows the guard rescaled.
    """
    W = W.to(torch.float64)
    n = W.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=W.device)
    if alpha == 0 or n == 1:
        return eye.to(torch.float64), 0
    d = squared_distances(W, distance)
    off = torch.where(eye, torch.zeros_like(d), (alpha / sigma) * torch.exp(-d / sigma))
    s = off.sum(dim=1, keepdim=True)
    over = s > 1
    off = torch.where(over, off / s, off)
    xi = off + torch.diag(1 - off.sum(dim=1))
    return xi.clamp(min=0), int(over.sum())


def attention_heuristic(W: torch.Tensor, sigma: float, self_weight: float) -> torch.Tensor:
    """HeurFedAMP's ``ξ``: ``(1 − ξ_ii)·softmax_{j≠i}(σ·cos(w_i, w_j))`` off the diagonal, ``ξ_ii`` on it."""
    W = W.to(torch.float64)
    n = W.shape[0]
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64, device=W.device)
    unit = W / W.norm(dim=1, keepdim=True).clamp(min=1e-300)
    cos = unit @ unit.T
    eye = torch.eye(n, dtype=torch.bool, device=W.device)
    off = torch.softmax(torch.where(eye, torch.full_like(cos, -math.inf), sigma * cos), dim=1)
    return (1 - self_weight) * off + self_weight * eye.to(torch.float64)


def _self_referenced(K: torch.Tensor) -> np.ndarray:
    """``K`` with ``K_ii = 1`` (a peer identical to ``i``), row-normalised, as a NumPy array."""
    k = K.fill_diagonal_(1.0).cpu().numpy()
    return k / k.sum(axis=1, keepdims=True)


def affinity_plain(W: torch.Tensor, sigma: float, distance: str = "sum") -> np.ndarray:
    """Plain FedAMP's attention relative to an identical peer: ``K_ij = e^{−‖w_i − w_j‖²/σ}``.

    ``ξ_ij = (α_k/σ)·K_ij`` for ``j ≠ i``, and ``α_k/σ`` is the attention the same
    formula gives a peer whose model equals ``w_i`` (a copy of client ``i``), so
    ``K_ij ∈ (0, 1]`` reads "how close to a copy of me is ``j``", independently of
    ``α_k`` and of the number of clients; ``K_ii = 1``.  Returned row-normalised
    (``K_ij / Σ_k K_ik``), so that the relative rule ``w_ij/w_ii ≥ t`` is ``K_ij ≥ t``;
    ``distance`` as in :func:`squared_distances`.
    """
    K = torch.exp(-squared_distances(W, distance) / sigma)
    return _self_referenced(K)


def affinity_heuristic(W: torch.Tensor, sigma: float) -> np.ndarray:
    """HeurFedAMP's attention relative to an identical peer: ``K_ij = e^{σ(cos(w_i, w_j) − 1)}``.

    ``ξ_ij ∝ e^{σ·cos(w_i, w_j)}`` and a copy of client ``i`` (cosine 1) would get
    ``e^{σ}``; ``K_ij ∈ (0, 1]``, ``K_ii = 1``.  Unlike ``ξ`` (whose off-diagonal
    share ``1 − ξ_ii`` is fixed, so that with two clients ``ξ_12 = 1 − ξ_ii``
    whatever the models) it can say "alone".  Returned row-normalised.
    """
    W = W.to(torch.float64)
    unit = W / W.norm(dim=1, keepdim=True).clamp(min=1e-300)
    K = torch.exp(sigma * ((unit @ unit.T).clamp(-1, 1) - 1))
    return _self_referenced(K)


def local_epochs_for(sizes, batch_size, local_epochs: int, local_steps: int) -> int:
    """Epochs per round so that every client takes at least ``local_steps`` minibatch steps.

    Client ``i`` takes ``ceil(n_i/B)`` steps an epoch; the smallest client decides.
    """
    per_epoch = min(max(1, math.ceil(int(n) / (batch_size or max(int(n), 1)))) for n in sizes)
    return max(int(local_epochs), math.ceil(int(local_steps) / per_epoch))


def proximal_loss(task_loss, coef: float):
    """``F_i(w) + coef·‖w − u_i‖²`` for one model (``coef = λ/(2α_k)``), differentiable in ``w``."""
    def loss(params, X, y, m, u):
        prox = sum(((params[k] - u[k]) ** 2).sum() for k in params)
        return task_loss(params, X, y, m) + coef * prox
    return loss


class _AttentiveMessagePassing(PersonalizedLearner):
    """What FedAMP and HeurFedAMP share: the round (message passing, proximal local steps) and the readout.

    A variant gives its attention ``ξ`` (:meth:`_attention`), its affinity (:meth:`_affinity`)
    and the parameters of its own; the parameters here are documented on each variant.
    """

    # The parameters of both (PersonalizedLearner adds the common ones after them; each variant its own).
    alpha_k: float = 0.5
    lam: float = 0.2
    sigma: float = 10.0
    local_steps: int = 5
    graph: str = "affinity"

    def check_params(self):
        super().check_params()
        check_param("alpha_k", self.alpha_k, "number", low=0)
        check_param("lam", self.lam, "number", low=0)
        check_param("sigma", self.sigma, "number", low=0, low_open=True)
        check_param("local_steps", self.local_steps, "int", low=1, high=MAX_STEPS)
        check_param("graph", self.graph, "choice", choices=GRAPHS)

    @abstractmethod
    def _attention(self, W: torch.Tensor) -> torch.Tensor:
        """``ξ`` of the stacked flattened models ``W`` (each variant its own)."""

    up, down, kept = ("params",), ("u",), ("params",)

    def init_state(self, fed, gen, device):
        params = self.init_params(gen, device, fed.n)
        return {"params": params, "history": [], "guarded": 0, **self._passing(params)}

    def _passing(self, params: dict) -> dict:
        """The server's message passing on ``params``: ``ξ``, the cloud models ``u`` and its guarded rows."""
        self._guarded = 0
        xi, u = self.message_passing(params)
        return {"xi": xi, "u": u, "pending_guarded": self._guarded}

    def message_passing(self, params: dict) -> tuple[torch.Tensor, dict]:
        """The server's half of a round: ``ξ`` from the stacked models and every cloud model ``u_i = Σ_j ξ_ij w_j``.

        Public so that the federated strategy (``coalitions.learners.federated.personal``, docs/federated.md)
        runs this very step on the models the sites upload.
        """
        W = flatten(params)
        xi = self._attention(W)
        return xi, unflatten((xi.to(W.dtype) @ W), params)

    def epochs_per_round(self, fed) -> int:
        return self._epochs_for(self.train_sizes_)

    def _epochs_for(self, sizes) -> int:
        """Epochs of a round: at least ``local_steps`` steps (and the protocol's ``local_steps``) for every client."""
        return local_epochs_for(sizes, self.minibatch_size(), 1, max(int(self.local_steps), self._min_local_steps()))

    def local_step(self, u: dict, rng: np.random.Generator, sizes, kept: dict | None = None
                   ) -> tuple[dict, dict, np.ndarray]:
        """The clients' half: from ``u_i``, minimise ``F_i(w) + λ/(2α_k)·‖w − u_i‖²`` on ``train_data_``.

        ``sizes`` are the training-set sizes of the *whole* federation (they set
        the epochs, :func:`local_epochs_for`); ``rng`` draws the minibatch order;
        ``kept`` is what the sites kept from their previous round (their
        optimiser state, ``{"site_opt": ...}``; ``None`` in the first).
        Returns the new stacked models, what the sites keep for the next round
        and each model's mean loss (in that order, as :meth:`_site_steps`).
        """
        coef = 0.0 if self.alpha_k == 0 else float(self.lam) / (2 * float(self.alpha_k))
        loss = self._task_loss if coef == 0 else proximal_loss(self._task_loss, coef)
        args = () if coef == 0 else (u,)
        start = {k: v.clone() for k, v in u.items()}
        epochs = self._epochs_for(sizes)
        return self._site_steps(kept or {}, start, loss, rng, epochs=epochs, args=args)

    def site_step(self, state, r, rng):
        """Each site: from its cloud model ``u_i``, its local steps; it keeps and uploads its model ``w_i``."""
        new, kept, losses = self.local_step(state["u"], rng(0), self.train_sizes_, state)
        return {**state, "params": new, **kept}, {"loss": float(np.mean(losses))}

    def server_step(self, state, r):
        """The round's ``ξ`` goes to the record; ``ξ`` and every ``u_i`` of the next round from the uploaded models."""
        history = [*state["history"], state["xi"].cpu()]
        guarded = int(state["guarded"]) + int(state["pending_guarded"])
        return {**state, "history": history, "guarded": guarded, **self._passing(state["params"])}

    def finish(self, state):
        self.params_ = {k: v.detach().cpu() for k, v in state["params"].items()}
        self._guarded = int(state.get("guarded", 0))     # a Flower site has no record (the server's)
        xi = self._attention(flatten(self.params_)).numpy()
        self.guarded_rows_ = self._guarded
        self.weights_ = xi / xi.sum(axis=1, keepdims=True)
        self.weights_history_ = [np.asarray(h, dtype=np.float64) for h in state.get("history", [])]
        self.affinity_ = self._affinity(flatten(self.params_))

    @abstractmethod
    def _affinity(self, W: torch.Tensor) -> np.ndarray:
        """The row-normalised affinity of ``W`` the weight rule reads by default (each variant its own)."""

    def rule_weights(self) -> np.ndarray:
        """The matrix the weight rule reads: ``affinity_`` (``graph="affinity"``) or ``ξ``."""
        return self.affinity_ if self.graph == "affinity" else super().rule_weights()


class FedAMP(_AttentiveMessagePassing):
    """FedAMP with ``ξ_ij = α_k·A'(‖w_i − w_j‖²)`` (module docstring).

    Parameters
    ----------
    alpha_k : float
        Step size of the message-passing gradient step (0.5); ``0`` turns
        FedAMP into Local.
    lam : float
        ``λ``, weight of the attention-inducing regulariser (0.2); the local
        proximal weight is ``λ/(2α_k)``.
    sigma : float
        ``σ`` of ``A(x) = 1 − e^{−x/σ}`` (10.0).
    local_steps : int
        At least this many minibatch steps per client and round (5): local
        epochs are repeated until the smallest client has taken them
        (:func:`local_epochs_for`).  With one step per round the proximal term
        is inert: the step starts at ``u_i``, where its gradient
        ``(λ/α_k)(w − u_i)`` is zero, so ``λ`` changes nothing.
    graph : {"affinity", "xi"}
        The matrix the weight rule reads: the attention relative to an
        identical peer (:func:`affinity_plain`, default; with the relative rule
        ``j`` collaborates when ``e^{−‖w_i − w_j‖²/σ} ≥ t``), or ``ξ`` itself
        (whose ``ξ_ij ≤ α_k/σ = 0.05`` makes the relative rule give no edge below
        20 clients).
    distance : {"sum", "mean"}
        The argument of ``A``: the paper's ``‖w_i − w_j‖²`` ("sum", default) or
        ``‖w_i − w_j‖²/P`` over the parameter count ``P`` ("mean",
        :func:`squared_distances`).  Under "sum" the default ``σ = 10`` was chosen
        on the 4.8k-parameter digits MLP, where the final models' median
        ``‖w_i − w_j‖²`` is 2.4 (``e^{−0.24}``); a 25k-parameter MLP multiplies
        the distances, ``e^{−‖w_i − w_j‖²/σ} → 0`` and ``ξ → I`` (FedAMP
        becomes Local).  Under "mean" ``σ`` is in units of a squared coordinate
        difference (median 5e-4 on digits: ``σ ≈ 2e-3`` reproduces "sum" with
        ``σ = 10`` there) and means the same on any model.
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    weights_ : ndarray (N, N)
        ``ξ`` from the final models.
    weights_history_ : list of ndarray
        ``ξ`` of each round.
    guarded_rows_ : int
        Rows the negative-``ξ_ii`` guard rescaled, over all rounds.
    affinity_ : ndarray (N, N)
        Row-normalised affinity of the final models (what the rule reads by default).
    """

    method = "fedamp"

    distance: str = "sum"

    def check_params(self):
        super().check_params()
        check_param("distance", self.distance, "choice", choices=DISTANCES)

    def _attention(self, W: torch.Tensor) -> torch.Tensor:
        xi, guarded = attention_plain(W, float(self.alpha_k), float(self.sigma), self.distance)
        self._guarded = getattr(self, "_guarded", 0) + guarded
        return xi

    def _affinity(self, W: torch.Tensor) -> np.ndarray:
        return affinity_plain(W, float(self.sigma), self.distance)

    def estimate_extra(self, peeling):
        return {**super().estimate_extra(peeling), "guarded_rows": self.guarded_rows_}


class FedAMPHeuristic(_AttentiveMessagePassing):
    """HeurFedAMP: cosine attention with a fixed self-attention ``ξ_ii`` (module docstring).

    Parameters
    ----------
    alpha_k : float
        Only sets the proximal weight ``λ/(2α_k)`` (0.5); ``0`` turns the
        method into Local.
    lam : float
        ``λ`` (0.2).
    sigma : float
        Temperature of the cosine attention ``e^{σ·cos}`` (200.0).
    local_steps : int
        As for :class:`FedAMP` (5).
    graph : {"affinity", "xi"}
        The rule reads :func:`affinity_heuristic` ``e^{σ(cos − 1)}`` (default) or ``ξ``
        (with two clients ``ξ_12 = 1 − ξ_ii`` whatever the models: always linked).
    self_weight : float
        ``ξ_ii`` in ``[0, 1]`` (0.3).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.
    """

    method = "fedamp-heuristic"

    sigma: float = 200.0
    self_weight: float = 0.3

    def check_params(self):
        super().check_params()
        check_param("self_weight", self.self_weight, "number", low=0, high=1)

    def _attention(self, W):
        if self.alpha_k == 0:
            return torch.eye(W.shape[0], dtype=torch.float64, device=W.device)
        return attention_heuristic(W, float(self.sigma), float(self.self_weight))

    def _affinity(self, W):
        return affinity_heuristic(W, float(self.sigma))
