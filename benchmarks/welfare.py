"""Benchmark of the welfare optimum: the coalition-structure DP against plain partition enumeration.

Prints, in one run:

1. The optimum by the dynamic programme over subsets (``coalitions.welfare``: the
   coalition welfare table, ``f[S]`` for every ``S`` and the optimal partition) on
   planted games under model-sharing (``shared``) semantics, at N = 10 … 18, wall time
   and the ``(3^N − 1)/2`` (set, sub-coalition) pairs per second.
2. A plain enumeration of every partition (restricted growth strings, each
   partition's welfare summed over its blocks, vectorised) at the sizes it can reach
   in memory (Bell(12) = 4,213,597 partitions), the same optimum checked, and the
   ratio enumeration / DP measured in this run.
3. The load average before and after, since the machine may be shared.

Targets (the project's): N = 16 in ≤ 10 s and N = 18 in ≤ 2 minutes on a 2-core CPU.

Run:  python benchmarks/welfare.py   (--quick: the DP up to N = 14, the enumeration up to N = 10)
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import coalitions as co
from coalitions.stable import enumerate_partitions
from coalitions.welfare import coalition_welfare, optimal_partitions, structure_values

TARGETS = {16: 10.0, 18: 120.0}


def game_of(n: int) -> co.Game:
    """A planted game of groups of 3 (and a remainder), noisy so that the optimum is unique."""
    groups = [3] * (n // 3) + ([n % 3] if n % 3 else [])
    return co.planted(groups, noise=0.2, seed=n)


def dp_optimum(game: co.Game) -> tuple[float, tuple[int, ...], float]:
    """The optimum by the dynamic programme: (welfare, partition, seconds)."""
    start = time.perf_counter()
    w = coalition_welfare(game, np.ones(game.n), "shared")
    f = structure_values(w)
    (part, *_), _ = optimal_partitions(w, f)
    return float(f[-1]), part, time.perf_counter() - start


def enumeration_optimum(game: co.Game) -> tuple[float, tuple[int, ...], float]:
    """The optimum by scoring every partition: (welfare, partition, seconds)."""
    start = time.perf_counter()
    w = coalition_welfare(game, np.ones(game.n), "shared")
    w[0] = 0.0
    _, label_mask = enumerate_partitions(game.n)
    scores = w[label_mask].sum(axis=1)
    best = int(np.argmax(scores))
    part = tuple(sorted((int(k) for k in label_mask[best] if k), key=lambda k: k & -k))
    return float(scores[best]), part, time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="DP up to N = 14, enumeration up to N = 10.")
    args = ap.parse_args(argv)
    dp_sizes = [10, 12, 14] if args.quick else [10, 12, 14, 16, 18]
    enum_sizes = [8, 10] if args.quick else [8, 10, 11, 12]
    load = os.getloadavg()
    print(f"# coalitions {co.__version__} welfare benchmark; python {platform.python_version()}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("\n## optimum by the dynamic programme over subsets (shared semantics, planted games)")
    print(f"{'N':>3} {'DP s':>9} {'pairs':>14} {'pairs/s':>12} target")
    dp = {}
    for n in dp_sizes:
        game = game_of(n)
        dp[n] = dp_optimum(game)
        pairs = (3 ** n - 1) // 2
        target = TARGETS.get(n)
        verdict = "" if target is None else (f"<= {target:g} s: " + ("met" if dp[n][2] <= target else "MISSED"))
        print(f"{n:>3} {dp[n][2]:>9.3f} {pairs:>14,} {pairs / dp[n][2]:>12.3g} {verdict}", flush=True)
    print("\n## plain enumeration of every partition, beside the DP in this run")
    print(f"{'N':>3} {'partitions':>12} {'enumerate s':>12} {'DP s':>9} {'enumerate / DP':>15} same optimum")
    for n in enum_sizes:
        game = game_of(n)
        if n not in dp:
            dp[n] = dp_optimum(game)
        x, part, secs = enumeration_optimum(game)
        same = abs(x - dp[n][0]) <= 1e-9 and part == dp[n][1]
        print(f"{n:>3} {co.brute_force.bell(n):>12,} {secs:>12.3f} {dp[n][2]:>9.4f} {secs / dp[n][2]:>15.1f} "
              f"{'yes' if same else 'NO'}", flush=True)
        if not same:
            raise SystemExit(f"N={n}: the DP and the enumeration disagree")
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
