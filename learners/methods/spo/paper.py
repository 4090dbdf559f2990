r"""SPO as the paper's public code runs it: one hypernetwork per target, EPO at the searched direction.

Cui et al. (2022), "Collaboration Equilibrium in Federated Learning", Appendix B and the
authors' code (``hyper_model/train.py``).  For a target client ``i`` and the clients ``S``
it may collaborate with (a face ``Δ_S`` of the simplex, ``k = |S|``):

1. a **fresh hypernetwork** ``h_i`` (``Linear(k, H)``, then ``layers − 1`` times
   ``LeakyReLU(0.2) → Linear(H, H)``, then a linear map to the target model's parameters)
   and a direction ``d`` starting at the face's barycentre ``1/k``;
2. ``rounds`` rounds, each of

   * ``front_steps`` (5) **front steps**: SGD (momentum 0.5) on ``Σ_j k·α_j L_j(h_i(d))``,
     ``L_j`` client ``j``'s mean training loss, ``α`` the EPO linear program's weights at the
     *current* direction ``d`` (Mahapatra & Rajan 2020; :func:`.epo.epo_lp_batch`), so the
     network learns the Pareto model of that one ray, not the whole front;
   * ``direction_steps`` (1) **direction steps**: ``d ← d − η ∇_d L_i^{val}(h_i(d))``, then
     every coordinate of the face clamped to ``[ε, 1 − ε]`` with ``ε = 1/(3k)`` and the
     direction renormalised to sum 1 (so no client's weight ever reaches 0);

3. the direction ``d`` at the end is ``i``'s searched direction, and its validation loss the
   face's value; the paper then reads collaborators with the ratio rule
   ``d_j / d_i ≥ 0.7`` (:class:`~.oracle.SPOOracle`).

:class:`PaperSearch` has :class:`~.search.DirectionSearch`'s call signature: each row
(target, face) trains its own hypernetwork, all rows batched as stacked parameters (one
SGD over the stack is each row's own SGD, since the rows share nothing).  So the
oracle's rules (ratio, and elimination: a new trained row per candidate face) run on it
unchanged.  Differences from the code, all forced by this project: the validation data is
the federation's validation split (the code holds out 1/6 of the target's training data);
``ε`` uses the face's size ``k`` (the code runs one federation at a time, where ``k = N``);
a ``warm`` start is ignored (the code always starts at the barycentre).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch.func import jacrev, vmap

from coalitions.learners.methods.spo.epo import epo_lp_batch
from coalitions.learners.training.engine import Padded, make_optimizer
from coalitions.learners.training.models import ModelSpec

__all__ = ["PaperSearch", "clamp_direction", "alternation", "PAPER_SETTINGS", "PAPER_PROTOCOL", "README_SETTINGS",
           "README_PROTOCOL", "SOLVERS"]

#: How a front step weighs the clients' losses: ``"epo"``, ``k·α`` from EPO's program at the direction
#: (the code's default ``--solver_type epo``); ``"linear"``, the direction itself (linear scalarisation).
SOLVERS = ("epo", "linear")

#: The authors' code's own settings, which ``--variant paper`` takes wherever its flags are not given
#: (``coalitions learn``, ``coalitions.learners.methods.learning.Learning``): the hypernetwork
#: ``Linear(k, 100)`` and two layers, SGD at 0.01 with momentum 0.5, the ratio rule
#: (:class:`~coalitions.learners.methods.spo.estimator.SPO`'s keywords).
PAPER_SETTINGS = {"hidden": 100, "layers": 2, "lr": 0.01, "momentum": 0.5, "rule": "ratio"}
#: The code's schedule as a protocol's fields: 2000 rounds of 5 front steps, each on the whole training set,
#: no early stopping and no rate grid.
PAPER_PROTOCOL = {"steps": 10_000, "batch_size": None}
#: The procedure of the authors' README for synthetic (``variant="readme"``): the front first, trained by
#: linear scalarisation at a direction drawn from ``Dir(1/k)`` every step (``--sample_ray --solver_type linear``),
#: then 200 direction steps from the last direction drawn; the hypernetwork ``--n_hidden 1``, affine.
README_SETTINGS = {"hidden": 100, "layers": 1, "lr": 0.01, "momentum": 0.5, "rule": "ratio", "direction_steps": 200}
#: The README's front: ``--total_hnet_epoch 1000`` full-batch steps, once (``--total_epoch 1``).
README_PROTOCOL = {"steps": 1000, "batch_size": None}


def clamp_direction(d: torch.Tensor, face: torch.Tensor) -> torch.Tensor:
    """The paper's projection of a direction: clamp to ``[1/(3k), 1 − 1/(3k)]`` on the face, renormalise.

    ``k`` is the face's size per row; coordinates off the face are 0.  Rows of ``d`` (B, N),
    ``face`` a bool mask (B, N).
    """
    k = face.sum(-1, keepdim=True).to(d.dtype)
    eps = 1.0 / (3.0 * k)
    c = torch.minimum(torch.maximum(d, eps), 1.0 - eps)
    c = torch.where(face, c, torch.zeros_like(c))
    return c / c.sum(-1, keepdim=True)


def alternation(rounds: int, front_steps: int, direction_steps: int) -> list[str]:
    """The schedule of one training run: ``"front"`` and ``"direction"`` steps in order."""
    return (["front"] * front_steps + ["direction"] * direction_steps) * rounds


def _dirichlet_on_faces(rng: np.random.Generator, faces: np.ndarray) -> np.ndarray:
    """One direction per row drawn from ``Dir(1/k)`` on the row's face (``k`` its size); 0 off it.

    Drawn as normalised ``Gamma(1/k)`` variables, since each row has its own face and ``k`` (numpy's
    ``dirichlet`` takes one concentration vector for all rows); a row whose draws all underflow to 0
    keeps the barycentre.
    """
    k = faces.sum(1, keepdims=True)
    g = rng.gamma(np.where(faces, 1.0 / np.maximum(k, 1), 1.0)) * faces
    total = g.sum(1, keepdims=True)
    return np.where(total > 0, g / np.where(total > 0, total, 1.0), faces / np.maximum(k, 1))


class PaperSearch:
    """Per-row hypernetworks trained with EPO at the searched direction (module docstring).

    Parameters
    ----------
    spec : ModelSpec
        The target model.
    loss : callable
        Per-sample loss ``loss(outputs, y)``.
    train, val : Padded
        Every client's training and validation split.
    device : torch.device
    seed : int
    rounds : int
        Rounds of ``front_steps`` front steps and ``direction_steps`` direction steps (the code's 2000).
    front_steps, direction_steps : int
        The code's 5 and 1.
    lr, momentum : float
        SGD on the hypernetwork (the code's 0.01 and 0.5).
    direction_lr : float
        Gradient step on the direction (the code's ``lr_prefer``, 0.01).
    hidden, layers : int
        Hypernetwork width and depth (the code's 100 and 2).
    batch_size : int or None
        Training samples per client per front step (``None``: full batch, as the code on
        ``synthetic`` and ``adult``).
    solver : {"epo", "linear"}
        How a front step weighs the losses (:data:`SOLVERS`).
    sample_rays : bool
        Each front step evaluates and weighs at a direction drawn from ``Dir(1/k)`` on the row's
        face instead of the searched one, and the direction steps start from the last one drawn
        (the code's ``--sample_ray``, which overwrites its input ray with each draw).
    progress : callable, optional
        ``progress(done, total)`` after each round.

    Attributes
    ----------
    epo_fallbacks_ : int
        Front steps of a row whose EPO program failed (the direction itself weighted the losses).
    last_directions_ : list of ndarray
        After a call: the direction of every row after each round, ``(rounds, B, N)`` stacked.
    """

    def __init__(self, spec: ModelSpec, loss: Callable, train: Padded, val: Padded, device, seed: int,
                 rounds: int = 2000, front_steps: int = 5, direction_steps: int = 1, lr: float = 0.01,
                 momentum: float = 0.5, direction_lr: float = 0.01, hidden: int = 100, layers: int = 2,
                 batch_size: int | None = None, solver: str = "epo", sample_rays: bool = False,
                 progress: Callable | None = None):
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        self.solver, self.sample_rays = solver, bool(sample_rays)
        self.spec, self.loss, self.train, self.val, self.device = spec, loss, train, val, device
        self.seed, self.rounds, self.front_steps, self.direction_steps = seed, rounds, front_steps, direction_steps
        self.lr, self.momentum, self.direction_lr = lr, momentum, direction_lr
        self.hidden, self.layers, self.batch_size, self.progress = hidden, layers, batch_size, progress
        self.names = tuple(spec.shapes)
        self.shapes = tuple(tuple(spec.shapes[k]) for k in self.names)
        self.sizes: tuple[int, ...] = tuple(math.prod(s) for s in self.shapes)
        self.epo_fallbacks_ = 0
        #: ``{(target, face bitmask): (hypernetwork, direction)}`` of every row trained so far.
        self.trained_: dict[tuple[int, int], tuple[dict, torch.Tensor]] = {}

    # -- the stacked hypernetworks
    def init_params(self, n: int, generators: list[torch.Generator]) -> dict:
        """One hypernetwork per generator (stacked), each ``nn.Linear``'s default initialisation."""
        widths = [n] + [self.hidden] * self.layers + [sum(self.sizes)]
        rows: list[dict] = []
        for gen in generators:
            one = {}
            for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
                bound = 1.0 / math.sqrt(a)
                one[f"w{layer}"] = (torch.rand((a, b), generator=gen) * 2 - 1) * bound
                one[f"b{layer}"] = (torch.rand((b,), generator=gen) * 2 - 1) * bound
            rows.append(one)
        return {k: torch.stack([r[k] for r in rows]).to(self.device).requires_grad_(True) for k in rows[0]}

    def target_params(self, hp: dict, d: torch.Tensor) -> dict:
        """One hypernetwork (unstacked ``hp``) at one direction ``d`` (N,): the target's parameters."""
        h = d @ hp["w0"] + hp["b0"]
        for layer in range(1, self.layers + 1):   # the code: no activation before the output layer
            if layer < self.layers:
                h = torch.nn.functional.leaky_relu(h, 0.2)
            h = h @ hp[f"w{layer}"] + hp[f"b{layer}"]
        parts = torch.split(h, list(self.sizes))
        return {k: p.reshape(s) for k, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def _mean_loss(self, params, X, y, m):
        per = self.loss(self.spec.forward(params, X), y)
        return (per * m).sum() / m.sum()

    def client_losses(self, hp: dict, d: torch.Tensor, X, y, m) -> torch.Tensor:
        """Every client's mean loss on ``(X, y, m)`` (padded, (N, n, …)) under one row's model: (N,)."""
        params = self.target_params(hp, d)
        return vmap(self._mean_loss, in_dims=(None, 0, 0, 0))(params, X, y, m)

    def _own_val(self, hp, d, X, y, m):
        return self._mean_loss(self.target_params(hp, d), X, y, m)

    # -- one call: train every row and return its final direction
    def __call__(self, targets: torch.Tensor, face: torch.Tensor, seed_key, warm: np.ndarray | None = None):
        """Train one hypernetwork per row and search its direction; ``(d, loss)`` as numpy (B, N), (B,).

        ``targets`` (B,) the target client of each row, ``face`` (B, N) its face; a row's
        network is initialised from ``(seed, target, face)``; ``seed_key`` names the batch's
        minibatch stream; ``warm`` is ignored (the code starts at the barycentre).
        """
        dev = self.device
        B, n = face.shape
        ent = [int(self.seed)] + [x if isinstance(x, int) else sum(map(ord, x)) for x in seed_key]
        rng = np.random.default_rng(ent)
        fnp = face.numpy()
        keys = [(int(targets[b]), int(sum(1 << j for j in np.flatnonzero(fnp[b])))) for b in range(B)]
        # each row's network is drawn from its own (seed, target, face): a row's result does not depend on
        # which other rows share its batch (under full batch; minibatches come from one stream)
        hp = self.init_params(n, [torch.Generator().manual_seed(
            int(np.random.default_rng([int(self.seed), *key]).integers(2 ** 62))) for key in keys])
        opt = make_optimizer("sgd", self.lr, self.momentum, params=hp.values())
        fm = face.to(dev)
        d = clamp_direction(fm.to(torch.float32) / fm.sum(-1, keepdim=True), fm)
        tg = targets.to(dev)
        losses_fn = vmap(self.client_losses, in_dims=(0, 0, None, None, None))
        jac_fn = vmap(jacrev(self.client_losses), in_dims=(0, 0, None, None, None))
        val_fn = vmap(torch.func.grad_and_value(self._own_val, argnums=1))
        own = (self.val.X[tg], self.val.y[tg], self.val.m[tg])   # each row's target's validation split
        history = []
        for rnd in range(self.rounds):
            for _ in range(self.front_steps):
                X, y, m = self.train.sample(self.batch_size, rng)
                if self.sample_rays:   # the code's input ray overwritten by a Dir(1/k) draw on the face
                    draw = _dirichlet_on_faces(rng, fnp)
                    d = torch.as_tensor(draw, dtype=torch.float32, device=dev)
                L = losses_fn(hp, d, X, y, m)                         # (B, N)
                weights = (d if self.solver == "linear" else
                           self._epo_weights(hp, d, X, y, m, L.detach(), fnp, jac_fn))
                opt.zero_grad(set_to_none=True)
                (weights * L).sum().backward()
                opt.step()
            frozen = {k: v.detach() for k, v in hp.items()}
            for _ in range(self.direction_steps):
                g, _ = val_fn(frozen, d, *own)
                d = clamp_direction(d - self.direction_lr * g, fm)
            history.append(d.cpu().numpy())
            if self.progress is not None:
                self.progress(rnd + 1, self.rounds)
        with torch.no_grad():
            frozen = {k: v.detach() for k, v in hp.items()}
            loss = vmap(self._own_val)(frozen, d, *own)
        self.last_directions_ = np.stack(history) if history else np.zeros((0, B, n))
        for b, key in enumerate(keys):
            self.trained_[key] = ({k: v[b] for k, v in frozen.items()}, d[b])
        return d.double().cpu().numpy(), loss.double().cpu().numpy()

    def scores(self, D: np.ndarray, split: Padded) -> list[np.ndarray]:
        """Client ``i``'s outputs on ``split`` from the hypernetwork trained for ``i`` on the support of ``D[i]``.

        Under the paper's procedure a direction is only meaningful with the network trained
        at it: row ``i`` is read from the row (``i``, face = support of ``D[i]``) of an
        earlier call, at direction ``D[i]``.
        """
        out = []
        with torch.no_grad():
            for i, X in enumerate(split.raw_X):
                key = (i, int(sum(1 << j for j in np.flatnonzero(D[i] > 0))))
                if key not in self.trained_:
                    raise KeyError(f"client {i} was never searched on the face {key[1]:#b}")
                hp, _ = self.trained_[key]
                d = torch.as_tensor(D[i], dtype=torch.float32, device=self.device)
                out.append(self.spec.forward(self.target_params(hp, d), torch.tensor(X, device=self.device))
                           .double().cpu().numpy())
        return out

    def _epo_weights(self, hp, d, X, y, m, L, fnp: np.ndarray, jac_fn) -> torch.Tensor:
        """``k·α`` per row on its face (EPO at the row's direction; the direction itself on failure)."""
        jac = jac_fn({k: v.detach() for k, v in hp.items()}, d, X, y, m)
        G = torch.cat([g.reshape(g.shape[0], g.shape[1], -1) for g in jac.values()], dim=-1)
        gram = (G @ G.transpose(1, 2)).double().cpu().numpy()
        Ln = L.double().cpu().numpy()
        dn = d.detach().double().cpu().numpy()
        idx = [np.flatnonzero(f) for f in fnp]
        alphas = epo_lp_batch([Ln[b, ix] for b, ix in enumerate(idx)],
                              [gram[b][np.ix_(ix, ix)] for b, ix in enumerate(idx)],
                              [dn[b, ix] for b, ix in enumerate(idx)])
        out = np.zeros_like(dn)
        for b, (ix, a) in enumerate(zip(idx, alphas, strict=True)):
            if a is None:
                self.epo_fallbacks_ += 1
                a = dn[b, ix] / dn[b, ix].sum()
            out[b, ix] = a * len(ix)
        return torch.as_tensor(out, dtype=L.dtype, device=L.device)
