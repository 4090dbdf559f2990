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
``coalitions.certify`` at z = 1.96 over every coalition) — equilibria need not be unique —,
the true ``D``-share of the coalitions that block its partition under the sampled certificate's
rules (:func:`coalitions.sampled_certificate.blocking_share` over all ``2^N`` coalitions of the
exhaustive game), and the sampled CE's coalitions used against the ``2^N − 1`` of the exhaustive
game.  For the sampled CE it also prints the certified ε and its **coverage**: how often the
true share is at most ε, with the exact 95 % interval of that rate (the certificate promises
at least ``1 − δ = 0.95``).  The exact CE is what all are scored
against, so a method that reproduces it more often is closer to the reference.

Run:  python benchmarks/sampled_vs_learned.py [--game linear|fashion] [--sizes 10] [--seeds 0-9] [--budget 400]
      [--learners spo,fedamp,federico | none] [--quick]

``--learners none`` runs the exhaustive game and the sampled CE only (coverage over many seeds).

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
from sampled_ce import interval  # noqa: E402
from spo_agreement import parse_seeds  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.learners.training import threads  # noqa: E402
from coalitions.sampled_certificate import blocking_share  # noqa: E402

LEARNERS = ("spo", "fedamp", "federico")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10", help="client counts [10]")
    ap.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 [0-9]")
    ap.add_argument("--budget", type=int, default=400, help="coalitions the sampled CE may use [400]")
    ap.add_argument("--game", choices=sorted(GAMES), default="linear",
                    help="linear: synthetic regime I; fashion: reproduce fashion's Dirichlet federation [linear]")
    ap.add_argument("--learners", default=",".join(LEARNERS),
                    help=f"learned methods beside the sampled CE, comma-separated, or none [{','.join(LEARNERS)}]")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    sizes, seeds = ([6], [0]) if a.quick else (parse_seeds(a.sizes), parse_seeds(a.seeds))
    learners = () if a.learners.strip() == "none" else tuple(m.strip() for m in a.learners.split(","))
    if unknown := sorted(set(learners) - set(LEARNERS)):
        ap.error(f"--learners: unknown {', '.join(unknown)}; choose from {', '.join(LEARNERS)} or none")
    if a.quick:
        learners = ("fedamp",)
    threads.configure(1)
    print(f"# sampled CE beside learned methods ({platform.machine()}, python {platform.python_version()}, "
          f"{'synthetic regime I' if a.game == 'linear' else 'fashion, Dirichlet'}, seeds {seeds}, budget {a.budget}, epsilon 0.05, delta 0.05); "
          "CPU = process time, PyTorch on one thread")
    print("| N | method | CE = exhaustive CE | a CE of the full game (shared) | true blocking share (mean, max) "
          "| coalitions trained (mean) | CPU s (mean) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    notes = []
    for n in sizes:
        hits = {m: 0 for m in ("sampled", *learners)}
        stable = {m: 0 for m in ("exhaustive", "sampled", *learners)}
        cpu = {m: [] for m in ("exhaustive", "sampled", *learners)}
        used, eps = [], []
        share = {m: [] for m in ("exhaustive", "sampled", *learners)}
        for seed in seeds:
            fed = federation(a.game, n, seed)
            exact = measure(a.game, "exact", fed, seed, a.quick)
            cpu["exhaustive"].append(exact["cpu_ce"])
            g = exact["game"]

            def is_ce(blocks, g=g) -> bool:
                return bool(co.certify(g, sorted(blocks), semantics="shared").holds)

            stable["exhaustive"] += is_ce(exact["partition"])
            got = sampled(a.game, fed, seed, a.budget, a.quick)
            part, k, c, cert = got["partition"], got["trained"], got["cpu"], got["certificate"]

            def true_share(blocks, g=g, cert=cert) -> float:
                return blocking_share(g, sorted(blocks), z=cert.z, tol=cert.tol, distribution=cert.distribution)

            share["exhaustive"].append(true_share(exact["partition"]))
            share["sampled"].append(true_share(part))
            eps.append(cert.epsilon)
            hits["sampled"] += part == exact["partition"]
            stable["sampled"] += is_ce(part)
            used.append(k)
            cpu["sampled"].append(c)
            for m in learners:
                r = measure(a.game, m, fed, seed, a.quick)
                hits[m] += against(exact, r)[1]
                stable[m] += is_ce(r["estimate"].masks)
                share[m].append(true_share(r["estimate"].masks))
                cpu[m].append(r["cpu_ce"])
        s = len(seeds)

        def sh(m: str, share=share) -> str:
            return f"{np.mean(share[m]):.2g}, {max(share[m]):.2g}"

        print(f"| {n} | exhaustive | (the reference) | {stable['exhaustive']}/{s} | {sh('exhaustive')} "
              f"| {(1 << n) - 1} | {np.mean(cpu['exhaustive']):.2f} |")
        print(f"| {n} | sampled | {hits['sampled']}/{s} | {stable['sampled']}/{s} | {sh('sampled')} "
              f"| {np.mean(used):.0f} | {np.mean(cpu['sampled']):.2f} |")
        for m in learners:
            print(f"| {n} | {m} | {hits[m]}/{s} | {stable[m]}/{s} | {sh(m)} | (no coalition models) "
                  f"| {np.mean(cpu[m]):.2f} |")
        cover = sum(t <= e for t, e in zip(share["sampled"], eps, strict=True))
        lo, hi = interval(cover, s)
        notes.append(f"N = {n}: the sampled CE's certified ε (mean {np.mean(eps):.4f}, max {max(eps):.4f}) covers "
                     f"the true share on {cover}/{s} seeds = {cover / s:.2f} [95 % CI {lo:.2f}, {hi:.2f}]")
    print()
    for line in notes:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
