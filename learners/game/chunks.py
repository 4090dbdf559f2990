"""One chunk of the exhaustive game: train its subset models and score them (the unit of work of
the local loop and of the Ray tasks in :mod:`coalitions.learners.distributed`).

Learning rates chosen on validation.  Under a protocol with an ``lr_grid`` every subset model is
trained once per rate of the grid, from the same initial parameters and batch order, and keeps
the rate whose model has the lowest *pooled validation loss* over its members,
``Σ_{i∈S} n_i^val·L_i(S) / Σ_{i∈S} n_i^val`` (its training objective's loss on its members'
validation data; ties go to the earlier rate; test data are never read): the exact game's
column tunes its rate by the rule every learner column follows
(:class:`coalitions.learners.training.tuning.RateChoice`), one choice per subset model.  A model
whose pooled loss is NaN or ``+inf`` at every rate keeps no rate (``"lr"`` NaN) and the first
rate's scores.

Data roles (:mod:`coalitions.learners.data.roles`).  "Validation" above is the clients'
*tuning* rows (:attr:`~coalitions.learners.data.federation.Client.tuning`): under a protocol with a
``tune_split`` the rows held out of training, which never score the game; without one the
validation rows, which then tune and score.  The rate and the stopping step read only the tuning
rows; the game's values and bootstrap replicates only the validation rows.
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
from coalitions.learners.training.tuning import RateChoice


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

    #: ``oracle``: the :class:`~coalitions.learners.exact.ExhaustiveOracle` whose settings it trains with: its
    #: protocol for ``fed`` (``protocol``, or the default of ``fed``'s task and input shape), seed and precision.
    def __init__(self, oracle, fed: Federation, cfg: dict, device: str, draws=None):
        import torch

        from coalitions.learners.training.allocator import keep_freed_memory
        from coalitions.learners.training.models import make_model

        if str(device) == "cpu":  # the steps' buffers stay in the process (allocator module)
            keep_freed_memory()

        self.fed, self.cfg, self.device, self.draws = fed, cfg, device, draws
        self.seed = int(oracle.seed)
        self.dtype = torch.float64 if oracle.dtype == "float64" else torch.float32
        self.protocol = oracle._protocol_for(fed)
        self.spec = make_model(cfg["model"], fed.input_shape, fed.n_outputs, hidden=self.protocol.hidden)
        self._eval_batch = oracle._eval_batch

        def cat(part, attr):
            return np.concatenate([getattr(getattr(c, part), attr) for c in fed.clients])

        y_dtype = self.dtype if fed.task == "regression" else torch.int64
        self.X = torch.as_tensor(cat("train", "X"), device=device).to(self.dtype)
        self.y = torch.as_tensor(cat("train", "y"), device=device).to(y_dtype)
        self.owner = torch.as_tensor(np.repeat(np.arange(fed.n), fed.sizes("train")), device=device)
        self.evals = {part: torch.as_tensor(cat(part, "X"), device=device).to(self.dtype) for part in ("val", "test")}
        self.bounds = {part: np.concatenate([[0], np.cumsum(fed.sizes(part))]) for part in ("val", "test")}
        # the rows that choose a rate and a stopping step: the clients' own tuning rows, or the validation rows
        self.separate = fed.tuning is not None
        tune = "tuning" if self.separate else "val"
        if self.separate:
            self.evals["tuning"] = torch.as_tensor(cat("tuning", "X"), device=device).to(self.dtype)
            self.bounds["tuning"] = np.concatenate([[0], np.cumsum(fed.sizes("tuning"))])
        self.tune_part = tune
        gen = torch.Generator().manual_seed(self.seed)
        self.init = {k: v[0].to(device) for k, v in self.spec.init(gen, 1, dtype=self.dtype).items()}
        self.personal = cfg.get("heads", "shared") == "personal"
        if self.personal:  # one head per client, each starting at the model's own initial head
            from coalitions.learners.training.models import personal_init

            self.init = personal_init(self.spec, self.init, fed.n)
        n = self.X.shape[0]
        self.step_samples = n if self.protocol.batch_size is None else min(n, self.protocol.batch_size)
        self.tune_y = torch.as_tensor(cat(tune, "y"), device=device).to(y_dtype)
        self.tune_owner = torch.as_tensor(np.repeat(np.arange(fed.n), fed.sizes(tune)), device=device)
        self.n_tune = torch.as_tensor(fed.sizes(tune), device=device).to(self.dtype)

    def _early(self, ms, protocol):
        """Per-subset early stopping under ``protocol``'s patience (:mod:`.stopping`), or None without one."""
        if protocol is None or protocol.patience is None:
            return None
        import torch

        from coalitions.learners.data.metrics import loss_function
        from coalitions.learners.game.stopping import SubsetEarlyStop, pooled_validation_loss
        from coalitions.learners.training.models import member_personal_outputs, stacked_forward

        loss = loss_function(self.fed.task)
        member = torch.as_tensor(membership(ms, self.fed.n), device=self.X.device).to(self.dtype)
        onehot = torch.nn.functional.one_hot(self.tune_owner, self.fed.n).to(self.dtype)
        counts = self.fed.sizes(self.tune_part).tolist()
        members = [torch.nonzero(member[:, i])[:, 0] for i in range(self.fed.n)]
        lo = self.bounds[self.tune_part]
        X, y = self.evals[self.tune_part], self.tune_y   # the tuning rows only: they stop, the validation rows score

        def evaluate(params):
            if self.personal:   # only members' samples: ℓ_S reads no other (half the products)
                per_sample = X.new_zeros((len(ms), X.shape[0]))
                for i, out in enumerate(member_personal_outputs(self.spec, params, X, counts, members)):
                    if out is not None:
                        per_sample[:, lo[i]:lo[i + 1]].index_copy_(0, members[i], loss(out, y[lo[i]:lo[i + 1]]))
            else:
                per_sample = loss(stacked_forward(self.spec, params, X), y)
            per_client = (per_sample @ onehot) / self.n_tune.clamp(min=1)      # (M, N) mean losses of members
            return pooled_validation_loss(per_client, member, self.n_tune)

        return SubsetEarlyStop(protocol.patience, len(ms), self.X.device), evaluate

    @property
    def grid(self) -> tuple[float, ...] | None:
        """The protocol's learning-rate grid (``None``: one rate)."""
        return self.protocol.lr_grid

    def __call__(self, ms, progress: Callable[[int], None] | None = None) -> dict:
        """``{"val": (N, len(ms)), "test": (N, len(ms))}``: each member's metric, NaN for non-members.

        With bootstrap ``draws`` also ``"replicates"``: ``(B, N, len(ms))``, the validation
        metric re-scored on every replicate of each member's validation set (no retraining).
        With a learning-rate grid (module docstring) also ``"lr"``: ``(len(ms),)``, the rate each
        subset model kept; ``progress`` then counts the epochs of every rate in turn.
        """
        grid = self.grid
        loss_game = bool(self.cfg.get("loss_game"))
        if grid is None:
            return self._train_and_score(ms, progress, self.protocol, loss_game)
        epochs = int(self.protocol.epochs_for(int(self.X.shape[0])))
        n_tune = self.fed.sizes(self.tune_part).astype(np.float64)
        reads = "tune_loss" if self.separate else "val_loss"   # the rate reads the tuning rows only
        member = membership(ms, self.fed.n)
        best: dict = {}
        # the rule every tuned place follows; here NaN or +inf at every rate keeps no rate (lr NaN) and the
        # first rate's model
        choice = RateChoice(finite_only=False, first=False)
        for k, rate in enumerate(grid):
            tick = None if progress is None else (lambda ep, k=k: progress(k * epochs + ep))
            out = self._train_and_score(ms, tick, self.protocol.with_(lr=rate, lr_grid=None),
                                        loss_game or not self.separate, tune_loss=self.separate)
            weights = member.T * n_tune[:, None]                              # (N, len(ms)) members' tuning rows
            losses = out.pop(reads) if self.separate else out[reads]
            pooled = np.nansum(losses * weights, axis=0) / weights.sum(axis=0)
            better = choice.offer(pooled)                                     # strict: ties keep the earlier rate
            if not best:
                best = out
            else:
                for key, block in out.items():
                    best[key][..., better] = block[..., better]
        if not self.cfg.get("loss_game"):
            best.pop("val_loss", None)
            best.pop("replicates_loss", None)
        best["lr"] = choice.rates(grid)
        return best

    def train(self, ms, protocol, progress: Callable[[int], None] | None = None):
        """The trained parameters of the subset models ``ms`` under ``protocol`` and their early stop.

        Returns ``(params, early)``: the stacked parameters (under a protocol with ``patience``
        each model's best, where it stopped on its own pooled validation loss) and the
        ``(SubsetEarlyStop, evaluate)`` pair that stopped them (``None`` without patience).
        The models :meth:`__call__` scores, and the ones
        :meth:`~coalitions.learners.exact.ExhaustiveOracle.subset_outputs` trains again.
        """
        fed = self.fed
        early = self._early(ms, protocol)
        # every training setting from the one protocol (a grid's rate included; without one, PyTorch's
        # Adam and cosine at the oracle's protocol's settings); the oracle's config records the same
        # values as provenance and is not read here
        p = self.protocol if protocol is None else protocol
        settings = {"epochs": p.epochs_for(int(self.X.shape[0])), "lr": float(p.lr),
                    "l2": float(p.weight_decay), "batch_size": p.batch_size}
        train = train_subsets_personal if self.personal else train_subsets
        params = train(self.spec, fed.task, self.X, self.y, self.owner, ms, fed.n, self.init, **settings,
                       seed=self.seed, progress=progress, protocol=protocol, early=early)
        return params, early

    def _part_scores(self, params, ms, part: str):
        """The models' scores on every client's ``part`` rows (each member through its own head with personal heads)."""
        if self.personal:
            return _scores_personal(self.spec, params, self.evals[part], self.fed.sizes(part),
                                    self._eval_batch(self.spec, len(ms)))
        return _scores(self.spec, params, self.evals[part], self._eval_batch(self.spec, len(ms)))

    def _member_losses(self, params, ms, part: str) -> np.ndarray:
        """``(N, len(ms))``: each member's mean loss on its ``part`` rows under the models ``params`` (NaN elsewhere)."""
        fed = self.fed
        member = membership(ms, fed.n)
        scores = self._part_scores(params, ms, part)
        lo = self.bounds[part]
        out = np.full((fed.n, len(ms)), np.nan)
        for i, c in enumerate(fed.clients):
            rows = member[:, i]
            if rows.any():
                out[i, rows] = mean_loss_batch(fed.task, getattr(c, part).y, scores[rows, lo[i]:lo[i + 1]])
        return out

    def scores(self, ms, protocol, part: str):
        """The models of ``ms`` trained as :meth:`train` trains them: their scores on every client's ``part`` split."""
        params, _ = self.train(ms, protocol)
        return self._part_scores(params, ms, part)

    def _train_and_score(self, ms, progress, protocol, loss: bool, tune_loss: bool = False) -> dict:
        """Train the subset models ``ms`` under ``protocol`` and score them (``loss``: also the validation loss).

        Under a protocol with ``patience`` each model stops on its own pooled tuning loss and
        keeps its best parameters; ``"stopped_at"`` ``(len(ms),)`` records the step where it stopped.
        ``tune_loss`` (separate tuning rows only): also ``"tune_loss"`` ``(N, len(ms))``, each
        member's mean loss on its tuning rows, what the learning-rate grid reads.
        """
        fed = self.fed
        params, early = self.train(ms, protocol, progress)
        member = membership(ms, fed.n)
        out = {}
        if early is not None:
            out["stopped_at"] = early[0].stopped_at.cpu().numpy().astype(np.float64)
        if tune_loss:
            out["tune_loss"] = self._member_losses(params, ms, "tuning")
        if loss:
            out["val_loss"] = np.full((fed.n, len(ms)), np.nan)
        if self.draws is not None:
            out["replicates"] = np.full((len(self.draws[0]), fed.n, len(ms)), np.nan)
            if loss:
                out["replicates_loss"] = np.full_like(out["replicates"], np.nan)
        for part in ("val", "test"):
            block = np.full((fed.n, len(ms)), np.nan)
            scores = self._part_scores(params, ms, part)
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
