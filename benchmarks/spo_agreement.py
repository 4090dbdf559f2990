"""How often SPO's benefit graph and CE agree with the exact game's (synthetic regime I, rho 0.1).

For each seed (default 0–19; SPO's defaults were never tuned on them), build
``synthetic`` with the paper's code's settings (10 samples per client,
``rho = 0.1``, noise SD 0.01, 1000 fresh validation points), solve the exact
game (closed-form least squares on every subset, :func:`coalitions.solve`) and
fit SPO once.  From that one fit it scores, against the exact ``BG(all)`` and
CE (:func:`coalitions.compare.compare`):

* **SPO, elimination rule** (the default) and **SPO, ratio rule** (the paper's
  ``d_j / d_i ≥ 0.7``), both on the same hypernetwork and searches;
* the same search and rules on a **perfect front**
  (:class:`~coalitions.learners.methods.spo.exact_front.ExactParetoFront`, the
  closed-form model the hypernetwork is trained to output): what the method
  reaches when the hypernetwork makes no error;
* with ``--front-error``, the **front error**: over every client ``i`` and face ``S ∋ i``, the relative
  difference between the best validation loss the search finds on the
  hypernetwork and on the perfect front (median and 90th percentile per seed).

Per arm: mean edge F1 with a 95 % percentile-bootstrap interval over seeds,
the share of seeds with ``BG(all)`` exactly right (edge F1 = 1 and every OCS
exact) and with the same CE, each with a 95 % Wilson interval.  Paired
comparisons over the same seeds: an exact McNemar test (two-sided binomial on
the discordant seeds) for the shares and a Wilcoxon signed-rank test for edge
F1 (``learners.experiments.statistics.paired_wilcoxon``), for

* perfect front vs hypernetwork (how much the front's error costs),
* elimination vs ratio,
* with ``--new JSON`` (SPO parameters), new vs the old defaults.

Run:  python benchmarks/spo_agreement.py [--seeds 0-19] [--new '{"steps": 2000}'] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import coalitions as co  # noqa: E402
from coalitions.bitmask import members  # noqa: E402
from coalitions.compare import compare  # noqa: E402

#: The paper's code's regime I (docs/learners-data.md).
DATA = dict(samples=10, rho=0.1, noise=0.01)
#: --quick: a tiny network and budget, one seed (checks that the script runs to its end).
QUICK = dict(steps=40, directions=8, hidden=16, embed=8, layers=1, search_steps=5, starts=2, line_search=4)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a share ``k/n``."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, c - h), min(1.0, c + h)


def bootstrap_mean(x, n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean of ``x`` (resampling seeds)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float(x.mean())
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def mcnemar(a, b) -> str:
    """Exact McNemar test of two paired yes/no columns: discordant counts and two-sided p."""
    from scipy.stats import binomtest

    a, b = np.asarray(a, bool), np.asarray(b, bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    if only_a + only_b == 0:
        return "no discordant seed"
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue
    return f"{only_a} seeds only A, {only_b} only B, exact McNemar p = {p:.3g}"


def wilcoxon(a, b) -> str:
    from coalitions.learners.experiments.statistics import paired_wilcoxon

    r = paired_wilcoxon(np.asarray(a), np.asarray(b), sense="max", alternative="two-sided")
    if not r.testable:
        return f"F1 not testable ({r.n_used} non-zero differences of {r.n_pairs})"
    return f"F1 Wilcoxon W+ = {r.statistic:g} on {r.n_used} non-zero pairs, two-sided p = {r.p_value:.3g}"


def _as_estimate(oracle, names):
    """What :func:`compare` reads from an estimate, straight from an oracle (``BG(all)`` and peeling)."""
    grand = (1 << len(names)) - 1
    return SimpleNamespace(clients=tuple(names), benefit_graph=oracle.benefit_graph(grand),
                           partition=co.peel_oracle(oracle).partition)


def _score(oracle, names, game, exact) -> dict:
    r = compare(_as_estimate(oracle, names), game, exact=exact)
    return {"f1": float(r["edge_f1"]), "bg": bool(r["edge_f1"] == 1.0 and r["ocs_exact"] == 1.0),
            "ce": bool(r["same_partition"]), "edges": r["edges_learned"],
            "partition": " | ".join(",".join(b) for b in r["partition_learned"])}


def front_error(spo, perfect_search, n: int) -> np.ndarray:
    """Relative error of the best validation loss on every face ``S ∋ i``: hypernetwork vs perfect front."""
    import torch

    rows = [(i, S) for i in range(n) for S in range(1, 1 << n) if S >> i & 1]
    targets = torch.tensor([i for i, _ in rows])
    face = torch.zeros((len(rows), n), dtype=torch.bool)
    for r, (_, S) in enumerate(rows):
        face[r, list(members(S))] = True
    _, lh = spo.search_(targets, face, seed_key=("front",))
    _, le = perfect_search(targets, face, seed_key=("front",))
    return np.abs(lh / le - 1.0)


def run_seed(seed: int, params: dict, perfect: bool, front: bool = False) -> dict:
    """Fit SPO with ``params`` on one seed; score both rules (and the perfect front) against the exact game."""
    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.methods.spo import SPO, DirectionSearch, SPOOracle
    from coalitions.learners.methods.spo.exact_front import ExactParetoFront

    fed = load("synthetic", seed=seed, **DATA)
    game = ExhaustiveOracle().fit(fed).game_
    exact = co.solve(game)
    t = time.perf_counter()
    spo = SPO(device="cpu", seed=seed, **params).fit(fed)
    fit_s = time.perf_counter() - t
    out = {"seed": seed, "fit_s": fit_s, "exact": " | ".join(",".join(b) for b in sorted(exact.blocks()))}
    elim = SPOOracle(fed.names, spo.search_, "elimination", spo.threshold, spo.tol, spo.min_weight)
    out["elimination"] = _score(elim, fed.names, game, exact)
    out["ratio"] = _score(elim.with_rule("ratio"), fed.names, game, exact)
    if perfect:
        ps = DirectionSearch(ExactParetoFront(fed, spo.l2_), spo.spec_, spo.loss_, spo.val_, spo.device_, seed,
                             spo.search_steps, spo.starts, spo.line_search)
        pe = SPOOracle(fed.names, ps, "elimination", spo.threshold, spo.tol, spo.min_weight)
        out["perfect elimination"] = _score(pe, fed.names, game, exact)
        out["perfect ratio"] = _score(pe.with_rule("ratio"), fed.names, game, exact)
        if front:
            err = front_error(spo, ps, fed.n)
            out["front_err"] = (float(np.median(err)), float(np.quantile(err, 0.9)))
    return out


def summary(label: str, rows: list[dict], key: str) -> str:
    f1 = [r[key]["f1"] for r in rows]
    bg = sum(r[key]["bg"] for r in rows)
    ce = sum(r[key]["ce"] for r in rows)
    n = len(rows)
    lo, hi = bootstrap_mean(f1)
    bl, bh = wilson(bg, n)
    cl, ch = wilson(ce, n)
    return (f"  {label:34s} edge F1 {np.mean(f1):.3f} [{lo:.3f}, {hi:.3f}]   BG(all) exact {bg}/{n} "
            f"[{bl:.2f}, {bh:.2f}]   same CE {ce}/{n} [{cl:.2f}, {ch:.2f}]")


def paired(label: str, a_rows, a_key, b_rows, b_key) -> str:
    out = [f"  {label}:"]
    for what in ("bg", "ce"):
        out.append(f"    {'BG(all) exact' if what == 'bg' else 'same CE':14s} "
                   + mcnemar([r[a_key][what] for r in a_rows], [r[b_key][what] for r in b_rows]))
    out.append("    " + wilcoxon([r[a_key]["f1"] for r in a_rows], [r[b_key]["f1"] for r in b_rows]))
    return "\n".join(out)


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19", help="e.g. 0-19 or 100-119 or 0,3,9")
    ap.add_argument("--old", default="{}", help="SPO parameters of the reference arm (JSON; {} = the defaults)")
    ap.add_argument("--new", default=None, help="SPO parameters of a second arm, compared paired with --old")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--front-error", action="store_true",
                    help="also measure the front error on every face (192 searches per seed: slow)")
    ap.add_argument("--per-seed", action="store_true", help="print one line per seed and arm")
    ap.add_argument("--quick", action="store_true", help="one seed, a tiny SPO: check that the script runs to its end")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(args.threads)
    seeds = [0] if args.quick else parse_seeds(args.seeds)
    arms = {"old": {**json.loads(args.old), **(QUICK if args.quick else {})}}
    if args.new is not None:
        arms["new"] = {**json.loads(args.new), **(QUICK if args.quick else {})}
    print(f"synthetic regime I {DATA}, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), CPU, torch threads "
          f"{args.threads}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
    results: dict[str, list[dict]] = {}
    for name, params in arms.items():
        rows = []
        t = time.perf_counter()
        for s in seeds:
            r = run_seed(s, params, perfect=(name == "old"), front=args.front_error or args.quick)
            rows.append(r)
            if args.per_seed:
                keys = [k for k in ("elimination", "ratio", "perfect elimination", "perfect ratio") if k in r]
                print(f"  [{name}] seed {s} exact CE {r['exact']}; fit {r['fit_s']:.1f} s; "
                      + "; ".join(f"{k}: F1 {r[k]['f1']:.2f} CE {r[k]['partition']}" for k in keys)
                      + (f"; front err median {r['front_err'][0]:.3f} p90 {r['front_err'][1]:.3f}"
                         if "front_err" in r else ""), flush=True)
        results[name] = rows
        fits = [r["fit_s"] for r in rows]
        print(f"\n{name} arm, SPO parameters {params or 'defaults'}: {time.perf_counter() - t:.0f} s, "
              f"fit {np.median(fits):.1f} s median per seed (load average now {os.getloadavg()[0]:.1f})")
        print(summary("SPO, elimination rule", rows, "elimination"))
        print(summary("SPO, ratio rule (paper, 0.7)", rows, "ratio"))
        if name == "old":
            print(summary("perfect front, elimination rule", rows, "perfect elimination"))
            print(summary("perfect front, ratio rule", rows, "perfect ratio"))
        if name == "old" and "front_err" in rows[0]:
            med = [r["front_err"][0] for r in rows]
            p90 = [r["front_err"][1] for r in rows]
            print(f"  front error |best loss on face, hypernetwork / perfect front - 1| over all (i, S): median "
                  f"{np.median(med):.3f} (per seed {min(med):.3f}-{max(med):.3f}), 90th percentile "
                  f"{np.median(p90):.3f} (per seed {min(p90):.3f}-{max(p90):.3f})")
    old = results["old"]
    print("\npaired comparisons over the same seeds (A vs B):")
    print(paired("A = perfect front, B = hypernetwork (elimination)", old, "perfect elimination", old, "elimination"))
    print(paired("A = elimination, B = ratio (hypernetwork)", old, "elimination", old, "ratio"))
    if "new" in results:
        for rule in ("elimination", "ratio"):
            print(paired(f"A = new, B = old ({rule})", results["new"], rule, old, rule))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
