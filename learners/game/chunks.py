"""One chunk of the exhaustive game: train its subset models and score them (the unit of work of
the local loop and of the Ray tasks in :mod:`coalitions.learners.distributed`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch, mean_loss_batch
from coalitions.learners.game.bootstrap import rescore
from coalitions.learners.game.masks import membership
from coalitions.learners.game.personal import _scores_personal, train_subsets_personal
from coalitions.learners.game.shared import _scores, train_subsets


class ChunkTrainer:
    """Train and score the subset models of one chunk: the unit of work of the oracle.

    Built once per process from the oracle's settings and the federation (the
    training data concatenated on ``device``, the shared initial parameters
    drawn from the seed); calling it with a chunk's masks returns that chunk's
    values.  A subset's values do not depend on the chunk that holds it (every
    model starts from the same parameters and sees the same batch order), so
    chunks can run in any order, in any process — the local loop and the Ray
    tasks of :mod:`coalitions.learners.distributed` call the same object.
    """

    #: ``oracle``: the :class:`~coalitions.learners.exact.ExhaustiveOracle` whose settings it trains with.
    def __init__(self, oracle, fed: Federation, cfg: dict, device: str, draws=None):
        import torch

        from coalitions.learners.training.allocator import keep_freed_memory
        from coalitions.learners.training.models import make_model

        if str(device) == "cpu":  # the steps' buffers stay in the process (allocator module)
            keep_freed_memory()

        self.fed, self.cfg, self.device, self.draws = fed, cfg, device, draws
        self.seed = int(oracle.seed)
        self.dtype = torch.float64 if oracle.dtype == "float64" else torch.float32
        self.spec = make_model(cfg["model"], fed.input_shape, fed.n_outputs, hidden=cfg.get("hidden", oracle.hidden))
        self.protocol = oracle.protocol
        self._eval_batch = oracle._eval_batch

        def cat(part, attr):
            return np.concatenate([getattr(getattr(c, part), attr) for c in fed.clients])

        y_dtype = self.dtype if fed.task == "regression" else torch.int64
        self.X = torch.as_tensor(cat("train", "X"), device=device).to(self.dtype)
        self.y = torch.as_tensor(cat("train", "y"), device=device).to(y_dtype)
        self.owner = torch.as_tensor(np.repeat(np.arange(fed.n), fed.sizes("train")), device=device)
        self.evals = {part: torch.as_tensor(cat(part, "X"), device=device).to(self.dtype) for part in ("val", "test")}
        self.bounds = {part: np.concatenate([[0], np.cumsum(fed.sizes(part))]) for part in ("val", "test")}
        gen = torch.Generator().manual_seed(self.seed)
        self.init = {k: v[0].to(device) for k, v in self.spec.init(gen, 1, dtype=self.dtype).items()}
        self.personal = cfg.get("heads", "shared") == "personal"
        if self.personal:  # one head per client, each starting at the model's own initial head
            from coalitions.learners.training.models import personal_init

            self.init = personal_init(self.spec, self.init, fed.n)
        n = self.X.shape[0]
        self.step_samples = n if cfg["batch_size"] is None else min(n, cfg["batch_size"])

    def __call__(self, ms, progress: Callable[[int], None] | None = None) -> dict:
        """``{"val": (N, len(ms)), "test": (N, len(ms))}``: each member's metric, NaN for non-members.

        With bootstrap ``draws`` also ``"replicates"``: ``(B, N, len(ms))``, the validation
        metric re-scored on every replicate of each member's validation set (no retraining).
        """
        fed, cfg = self.fed, self.cfg
        if self.personal:
            params = train_subsets_personal(self.spec, fed.task, self.X, self.y, self.owner, ms, fed.n, self.init,
                                            epochs=cfg["epochs"], lr=cfg["lr"], l2=cfg["l2"],
                                            batch_size=cfg["batch_size"], seed=self.seed, progress=progress,
                                            protocol=self.protocol)
        else:
            params = train_subsets(self.spec, fed.task, self.X, self.y, self.owner, ms, fed.n, self.init,
                                   epochs=cfg["epochs"], lr=cfg["lr"], l2=cfg["l2"], batch_size=cfg["batch_size"],
                                   seed=self.seed, progress=progress, protocol=self.protocol)
        member = membership(ms, fed.n)
        out = {}
        loss = bool(cfg.get("loss_game"))
        if loss:
            out["val_loss"] = np.full((fed.n, len(ms)), np.nan)
        if self.draws is not None:
            out["replicates"] = np.full((len(self.draws[0]), fed.n, len(ms)), np.nan)
            if loss:
                out["replicates_loss"] = np.full_like(out["replicates"], np.nan)
        for part in ("val", "test"):
            block = np.full((fed.n, len(ms)), np.nan)
            if self.personal:
                scores = _scores_personal(self.spec, params, self.evals[part], fed.sizes(part),
                                          self._eval_batch(self.spec, len(ms)))
            else:
                scores = _scores(self.spec, params, self.evals[part], self._eval_batch(self.spec, len(ms)))
            lo = self.bounds[part]
            for i, c in enumerate(fed.clients):
                rows = member[:, i]
                if rows.any():
                    vals = evaluate_batch(fed.metric, getattr(c, part).y, scores[rows, lo[i]:lo[i + 1]])
                    if not np.all(np.isfinite(vals)):
                        raise InputError(f"client {c.name!r}: the {fed.metric} of its {part} split is "
                                         "undefined (a single class?)")
                    block[i, rows] = vals
                    if part == "val" and self.draws is not None:
                        out["replicates"][:, i, rows] = rescore(fed.metric, c.val.y, scores[rows, lo[i]:lo[i + 1]],
                                                                self.draws[i])
                    if part == "val" and loss:
                        mine = scores[rows, lo[i]:lo[i + 1]]
                        out["val_loss"][i, rows] = mean_loss_batch(fed.task, c.val.y, mine)
                        if self.draws is not None:
                            out["replicates_loss"][:, i, rows] = np.stack(
                                [mean_loss_batch(fed.task, c.val.y[d], mine[:, d]) for d in self.draws[i]])
            out[part] = block
        return out
