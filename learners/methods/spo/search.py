r"""SPO's direction search: the best point of a face of the simplex for a client.

For client ``i`` and a face ``Δ_S`` (the clients of ``S`` may carry weight), projected
gradient descent on ``i``'s validation loss under the trained hypernetwork,

.. math::  d \leftarrow \Pi_{\Delta_S}\big(d - t\, \hat g\big),\qquad
           \hat g = \frac{g - \bar g}{\lVert g - \bar g \rVert},\; g = \nabla_d L_i^{val}(h(d)),

with the exact projection (:func:`~coalitions.learners.methods.spo.simplex.project_simplex`)
and a batched line search over ``t = 1, 1/2, 1/4, …`` that only ever lowers the loss.
Several starts per row (the face's barycentre, the vertex ``e_i``, an optional warm start,
random points of the face); all rows and starts run as one batch; the best end point wins.
Randomness comes from ``numpy.random.default_rng([seed, *seed_key])``, so a search depends
on its row set and key alone, never on which searches ran before.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch.func import vmap

from coalitions.learners.methods.spo.fold import FoldedData, fold_pays
from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
from coalitions.learners.methods.spo.simplex import project_simplex
from coalitions.learners.training.engine import Padded
from coalitions.learners.training.models import ModelSpec
from coalitions.resources import check_memory

__all__ = ["DirectionSearch", "check_search_memory"]


def check_search_memory(rows: int, n: int, starts: int, line_search: int, n_params: int) -> None:
    """Refuse a direction search of ``rows`` rows that cannot run in memory (before anything is drawn).

    It holds each row's ``starts`` points and their ``line_search`` candidates (float64 and float32
    copies, 12 bytes a coordinate), and its gradient pass keeps every point's generated parameters.
    """
    check_memory(rows * starts * (12 * n * (line_search + 2) + 8 * n_params),
                 f"SPO's direction search ({rows} rows × --starts {starts} × --line-search {line_search})")


class DirectionSearch:
    """Searches a trained hypernetwork's faces for each client's best direction.

    Parameters
    ----------
    hypernet : ParetoHypernetwork
        Trained; its parameters are not changed.
    spec : ModelSpec
        The target model.
    loss : callable
        Per-sample loss ``loss(outputs, y)``.
    val : Padded
        Every client's validation split.
    device : torch.device
    seed : int
    search_steps : int
        Projected-gradient iterations.
    starts : int
        Starts per row (at least 2).
    line_search : int
        Step lengths tried per iteration (``1, 1/2, …, 2^{1-line_search}``).
    """

    def __init__(self, hypernet: ParetoHypernetwork, spec: ModelSpec, loss: Callable, val: Padded, device,
                 seed: int, search_steps: int, starts: int, line_search: int):
        self.hypernet, self.spec, self.loss, self.val, self.device = hypernet, spec, loss, val, device
        self.seed, self.search_steps, self.starts, self.line_search = seed, search_steps, starts, line_search
        self._folded: FoldedData | None = None
        self._fold_decided = False

    @property
    def folded(self) -> FoldedData | None:
        """The validation data folded into the hypernetwork's first-layer rows, where that pays (:mod:`.fold`).

        Decided and built on first use (the hypernetwork is trained by then, and frozen);
        ``None`` where the search generates every row's parameters (:func:`.fold.fold_pays`).
        """
        if not self._fold_decided:
            if fold_pays(self.hypernet, self.spec, int(self.val.sizes.max())):
                self._folded = FoldedData(self.hypernet, self.spec, self.val)
            self._fold_decided = True
        return self._folded

    def own_loss(self, d: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Validation loss of client ``targets[r]`` under ``h(d[r])``, for every row; chunked."""
        split = self.val
        folded = self.folded
        out = []
        chunk = 2048
        for s in range(0, d.shape[0], chunk):
            dd, tt = d[s:s + chunk], targets[s:s + chunk]
            # the rows sorted by target client, then one batched call per client on slices (views, no
            # copy of the generated parameters) with its validation data shared by all its rows
            # (gathering ``split.X[tt]`` would copy the whole validation set once per row)
            order = torch.argsort(tt, stable=True)
            sorted_t = tt[order]
            clients, counts = torch.unique_consecutive(sorted_t, return_counts=True)
            parts, start = [], 0
            if folded is not None:   # the first layer through each client's fold; the rest generated
                z = self.hypernet.features(dd[order])
                later = self.hypernet.generate(z, [k for k in self.hypernet.names
                                                   if k not in (folded.weight, folded.bias)])
                for c, k in zip(clients.tolist(), counts.tolist(), strict=True):
                    rows = {name: v[start:start + k] for name, v in later.items()}
                    parts.append(folded.losses(c, z[start:start + k], self.client_params(rows, c), self.loss))
                    start += k
            else:
                params = self.row_params(dd[order], sorted_t)
                for c, k in zip(clients.tolist(), counts.tolist(), strict=True):
                    p = {name: v[start:start + k] for name, v in params.items()}
                    parts.append(vmap(self._single_loss, in_dims=(0, None, None, None))(
                        p, split.X[c], split.y[c], split.m[c]))
                    start += k
            out.append(torch.cat(parts)[torch.argsort(order)])
        return torch.cat(out)

    def row_params(self, d: torch.Tensor, targets: torch.Tensor) -> dict:
        """Target-model parameters of each row ``(B, *shape)``: the hypernetwork's output at ``d[r]``."""
        return self.hypernet(d)

    def client_params(self, generated: dict, client: int) -> dict:
        """The folded path's parameters of rows that all target ``client``: the generated ones (shared heads)."""
        return generated

    def _single_loss(self, params, X, y, m):
        per = self.loss(self.spec.forward(params, X), y)
        return (per * m).sum() / m.sum()

    def __call__(self, targets: torch.Tensor, face: torch.Tensor, seed_key, warm: np.ndarray | None = None):
        """Best direction on each row's face for each row's target client (projected gradient).

        Parameters
        ----------
        targets : int tensor (B,)
            The client of each row.
        face : bool tensor (B, N)
            The face of each row (clients allowed a non-zero weight).
        seed_key : tuple of int or str
            Names this batch of searches for its random starts.
        warm : array (B, N), optional
            One more start per row.

        Returns ``(d, loss)`` as numpy arrays of shapes (B, N) and (B,).
        """
        dev = self.device
        B, n = face.shape
        K = max(int(self.starts), 2 + (warm is not None))
        check_search_memory(B, n, K, int(self.line_search), self.spec.n_params)
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
            draw = rng.gamma(1.0, size=(B, n)) * fnp
            starts.append(draw / draw.sum(1, keepdims=True))
        assert len(starts) == K
        d = torch.as_tensor(np.stack(starts, axis=1).reshape(B * K, n), dtype=torch.float32, device=dev)
        fk = faceg.repeat_interleave(K, dim=0)
        tk = tg.repeat_interleave(K)
        T = self.line_search
        steps = torch.tensor([2.0 ** -k for k in range(T)], dtype=torch.float32, device=dev)
        with torch.no_grad():
            loss = self.own_loss(d, tk)
        # the rows still descending: a row whose line search found no lower loss keeps its point, so
        # its next gradient and candidates would be the same and fail again; it leaves the batch
        live = torch.arange(d.shape[0], device=dev)
        for _ in range(self.search_steps):
            dl, fl, tl = d[live], fk[live], tk[live]
            dd = dl.clone().requires_grad_(True)
            with torch.enable_grad():
                g, = torch.autograd.grad(self.own_loss(dd, tl).sum(), dd)
            g = torch.where(fl, g, torch.zeros_like(g))
            cnt = fl.sum(1, keepdim=True)
            g = torch.where(fl, g - g.sum(1, keepdim=True) / cnt, torch.zeros_like(g))
            norm = g.norm(dim=1, keepdim=True)
            g = torch.where(norm > 0, g / norm.clamp(min=1e-30), torch.zeros_like(g))
            with torch.no_grad():
                cand = project_simplex(dl[:, None, :] - steps[None, :, None] * g[:, None, :], fl[:, None, :])
                lc = self.own_loss(cand.reshape(-1, n), tl.repeat_interleave(T)).reshape(-1, T)
                lc = torch.nan_to_num(lc, nan=math.inf)
                lbest, kbest = lc.min(dim=1)
                better = lbest < loss[live]
                if not bool(better.any()):
                    break
                d[live[better]] = cand[torch.arange(live.shape[0], device=dev), kbest][better]
                loss[live[better]] = lbest[better]
                live = live[better]
        loss = loss.reshape(B, K)
        which = torch.argmin(torch.nan_to_num(loss, nan=math.inf), dim=1)
        best_d = d.reshape(B, K, n)[torch.arange(B, device=dev), which]
        best_l = loss[torch.arange(B, device=dev), which]
        return best_d.double().cpu().numpy(), best_l.double().cpu().numpy()

