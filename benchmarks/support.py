"""Benchmark of equilibria with error bars: bootstrap replicates and the support of a CE.

Prints, in one run, as ratios against a reference measured in the same run:

1. The exhaustive oracle with 50 and with 200 replicates (its default: the measured game's
   standard errors) against the same oracle without replicates (``synthetic``, closed form, 6
   clients; ``heart``, logistic, 4 hospitals): what re-scoring the trained models costs beside
   training them.
2. The support of the CE over 50 replicates against 50 plain ``solve`` calls on the game
   itself (6 clients, and a planted game of 10), on point values: the support is one certified
   solve per replicate and nothing else.
3. One noise-aware ``solve`` (z = 1.96, 200 replicates) against a point-value one.
4. A planted 10-client game measured with large noise, whose peeled partition is not stable at
   z: the noise-aware ``solve`` that enumerates every partition, and the support over 20
   replicates, each solved the same way.

Best of ``--repeat`` runs each (default 3); ``--threads 1`` by default (PyTorch).

Run:  python benchmarks/support.py [--quick]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import coalitions as co
from coalitions.replicates import Replicates
from coalitions.support import support


def best(f, repeat: int) -> tuple[float, object]:
    out, t = None, float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        out = f()
        t = min(t, time.perf_counter() - s)
    return t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="one repetition: check that the script runs to its end")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1

    import os

    import torch

    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.training.protocol import TrainingProtocol

    torch.set_num_threads(args.threads)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"torch threads {args.threads}, best of {args.repeat}")
    print("\n1. exhaustive oracle: 50 and 200 replicates vs none")
    # heart: logistic regression, Adam at 0.05 for 500 full-batch steps (the oracle's former default)
    for name, fed, p in (("synthetic (closed form)", load("synthetic"), None),
                         ("heart (logistic)", load("heart"), TrainingProtocol(model="logistic", steps=500))):
        t0, _ = best(lambda fed=fed, p=p: ExhaustiveOracle(protocol=p, replicates=0).fit(fed), args.repeat)
        t50, o = best(lambda fed=fed, p=p: ExhaustiveOracle(protocol=p, replicates=50).fit(fed), args.repeat)
        t200, o = best(lambda fed=fed, p=p: ExhaustiveOracle(protocol=p, replicates=200).fit(fed), args.repeat)
        print(f"   {name:24s} N={fed.n}: none {t0:.3f} s, 50: {t50:.3f} s (x{t50 / t0:.2f}), "
              f"200: {t200:.3f} s (x{t200 / t0:.2f})")

    print("\n2. support over 50 replicates vs 50 solves of the game")
    rng = np.random.default_rng(0)
    for label, game in (("synthetic oracle game, N=6", ExhaustiveOracle(replicates=0).fit(load("synthetic")).game_),
                        ("planted 4+3+3, N=10", co.planted([4, 3, 3], noise=0.05, seed=1))):
        reps = Replicates.from_array(game.raw_values() * (1 + 0.02 * rng.normal(size=(50, 1, 1))),
                                     game.clients, game.sense)
        eq = co.solve(game)
        ref, _ = best(lambda game=game: [co.solve(game) for _ in range(50)], args.repeat)
        t, s = best(lambda eq=eq, reps=reps: support(eq.masks, reps), args.repeat)
        print(f"   {label:28s}: 50 solves {ref * 1e3:.0f} ms, support {t * 1e3:.0f} ms (x{t / ref:.2f}), "
              f"partition support {s.partition_share:.2f}")

    print("\n3. one noise-aware solve (z = 1.96, 200 replicates) vs one on point values")
    for label, fed in (("synthetic, N=6", load("synthetic")), ("heart, N=4", load("heart"))):
        game = ExhaustiveOracle().fit(fed).game_
        ref, _ = best(lambda game=game: co.solve(game, z=0), args.repeat)
        t, eq = best(lambda game=game: co.solve(game), args.repeat)
        print(f"   {label:28s}: point {ref * 1e3:.1f} ms, noise-aware {t * 1e3:.1f} ms (x{t / ref:.1f}), "
              f"verdict {eq.certificate.verdict}")

    print("\n4. a measured game whose peeled partition is not stable at z: the enumeration it falls back to")
    from coalitions.noise import Uncertainty

    planted = co.planted([4, 3, 3], noise=0.0, seed=1)
    raw = planted.raw_values()[None] + 0.3 * np.random.default_rng(0).normal(size=(200, *planted.values.shape))
    reps = Replicates.from_array(raw, planted.clients)
    noisy = planted.with_uncertainty(Uncertainty.from_replicates(reps))
    ref, _ = best(lambda: co.solve(noisy, z=0), args.repeat)
    t, eq = best(lambda: co.solve(noisy), args.repeat)
    few = Replicates.from_array(raw[:20], planted.clients)
    t20, _ = best(lambda: support(eq.masks, few, z=1.96, uncertainty=noisy.uncertainty), 1)
    print(f"   planted 4+3+3, N=10, noise 0.3: point {ref * 1e3:.1f} ms, noise-aware {t * 1e3:.0f} ms "
          f"(found by {eq.found_by}, verdict {eq.certificate.verdict}); support over 20 replicates {t20:.1f} s")


if __name__ == "__main__":
    main()
