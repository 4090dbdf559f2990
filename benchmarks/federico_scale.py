"""FedeRiCo's loss scale, chosen on held-out federations of both kinds (SPEC §5; docs/learners-personalized.md).

The paper does not say whether the likelihood ``p(D_i | φ_j) ∝ exp(−L(φ_j; D_i))`` takes the
*sum* of client ``i``'s per-sample losses (its data's negative log-likelihood) or their *mean* (a
temperature of ``n_i``).  The sum separates planted groups that the mean merges; the mean keeps
best-alone clients alone where the sum draws edges.  This script decides the default on
federations no report uses, of both kinds:

* **planted groups**: ``reproduce synthetic``'s regime I (two groups of three clients with
  conflicting tasks, 10 samples per client: collaboration within a group pays);
* **best alone**: its regime II (1,000 samples per client, distant clients: everyone alone).

For each data seed (``--seeds``, default 100–109: the reports use 0–4) and each kind, it trains
the exact game (closed form) and FedeRiCo with each likelihood under the experiment's protocol
and options, and scores whether FedeRiCo's equilibrium is the exact CE, and its edge F1 against
the exact ``BG(all)`` (at the exact game's own level, ``z = 1.96`` with its 200 replicates).
**The rule, written before the run:** the likelihood whose equilibrium equals the exact CE on
more (seed, kind) pairs; a tie keeps ``"sum"``, the data's negative log-likelihood.

Run:  python benchmarks/federico_scale.py [--quick] [--seeds 100-109]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from spo_agreement import parse_seeds  # noqa: E402  (one parser of seed ranges for every benchmark)

import coalitions as co  # noqa: E402
from coalitions.compare import compare  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.experiments.catalogue import SYNTHETIC, budgeted_options  # noqa: E402
from coalitions.learners.experiments.runner import compute_piece  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402
from coalitions.learners.methods.federico import LIKELIHOODS  # noqa: E402
from coalitions.learners.training import threads  # noqa: E402

#: The two kinds of federation: ``reproduce synthetic``'s regimes.
KINDS = {"planted groups": "few", "best alone": "many"}


def one(kind: str, seed: int, quick: bool) -> dict:
    """The exact CE and FedeRiCo's, per likelihood, on one held-out federation of ``kind``."""
    regime = next(r for r in SYNTHETIC.regimes if r.name == KINDS[kind])
    pair = separate_seeds(seed)
    fed = load(SYNTHETIC.dataset, seed=pair.data, **regime.options)
    game = compute_piece(fed, SYNTHETIC, "exact", SYNTHETIC.oracle_options(quick, regime), pair.init, "cpu")[0]
    exact = co.solve(game)
    out = {"kind": kind, "seed": seed, "exact": str(exact.partition)}
    for likelihood in LIKELIHOODS:
        opts = {**budgeted_options(SYNTHETIC, quick, "federico", fed.sizes("train"), regime), "likelihood": likelihood}
        est = compute_piece(fed, SYNTHETIC, "federico", opts, pair.init, "cpu")
        r = compare(est, game, exact=exact)
        out[likelihood] = {"same": bool(r["same_partition"]), "f1": float(r["edge_f1"]), "ce": str(est.partition)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100-109", help="Held-out data seeds (the reports use 0-4).")
    ap.add_argument("--quick", action="store_true", help="Two seeds, the experiment's quick settings (CI).")
    args = ap.parse_args(argv)
    threads.set_override(1)
    seeds = parse_seeds(args.seeds)[:2] if args.quick else parse_seeds(args.seeds)
    print(f"FedeRiCo's likelihood on held-out federations: seeds {seeds[0]}-{seeds[-1]}, "
          f"{'quick settings' if args.quick else 'the experiment settings'}; python {platform.python_version()}")
    start = time.perf_counter()
    rows = [one(kind, s, args.quick) for kind in KINDS for s in seeds]
    print(f"{'kind':<15} {'seed':>4}  {'exact CE':<16}" + "".join(f"  {lk + ' CE':<20} {'F1':>5}" for lk in LIKELIHOODS))
    for r in rows:
        print(f"{r['kind']:<15} {r['seed']:>4}  {r['exact']:<16}"
              + "".join(f"  {r[lk]['ce']:<20} {r[lk]['f1']:5.2f}" for lk in LIKELIHOODS))
    print("\nequal to the exact CE (of the seeds), mean edge F1:")
    totals = {}
    for lk in LIKELIHOODS:
        parts = []
        for kind in KINDS:
            mine = [r[lk] for r in rows if r["kind"] == kind]
            parts.append(f"{kind}: {sum(m['same'] for m in mine)}/{len(mine)}, F1 {np.mean([m['f1'] for m in mine]):.2f}")
        totals[lk] = sum(r[lk]["same"] for r in rows)
        print(f"  {lk:<5} " + "; ".join(parts) + f"; total {totals[lk]}/{len(rows)}")
    best = max(LIKELIHOODS, key=lambda lk: (totals[lk], lk == "sum"))
    print(f"the rule (more exact CEs, ties to sum) chooses: {best}")
    print(f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
