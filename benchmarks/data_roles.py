"""Does a client gain from pooling on its validation rows where it gains on its test rows? (issue 31 item 4)

Each subset model of the exact game chooses its learning rate (the protocol's ``lr_grid``) and its
stopping step (``patience``).  With the validation rows tuning those choices and scoring the game,
a client with few validation rows is scored on the rows its models were chosen on.  For one client
of a two-client-or-more experiment (Adult's PhD client by default) this prints, per seed of the
report (``separate_seeds``: the data and initialisation seeds ``coalitions reproduce`` uses), the
client's gain from the grand coalition, ``v(all) − v({client})``, on validation and on test, with
the rates and stopping steps the subset models kept, once with the validation rows tuning
(``tune_split = None``) and once with ``tune_split`` of the training rows held out for tuning
(docs/learners-protocol.md, "Data roles").

Run:  python benchmarks/data_roles.py [adult] [--client PhD] [--seeds 0 1 2 3 4] [--tune-split 0.2] [--quick]
Deterministic (no timing); Adult: about 1 minute on one core (``--quick``: seed 0 only).
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
from coalitions.learners.experiments.catalogue import get_experiment  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402


def gains(name: str, client: str, seeds, tune_split: float | None) -> list[dict]:
    """Per seed: the client's gain from pooling on validation and test, and the kept rates and stops."""
    exp = get_experiment(name)
    regime = exp.regimes[0]
    rows = []
    for seed in seeds:
        pair = separate_seeds(seed)
        fed = load(exp.dataset, seed=pair.data, **regime.options)
        options = exp.oracle_options(False, regime)
        protocol = options.pop("protocol").with_(tune_split=tune_split)
        game = ExhaustiveOracle(protocol=protocol, device="cpu", seed=pair.init, **options).fit(fed)
        i, grand = fed.names.index(client), (1 << fed.n) - 1
        rows.append({"seed": seed,
                     "val": float(game.values_val_[i, grand] - game.values_val_[i, 1 << i]),
                     "test": float(game.values_test_[i, grand] - game.values_test_[i, 1 << i]),
                     "lr": None if game.lr_chosen_ is None else [float(x) for x in game.lr_chosen_[1:]],
                     "stop": None if game.stopped_at_ is None else [int(x) for x in game.stopped_at_[1:]]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", nargs="?", default="adult")
    ap.add_argument("--client", default="PhD")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--tune-split", type=float, default=0.2)
    ap.add_argument("--quick", action="store_true", help="seed 0 only")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds = [0]
    torch.set_num_threads(1)
    for split in (None, args.tune_split):
        rows = gains(args.experiment, args.client, args.seeds, split)
        print(f"tune_split {split}: {args.client}'s gain from pooling, v(all) - v({{{args.client}}})")
        for r in rows:
            print(f"  seed {r['seed']}: validation {r['val']:+.4f}  test {r['test']:+.4f}  "
                  f"rates {r['lr']}  stops {r['stop']}")
        val, test = np.sign([r["val"] for r in rows]), np.sign([r["test"] for r in rows])
        print(f"  validation helps/hurts {int((val > 0).sum())}/{int((val < 0).sum())}, "
              f"test helps/hurts {int((test > 0).sum())}/{int((test < 0).sum())}, "
              f"same sign on {int((val == test).sum())} of {len(rows)} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
