"""Is a planted federation's partition into its groups an equilibrium of its measured game? (docs/scale.md)

``synthetic --groups G`` plants ``G`` groups whose tasks conflict; whether the groups are the
collaboration equilibrium of the game measured on the data is a question of the data, not of the
construction.  A partition can be a CE only if each of its blocks passes *inner agreement*: no
proper sub-coalition splits off with none of its members significantly worse (SPEC, the
noise-aware rule of :mod:`coalitions.sampled` at z = 1.96 with the paired bootstrap replicates).
For every seed and every planted group this script measures **all** ``2^k − 2`` proper
sub-coalitions of the group (closed form, the settings of ``coalitions sample-ce synthetic``:
200 replicates, the seed's data and initialisation) and prints how many split off
(:func:`coalitions.sampled.inner_violations`), the largest of them, and how many clients of the
group some other member does not significantly need (the group less that client splits off).
A group with a violation is not a block of any CE of the measured game, so a search that
returns it would be wrong.

Run:  python benchmarks/planted_inner.py [--clients 50] [--groups 5] [--seeds 0-9] [--samples 10]
      [--dim 20] [--rho 0.1] [--noise 0.01] [--val 1000] [--quick]

``--quick``: 12 clients in 3 groups, seed 0 (CI).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from coalitions.bitmask import popcount  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.game.source import SubsetSource  # noqa: E402
from coalitions.measured import MeasuredGame  # noqa: E402
from coalitions.noise import DEFAULT_Z  # noqa: E402
from coalitions.params import ParameterError  # noqa: E402
from coalitions.sampled import Rules, inner_violations, proper_subsets  # noqa: E402


def seeds_of(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"``."""
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def group_check(cache: MeasuredGame, block: int, rules: Rules) -> tuple[int, int, int, int]:
    """Violations among ``block``'s proper sub-coalitions, how many there are, the largest violator's
    size, and the members whose removal leaves a violating sub-coalition."""
    subs = proper_subsets(block)
    cache.measure(np.concatenate([[block], subs]))
    bad = inner_violations(cache, block, subs, rules)
    size = popcount(subs)
    k = popcount(np.array([block]))[0]
    return int(bad.sum()), int(subs.size), int(size[bad].max()) if bad.any() else 0, int((bad & (size == k - 1)).sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--samples", type=int, default=10, help="training samples per client [10]")
    ap.add_argument("--dim", type=int, default=20, help="features (the model has one more unknown) [20]")
    ap.add_argument("--rho", type=float, default=0.1, help="spread of the tasks within a group [0.1]")
    ap.add_argument("--noise", type=float, default=0.01, help="label noise [0.01]")
    ap.add_argument("--val", type=int, default=1000, help="fresh validation points per client [1000]")
    ap.add_argument("--quick", action="store_true", help="12 clients, 3 groups, seed 0 (CI)")
    a = ap.parse_args(argv)
    if a.quick:
        a.clients, a.groups, a.seeds = 12, 3, "0"
    largest = -(-a.clients // a.groups) if a.groups > 0 else 0
    if not 1 <= a.groups <= a.clients or largest > 16:
        ap.error(f"--groups {a.groups} of --clients {a.clients}: groups of 1 to 16 clients are measured whole "
                 f"(2^k - 2 sub-coalitions each)")
    rules = Rules(z=DEFAULT_Z)
    print(f"synthetic --clients {a.clients} --groups {a.groups} --samples {a.samples} --dim {a.dim} --rho {a.rho:g} "
          f"--noise {a.noise:g} --val {a.val}: every proper sub-coalition of every planted group, 200 replicates, "
          f"z = {rules.z}")
    print("seed | group | sub-coalitions that split off | largest | members not needed | passes")
    passed = total = 0
    for seed in seeds_of(a.seeds):
        t = time.perf_counter()
        try:
            fed = load("synthetic", seed=seed, clients=a.clients, groups=a.groups, samples=a.samples, dim=a.dim, rho=a.rho,
                       noise=a.noise, val=a.val)
        except ParameterError as e:   # a bad --samples, --rho, --noise or --val: one line, exit code 2
            ap.error(str(e))
        cache = MeasuredGame(SubsetSource(fed, ExhaustiveOracle(seed=seed, replicates=200, threads=1)))
        for g, names in enumerate(fed.planted_groups):
            block = sum(1 << fed.names.index(c) for c in names)
            bad, subs, largest, loo = group_check(cache, block, rules)
            passed += bad == 0
            total += 1
            print(f"{seed} | {g} | {bad} of {subs} | {largest} | {loo} of {len(names)} | {'yes' if bad == 0 else 'no'}")
        print(f"# seed {seed}: {cache.trainings} coalitions measured in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"planted groups that pass their inner check: {passed} of {total}; a partition with a group that "
          f"fails is not a CE of the measured game")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
