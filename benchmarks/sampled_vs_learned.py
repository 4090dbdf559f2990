"""The sampled equilibrium beside the learned methods, against the exhaustive game (docs/scale.md).

On ``reproduce synthetic``'s regime I federation with ``N`` clients (``--game linear``, the
default: 10 samples per client, two groups with opposite tasks; linear regression, the exact
game in closed form) or on ``reproduce fashion``'s Dirichlet federation with ``N`` clients
(``--game fashion``: its protocol, personal heads, the exact game at its fixed rate), both with
200 bootstrap replicates, for each seed:

* the exhaustive game and its CE (``coalitions.solve`` at z = 1.96 with the regime's family of
  comparisons: the reference);
* the sampled CE (:func:`coalitions.sample_ce` on the same subset models trained on demand,
  :class:`~coalitions.learners.game.source.SubsetSource`, ``--budget`` coalitions,
  ε = 0.05, δ = 0.05), with the coalitions it trained;
* SPO, FedAMP and FedeRiCo under the experiment's settings (``compute_piece``, as
  ``benchmarks/frontier.py`` runs them), each giving its own CE.

It prints, per method, how often its CE is the exhaustive CE, how often its partition is a CE
of the full game under shared payoffs (each block's own model, what the sampled search judges;
``coalitions.certify`` at z = 1.96 over every coalition) — equilibria need not be unique —
and the sampled CE's coalitions used against the ``2^N − 1`` of the exhaustive game.  The exact CE is what all are scored
against, so a method that reproduces it more often is closer to the reference.

Run:  python benchmarks/sampled_vs_learned.py [--game linear|fashion] [--sizes 10] [--seeds 0-9] [--budget 400]
      [--quick]

``--quick``: N = 6, one seed, five training steps, the learners FedAMP only (CI).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from frontier import GAMES, against, federation, measure, sampled  # noqa: E402
from spo_agreement import parse_seeds  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.learners.training import threads  # noqa: E402

LEARNERS = ("spo", "fedamp", "federico")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10", help="client counts [10]")
    ap.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 [0-9]")
    ap.add_argument("--budget", type=int, default=400, help="coalitions the sampled CE may use [400]")
    ap.add_argument("--game", choices=sorted(GAMES), default="linear",
                    help="linear: synthetic regime I; fashion: reproduce fashion's Dirichlet federation [linear]")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    sizes, seeds = ([6], [0]) if a.quick else (parse_seeds(a.sizes), parse_seeds(a.seeds))
    learners = ("fedamp",) if a.quick else LEARNERS
    threads.configure(1)
    print(f"# sampled CE beside learned methods ({platform.machine()}, python {platform.python_version()}, "
          f"{'synthetic regime I' if a.game == 'linear' else 'fashion, Dirichlet'}, seeds {seeds}, budget {a.budget}, epsilon 0.05, delta 0.05); "
          "CPU = process time, PyTorch on one thread")
    print("| N | method | CE = exhaustive CE | a CE of the full game (shared) | coalitions trained (mean) "
          "| CPU s (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        hits = {m: 0 for m in ("sampled", *learners)}
        stable = {m: 0 for m in ("exhaustive", "sampled", *learners)}
        cpu = {m: [] for m in ("exhaustive", "sampled", *learners)}
        used = []
        for seed in seeds:
            fed = federation(a.game, n, seed)
            exact = measure(a.game, "exact", fed, seed, a.quick)
            cpu["exhaustive"].append(exact["cpu_ce"])
            g = exact["game"]

            def is_ce(blocks, g=g) -> bool:
                return bool(co.certify(g, sorted(blocks), semantics="shared").holds)

            stable["exhaustive"] += is_ce(exact["partition"])
            got = sampled(a.game, fed, seed, a.budget, a.quick)
            part, k, c = got["partition"], got["trained"], got["cpu"]
            hits["sampled"] += part == exact["partition"]
            stable["sampled"] += is_ce(part)
            used.append(k)
            cpu["sampled"].append(c)
            for m in learners:
                r = measure(a.game, m, fed, seed, a.quick)
                hits[m] += against(exact, r)[1]
                stable[m] += is_ce(r["estimate"].masks)
                cpu[m].append(r["cpu_ce"])
        s = len(seeds)
        print(f"| {n} | exhaustive | (the reference) | {stable['exhaustive']}/{s} | {(1 << n) - 1} "
              f"| {np.mean(cpu['exhaustive']):.2f} |")
        print(f"| {n} | sampled | {hits['sampled']}/{s} | {stable['sampled']}/{s} | {np.mean(used):.0f} "
              f"| {np.mean(cpu['sampled']):.2f} |")
        for m in learners:
            print(f"| {n} | {m} | {hits[m]}/{s} | {stable[m]}/{s} | (no coalition models) | {np.mean(cpu[m]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
