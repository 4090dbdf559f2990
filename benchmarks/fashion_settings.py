"""How the Table 3 federation's learning rate was chosen (learners/experiments/catalogue.py, FASHION).

On seeds no report uses (100-102; the reports use 0-4) and for each regime of ``reproduce
fashion``, train the whole personal-head exact game (:class:`coalitions.learners.exact.ExhaustiveOracle`,
the protocol's MLP, Adam, full batch, 100 steps) at each learning rate of a grid and score it by
its **validation loss** averaged over every entry ``ℓ_i(S)`` of the validation-loss game (every
client in every coalition: the singletons are Local's models).  The rate with the lowest mean over
seeds and regimes is the protocol's; its validation accuracy and the exact CE of both games are
printed too, never the test data.

Run:  python benchmarks/fashion_settings.py [--seeds 100 101 102] [--lrs 0.003 0.01 0.03] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import coalitions as co  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.experiments.catalogue import EXPERIMENTS  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.003, 0.01, 0.03])
    ap.add_argument("--steps", type=int, default=None, help="budget (default: the experiment's)")
    ap.add_argument("--regimes", nargs="+", default=None, help="regime names (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help="one seed, one rate, 2 steps, 20 replicates, the first regime (what CI runs; not a "
                         "measurement)")
    args = ap.parse_args(argv)
    exp = EXPERIMENTS["fashion"]
    if args.quick:
        args.seeds, args.lrs, args.steps = args.seeds[:1], args.lrs[:1], args.steps or 2
        args.regimes = args.regimes or [exp.regimes[0].name]
    means: dict[float, list[float]] = {lr: [] for lr in args.lrs}
    print("regime        seed  lr      val loss  val acc  CE (accuracy game)      CE (loss game)          s")
    for regime in exp.regimes:
        if args.regimes and regime.name not in args.regimes:
            continue
        for seed in args.seeds:
            pair = separate_seeds(seed)
            fed = load(exp.dataset, seed=pair.data, **regime.options)
            for lr in args.lrs:
                opts = {**exp.oracle_options(False, regime), **({"replicates": 20} if args.quick else {})}
                # at this one rate, no grid: the rate is what is measured
                p = opts.pop("protocol").with_(lr=lr, lr_grid=None, **({"steps": args.steps} if args.steps else {}))
                t = time.perf_counter()
                o = ExhaustiveOracle(protocol=p, seed=pair.init, device="cpu", threads=1, **opts).fit(fed)
                loss = float(np.nanmean(o.loss_game_.raw_values()))
                means[lr].append(loss)
                ce = " | ".join(",".join(o.game_.names(k)) for k in co.solve(o.game_).masks)
                ce_loss = " | ".join(",".join(o.loss_game_.names(k)) for k in co.solve(o.loss_game_).masks)
                print(f"{regime.name:13s} {seed:4d}  {lr:<6g}  {loss:8.4f}  {np.nanmean(o.values_val_):7.4f}  "
                      f"{ce[:22]:22s}  {ce_loss[:22]:22s}  {time.perf_counter() - t:.0f}", flush=True)
    best = min(means, key=lambda lr: np.mean(means[lr]))
    print("mean validation loss per rate: " + ", ".join(f"{lr:g}: {np.mean(v):.4f}" for lr, v in means.items())
          + f"; chosen {best:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
