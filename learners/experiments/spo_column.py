"""SPO's column of a reproduction: how it is fitted and its extra rows (the paper's "CE (ours)", its rules).

SPO is the one column that is not a :class:`~coalitions.learners.methods.base.PersonalizedLearner`:
it tunes its own learning rate (same grid, same rule: :mod:`coalitions.learners.training.tuning`)
and reports its utilities in its own CE beside the exact one.
"""

from __future__ import annotations

from coalitions.learners.experiments.agreement import _mean

__all__ = ["fit_spo", "ce_ours", "ce_paper", "rules_summary"]


def fit_spo(fed, options: dict, seed: int, device: str, progress=None, protocol=None):
    """SPO fitted on ``fed`` with ``options`` (its own settings) under the column's training ``protocol``.

    SPO takes the protocol whole, as every other column does: its steps, batch, patience and
    rate grid (it chooses its rate from the grid on validation itself).  ``None``: the default
    protocol of ``fed``'s task and input shape (:meth:`SPO.protocol_for
    <coalitions.learners.methods.spo.SPO.protocol_for>`).
    """
    from coalitions.learners.methods.registry import create

    return create("spo", options, device=device, seed=seed, progress=progress).set_params(protocol=protocol).fit(fed)


def ce_ours(estimate) -> dict | None:
    """The paper's "CE (ours)" row: SPO's utilities inside SPO's own CE.

    Each client's model is the hypernetwork at its best direction on the face of
    its block of the partition that SPO's own estimate peels to (not the exact
    game's CE), scored by SPO: ``{"partition": [[names]], "val": {name: metric},
    "test": {name: metric}}`` from the estimate's ``extra.ce_utilities``; ``None``
    when the estimate has none.  Reported beside the exact CE.
    """
    utilities = estimate.extra.get("ce_utilities") if estimate.extra else None
    if not utilities:
        return None
    return {"partition": [list(b) for b in estimate.blocks()],
            "val": {c: float(v) for c, v in utilities["val"].items()},
            "test": {c: float(v) for c, v in utilities["test"].items()}}


def ce_paper(estimate, game, test_game, semantics: str = "personalized") -> dict:
    """The paper's CE row by its definition (Cui et al. 2022, §5): models *trained* on the coalitions of SPO's CE.

    SPO's partition (what its own estimate peels to) with each client scored by the exact game's model of
    the coalition it uses in that partition (:func:`coalitions.payoffs.models_in`, as the ``CE`` column
    scores the exact CE): the subset models of the same protocol and seed, so that this column and ``CE``
    differ by the partition alone.  ``{"partition": [[names]], "models": {name: [names]}, "val": {name:
    metric}, "test": {name: metric}}``.  The hypernetwork read at the coalition is :func:`ce_ours`.
    """
    from coalitions.payoffs import models_in

    masks = list(estimate.partition.masks)
    used = models_in(game, masks, semantics)
    names = list(game.clients)

    def members(mask: int) -> list[str]:
        return [c for i, c in enumerate(names) if mask >> i & 1]

    raw_val, raw_test = game.raw_values(), test_game.raw_values()
    return {"partition": [members(m) for m in masks], "models": {c: members(used[i]) for i, c in enumerate(names)},
            "val": {c: float(raw_val[i, used[i]]) for i, c in enumerate(names)},
            "test": {c: float(raw_test[i, used[i]]) for i, c in enumerate(names)}}


def rules_summary(runs: list[dict], method: str = "spo") -> dict:
    """SPO's rules side by side (the one used and the paper's ratio rule) over the seeds, against the exact CE."""
    rules = [r["methods"].get(method, {}).get("rules") for r in runs]
    if not rules or any(x is None for x in rules):
        return {}
    out = {}
    for name, first in rules[0].items():
        same = [x[name].get("same_partition") for x in rules]
        stable = [x[name].get("is_exact_ce") for x in rules]
        out[name] = {"label": first["label"], "used": first["used"], "partition": first["partition"],
                     **{k: first[k] for k in ("threshold", "tol") if k in first},
                     "edges": _mean([len(x[name]["edges"]) for x in rules]),
                     "edge_f1": _mean([x[name].get("edge_f1") for x in rules]),
                     "same_partition": None if None in same else int(sum(same)),
                     "is_exact_ce": None if None in stable else int(sum(stable)), "seeds": len(rules)}
    return out
