"""SPO's column of a reproduction: how it is fitted and its extra rows (the paper's "CE (ours)", its rules).

SPO is the one column that is not a :class:`~coalitions.learners.methods.base.PersonalizedLearner`:
it tunes its own learning rate (same grid, same rule: :mod:`coalitions.learners.training.tuning`)
and reports its utilities in its own CE beside the exact one.
"""

from __future__ import annotations

from coalitions.learners.experiments.agreement import _mean

__all__ = ["fit_spo", "ce_ours", "rules_summary"]


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
