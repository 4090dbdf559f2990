"""Early stopping over Flower: the in-process rule, split between the sites and the server.

In process (:meth:`PersonalizedLearner.fit <coalitions.learners.methods.base.PersonalizedLearner.fit>`)
the learner scores, after every round ``r``, each client's mean validation loss under the models it
would predict with (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.val_losses`),
updates an :class:`~coalitions.learners.methods.base.EarlyStop` with their mean over the clients,
copies the whole state when that mean improved, stops once ``patience`` rounds in a row did not
improve it, and predicts with the copy.  Over Flower nobody holds the whole state: each site holds
its kept part, the server the rest.  So the same rule runs in three moves:

1. **Score.**  Round ``r``'s message (``r >= 1``) finds a site holding, once the message's rows are
   merged in, exactly its row of the state after round ``r − 1``.  Before its site step the site
   scores that state's validation loss (the reply's ``val-loss``) and keeps a copy of it
   (``pending``: its kept keys and the rows it received).
2. **Decide.**  The server updates the stopper with the mean of the sites' losses (site order, as
   in process).  When the mean improved it copies its own state and tells every site, in its next
   message (``promote``), that its pending copy is now its best.  When the rule stops after round
   ``r − 1``, round ``r`` (which the sites ran meanwhile) is discarded, as in process it never runs,
   and the remaining Flower rounds send nothing.
3. **Finish.**  The final evaluation carries the last verdict and, when the run did not stop early,
   asks each site to score the last round's state as well (``validate-last``): the site returns its
   validation loss and the utilities of both its last and its best state, and the server keeps the
   ones the rule picks.

What a site sends besides the method's own records: one validation loss per round, the number the
in-process learner records per client in ``val_loss_clients_``.
"""

from __future__ import annotations

import copy

import numpy as np

from coalitions.learners.federated.personal.learners import as_numpy
from coalitions.learners.federated.replies import BadReply, check_number

__all__ = ["early", "site_validation", "stashed", "carried", "site_val_loss", "snapshot", "ServerStopper"]

def early(cfg) -> bool:
    """Whether a message belongs to a run with early stopping (its ``early`` flag)."""
    return bool(int(cfg.get("early", 0)))


def snapshot(learner, state: dict) -> dict:
    """The site's part of ``state`` its predictions read: the kept keys and the rows it received."""
    return {k: as_numpy(state[k]) for k in (*learner.kept, *learner.down) if state.get(k)}


def stashed(kept: dict | None, tag: str) -> dict:
    """The copy ``tag`` (``"pending"`` or ``"best"``) a site kept (in its ``Context``, under
    ``<tag>__<state key>``), or ``{}``."""
    prefix = f"{tag}__"
    return {k[len(prefix):]: v for k, v in (kept or {}).items() if k.startswith(prefix)}


def carried(kept: dict | None) -> dict:
    """The copies a site keeps through an exchange that scores nothing (a later phase of a round of several)."""
    return {tag: snap for tag in ("pending", "best") if (snap := stashed(kept, tag))}


def flat(copies: dict) -> dict:
    """``{tag: {key: arrays}}`` as the site's kept records ``{"<tag>__<key>": arrays}``."""
    return {f"{tag}__{k}": arrays for tag, snap in copies.items() for k, arrays in snap.items()}


def site_val_loss(learner, state: dict) -> float:
    """The site's mean validation loss under the models of ``state`` (the learner's own scoring)."""
    import torch

    from coalitions.learners.training.engine import Padded

    data = Padded(learner.federation_, "val", torch.device("cpu"))
    return float(learner.val_losses(state, data)[0])


def site_validation(learner, cfg, state: dict, kept: dict | None, metrics: dict) -> dict:
    """Moves 1 and 2 at a site, before its site step: returns its copies (``{tag: snapshot}``).

    ``state`` is the merged state after the previous round; ``metrics`` receives ``val-loss``.
    """
    best = stashed(kept, "pending" if int(cfg["promote"]) else "best")
    copies = {"best": best} if best else {}
    if int(cfg["validate"]):
        copies["pending"] = snapshot(learner, state)
        metrics["val-loss"] = site_val_loss(learner, state)
    return copies


class ServerStopper:
    """The server's half: the stopper over the sites' mean, its verdicts and its copy of the best state.

    Parameters
    ----------
    patience : int
    warmup : int, default 0
        The first rounds recorded but not counted (the learner's ``warmup_rounds()``), as in process.
    """

    def __init__(self, patience: int, warmup: int = 0):
        from coalitions.learners.methods.base import EarlyStop

        self.rule = EarlyStop(int(patience), warmup=int(warmup))
        self.verdict = False          # whether the sites' pending copy is the best so far
        self.best_state: dict | None = None
        self.per_site: list[list[float]] = []

    @property
    def stopped(self) -> bool:
        return bool(self.rule.stopped)

    def losses(self, names, values) -> list[float]:
        """The sites' validation losses (``values``, site order), each checked: a finite number >= 0."""
        return [check_number(v, name, "its validation loss", 0.0) for name, v in zip(names, values, strict=True)]

    def update(self, per_site: list[float], state: dict) -> bool:
        """Record one round's losses with the server's ``state`` after it; returns whether it improved."""
        self.per_site.append([float(x) for x in per_site])
        self.verdict = self.rule.update(float(np.mean(per_site)))
        if self.verdict:
            self.best_state = copy.deepcopy(state)
        return self.verdict

    def final_results(self, names, results: list[dict], state: dict) -> tuple[list[dict], dict]:
        """Move 3: each site's chosen result and the server state that goes with it.

        ``results``: the sites' evaluation replies (``last``, ``best``, ``val-loss``).
        """
        use_last = False
        if not self.stopped:
            self.update(self.losses(names, [r.get("val-loss") for r in results]), state)
            use_last = self.verdict
        key = "last" if use_last else "best"
        chosen = []
        for name, res in zip(names, results, strict=True):
            part = res.get(key)
            if not isinstance(part, dict):
                raise BadReply(name, f"its evaluation holds no {key!r} result")
            chosen.append(dict(part))
        best = state if use_last or self.best_state is None else self.best_state
        return chosen, best

    def record(self, learner) -> None:
        """Set on the server's learner what ``fit`` sets after its rounds (histories, stop, best round)."""
        learner.val_loss_clients_ = [list(v) for v in self.per_site]
        learner.val_loss_history_ = [float(np.mean(v)) for v in self.per_site]
        run = learner.rounds_run_ = len(self.per_site)
        learner.hit_max_ = run == learner.rounds_
        learner.best_round_ = self.rule.best_round
        learner.steps_per_round_ = learner.steps_per_round(learner.federation_)
        learner.stopped_at_ = run * learner.steps_per_round_
