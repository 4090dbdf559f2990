"""Does the sampled search find the planted groups of a measured federation? (docs/scale.md)

``synthetic --groups G`` plants ``G`` groups of clients whose tasks conflict.  Whether the planted
partition is the collaboration equilibrium of the game *measured* on the data depends on the
data (``benchmarks/planted_inner.py`` checks it): with the loader's default of 10 rows a client
for 21 unknowns, a group of ten holds 100 rows and its last members bring no measurable gain, so
the groups are not an equilibrium.  Where each client holds a small part of what its group must
learn (``--samples 10 --dim 120``: 10 rows a client of a 121-parameter model, a group of ten
100 rows) every member is needed and the groups are an equilibrium; this script then asks
whether :func:`coalitions.sample_ce` finds them, and at what cost.

For each seed it builds the federation, measures coalitions on demand with the exhaustive
oracle's subset models (closed form, 200 bootstrap replicates, one thread: what ``coalitions
sample-ce synthetic`` does), runs the search and its certificate from everyone alone and prints
one row: the planted groups recovered or not, the certificate (ε at δ), the coalitions the
search and the certificate used, and the wall time; then the count of seeds recovered with its
exact 95 % interval (Clopper–Pearson).

Run:  python benchmarks/planted_federation.py [--clients 50] [--groups 5] [--samples 10] [--dim 120]
      [--rho 0.01] [--seeds 0-9] [--budget 2000] [--epsilon 0.01] [--quick]

``--quick``: 12 clients in 3 groups of four, 5 rows a client of a 25-parameter model, seed 0, a budget
of 600 at ε = 0.05 (CI).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import binomtest  # noqa: E402

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.game.source import SubsetSource  # noqa: E402
from coalitions.params import ParameterError  # noqa: E402
from coalitions.sampled_ce import sample_ce  # noqa: E402

#: The bootstrap replicates of every measured value (``coalitions sample-ce``'s default).
REPLICATES = 200


def seeds_of(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"``."""
    try:
        if "-" in text:
            a, b = text.split("-")
            return list(range(int(a), int(b) + 1))
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise ParameterError("seeds", f"--seeds must read like 0-9 or 0,3,5, got {text!r}") from None


def run_seed(seed: int, a: argparse.Namespace) -> dict:
    """One federation, one search and certificate: what the row reports."""
    fed = load("synthetic", seed=seed, clients=a.clients, groups=a.groups, samples=a.samples, dim=a.dim,
               rho=a.rho)
    source = SubsetSource(fed, ExhaustiveOracle(seed=seed, replicates=REPLICATES, threads=1))
    t = time.perf_counter()
    res = sample_ce(source, a.budget, a.epsilon, a.delta, seed=seed)
    wall = time.perf_counter() - t
    planted = sorted(tuple(sorted(g, key=int)) for g in fed.planted_groups)
    found = sorted(tuple(sorted(b, key=int)) for b in res.blocks())
    return {"seed": seed, "recovered": found == planted, "blocks": len(found),
            "sizes": sorted(len(b) for b in found), "certified": res.holds, "epsilon": res.certificate.epsilon,
            "search": res.search.trainings, "stopped": res.search.stopped,
            "certificate": res.certificate.trainings, "total": res.trainings, "wall": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--samples", type=int, default=10, help="training rows per client [10]")
    ap.add_argument("--dim", type=int, default=120, help="features (the model has one more unknown) [120]")
    ap.add_argument("--rho", type=float, default=0.01, help="spread of the tasks within a group [0.01]")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--budget", type=int, default=2000, help="coalitions per run, search and certificate [2000]")
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--delta", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="12 clients in 3 groups, seed 0 (CI)")
    a = ap.parse_args(argv)
    if a.quick:
        a.clients, a.groups, a.samples, a.dim, a.seeds, a.budget, a.epsilon = 12, 3, 5, 24, "0", 600, 0.05
    try:
        seeds = seeds_of(a.seeds)
        rows = []
        print(f"synthetic --clients {a.clients} --groups {a.groups} --samples {a.samples} --dim {a.dim} "
              f"--rho {a.rho:g}: sample-ce --budget {a.budget} --epsilon {a.epsilon:g} --delta {a.delta:g}, "
              f"{REPLICATES} replicates (z = 1.96), from everyone alone; {platform.processor() or platform.machine()}")
        print("seed | planted groups recovered | blocks (sizes) | certified | epsilon | search | certificate "
              "| coalitions | wall s")
        for seed in seeds:
            r = run_seed(seed, a)
            rows.append(r)
            print(f"{seed} | {'yes' if r['recovered'] else 'no'} | {r['blocks']} ({','.join(map(str, r['sizes']))}) "
                  f"| {'yes' if r['certified'] else 'no'} | {r['epsilon']:.5f} | {r['search']} ({r['stopped']}) "
                  f"| {r['certificate']} | {r['total']} | {r['wall']:.1f}", flush=True)
    except (ParameterError, InputError) as e:   # a bad option of the federation or the run: one line, exit 2
        ap.error(str(e))
    k, n = sum(r["recovered"] for r in rows), len(rows)
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    print(f"recovered on {k} of {n} seeds (95 % interval {ci.low:.2f}-{ci.high:.2f}); certified on "
          f"{sum(r['certified'] for r in rows)}; coalitions at most {max(r['total'] for r in rows)}; "
          f"wall at most {max(r['wall'] for r in rows):.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
