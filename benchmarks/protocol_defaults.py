"""How the default training protocols were chosen (learners/training/protocol.py, DEFAULT_PROTOCOLS).

On data no report uses — seeds 100–102 of each federation (the reports use seeds
0–4; the seed fixes the split and the initialisation) — train the whole exact
game (:class:`coalitions.learners.exact.ExhaustiveOracle`) under each protocol of
a grid (Adam, cosine schedule, full batch; learning rate × budget in gradient
steps per client) and score it by its **validation** metric averaged over every
entry ``v_i(S)`` of the game (every client in every coalition: the singletons
are Local's models, the grand coalition is the pooled model).  A setting's
*excess* in a regime is how far its score is from the regime's best on the grid
(regression: relative, ``MSE / best − 1``; classification: accuracy points,
``best − accuracy``); a task's default is the smallest budget, then the smallest
learning rate, whose largest excess over the task's regimes is at most 0.01, or,
when no setting reaches that, the setting with the smallest largest excess.
Test data are never read.

Synthetic regression trains the linear model by gradient here (the protocol's
settings for the federated methods, which must iterate); the exact game and
Local use the closed form on that task.

Run:  python benchmarks/protocol_defaults.py [--seeds 100 101 102] [--quick]
Deterministic (no timing): the same command prints the same table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

#: (task, regime label, dataset, loader options, model): the regimes of the reports, other seeds
TASKS = (
    ("synthetic", "I", "synthetic", {"samples": 10, "rho": 0.1, "noise": 0.01}, "linear"),
    ("synthetic", "II", "synthetic", {"samples": 1000, "rho": 1.0}, "linear"),
    ("heart", "accuracy", "heart", {}, "logistic"),
    ("adult", "phd", "adult", {}, "logistic"),
)
LRS = (0.005, 0.01, 0.05, 0.1)
STEPS = (50, 100, 300, 500, 1000)


def score(dataset: str, options: dict, model: str, lr: float, steps: int, seed: int) -> float:
    fed = load(dataset, seed=seed, **options)
    p = TrainingProtocol(model=model, lr=lr, steps=steps, weight_decay=1e-3)
    o = ExhaustiveOracle(protocol=p, seed=seed, device="cpu").fit(fed)
    return float(np.nanmean(o.values_val_)), fed.sense


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    ap.add_argument("--quick", action="store_true", help="two learning rates, two budgets, one seed")
    ap.add_argument("--tasks", nargs="+", default=sorted({t[0] for t in TASKS}))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lrs, steps, seeds = (LRS[1:3], STEPS[:2], args.seeds[:1]) if args.quick else (LRS, STEPS, args.seeds)
    grid = [(lr, s) for lr in lrs for s in steps]
    for task in args.tasks:
        excess = {k: 0.0 for k in grid}
        for t, label, dataset, options, model in TASKS:
            if t != task:
                continue
            table, sense = {}, "max"
            for lr, s in grid:
                vals = []
                for seed in seeds:
                    v, sense = score(dataset, options, model, lr, s, seed)
                    vals.append(v)
                table[(lr, s)] = float(np.mean(vals))
            best = (min if sense == "min" else max)(table.values())
            for k, v in table.items():
                excess[k] = max(excess[k], v / best - 1 if sense == "min" else best - v)
            print(f"\n{task} {label} ({model}, validation {'MSE' if sense == 'min' else 'accuracy'}, mean over "
                  f"the game's entries and seeds {', '.join(map(str, seeds))})")
            print("  lr \\ steps " + "".join(f"{s:>11}" for s in steps))
            for lr in lrs:
                print(f"  {lr:<11g}" + "".join(f"{table[(lr, s)]:>11.4g}" for s in steps))
        ok = [k for k in grid if excess[k] <= 0.01]
        pick = min(ok, key=lambda k: (k[1], k[0])) if ok else min(grid, key=lambda k: (excess[k], k[1], k[0]))
        print(f"  {task}: chosen lr {pick[0]:g}, {pick[1]} steps (largest excess over its regimes "
              f"{excess[pick]:.3g}{'' if ok else '; no setting within 0.01'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
