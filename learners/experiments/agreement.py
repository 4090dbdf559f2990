"""Each learner column against the exact game: edges, partition and certificate (``coalitions reproduce``).

Shared by the runner's per-seed summaries and SPO's rules (:mod:`.spo_column`).
"""

from __future__ import annotations

import numpy as np

import coalitions as co

__all__ = ["sensitivity_against_exact", "rules_against_exact"]


def _names(game: co.Game, mask: int) -> list[str]:
    return list(game.names(int(mask)))


def _is_ce(game: co.Game, estimate) -> bool:
    """Whether the learner's partition is a CE of the exact game (exhaustive certificate)."""
    index = {c: i for i, c in enumerate(game.clients)}
    partition = [sum(1 << index[estimate.clients[i]] for i in co.bitmask.members(k)) for k in estimate.masks]
    return bool(co.certify(game, partition).holds)


def _against_exact(edges, partition, game: co.Game | None, eq: co.Equilibrium | None) -> dict:
    """Edge precision/recall/F1 of ``edges`` (``[[j, i], ...]`` names) and whether ``partition`` is the exact CE."""
    if game is None or eq is None:
        return {}
    from coalitions.compare import edge_scores

    exact_edges = {(game.clients[j], game.clients[i]) for j, i in co.ExactOracle(game).benefit_graph(game.grand).edges}
    p, r, f1 = edge_scores({(a, b) for a, b in edges}, exact_edges)
    same = {frozenset(b) for b in partition} == {frozenset(_names(game, k)) for k in eq.masks}
    index = {c: i for i, c in enumerate(game.clients)}
    stable = co.certify(game, [sum(1 << index[c] for c in b) for b in partition]).holds
    return {"edge_precision": p, "edge_recall": r, "edge_f1": f1, "same_partition": bool(same),
            "is_exact_ce": bool(stable)}


def sensitivity_against_exact(estimate, game, eq) -> dict | None:
    """``extra.sensitivity`` of the estimate with each threshold's agreement with the exact game (or None)."""
    sens = estimate.extra.get("sensitivity")
    if not sens:
        return None
    rows = [dict(row, **_against_exact(row["edges"], row["partition"], game, eq)) for row in sens["rows"]]
    return {"rule": sens["rule"], "threshold_used": sens["threshold_used"], "rows": rows}


def rules_against_exact(estimate, game, eq) -> dict | None:
    """SPO's ``extra.rules`` (the rule used and the paper's ratio rule, labelled), each against the exact game."""
    rules = estimate.extra.get("rules")
    if not rules:
        return None
    return {name: {"label": r["label"], "used": r["used"], "edges": r["edges"], "partition": r["partition"],
                   **{k: r[k] for k in ("threshold", "tol") if k in r},
                   **_against_exact(r["edges"], r["partition"], game, eq)}
            for name, r in rules.items()}


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None
