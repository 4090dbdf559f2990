"""One generic round over Flower for every method written as a site step and a server step.

A method declares which state keys a site uploads (``up``), which the server sends down
(``down``) and which a site keeps besides its optimiser states (``kept``), and writes
:meth:`site_step <coalitions.learners.methods.base.PersonalizedLearner.site_step>` and
:meth:`server_step <coalitions.learners.methods.base.PersonalizedLearner.server_step>` on
stacked tensors.  In process ``train_round`` is the one after the other over all ``N``
clients; here :class:`StepStrategy` (the server) stacks the sites' uploads, calls
``server_step`` and sends each site its share of the down keys, and :func:`step_site`
(the ClientApp) merges the message into the state its ``Context`` kept, calls
``site_step`` on its one-row state and replies with the up keys.  A method whose round is
several exchanges (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.phases`:
FedeRiCo's neighbour sampling, then one exchange per minibatch step) gets one message per
phase, each with the phase's own up and down keys.  Nothing here names a method.
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
from coalitions.learners.federated.personal.stopping import ServerStopper, carried, early, flat, site_validation
from coalitions.learners.federated.personal.strategies import PersonalStrategy
from coalitions.learners.federated.replies import BadReply, check_arrays, check_losses, check_metrics, check_number

__all__ = ["StepStrategy", "SuPerFedStrategy", "STRATEGIES", "step_site", "step_site_state", "uses_steps", "uploads"]


def uses_steps(learner) -> bool:
    """Whether the learner (or its class) writes its round as site steps and server steps (one phase or several)."""
    from coalitions.learners.methods.base import PersonalizedLearner

    cls: Any = learner if isinstance(learner, type) else type(learner)
    return (cls.site_step is not PersonalizedLearner.site_step
            or cls.site_phase is not PersonalizedLearner.site_phase)


def uploads(learner) -> bool:
    """Whether anything goes up in a round (Local: nothing; its sites run all their rounds in one message)."""
    return any(phase.up for phase in learner.phases(0))


def step_site_state(learner, received: dict, kept: dict | None, down=None) -> dict:
    """The site's one-row state: what it kept (or, before its first exchange, its row of the initial state) and
    the message's ``down`` keys (default: the learner's, what the final evaluation carries)."""
    state = {k: as_tensors(kept[k] if kept else received[k]) for k in learner.kept}
    state.update(restored_optimisers(kept))
    state.update({k: as_tensors(received[k]) for k in (learner.down if down is None else down) if k in received})
    return state


def step_site(learner, cfg: dict, received: dict, kept: dict | None):
    """A ``train`` message at a site: ``site_phase`` on its one-row state; returns ``(reply, metrics, kept)``.

    The message names the round (``round``) and which of its phases (``phase``, 0 by default).
    """
    from coalitions.errors import InputError

    sizes = [int(x) for x in cfg["sizes"]]
    site, first, seed = int(cfg["site-index"]), int(cfg["round"]), int(learner.seed)
    learner.train_sizes_ = np.asarray(sizes, dtype=np.int64)    # every site's, as the server's message says
    total, mine = epoch_steps(sizes, learner.minibatch_size(), site)

    def rng_of(r):
        def rng(stream):   # a stream drawn per minibatch step skips the steps of larger clients
            k = learner.step_draws.get(stream)
            return SiteGenerator(seed, r, stream, site, sizes, None if k is None else (k * total, k * mine))
        return rng

    phases = learner.phases(first)
    j = int(cfg.get("phase", 0))
    if not 0 <= j < len(phases):
        raise InputError(f"the server's message names phase {j} of round {first}, which has {len(phases)}")
    phase = phases[j]
    state = step_site_state(learner, received, kept, phase.down)
    losses, counts = [], []
    metrics: dict = {}
    copies = site_validation(learner, cfg, state, kept, metrics) if early(cfg) else carried(kept)
    # nothing goes up (Local) and no early stopping: this one message runs all the site's rounds
    per_round = uploads(learner) or early(cfg)
    for r in (range(first, first + 1) if per_round else range(int(cfg["rounds"]))):
        state, info = learner.site_phase(state, r, rng_of(r), phase)
        losses.append(float(info["loss"]))
        counts.append(int(info.get("count", 1)))
    reply = {k: as_numpy(state[k]) for k in phase.up}
    keep = {**{k: as_numpy(state[k]) for k in learner.kept}, **kept_optimisers(state), **flat(copies)}
    return reply, {"losses": losses, "counts": counts, **metrics}, keep or None


class StepStrategy(PersonalStrategy):
    """The server of every method written as steps: per phase, stack the uploads, ``server_phase``, send the shares.

    Exchange ``x`` is phase ``j`` of round ``r`` (:attr:`schedule`).  Its message to site ``i``
    holds the site's share of each of the phase's down keys
    (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.share`: by default its row, or
    all of a key with one row) and, in the first exchange, its row of the :attr:`kept` keys of the
    initial state (the site's personal parameters start where the in-process learner starts them).
    The replies' up keys, checked and stacked in site order, go through ``server_phase``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        patience = self.learner.patience_rounds()
        #: Early stopping over Flower (:mod:`.stopping`), or None without patience.
        self.stopper = None if patience is None else ServerStopper(patience, self.learner.warmup_rounds())
        #: The training exchanges in order: ``(round, phase index, phase)``.
        self.schedule = [(r, j, phase) for r in range(self.rounds) for j, phase in enumerate(self.learner.phases(r))]
        self._round = [0.0, 0]      # the running round's sum of losses and their count

    def group(self, x: int) -> str:
        """How exchange ``x`` is named in the log and in errors: ``round r`` (and the exchange, in a round of several)."""
        r = self.schedule[x][0]
        return f"round {r + 1}" + (f" (exchange {x + 1})" if len(self.learner.phases(r)) > 1 else "")

    def train_contents(self, x: int) -> dict | None:
        """``{site: message}`` of exchange ``x``; None once early stopping stopped (the rest sends nothing)."""
        if self.stopper is not None and self.stopper.stopped:
            return None
        r, j, _ = self.schedule[x]
        extra = {"phase": j}
        if self.stopper is not None and j == 0:     # a round's first exchange scores the previous round
            extra.update({"early": 1, "validate": int(r >= 1), "promote": int(self.stopper.verdict)})
        return {name: self.content(i, r, self.payload(x, i), extra) for i, name in enumerate(self.names)}

    def take_train(self, x: int, replies: dict) -> None:
        """The sites' replies to exchange ``x`` (``{site: reply}``), checked; the server phase on their uploads."""
        r, j, phase = self.schedule[x]
        if j == 0 and not self.admit(r, replies):     # the round does not count (early stopping decided before it)
            return
        n_losses = self.rounds if self.exchanges() == 1 else 1
        metrics = {name: self._metrics(name, replies[name]) for name in self.names}
        losses = np.array([check_losses(metrics[name].get("losses", []), name, n=n_losses) for name in self.names],
                          dtype=np.float64)
        counts = np.array([self._counts(metrics[name].get("counts", []), name, n_losses) for name in self.names],
                          dtype=np.float64)
        self.absorb(x, [{k: self._arrays(name, replies[name], k) for k in self._records(name, replies[name], phase)}
                        for name in self.names])
        if n_losses > 1:    # one exchange ran every round: the mean over the sites, round by round
            self.loss_history += [float(v) for v in (losses * counts).sum(axis=0) / np.maximum(counts.sum(axis=0), 1)]
            self.log(f"{self.method}: {self.rounds} rounds in one exchange, mean loss {self.loss_history[-1]:.4f}")
            return
        self._round = [self._round[0] + float((losses * counts).sum()), self._round[1] + int(counts.sum())]
        phases = len(self.learner.phases(r))
        if j < phases - 1:
            return
        self.loss_history.append(self._round[0] / max(self._round[1], 1))    # in process: the mean over the clients
        self._round = [0.0, 0]
        self.log(f"{self.method}: round {r + 1}/{self.rounds}"
                 f"{f' ({phases} exchanges)' if phases > 1 else ''}, mean loss {self.loss_history[-1]:.4f}")

    def _counts(self, values, name: str, n: int) -> list[int]:
        """How many losses each of a site's ``losses`` averages: ``n`` integers in ``[0, n-train]``."""
        values = values if isinstance(values, list) else [values]
        if len(values) != n:
            raise BadReply(name, f"{len(values)} loss counts, expected {n}")
        high = self.sizes[self.names.index(name)]
        out = [check_number(c, name, "its loss count", 0, high) for c in values]
        if any(c != int(c) for c in out):
            raise BadReply(name, f"its loss counts {values!r} are not whole numbers")
        return [int(c) for c in out]

    def _records(self, name: str, rep, phase) -> list[str]:
        """The phase's upload keys, every one of them in the reply and nothing else."""
        have = list(rep.content.array_records)
        if sorted(have) != sorted(phase.up):
            raise BadReply(name, f"its reply holds records {sorted(have)}, expected {sorted(phase.up)}",
                           rep.metadata.src_node_id)
        return list(phase.up)

    def admit(self, r, replies: dict) -> bool:
        """With early stopping: the sites' losses of round ``r − 1``; round ``r`` counts unless the rule stopped."""
        if self.stopper is None or r == 0:
            return True
        losses = self.stopper.losses(self.names, [self._metrics(n, replies[n]).get("val-loss") for n in self.names])
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
        """One per phase of every round; one when nothing goes up and nothing stops early (the sites run all
        their rounds in it)."""
        return len(self.schedule) if uploads(self.learner) or self.stopper is not None else 1

    def finish(self, seconds):
        learner = super().finish(seconds)
        if self.stopper is not None:
            self.stopper.record(learner)
        return learner

    def _shares(self, keys, i: int) -> dict:
        return {k: as_numpy(self.learner.share(k, self.state[k], i, len(self.names))) for k in keys
                if self.state.get(k)}

    def payload(self, x, i):
        """Site ``i``'s message of exchange ``x``: its shares of the phase's down keys (and of the kept keys at 0)."""
        out = self._shares(self.schedule[x][2].down, i)
        if x == 0:
            out.update({k: as_numpy(row_of(self.state[k], i)) for k in self.learner.kept})
        return out

    def absorb(self, x, replies):
        """The server phase of exchange ``x`` on the sites' uploads, stacked in site order."""
        import torch

        r, _, phase = self.schedule[x]
        up = {k: {p: torch.cat([as_tensors(rep[k])[p] for rep in replies]) for p in replies[0][k]} for k in phase.up}
        self.state = self.learner.server_phase({**self.state, **up}, r, phase)

    def finish_weights(self):
        """Keep the server's final state (``server_state_``); the weights of a method that has them."""
        self.learner.server_state_ = self.state
        if self.learner.has_weights:    # learned from the uploads, which the server holds
            self.learner.finish(self.state)
        else:
            super().finish_weights()
        self.learner.server_finish(self.state)

    def final_payload(self, i):
        return self._shares(self.learner.down, i)

    def _arrays(self, name: str, rep, key: str) -> dict:
        """Upload ``key`` of a reply as ``{name: (rows, ...)}``, checked against the method's record
        (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.record_shapes`, ``record_rows``,
        ``record_dtype``, then its own ``check_upload``)."""
        from coalitions.learners.federated.transport import reply_arrays

        lr = self.learner
        shapes, rows = lr.record_shapes(key), lr.record_rows(key)
        arrays = check_arrays(reply_arrays(rep, key, name, rep.metadata.src_node_id),
                              [(rows, *s) for s in shapes.values()], name, key, dtype=np.dtype(lr.record_dtype(key)))
        value = dict(zip(shapes, arrays, strict=True))
        fault = lr.check_upload(key, value, self.names.index(name))
        if fault:
            raise BadReply(name, fault, rep.metadata.src_node_id)
        return value


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


#: The server of each federated method: the generic one (SuPerFed's adds its sites' lambda* and validation
#: curves to the learner; a name and its alias share one).
STRATEGIES = {m: SuPerFedStrategy if PERSONAL[m] in ("superfed-mm", "superfed-lm") else StepStrategy
              for m in PERSONAL}
