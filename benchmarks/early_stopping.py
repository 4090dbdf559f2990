"""Every round-based learner with and without early stopping (issue 18 item 2).

docs/learners-personalized.md, "Early stopping", gives the results.

For one experiment of the catalogue (seed 0, its first regime, its protocol), each learner
trains under the protocol (``protocol=``: its model, optimiser, learning rate, batch and budget,
the learner deriving the rounds that give its largest client ``protocol.steps`` local steps), once
running every round (``patience=None``) and once with ``patience=5`` (one validation
evaluation per round; the best round's models kept).  Prints the mean test metric over
clients, the learning rate, the step where training stopped, the budget and whether it
hit the maximum.  No learning-rate grid here: the rate is the protocol's.

Run:  python benchmarks/early_stopping.py heart local,fedavg,fedper,qffl
      python benchmarks/early_stopping.py digits local,fedavg,fedper --patience 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from coalitions.learners.data.datasets import LOADERS
from coalitions.learners.experiments.catalogue import EXPERIMENTS
from coalitions.learners.methods.registry import METHODS


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", nargs="?", choices=sorted(EXPERIMENTS))
    ap.add_argument("methods", nargs="?", help="comma-separated learners (registry names)")
    ap.add_argument("--patience", type=int, default=5)
    ap.add_argument("--quick", action="store_true",
                    help="heart with local and fedavg (what CI runs; the defaults when nothing is named)")
    args = ap.parse_args(argv)
    if args.quick or args.experiment is None:
        args.experiment, args.methods = args.experiment or "heart", args.methods or "local,fedavg"
    elif args.methods is None:
        ap.error("name the learners (comma-separated registry names)")
    exp = EXPERIMENTS[args.experiment]
    regime = exp.regimes[0] if exp.regimes else None
    fed = LOADERS[exp.dataset](seed=0, **(regime.options if regime else {}))
    p = exp.protocol_for(quick=True, regime=regime)
    print(f"{exp.name}: {p.optimizer} lr={p.lr} steps={p.steps} batch={p.batch_size} model={p.model}")
    for m in args.methods.split(","):
        cls = METHODS[m].estimator_class()
        for patience in (None, args.patience):
            est = cls(protocol=p.with_(patience=patience, lr_grid=None), engine="batched")
            t = time.perf_counter()
            est.fit(fed)
            test = float(np.mean(list(est.utilities_["test"].values())))
            print(f"{m:12s} patience={patience!s:4s} test={test:.4f} lr={est.lr_} stopped_at={est.stopped_at_} "
                  f"max={est.rounds_ * est.steps_per_round_} hit_max={est.hit_max_} "
                  f"({time.perf_counter() - t:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
