"""The exhaustive oracle's subset models measured on demand: a lazy game over a federation.

:class:`SubsetSource` is a :class:`coalitions.lazy.ValueSource`: asked for a list of coalitions
(bitmasks), it trains exactly those subset models with the settings of an
:class:`~coalitions.learners.exact.ExhaustiveOracle` — the same protocol, rate grid, early
stopping, data roles, seed and precision — and returns their validation values with the same
paired bootstrap replicates.  A subset's model does not depend on which other subsets are trained
beside it (every model starts from the same parameters and sees the same batch order:
:class:`~coalitions.learners.game.chunks.ChunkTrainer`), and each client's bootstrap resamples
are drawn once from the seed, so

``SubsetSource(fed, oracle).measure(masks)`` equals the columns ``masks`` of
``oracle.fit(fed).game_`` (and of its replicates)

whatever the order and grouping of the requests (to float32 precision: the scores of a chunk are
evaluated in batches sized by the chunk, so a loss can differ in its last bits): a search that measures a few hundred of the
``2^N`` coalitions sees the values the exhaustive game would have given them.  Nothing of size
``2^N`` is allocated, so ``N`` is bounded by memory for the data, not by the number of subsets
(masks are 64-bit integers: ``N ≤ 62``).

Backends: in this process (``oracle.backend == "local"``), or as Ray tasks
(``oracle.backend == "ray"``, :func:`coalitions.learners.distributed.oracle_chunks`), each chunk
of a request one task.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.roles import with_roles
from coalitions.learners.game.bootstrap import bootstrap_draws
from coalitions.learners.game.closed_form import (
    closed_form_mse,
    closed_form_replicates,
    closed_form_weights,
    replicate_moments,
)
from coalitions.learners.game.masks import membership

__all__ = ["SubsetSource", "MAX_CLIENTS", "GAMES"]

#: Clients a lazy game can hold: coalitions are 64-bit signed bitmasks.
MAX_CLIENTS = 62
#: Which value a source measures: the federation's metric, or (classification) the validation loss.
GAMES = ("metric", "loss")


class SubsetSource:
    """Subset models of ``federation`` trained on demand with ``oracle``'s settings.

    Parameters
    ----------
    federation : Federation
        The clients and their data (at most :data:`MAX_CLIENTS`).
    oracle : ExhaustiveOracle, optional
        The settings (protocol, seed, precision, replicates, heads, device, backend, threads,
        memory budget); default ``ExhaustiveOracle()``.  It is not fitted or changed.
    game : {"metric", "loss"}
        ``"metric"``: ``v_i(S)`` is the federation's metric on ``i``'s validation rows (its sense);
        ``"loss"`` (classification): the mean validation cross-entropy, sense ``"min"`` (the
        oracle's ``loss_game``).
    progress : callable, optional
        ``progress(done, total)`` in subset models within each :meth:`measure` call.

    Attributes
    ----------
    clients : tuple of str
    sense : {"max", "min"}
    provenance : dict
        What determines the values: data set, options, metric, model configuration, seed, data
        roles (the exhaustive oracle's provenance without the backend, which does not change them).
    backend_ : dict
        What trained the last request (``{"name": "local", "workers": 1}`` or Ray's record).
    trained_ : int
        Subset models trained so far by this object.

    Examples
    --------
    >>> from coalitions.learners.data import load_federation          # doctest: +SKIP
    >>> src = SubsetSource(load_federation("synthetic", seed=0))       # doctest: +SKIP
    >>> src.measure(np.array([0b1, 0b11])).values.shape               # doctest: +SKIP
    (6, 2)
    """

    def __init__(self, federation: Federation, oracle=None, *, game: str = "metric", progress=None):
        from coalitions.learners.exact import ExhaustiveOracle
        from coalitions.params import ParameterError, check_param

        check_param("game", game, "choice", choices=GAMES)
        if oracle is None:
            oracle = ExhaustiveOracle()
        if not isinstance(oracle, ExhaustiveOracle):
            raise ParameterError("oracle", "{name} must be an ExhaustiveOracle, got " + type(oracle).__name__)
        if federation.n > MAX_CLIENTS:
            raise InputError(f"{federation.n} clients: a lazy game holds at most {MAX_CLIENTS} "
                             "(coalitions are 64-bit bitmasks)")
        if game == "loss" and federation.task == "regression":
            raise ParameterError("game", "{name} loss is the classification loss game; dataset "
                                 f"{federation.name!r} is a regression (its metric is already a loss)")
        oracle._check()
        from sklearn.base import clone

        self._oracle = o = clone(oracle)
        o.loss_game = game == "loss"
        p = o.protocol_ = o._protocol_for(federation)
        self.federation = fed = with_roles(federation, p)
        self.config = cfg = o._config(fed, p)
        self.game = game
        self.progress = progress
        self._draws = bootstrap_draws(fed, o.replicates, o.seed) if o.replicates else None
        self._closed = cfg["solver"] == "closed-form"
        if self._closed:
            o.device_ = "cpu"
        else:
            from coalitions.learners.training.engine import resolve_device

            o.device_ = "cuda" if o.backend == "ray" and o.device == "cuda" else str(resolve_device(o.device))
        o.backend_ = {"name": "local", "workers": 1}
        prov = o._provenance(fed, cfg, "val")
        prov.pop("backend")
        prov.pop("version")
        prov["lazy"] = True
        if game == "loss":
            prov["metric"] = "loss"
        self.provenance = prov
        self.clients = tuple(fed.names)
        self.sense = "min" if game == "loss" else fed.sense
        self.backend_: dict = dict(o.backend_)
        self.trained_ = 0
        self._trainer: Any = None     # the ChunkTrainer, built at the first request trained here
        self._moments: Any = None     # each client's resampled moments (closed form), once per source

    # ------------------------------------------------------------------ measuring
    def measure(self, masks):
        """Train and score the subset models of ``masks``: a :class:`coalitions.lazy.Measurement`.

        ``masks``: distinct non-empty coalitions of this federation's clients (``(k,)`` integers).
        """
        from coalitions.lazy import Measurement, check_masks

        n = self.federation.n
        ms = check_masks(masks, n)
        if ms.size == 0:
            empty = np.zeros((n, 0))
            reps = None if self._draws is None else np.zeros((len(self._draws[0]), n, 0))
            return Measurement(ms, empty, reps, None)
        blocks = self._closed_form(ms) if self._closed else self._batched(ms)
        key, rkey = ("val_loss", "replicates_loss") if self.game == "loss" else ("val", "replicates")
        self.trained_ += int(ms.size)
        return Measurement(ms, blocks[key], blocks.get(rkey), None)

    def _closed_form(self, ms: np.ndarray) -> dict:
        fed = self.federation
        personal = self.config.get("heads") == "personal"
        # with personal heads the affine model is all head: each member alone, in every coalition
        fit = np.left_shift(1, np.arange(fed.n, dtype=np.int64)) if personal else ms
        W = closed_form_weights(fed, self.config["ridge"], masks=fit)
        out = {"val": closed_form_mse(fed, W, "val", masks=fit)}
        if self._draws is not None:
            if self._moments is None:   # each client's resampled moments, once per source
                self._moments = replicate_moments(fed, self._draws)
            out["replicates"] = closed_form_replicates(fed, W, self._draws, masks=fit, moments=self._moments)
        if personal:
            out = {key: _alone(v, ms, fed.n) for key, v in out.items()}
        if self.progress is not None:
            self.progress(len(ms), len(ms))
        return out

    def _batched(self, ms: np.ndarray) -> dict:
        from coalitions.learners.game.chunks import ChunkTrainer
        from coalitions.learners.training.models import make_model
        from coalitions.learners.training.threads import step_macs, using

        o, fed, cfg = self._oracle, self.federation, self.config
        spec = make_model(cfg["model"], fed.input_shape, fed.n_outputs, hidden=o.protocol_.hidden)
        size = o._chunk_size(spec, fed, len(ms))
        if o.backend == "ray" and o.chunk_size is None:
            from coalitions.learners.distributed import oracle_chunk_size

            size = oracle_chunk_size(size, len(ms))
        chunks = [ms[s:s + size] for s in range(0, len(ms), size)]
        parts: dict[int, dict] = {}
        done = {"models": 0}

        def store(k: int, blocks: dict) -> None:
            parts[k] = blocks
            done["models"] += len(chunks[k])
            if self.progress is not None:
                self.progress(done["models"], len(ms))

        if o.backend == "ray":
            from coalitions.learners.distributed import oracle_chunks
            from coalitions.learners.exact import chunk_trainer

            self.backend_ = oracle_chunks(o, fed, cfg, list(enumerate(chunks)), store, chunk_trainer,
                                          address=o.address)
        else:
            if self._trainer is None:
                self._trainer = ChunkTrainer(o, fed, cfg, o.device_, self._draws)
            with using(step_macs(spec, self._trainer.step_samples, size), o.threads):
                for k, chunk in enumerate(chunks):
                    store(k, self._trainer(chunk))
            self.backend_ = {"name": "local", "workers": 1}
        return {key: np.concatenate([parts[k][key] for k in range(len(chunks))], axis=-1)
                for key in parts[0] if key in ("val", "replicates", "val_loss", "replicates_loss")}

    def __repr__(self) -> str:
        return (f"SubsetSource({self.federation.name!r}, {len(self.clients)} clients, game={self.game!r}, "
                f"trained={self.trained_})")


def _alone(singletons: np.ndarray, ms: np.ndarray, n: int) -> np.ndarray:
    """Each member's value alone in every coalition of ``ms``: ``(..., N, k)`` from ``(..., N, N)`` singletons."""
    member = membership(ms, n)                                  # (k, N)
    alone = np.diagonal(singletons, axis1=-2, axis2=-1)         # (..., N): client i's value in {i}
    return np.where(member.T, alone[..., :, None], np.nan)
