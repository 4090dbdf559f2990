"""How AFL's mixture step ``γ_λ`` (``lambda_lr``) is chosen per experiment (catalogue, issue 18).

AFL (Mohri et al. 2019; learners/methods/fair.py) ascends its client weights along the
losses, ``λ ← Π_Δ(λ + γ_λ F(w^t))``; the projection makes the step ``γ_λ(F − mean F)``,
so how far ``λ`` moves per round depends on the size and spread of the task's losses.
On ``digits`` (ten-class CNN, losses near ln 10 while the CNN leaves its initial plateau)
the default ``γ_λ = 0.1`` moves ``λ`` around on small loss differences while the model is
still at its plateau; the mean validation loss never falls below its start (2.29; it rises
to 3.8), patience stops the run after 13 rounds and AFL scores near chance (13.6 % test in
the digits report before the change).

On data no report uses — seeds 100–102 (the reports use 0–4) — fit AFL under the
experiment's own protocol and settings (``coalitions reproduce``'s piece,
:func:`coalitions.learners.experiments.columns.compute_piece`) for each ``γ_λ`` of a
grid and print the **validation** metric (mean over clients) per seed and its mean over
the seeds; the catalogue takes the grid's best mean.  Test data are never read.

Run:  python benchmarks/afl_lambda.py [digits heart ...] [--seeds 100 101 102] [--quick]
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
from coalitions.learners.experiments.catalogue import budgeted_options, get_experiment  # noqa: E402
from coalitions.learners.experiments.columns import compute_piece  # noqa: E402

GRID = (0.1, 0.03, 0.01, 0.003, 0.001)


def scan(name: str, seeds, grid, quick: bool) -> dict:
    """``{regime: {γ_λ: [validation metric per seed]}}`` of AFL on experiment ``name``."""
    exp = get_experiment(name)
    out: dict = {}
    for regime in exp.regimes:
        rows = out.setdefault(regime.name, {g: [] for g in grid})
        for seed in seeds:
            fed = load(exp.dataset, seed=seed, **regime.options)
            base = {k: v for k, v in budgeted_options(exp, quick, "afl", fed.sizes("train"), regime).items()
                    if k != "lambda_lr"}
            for g in grid:
                est = compute_piece(fed, exp, "afl", {**base, "lambda_lr": g}, seed, "cpu")
                rows[g].append(float(np.mean(list(est.utilities["val"].values()))))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiments", nargs="*", default=["digits"], help="catalogue experiments [digits]")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    ap.add_argument("--quick", action="store_true", help="one seed, two rates, the experiment's --quick budget")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seeds, grid = (args.seeds[:1], GRID[:2]) if args.quick else (args.seeds, GRID)
    for name in args.experiments:
        for regime, rows in scan(name, seeds, grid, args.quick).items():
            means = {g: float(np.mean(v)) for g, v in rows.items()}
            best = max(means, key=lambda g: (means[g], g))
            print(f"{name} {regime}: validation metric of AFL, mean over clients, seeds {seeds}")
            for g, v in rows.items():
                mark = "  <- best mean" if g == best else ""
                print(f"  lambda_lr {g:<6} " + " ".join(f"{x:.3f}" for x in v) + f"   mean {means[g]:.3f}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
