"""The site's half of a personalised method: its round, its FedeRiCo phases, its final scores.

Runs in the ClientApp (:mod:`coalitions.learners.federated.apps`) on the site's own data.
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.federated.personal.engine import step_site, step_site_state, uses_steps
from coalitions.learners.federated.personal.learners import (
    PERSONAL,
    as_numpy,
    as_tensors,
)
from coalitions.learners.federated.personal.randomness import SiteGenerator
from coalitions.learners.federated.personal.stopping import early, site_val_loss, stashed

__all__ = ["site_train", "federico_site", "site_finish"]


# --------------------------------------------------------------------------- the site's half
def site_train(method: str, learner, cfg: dict, received: dict, kept: dict | None):
    """A ``train`` message at a site: its site step (:func:`~.engine.step_site`), or a FedeRiCo phase.

    Returns ``(reply, metrics, kept)``: the arrays for the server, the numbers
    for the server (``{"losses": [...]}``, one per round run), what the site keeps.
    """
    if uses_steps(learner):
        return step_site(learner, cfg, received, kept)
    if method == "federico":
        return federico_site(learner, cfg, received, kept)
    raise InputError(f"--method {method}: not a federated personalised method ({', '.join(PERSONAL)})")


def federico_site(learner, cfg: dict, received: dict, kept: dict | None):
    """FedeRiCo at site ``i``: its neighbours, its E-step, its share of each M-step (one message each).

    The site keeps its own row of the tracked losses ``L̂_i·``, of the prior and
    of the posterior ``w_i·`` (``kept["row"]``).  Phases (``cfg["phase"]``):

    ``sample``
        The ε-greedy neighbours of the site from its posterior row
        (:func:`~coalitions.learners.methods.federico.sample_neighbours` on the
        round's generator ``default_rng([seed, r, 1])``, the site's row).
    ``step`` (epoch ``e``, step ``s``)
        ``received["models"]`` holds ``φ_i`` and its neighbours' models, as
        they stand.  On the round's first step the site first runs the E-step
        on them (:meth:`FedeRiCo.e_step <coalitions.learners.methods.federico.FedeRiCo.e_step>`,
        loss on its whole training split); then it returns ``∇ w_ij·ℓ(φ_j; batch_i)``
        for each of the models (:meth:`~coalitions.learners.methods.federico.FedeRiCo.pair_gradients`),
        which the server sums per model and applies.
    """
    import torch

    from coalitions.learners.methods.federico import sample_neighbours
    from coalitions.learners.training.engine import epoch_plan

    sizes = [int(x) for x in cfg["sizes"]]
    n, site, r = len(sizes), int(cfg["site-index"]), int(cfg["round"])
    k = min(int(learner.neighbours), n - 1)
    if kept is None:   # the in-process initial state: uniform prior and posterior; L̂ set on the first E-step
        kept = {"row": {"ema": np.full((1, n), np.nan), "log_prior": np.full((1, n), -np.log(n)),
                        "w": np.full((1, n), 1.0 / n)}}
    row = {key: torch.as_tensor(np.asarray(v, dtype=np.float64)) for key, v in kept["row"].items()}
    if cfg["phase"] == "sample":
        W = np.zeros((n, n))
        W[site] = row["w"][0].numpy()
        nb = sample_neighbours(W, k, float(learner.eps), np.random.default_rng([int(learner.seed), r, 1]))[site]
        return {}, {"neighbours": [int(j) for j in nb]}, kept
    pairs = [site, *[int(j) for j in cfg["neighbours"]]]
    models = as_tensors(received["models"])
    cli_t = torch.zeros(len(pairs), dtype=torch.int64)
    mod_t = torch.as_tensor(pairs, dtype=torch.int64)
    metrics: dict = {}
    epoch, step = int(cfg["epoch"]), int(cfg["step"])
    if epoch == 0 and step == 0:
        losses = learner.full_losses(models, cli_t, torch.arange(len(pairs))).to(torch.float64)
        if torch.isnan(row["ema"]).any():     # before the first round every model is the initial one
            row["ema"] = torch.full((1, n), float(losses[0]), dtype=torch.float64)
        ema, w, log_prior = learner.e_step(row["ema"], row["log_prior"], cli_t, mod_t, losses)
        row = {"ema": ema, "log_prior": log_prior, "w": w}
        kept = {"row": {key: v.numpy() for key, v in row.items()}}
        metrics.update({"w": [float(x) for x in w[0]], "ema": [float(x) for x in ema[0]]})
    gen = SiteGenerator(int(learner.seed), r, 0, site, sizes)
    data = learner.train_data_
    for _ in range(epoch + 1):
        idx, mask, active = epoch_plan(data.sizes, learner.minibatch_size(), gen)
    weight = row["w"][0, mod_t].to(next(iter(models.values())).dtype)
    if step < idx.shape[0]:
        idx_t = torch.as_tensor(idx[step])
        X, y = data.gather(idx_t[cli_t], cli_t)
        mb = torch.as_tensor(mask[step])[cli_t]
        act = torch.as_tensor(active[step])[cli_t]
        grads, values = learner.pair_gradients(models, X, y, mb, weight, act)
        metrics.update({"active": 1, "own-loss": float((values / weight.clamp(min=1e-30))[0])})
    else:   # this site's epoch is over; larger sites still step
        grads = {key: torch.zeros_like(v) for key, v in models.items()}
        metrics.update({"active": 0, "own-loss": 0.0})
    return {"grads": as_numpy(grads)}, metrics, kept


def site_finish(method: str, learner, received: dict, kept: dict | None, cfg: dict | None = None) -> dict:
    """The site's final model, scored on its own validation and test splits (the learner's ``finish``).

    Returns ``{"val": x, "test": y}`` and, for SuPerFed, ``"lambda"`` and
    ``"val_curve"`` (its ``λ*`` and the validation metric along the grid).  Under early stopping
    (``cfg``'s ``early`` flag) the last and the best state's results (:mod:`.stopping`).
    """
    import torch

    kept = kept or {}
    state: dict
    if uses_steps(learner):
        state = step_site_state(learner, received, kept)
        if early(cfg or {}):
            return _final_with_patience(method, learner, cfg or {}, state, kept)
    elif method == "federico":   # every model, mixed by the site's own posterior row
        state = {"phi": as_tensors(received["models"]), "history": [], "ema_history": [], "neighbours": [],
                 **{key: torch.as_tensor(np.asarray(v, dtype=np.float64)) for key, v in kept["row"].items()}}
    else:
        raise InputError(f"--method {method}: not a federated personalised method ({', '.join(PERSONAL)})")
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


