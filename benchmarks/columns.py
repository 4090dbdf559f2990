"""Every learner column of an experiment under the one training protocol, beside a recorded run.

For one experiment of the catalogue (its first regime or ``--regime``, the given seeds), each learner column is
trained exactly as ``coalitions reproduce`` trains it
(:func:`coalitions.learners.experiments.columns.compute_piece`: the experiment's
``TrainingProtocol``, its learning-rate grid chosen on validation, its patience) and printed with
the rate it chose, the local step where it stopped (mean over seeds; the budget is the header's
``steps``), on how many seeds it hit the budget without stopping, and its
mean test metric over clients and seeds.  With ``--before results.json`` (a committed
``docs/results/*/results.json``) the same column's mean test metric in that run, on the same
regime and seeds, is printed beside it: the before/after table of issue 18.

Nothing is selected on test data here: the rate is the grid's best *validation* loss, the test
metric is only reported.

Run:  python benchmarks/columns.py heart --before docs/results/heart/results.json
      python benchmarks/columns.py fashion --methods local,fedavg,fedper --seeds 0 --quick-settings
      python benchmarks/columns.py --quick     (heart, local and fedavg, one seed: what CI runs)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from coalitions.learners.data.datasets import load
from coalitions.learners.experiments.catalogue import EXPERIMENTS, budgeted_options, select_methods
from coalitions.learners.experiments.columns import compute_piece
from coalitions.learners.experiments.statistics import separate_seeds


def before_means(path: str, regime: str, seeds) -> dict:
    """Each column's mean test metric in a recorded ``results.json`` (regime ``regime``, ``seeds``)."""
    with open(path, encoding="utf-8") as fh:
        rec = json.load(fh)
    reg = next((r for r in rec["regimes"] if r["name"] == regime), None)
    if reg is None:
        raise SystemExit(f"{path}: no regime {regime!r}")
    out: dict[str, list[float]] = {}
    for run in reg["runs"]:
        if run["seed"] not in seeds:
            continue
        for m, summary in run["methods"].items():
            test = summary.get("test") or {}
            if test:
                out.setdefault(m, []).append(float(np.mean(list(test.values()))))
    return {m: float(np.mean(v)) for m, v in out.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", nargs="?", choices=sorted(EXPERIMENTS))
    ap.add_argument("--methods", default=None, help="comma-separated learners [the experiment's]")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds [0]")
    ap.add_argument("--regime", default=None, help="the regime's name [the experiment's first]")
    ap.add_argument("--quick-settings", action="store_true", help="the experiment's --quick budget")
    ap.add_argument("--before", default=None, help="a recorded results.json to print beside")
    ap.add_argument("--steps", type=int, default=None, help="override the protocol's step budget")
    ap.add_argument("--patience", type=int, default=None, help="override the protocol's patience (rounds)")
    ap.add_argument("--local-steps", type=int, default=None, help="override the protocol's local steps per round")
    ap.add_argument("--lr-grid", default=None, help="override the protocol's rate grid, e.g. 0.015,0.05,0.15")
    ap.add_argument("--tune-split", type=float, default=None,
                    help="override the protocol's tuning share of each client's training rows, e.g. 0.5")
    ap.add_argument("--split", default=None, help="override the regime's train/validation/test sizes, e.g. 40/100/100")
    ap.add_argument("--quick", action="store_true", help="heart, local and fedavg, seed 0 (what CI runs)")
    args = ap.parse_args(argv)
    if args.quick or args.experiment is None:
        args.experiment = args.experiment or "heart"
        args.methods = args.methods or "local,fedavg"
    exp = EXPERIMENTS[args.experiment]
    regime = exp.regimes[0] if args.regime is None else next((r for r in exp.regimes if r.name == args.regime), None)
    if regime is None:
        ap.error(f"--regime: {exp.name} has the regimes {', '.join(r.name for r in exp.regimes)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = select_methods(exp, args.methods.split(",") if args.methods else None)
    before = before_means(args.before, regime.name, seeds) if args.before else {}
    quick = bool(args.quick_settings or args.quick)
    p = exp.protocol_for(quick, regime)
    grid = tuple(float(x) for x in args.lr_grid.split(",")) if args.lr_grid else None
    changes = {k: v for k, v in (("steps", args.steps), ("patience", args.patience), ("local_steps", args.local_steps),
                                 ("lr_grid", grid), ("tune_split", args.tune_split)) if v is not None}
    p = p.with_(**changes)
    data_options = dict(regime.options) if args.split is None else {**regime.options, "split": args.split}
    print(f"{exp.name} ({regime.name}), seeds {seeds}: {p.optimizer} lr {p.lr} grid {p.lr_grid} steps {p.steps} "
          f"batch {p.batch_size} patience {p.patience} local steps {p.local_steps} tune split {p.tune_split} "
          f"model {p.model} data {data_options}")
    print(f"{'column':18s} {'lr':>8s} {'stopped':>8s} {'hit max':>8s} {'test':>7s} {'before':>7s}")
    for m in methods:
        rows, t = [], time.perf_counter()
        for seed in seeds:
            pair = separate_seeds(seed)
            fed = load(exp.dataset, seed=pair.data, **data_options)
            opts = budgeted_options(exp, quick, m, fed.sizes("train"), regime)
            if changes and "protocol" in opts:
                opts["protocol"] = opts["protocol"].with_(**changes)
            elif changes:   # SPO: its steps and patience (no rounds)
                opts.update({k: v for k, v in changes.items() if k not in ("local_steps", "lr_grid", "tune_split")})
            est = compute_piece(fed, exp, m, opts, pair.init, "cpu")
            stop = (est.extra or {}).get("stopping") or {}
            rows.append((stop.get("lr"), stop.get("stopped_at"), stop.get("hit_max"),
                         float(np.mean(list(est.utilities["test"].values())))))
        lrs = sorted({r[0] for r in rows if r[0] is not None})
        stopped = [r[1] for r in rows if r[1] is not None]
        hit = [r[2] for r in rows if r[2] is not None]
        test = float(np.mean([r[3] for r in rows]))
        b = before.get(m)
        print(f"{m:18s} {'/'.join(f'{x:g}' for x in lrs) or '-':>8s} "
              f"{(f'{np.mean(stopped):.0f}' if stopped else '-'):>8s} "
              f"{(f'{sum(hit)}/{len(hit)}' if hit else '-'):>8s} {test:7.4f} "
              f"{(f'{b:.4f}' if b is not None else '-'):>7s}   ({time.perf_counter() - t:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
