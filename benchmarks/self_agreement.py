"""How well the exhaustive game reproduces itself: point values against noise-aware (docs/concepts.md §7).

For each experiment of ``coalitions reproduce`` (its data, its regime, its oracle settings: the
reference every learned graph is compared with), the exhaustive game is trained once per
*training* seed on the same data split (``--data-seed``), with 200 bootstrap replicates of the
validation rows.  Printed per experiment and regime, at ``z = 0`` (point values) and
``z = 1.96`` (noise-aware):

* **self-agreement under validation resampling**: the median over replicates of the edge F1 of a
  replicate's benefit graph ``BG(all)`` against the game's own (:func:`coalitions.support.self_agreement`);
* the share of replicates whose graph is the game's own, edge for edge (``same graph``): an
  empty graph scores F1 = 0 against a replicate with a single edge, so the two read together;
* **self-agreement across retraining**: the median edge F1 over pairs of training seeds;
* for a classification task, the same for the **validation-loss game** of the same subset models
  (``ExhaustiveOracle(loss_game=True)``), so that the game whose graph reproduces itself better
  can be chosen as the primary one on seeds no report uses (``--data-seed 100`` ...);
* each of these at ``z = 1.96`` for every family of comparisons (:mod:`coalitions.noise`: per
  comparison, the default; client-wise; game-wise);
* the equilibrium's **support over validation resamples** (the share of replicates whose CE is
  the game's; seed 0's game) and **over retraining** (the share of the other seeds' games whose
  CE is seed 0's).

An empty graph against an empty graph counts as F1 = 1 (both say: nobody needs anybody).

Run:  python benchmarks/self_agreement.py [--quick] [--experiments synthetic,heart] [--seeds 3] [--json OUT]
      [--split TRAIN/VAL/TEST]

``--split`` replaces the regime's rows a client (``fashion``'s ``40/100/100``; for the regimes that
take a ``split``), e.g. ``40/1000/100`` to ask what ten times the validation rows do to the noise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import time

import numpy as np

import coalitions as co
from coalitions.learners.data.datasets import load
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.experiments.catalogue import get_experiment
from coalitions.learners.experiments.statistics import separate_seeds
from coalitions.support import edge_f1, self_agreement, support, support_over

#: (row key, z, family): point values, then z = 1.96 for each family of comparisons (coalitions.noise).
CASES = (("point", 0.0, "comparison"), ("aware", 1.96, "comparison"), ("client-wise", 1.96, "client"),
         ("game-wise", 1.96, "game"))


def games(exp_name: str, regime, data_seed: int, seeds: int, quick: bool, replicates: int, split: str | None = None):
    """Per training seed: the metric game and, for a classification task, the validation-loss game."""
    exp = get_experiment(exp_name)
    data = dict(regime.options)
    if split is not None:
        if "split" not in data:
            raise SystemExit(f"self_agreement.py: error: --split: {exp_name}/{regime.name} takes no split")
        data["split"] = split
    fed = load(exp.dataset, seed=separate_seeds(data_seed).data, **data)
    options = dict(exp.oracle_options(quick, regime))
    options["loss_game"] = fed.task != "regression"   # a regression metric (MSE) is its loss already
    metric, loss = [], []
    for s in range(seeds):
        t = time.perf_counter()
        o = ExhaustiveOracle(seed=separate_seeds(s).init, **{**options, "replicates": replicates}).fit(fed)
        took = time.perf_counter() - t
        metric.append((o.game_, o.replicates_, took))
        if o.loss_game_ is not None:
            loss.append((o.loss_game_, o.loss_replicates_, took))
    return fed, {fed.metric: metric, **({"loss": loss} if loss else {})}


def measure(found) -> dict:
    row = {}
    for key, z, family in CASES:
        first, reps, _ = found[0]
        first = first.with_uncertainty(first.uncertainty.with_family(family))
        f1 = self_agreement(first, reps, z=z)
        graphs = [co.ExactOracle(g.with_uncertainty(g.uncertainty.with_family(family)), z=z).benefit_graph(g.grand).edges
                  for g, _, _ in found]
        across = [edge_f1(a, b) for a, b in itertools.combinations(graphs, 2)]
        eq = co.solve(first, z=z)
        sup = support(eq.masks, reps, z=z, uncertainty=first.uncertainty)
        others = [g.with_uncertainty(first.uncertainty if z > 0 else None) for g, _, _ in found[1:]]
        again = support_over(eq.masks, others, len(others), z=z) if others else None
        row[key] = {"f1_resampling": float(np.median(f1)), "graph_same": float(np.mean(f1 == 1.0)),
                    "f1_retraining": float(np.median(across)) if across
                    else None, "edges": len(graphs[0]), "partition": co.format_partition(first, eq.masks),
                    "verdict": eq.certificate.verdict, "support_resampling": sup.partition_share,
                    "support_retraining": None if again is None else again.partition_share}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="synthetic and heart, 2 seeds, 30 replicates, the experiments' quick settings")
    ap.add_argument("--experiments", default="synthetic,heart,adult,digits")
    ap.add_argument("--seeds", type=int, default=3, help="Training seeds per game.")
    ap.add_argument("--data-seeds", default="0",
                    help="Data splits, e.g. 100-119 (seeds no report uses, to choose the primary game).")
    ap.add_argument("--replicates", type=int, default=None, help="Bootstrap replicates per game [200; quick 30].")
    ap.add_argument("--settings", choices=("full", "quick"), default="full",
                    help="The experiments' oracle settings (reproduce) or their --quick ones.")
    ap.add_argument("--regimes", default=None, help="Only these regimes, e.g. dirichlet [default: all].")
    ap.add_argument("--json", default=None, help="Also write the rows here.")
    ap.add_argument("--split", default=None, help="Rows a client, TRAIN/VAL/TEST, for the regimes that take one.")
    args = ap.parse_args()
    names = ["synthetic", "heart"] if args.quick else args.experiments.split(",")
    seeds = 2 if args.quick else args.seeds
    if args.replicates is None:
        args.replicates = 30 if args.quick else 200
    quick = args.quick or args.settings == "quick"
    lo, _, hi = args.data_seeds.partition("-")
    data_seeds = list(range(int(lo), int(hi or lo) + 1))
    print(f"self-agreement of the exhaustive game: {seeds} training seeds, data seeds {args.data_seeds}, "
          f"{args.replicates} replicates, {'quick' if quick else 'full'} oracle settings"
          f"{'' if args.split is None else f', split {args.split}'}; "
          f"python {platform.python_version()}, torch via coalitions.learners, {platform.machine()}")
    print(f"{'experiment':<24} {'game':<8} {'z':>4} {'family':<6}  {'edges':>5}  {'F1 resample':>11}  {'same graph':>10}  "
          f"{'F1 retrain':>10}  "
          f"{'support resample':>16}  {'support retrain':>15}  {'verdict':<26} partition")
    rows = []
    for name, data_seed in itertools.product(names, data_seeds):
        exp = get_experiment(name)
        for regime in exp.regimes:
            if args.regimes and regime.name not in args.regimes.split(","):
                continue
            start = time.perf_counter()
            fed, by_game = games(name, regime, data_seed, seeds, quick, args.replicates, args.split)
            label = name if len(exp.regimes) == 1 else f"{name}/{regime.name}"
            for game_name, found in by_game.items():
                row = measure(found)
                for key, z, family in CASES:
                    r = row[key]
                    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
                    print(f"{label:<24} {game_name:<8} {z:4.2f} {family[:6]:<6}  {r['edges']:5d}  {fmt(r['f1_resampling']):>11}  "
                          f"{fmt(r['graph_same']):>10}  {fmt(r['f1_retraining']):>10}  {fmt(r['support_resampling']):>16}  "
                          f"{fmt(r['support_retraining']):>15}  {r['verdict']:<26} {r['partition']}", flush=True)
                rows.append({"experiment": label, "game": game_name, "data_seed": data_seed, "clients": fed.n,
                             "seconds": time.perf_counter() - start, "train_seconds": [t for _, _, t in found],
                             **row})
    summary(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
        print(f"rows: {args.json}")


def summary(rows: list[dict]) -> None:
    """Per experiment and game: the mean over data seeds of the median resampling F1, and the primary game.

    The primary game of an experiment is the one whose graph reproduces itself better under
    validation resampling at the default level (z = 1.96), on average over the data seeds run.
    """
    print("\nmean over data seeds of the median edge F1 under validation resampling, and of the CE's support "
          "(z 0 / z 1.96 per comparison / client-wise / game-wise):")
    for label in dict.fromkeys(r["experiment"] for r in rows):
        mine = [r for r in rows if r["experiment"] == label]
        scores = {}
        for game in dict.fromkeys(r["game"] for r in mine):
            rs = [r for r in mine if r["game"] == game]
            f1 = [float(np.mean([r[k]["f1_resampling"] for r in rs])) for k, _, _ in CASES]
            sup = [float(np.mean([r[k]["support_resampling"] for r in rs])) for k, _, _ in CASES]
            scores[game] = f1[1]
            print(f"  {label:<24} {game:<8} F1 {' / '.join(f'{x:.2f}' for x in f1)}; "
                  f"support {' / '.join(f'{x:.2f}' for x in sup)}  ({len(rs)} data seeds)")
        if len(scores) > 1:
            print(f"  {label:<24} primary game: {max(scores, key=lambda g: scores[g])}")


if __name__ == "__main__":
    main()
