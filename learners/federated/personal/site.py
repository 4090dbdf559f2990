"""The site's half of a personalised method: its steps, its final scores.

Runs in the ClientApp (:mod:`coalitions.learners.federated.apps`) on the site's own data.
"""

from __future__ import annotations

from coalitions.errors import InputError
from coalitions.learners.federated.personal.engine import step_site, step_site_state, uses_steps
from coalitions.learners.federated.personal.learners import PERSONAL
from coalitions.learners.federated.personal.stopping import early, site_val_loss, stashed

__all__ = ["site_train", "site_finish"]


# --------------------------------------------------------------------------- the site's half
def site_train(method: str, learner, cfg: dict, received: dict, kept: dict | None):
    """A ``train`` message at a site: its step of the message's phase (:func:`~.engine.step_site`).

    Returns ``(reply, metrics, kept)``: the arrays for the server, the numbers
    for the server (``{"losses": [...], "counts": [...]}``, one per round run), what the site keeps.
    """
    if not uses_steps(learner):
        raise InputError(f"--method {method}: not a federated personalised method ({', '.join(PERSONAL)})")
    return step_site(learner, cfg, received, kept)


def site_finish(method: str, learner, received: dict, kept: dict | None, cfg: dict | None = None) -> dict:
    """The site's final model, scored on its own validation and test splits (the learner's ``finish``).

    Returns ``{"val": x, "test": y}`` and, for SuPerFed, ``"lambda"`` and
    ``"val_curve"`` (its ``λ*`` and the validation metric along the grid).  Under early stopping
    (``cfg``'s ``early`` flag) the last and the best state's results (:mod:`.stopping`).
    """
    kept = kept or {}
    if not uses_steps(learner):
        raise InputError(f"--method {method}: not a federated personalised method ({', '.join(PERSONAL)})")
    state = step_site_state(learner, received, kept)
    if early(cfg or {}):
        return _final_with_patience(method, learner, cfg or {}, state, kept)
    return _scores(method, learner, state)


def _scores(method: str, learner, state: dict) -> dict:
    """The utilities of the site's model under ``state`` (and SuPerFed's ``λ*`` and validation curve)."""
    import torch

    learner.finish(state)
    u = learner.client_utilities(learner.federation_, torch.device("cpu"))
    name = learner.federation_.names[0]
    out = {"val": u["val"][name], "test": u["test"][name]}
    if PERSONAL.get(method) in ("superfed-mm", "superfed-lm"):
        out["lambda"] = float(learner.lambda_[0])
        out["val_curve"] = [float(x) for x in learner.val_curve_[0]]
    return out


def _final_with_patience(method: str, learner, cfg: dict, state: dict, kept: dict) -> dict:
    """The final evaluation under early stopping (:mod:`.stopping`, move 3): the best state's scores and,
    unless the run stopped early, the last state's with its validation loss."""
    best = stashed(kept, "pending" if int(cfg["promote"]) else "best")
    out: dict = {}
    if int(cfg["validate-last"]):
        out["val-loss"] = site_val_loss(learner, state)
        out["last"] = _scores(method, learner, state)
    if best:
        out["best"] = _scores(method, learner, step_site_state(learner, best, best))
    return out


