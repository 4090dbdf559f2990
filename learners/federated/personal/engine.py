"""One generic round over Flower for every method written as a site step and a server step.

A method declares which state keys a site uploads (``up``), which the server sends down
(``down``) and which a site keeps besides its optimiser states (``kept``), and writes
:meth:`site_step <coalitions.learners.methods.base.PersonalizedLearner.site_step>` and
:meth:`server_step <coalitions.learners.methods.base.PersonalizedLearner.server_step>` on
stacked tensors.  In process ``train_round`` is the one after the other over all ``N``
clients; here :class:`StepStrategy` (the server) stacks the sites' uploads, calls
``server_step`` and sends each site its row of the down keys, and :func:`step_site`
(the ClientApp) merges the message into the state its ``Context`` kept, calls
``site_step`` on its one-row state and replies with the up keys.  Nothing here names a method.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coalitions.learners.federated.personal.learners import (
    PERSONAL,
    as_numpy,
    as_tensors,
    kept_optimisers,
    restored_optimisers,
    row_of,
)
from coalitions.learners.federated.personal.randomness import SiteGenerator, epoch_steps
from coalitions.learners.federated.personal.stopping import ServerStopper, early, flat, site_validation
from coalitions.learners.federated.personal.strategies import METHOD_STRATEGIES, PersonalStrategy
from coalitions.learners.federated.replies import BadReply, check_arrays, check_metrics, check_number

__all__ = ["StepStrategy", "SuPerFedStrategy", "STRATEGIES", "step_site", "step_site_state", "uses_steps"]


def uses_steps(learner) -> bool:
    """Whether the learner (or its class) writes its round as a site step and a server step."""
    from coalitions.learners.methods.base import PersonalizedLearner

    cls: Any = learner if isinstance(learner, type) else type(learner)
    return cls.site_step is not PersonalizedLearner.site_step


def _row(value, i: int, n: int) -> dict:
    """Site ``i``'s share of a down key: its row when the tensors hold one row per site, else all of it."""
    return row_of(value, i) if next(iter(value.values())).shape[0] == n else dict(value)


def step_site_state(learner, received: dict, kept: dict | None) -> dict:
    """The site's one-row state: what it kept (or, before its first round, its row of the initial state) and the message."""
    state = {k: as_tensors(kept[k] if kept else received[k]) for k in learner.kept}
    state.update(restored_optimisers(kept))
    state.update({k: as_tensors(received[k]) for k in learner.down if k in received})
    return state


def step_site(learner, cfg: dict, received: dict, kept: dict | None):
    """A ``train`` message at a site: ``site_step`` on its one-row state; returns ``(reply, metrics, kept)``."""
    sizes = [int(x) for x in cfg["sizes"]]
    site, first, seed = int(cfg["site-index"]), int(cfg["round"]), int(learner.seed)
    learner.train_sizes_ = np.asarray(sizes, dtype=np.int64)    # every site's, as the server's message says
    total, mine = epoch_steps(sizes, learner.minibatch_size(), site)

    def rng_of(r):
        def rng(stream):   # a stream drawn per minibatch step skips the steps of larger clients
            k = learner.step_draws.get(stream)
            return SiteGenerator(seed, r, stream, site, sizes, None if k is None else (k * total, k * mine))
        return rng

    state = step_site_state(learner, received, kept)
    losses = []
    metrics: dict = {}
    copies = site_validation(learner, cfg, state, kept, metrics) if early(cfg) else {}
    # nothing goes up (Local) and no early stopping: this one message runs all the site's rounds
    per_round = bool(learner.up) or early(cfg)
    for r in (range(first, first + 1) if per_round else range(int(cfg["rounds"]))):
        state, info = learner.site_step(state, r, rng_of(r))
        losses.append(float(info["loss"]))
    reply = {k: as_numpy(state[k]) for k in learner.up}
    keep = {**{k: as_numpy(state[k]) for k in learner.kept}, **kept_optimisers(state), **flat(copies)}
    return reply, {"losses": losses, **metrics}, keep or None


class StepStrategy(PersonalStrategy):
    """The server of every method written as two steps: stack the uploads, ``server_step``, send the rows down.

    Round ``r``'s message to site ``i`` holds its row of each :attr:`down` key (a
    key with one row goes to every site alike) and, in round 0, its row of the
    :attr:`kept` keys of the initial state (the site's personal parameters start
    where the in-process learner starts them).  The replies' :attr:`up` keys,
    stacked in site order, go through ``server_step``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        patience = self.learner.patience_rounds()
        #: Early stopping over Flower (:mod:`.stopping`), or None without patience.
        self.stopper = None if patience is None else ServerStopper(patience)

    def configure_train(self, server_round, arrays, config, grid):
        if self.stopper is None:
            return super().configure_train(server_round, arrays, config, grid)
        if self.stopper.stopped:     # the rule stopped: the remaining Flower rounds send nothing
            return []
        r = int(server_round) - 1
        extra = {"early": 1, "validate": int(r >= 1), "promote": int(self.stopper.verdict)}
        return [self._message(i, "train", r, self.payload(r, i), grid, extra) for i in range(len(self.names))]

    def aggregate_train(self, server_round, replies):
        if self.stopper is not None and self.stopper.stopped:
            return None, None
        return super().aggregate_train(server_round, replies)

    def admit(self, r, reps) -> bool:
        """With early stopping: the sites' losses of round ``r − 1``; round ``r`` counts unless the rule stopped."""
        if self.stopper is None or r == 0:
            return True
        losses = self.stopper.losses(self.names, [self._metrics(rep).get("val-loss") for rep in reps])
        self.stopper.update(losses, self.state)
        return not self.stopper.stopped

    def final_extra(self) -> dict:
        if self.stopper is None:
            return {}
        return {"early": 1, "promote": int(self.stopper.verdict), "validate-last": int(not self.stopper.stopped)}

    def final_results(self, results: list[dict]) -> list[dict]:
        if self.stopper is None:
            return results
        chosen, self.state = self.stopper.final_results(self.names, results, self.state)
        return chosen

    def exchanges(self) -> int:
        """A round per exchange; one exchange when nothing goes up and nothing stops early (the sites run all
        their rounds in it)."""
        return self.rounds if self.learner.up or self.stopper is not None else 1

    def finish(self, seconds):
        learner = super().finish(seconds)
        if self.stopper is not None:
            self.stopper.record(learner)
        return learner

    def payload(self, r, i):
        n = len(self.names)
        out = {k: as_numpy(_row(self.state[k], i, n)) for k in self.learner.down if self.state.get(k)}
        if r == 0:
            out.update({k: as_numpy(row_of(self.state[k], i)) for k in self.learner.kept})
        return out

    def absorb(self, r, replies):
        import torch

        up = {k: {p: torch.cat([as_tensors(rep[k])[p] for rep in replies]) for p in replies[0][k]}
              for k in self.learner.up}
        self.state = self.learner.server_step({**self.state, **up}, r)

    def finish_weights(self):
        """Keep the server's final state (``server_state_``); the weights of a method that has them."""
        self.learner.server_state_ = self.state
        if self.learner.has_weights:    # learned from the uploads, which the server holds
            self.learner.finish(self.state)
        else:
            super().finish_weights()
        self.learner.server_finish(self.state)

    def final_payload(self, i):
        return {k: as_numpy(_row(self.state[k], i, len(self.names))) for k in self.learner.down if self.state.get(k)}

    def _arrays(self, rep, key: str, rows: int = 1, names=None) -> dict:
        """Upload ``key`` of a reply as ``{name: (1, ...)}``, checked against the method's :meth:`record_shapes`."""
        from coalitions.learners.federated.transport import reply_arrays

        if key not in self.learner.up:
            raise BadReply(self._name(rep), f"its reply holds a record {key!r}, expected {list(self.learner.up)}")
        shapes = self.learner.record_shapes(key)
        name = self._name(rep)
        arrays = check_arrays(reply_arrays(rep, key, name, rep.metadata.src_node_id),
                              [(rows, *s) for s in shapes.values()], name, key)
        return dict(zip(shapes, arrays, strict=True))


class SuPerFedStrategy(StepStrategy):
    """SuPerFed: the global (federated) model averaged as in FedAvg; each site's local model stays there."""

    def check_extra(self, name, res):
        if set(res) != {"lambda", "val_curve"}:
            raise BadReply(name, f"its evaluation holds fields {sorted(res)}, expected lambda and val_curve")
        return {"lambda": check_number(res["lambda"], name, "its lambda", 0.0, 1.0),
                "val_curve": [float(x) for x in check_metrics(res["val_curve"], self.learner.federation_.metric,
                                                                 name, len(self.learner.lambda_grid),
                                                                 "validation curve")]}

    def finish(self, seconds):
        lr = super().finish(seconds)
        names = self.names
        lr.lambda_ = np.array([self.site_extra[n]["lambda"] for n in names])
        lr.val_curve_ = np.array([self.site_extra[n]["val_curve"] for n in names])
        return lr


def _stepped(method: str) -> bool:
    from coalitions.learners.methods.registry import METHODS

    return uses_steps(METHODS[PERSONAL[method]].estimator_class())


#: The server of each federated method: the generic one for every method written as two steps.
#: (SuPerFed's adds its sites' lambda* and validation curves to the learner; a name and its alias share one.)
STRATEGIES = {m: SuPerFedStrategy if PERSONAL[m] in ("superfed-mm", "superfed-lm")
              else StepStrategy if _stepped(m) else METHOD_STRATEGIES[PERSONAL[m]] for m in PERSONAL}
