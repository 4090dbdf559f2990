"""``benchmarks/planted_inner.py``: its inner check of a planted group against a direct recount.

The benchmark measures every proper sub-coalition of each planted group through the lazy game
and :func:`coalitions.sampled.inner_violations`; here the same count is made from the exhaustive
oracle's whole game and its replicates, by the rule written out (docs/scale.md): ``K' ⊊ K``
splits off when no member of ``K'`` is significantly worse in it, ``v_i(K') + z·se ≥ v_i(K) − tol``
in the game's higher-is-better units, ``se`` the paired bootstrap standard error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from planted_inner import group_check  # noqa: E402

from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.game.source import SubsetSource  # noqa: E402
from coalitions.measured import MeasuredGame  # noqa: E402
from coalitions.sampled import Rules  # noqa: E402


def _recount(values: np.ndarray, reps: np.ndarray, block: int, z: float, tol: float) -> tuple[int, int]:
    """Violations among ``block``'s proper sub-coalitions, and the largest violator's size, by the rule itself."""
    members = [i for i in range(values.shape[0]) if block >> i & 1]
    bad, largest = 0, 0
    for sub in range(1, block):
        if sub & ~block or sub == block:
            continue
        inside = [i for i in members if sub >> i & 1]
        ok = all(values[i, sub] + z * np.std(reps[:, i, sub] - reps[:, i, block], ddof=1) >= values[i, block] - tol
                 for i in inside)
        if ok:
            bad += 1
            largest = max(largest, len(inside))
    return bad, largest


@pytest.mark.parametrize("seed", [0, 3])
def test_the_inner_check_of_each_planted_group_is_the_rule_recounted(seed):
    fed = load("synthetic", seed=seed, clients=12, groups=3)
    oracle = ExhaustiveOracle(seed=seed, replicates=50, threads=1)
    whole = oracle.fit(fed)
    values, reps = whole.game_.values, whole.replicates_.values     # higher is better, NaN outside
    cache = MeasuredGame(SubsetSource(fed, oracle))
    seen = []
    for z in (0.0, 1.96):
        rules = Rules(z=z)
        for names in fed.planted_groups:
            block = sum(1 << fed.names.index(c) for c in names)
            bad, subs, largest, _ = group_check(cache, block, rules)
            assert subs == (1 << len(names)) - 2
            want = _recount(values, reps, block, z, rules.tol)
            assert (bad, largest) == want
            seen.append(bad)
    assert any(seen) and not all(seen)   # both outcomes occur: the comparison can fail either way
