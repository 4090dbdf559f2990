"""How often SPO's benefit graph and CE agree with the exact game's (synthetic regime I, rho 0.1).

For each seed (default 0–19; SPO's defaults were chosen on seeds it does not report,
100–119), build ``synthetic`` with the paper's code's settings (10 samples per client,
``rho = 0.1``, noise SD 0.01, 1000 fresh validation points), solve the exact game
(closed-form least squares on every subset, :func:`coalitions.solve`) and fit SPO once per
**variant** (``--variants``):

* ``ours``: one hypernetwork over the simplex, the projected-gradient search (SPO's defaults);
* ``paper``: the paper's public code (:mod:`coalitions.learners.methods.spo.paper`): one
  hypernetwork per searched client and face, EPO at the searched direction, 5 front steps
  alternating with 1 direction step, directions clamped to ``[1/(3k), 1 − 1/(3k)]``
  (``PAPER``: the code's network, 100 wide and 2 layers; ``--paper-steps`` front steps per
  hypernetwork, the code's 10,000 by default);
* ``readme``: the authors' README for synthetic (``README``): on the same per-search networks,
  the front first (1,000 linear-scalarisation steps at rays drawn from ``Dir(1/N)``), then 200
  direction steps; an affine hypernetwork.

Every arm is scored beside the **constant answer** ``0,1,2 | 3,4,5`` (no data read), against
the exact game at its default level (``--reference-z``: 0 for point values, as the committed
runs in docs/learners-spo-runs were scored).

Each fit is read by both **rules** (elimination, and the paper's ratio ``d_j / d_i ≥ 0.7``) on
the same searches, and scored against the exact ``BG(all)`` and CE
(:func:`coalitions.compare.compare`).  Controls, without any training (``--controls``):

* the ``ours`` search and both rules on the **perfect front**
  (:class:`~coalitions.learners.methods.spo.exact_front.ExactParetoFront` at SPO's ridge);
* the same search with elimination on the perfect front in the limit ``λ → 0`` (bias decayed,
  the exhaustive oracle's ridge);
* the perfect front **read at each coalition's pooled direction** ``d_S ∝ n`` on ``S``
  (:func:`~coalitions.learners.methods.spo.exact_front.pooled_front_game`), at SPO's ridge
  0.01 and in the limit ``λ → 0`` (the exhaustive oracle's ridge, bias decayed): there the
  front's value of a coalition is the exact subset model's, so its CE must be the exact one.

Per arm: mean edge F1 with a 95 % percentile-bootstrap interval over seeds, the share of
seeds with ``BG(all)`` exactly right (edge F1 = 1 and every OCS exact) and with the same CE,
each with a 95 % Wilson interval.  Paired comparisons over the same seeds: an exact McNemar
test (two-sided binomial on the discordant seeds) for the shares and a Wilcoxon signed-rank
test for edge F1, for every pair of variant × rule arms.

``--variants none --controls`` runs the controls alone.  ``--json FILE`` writes every seed's scores; ``--combine A.json B.json …`` prints the tables
and tests of runs made separately (e.g. one process per variant) without fitting anything.

Run:  python benchmarks/spo_agreement.py [--seeds 0-19] [--variants ours,paper] [--quick]
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
from coalitions.learners.methods.spo.paper import (  # noqa: E402
    PAPER_PROTOCOL,
    PAPER_SETTINGS,
    README_PROTOCOL,
    README_SETTINGS,
)

#: The paper's code's regime I (docs/learners-data.md).
DATA = dict(samples=10, rho=0.1, noise=0.01)
#: --quick: a tiny network and budget, one seed (checks that the script runs to its end).
QUICK = {"ours": dict(steps=40, directions=8, hidden=16, embed=8, layers=1, search_steps=5, starts=2, line_search=4),
         "paper": dict(steps=10, hidden=8), "readme": dict(steps=20, hidden=8, direction_steps=5)}
#: The paper's code on synthetic: hypernetwork 100 wide, 2 layers, SGD 0.01 (momentum 0.5), full batch, 10,000
#: front steps (what ``--variant paper`` takes by default; the rule is each arm's own).
PAPER = {"variant": "paper", **{k: v for k, v in PAPER_SETTINGS.items() if k != "rule"}, **PAPER_PROTOCOL}
#: The authors' README for synthetic: the front first (1,000 linear-scalarisation steps at rays drawn from
#: Dir(1/N)), then 200 direction steps; an affine hypernetwork (``--n_hidden 1``).
README = {"variant": "readme", **{k: v for k, v in README_SETTINGS.items() if k != "rule"}, **README_PROTOCOL}
#: Each variant's settings over SPO's defaults.
PRESETS = {"ours": {}, "paper": PAPER, "readme": README}
#: SPO's training settings here unless ``--params`` or a variant changes them: 3000 hypernetwork steps of 256
#: samples per client, the estimator's defaults when docs/learners-spo.md measured this benchmark.
BUDGET = dict(steps=3000, batch_size=256)
#: The level of the exact game's comparisons, the reference every arm is scored against (``--reference-z``):
#: None, the game's default (z = 1.96 on the oracle's replicates); 0.0, point values (the committed runs').
REFERENCE_Z: float | None = None
#: The arms of one variant's fit: the two rules on the same searches.
RULE_NAMES = ("elimination", "ratio")


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
    r = compare(_as_estimate(oracle, names), game, exact=exact, z=REFERENCE_Z)
    return {"f1": float(r["edge_f1"]), "bg": bool(r["edge_f1"] == 1.0 and r["ocs_exact"] == 1.0),
            "ce": bool(r["same_partition"]), "edges": r["edges_learned"],
            "partition": " | ".join(",".join(b) for b in r["partition_learned"])}


#: The constant answer: the planted groups, every client's collaborators the rest of its group, on every seed
#: (no data read). Any method's agreement is read beside it.
CONSTANT = "constant 0,1,2 | 3,4,5"


def constant_arm(names, game, exact, z: float | None = None) -> dict:
    """:data:`CONSTANT` scored against the exact game like any arm (``z``: its comparisons' level, as in ``exact``)."""
    from coalitions.graph import BenefitGraph

    n = len(names)
    groups = ((1 << (n // 2)) - 1, ((1 << n) - 1) ^ ((1 << (n // 2)) - 1))
    ocs = tuple((i, next(g for g in groups if g >> i & 1) & ~(1 << i)) for i in range(n))
    est = SimpleNamespace(clients=tuple(names), benefit_graph=BenefitGraph(tuple(names), (1 << n) - 1, ocs),
                          partition=groups)
    r = compare(est, game, exact=exact, z=z)
    return {"f1": float(r["edge_f1"]), "bg": bool(r["edge_f1"] == 1.0 and r["ocs_exact"] == 1.0),
            "ce": bool(r["same_partition"]), "edges": r["edges_learned"],
            "partition": " | ".join(",".join(b) for b in r["partition_learned"])}


def _text(exact) -> str:
    return " | ".join(",".join(b) for b in sorted(exact.blocks()))


def exact_game(seed: int):
    """Seed ``seed``'s federation, its exact game (closed-form least squares on every subset) and CE."""
    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle

    fed = load("synthetic", seed=seed, **DATA)
    oracle = ExhaustiveOracle().fit(fed)
    return fed, oracle, oracle.game_, co.solve(oracle.game_, z=REFERENCE_Z)


def with_constant(rows: list[dict]) -> list[dict]:
    """``rows`` with the :data:`CONSTANT` arm, computed from each seed's exact game where a run predates it.

    It is scored against the reference the run's arms were: the exact CEs the rows record are the
    game's at the default level (noise-aware, z = 1.96 on the oracle's replicates) or, for runs made
    before that default, at z = 0 (point values) — then on every seed, checked.
    """
    todo = [r for r in rows if CONSTANT not in r]
    games = {r["seed"]: exact_game(r["seed"]) for r in todo}
    z = None if all(_text(games[r["seed"]][3]) == r["exact"] for r in todo) else 0.0
    for r in todo:
        fed, _, game, exact = games[r["seed"]]
        if z is not None:
            exact = co.solve(game, z=z)
            if _text(exact) != r["exact"]:
                raise SystemExit(f"spo_agreement: seed {r['seed']}: the row's exact CE {r['exact']} is the game's "
                                 "neither at its default level nor at z = 0 (made under another protocol?)")
        r[CONSTANT] = constant_arm(fed.names, game, exact, z)
        r["reference z"] = "default" if z is None else 0.0
    return rows


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


def spo_options(params: dict) -> dict:
    """``params`` as SPO's keywords: its training settings among them (``steps``, ``batch_size``, ``patience``,
    ``lr_grid``, over :data:`BUDGET`) become its ``protocol``, the one place SPO reads them from."""
    from coalitions.learners.methods.spo.estimator import PROTOCOL_FIELDS
    from coalitions.learners.training.protocol import TrainingProtocol

    fields = {**BUDGET, **{k: v for k, v in params.items() if k in PROTOCOL_FIELDS}}
    return {**{k: v for k, v in params.items() if k not in PROTOCOL_FIELDS}, "protocol": TrainingProtocol(**fields)}


def run_seed(seed: int, variant: str, params: dict, controls: bool, front: bool = False,
             rules: tuple[str, ...] = RULE_NAMES) -> dict:
    """Fit SPO (``variant``) once on one seed; score ``rules`` (and the controls) against the exact game.

    The fit concludes with the ratio rule (``BG(all)``'s searches, which every rule needs); each
    rule then reads the same cached searches (:meth:`SPOOracle.with_rule`), elimination adding its own.
    """
    from coalitions.learners.methods.spo import SPO, DirectionSearch, SPOOracle
    from coalitions.learners.methods.spo.exact_front import ExactParetoFront, pooled_front_game

    fed, oracle, game, exact = exact_game(seed)
    t = time.perf_counter()
    out: dict = {"seed": seed, "exact": _text(exact),
                 CONSTANT: constant_arm(fed.names, game, exact, REFERENCE_Z),
                 "reference z": "default" if REFERENCE_Z is None else REFERENCE_Z}
    if variant == "none":   # the controls alone
        out["fit_s"] = 0.0
        spo = SPO(device="cpu", seed=seed)
        rules = ()
    else:
        spo = SPO(device="cpu", seed=seed, **spo_options({**PRESETS[variant], "rule": "ratio",
                                                          **params})).fit(fed)
        out["fit_s"] = time.perf_counter() - t
    for rule in rules:
        t = time.perf_counter()
        learned = spo.oracle_ if rule == spo.rule else spo.oracle_.with_rule(rule)
        out[f"{variant} {rule}"] = _score(learned, fed.names, game, exact)
        out[f"{variant} {rule} score_s"] = time.perf_counter() - t
    if controls:
        ref = spo if variant == "ours" else SPO(device="cpu", seed=seed)
        l2 = 1e-2  # SPO's ridge on regression (ours' default)
        ps = DirectionSearch(ExactParetoFront(fed, l2), make_spec(fed), _loss(fed), _padded(fed, "val"), "cpu", seed,
                             ref.search_steps, ref.starts, ref.line_search)
        pe = SPOOracle(fed.names, ps, "elimination", ref.threshold, ref.tol, ref.min_weight)
        out["perfect front, search, elimination"] = _score(pe, fed.names, game, exact)
        out["perfect front, search, ratio"] = _score(pe.with_rule("ratio"), fed.names, game, exact)
        ridge = float(oracle.protocol_.weight_decay)   # the closed form's ridge (1e-10 by default)
        ps0 = DirectionSearch(ExactParetoFront(fed, 2 * ridge, bias_decay=True), make_spec(fed), _loss(fed),
                              _padded(fed, "val"), "cpu", seed, ref.search_steps, ref.starts, ref.line_search)
        out["perfect front, search, elimination, l2 -> 0"] = _score(
            SPOOracle(fed.names, ps0, "elimination", ref.threshold, ref.tol, ref.min_weight), fed.names, game, exact)
        for label, g in ((f"perfect front, pooled d_S, l2 {l2:g}", pooled_front_game(fed, l2)),
                         ("perfect front, pooled d_S, l2 -> 0", pooled_front_game(fed, 2 * ridge, bias_decay=True))):
            out[label] = _score_game(g, game, exact)
            if label.endswith("-> 0"):
                out["pooled_max_rel_diff"] = float(np.nanmax(np.abs(g.raw_values() / game.raw_values() - 1)))
        if front and variant == "ours":
            err = front_error(spo, ps, fed.n)
            out["front_err"] = (float(np.median(err)), float(np.quantile(err, 0.9)))
    return out


def make_spec(fed):
    from coalitions.learners.training.models import make_model

    return make_model("linear", fed.input_shape, fed.n_outputs)


def _loss(fed):
    from coalitions.learners.data.metrics import loss_function

    return loss_function(fed.task)


def _padded(fed, part):
    import torch

    from coalitions.learners.training.engine import Padded

    return Padded(fed, part, torch.device("cpu"))


def _score_game(g, game, exact) -> dict:
    """A control that is a whole game: its exact ``BG(all)`` and CE against the exact game's."""
    from coalitions.graph import ExactOracle

    est = SimpleNamespace(clients=tuple(g.clients), benefit_graph=ExactOracle(g).benefit_graph((1 << g.n) - 1),
                          partition=co.solve(g).masks)
    r = compare(est, game, exact=exact, z=REFERENCE_Z)
    return {"f1": float(r["edge_f1"]), "bg": bool(r["edge_f1"] == 1.0 and r["ocs_exact"] == 1.0),
            "ce": bool(r["same_partition"]), "edges": r["edges_learned"],
            "partition": " | ".join(",".join(b) for b in r["partition_learned"])}


def summary(label: str, rows: list[dict], key: str) -> str:
    f1 = [r[key]["f1"] for r in rows]
    bg = sum(r[key]["bg"] for r in rows)
    ce = sum(r[key]["ce"] for r in rows)
    n = len(rows)
    lo, hi = bootstrap_mean(f1)
    bl, bh = wilson(bg, n)
    cl, ch = wilson(ce, n)
    return (f"  {label:40s} edge F1 {np.mean(f1):.3f} [{lo:.3f}, {hi:.3f}]   BG(all) exact {bg:2d}/{n} "
            f"[{bl:.2f}, {bh:.2f}]   same CE {ce:2d}/{n} [{cl:.2f}, {ch:.2f}]")


def paired(label: str, rows: list[dict], a_key: str, b_key: str) -> str:
    out = [f"  A = {a_key}, B = {b_key}{label}:"]
    for what in ("bg", "ce"):
        out.append(f"    {'BG(all) exact' if what == 'bg' else 'same CE':14s} "
                   + mcnemar([r[a_key][what] for r in rows], [r[b_key][what] for r in rows]))
    out.append("    " + wilcoxon([r[a_key]["f1"] for r in rows], [r[b_key]["f1"] for r in rows]))
    return "\n".join(out)


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def merge(runs: list[list[dict]]) -> list[dict]:
    """Rows of separate runs joined by seed (only the seeds every run has)."""
    by_seed: dict[int, dict] = {}
    seeds = set.intersection(*({r["seed"] for r in rows} for rows in runs))
    for rows in runs:
        for r in rows:
            if r["seed"] in seeds:
                by_seed.setdefault(r["seed"], {}).update(r)
    return [by_seed[s] for s in sorted(by_seed)]


def report(rows: list[dict]) -> None:
    """The agreement table (every arm present) and the paired tests."""
    arms = [k for k in rows[0] if isinstance(rows[0][k], dict) and "ce" in rows[0][k]]
    level = {str(r.get("reference z", "default")) for r in rows}
    print(f"\nagreement with the exact game over seeds {rows[0]['seed']}..{rows[-1]['seed']} ({len(rows)}; the exact "
          f"game's comparisons at {'z = 0, point values' if level == {'0.0'} else 'its default level'}):")
    for k in arms:
        print(summary(k, rows, k))
    if "front_err" in rows[0]:
        med = [r["front_err"][0] for r in rows]
        p90 = [r["front_err"][1] for r in rows]
        print(f"  front error |best loss on face, hypernetwork / perfect front - 1| over all (i, S): median "
              f"{np.median(med):.3f}, 90th percentile {np.median(p90):.3f}")
    if "pooled_max_rel_diff" in rows[0]:
        print(f"  pooled front at l2 -> 0 vs the exact game: largest relative difference of any v_i(S) "
              f"{max(r['pooled_max_rel_diff'] for r in rows):.1e}")
    learned = [k for k in arms if k.split()[0] in PRESETS]
    print("\npaired comparisons over the same seeds (exact McNemar on the discordant seeds; Wilcoxon on F1):")
    for a_i, a in enumerate(learned):
        for b in learned[a_i + 1:]:
            print(paired("", rows, a, b))
    for a in learned:   # does the method beat answering the planted groups without looking?
        if CONSTANT in rows[0]:
            print(paired(" (the method against the constant answer)", rows, a, CONSTANT))
    controls = [("perfect front, search, elimination", "ours elimination", " (what the front's error costs)"),
                ("perfect front, search, elimination, l2 -> 0", "perfect front, search, elimination",
                 " (what the ridge costs the searched front)"),
                ("perfect front, pooled d_S, l2 -> 0", "perfect front, search, elimination, l2 -> 0",
                 " (what searching costs without a ridge)"),
                ("perfect front, pooled d_S, l2 0.01", "perfect front, search, elimination",
                 " (what searching a face's best direction instead of reading the pooled one costs)"),
                ("perfect front, pooled d_S, l2 -> 0", "perfect front, pooled d_S, l2 0.01", " (what the ridge costs)")]
    for a, b, why in controls:
        if a in rows[0] and b in rows[0]:
            print(paired(why, rows, a, b))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19", help="e.g. 0-19 or 100-119 or 0,3,9")
    ap.add_argument("--variants", default="ours,paper", help="comma-separated: ours, paper, readme")
    ap.add_argument("--params", default="{}", help="SPO parameters for every variant (JSON), over its defaults")
    ap.add_argument("--paper-steps", type=int, default=PAPER["steps"],
                    help="front steps of each of the paper variant's hypernetworks (the code: 10000)")
    ap.add_argument("--rules", default="elimination,ratio", help="comma-separated: elimination, ratio")
    ap.add_argument("--controls", action="store_true", help="also the perfect-front controls (no training)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reference-z", type=float, default=None,
                    help="level of the exact game's comparisons [its default, 1.96]; 0: point values, as the runs "
                         "in docs/learners-spo-runs were scored")
    ap.add_argument("--front-error", action="store_true",
                    help="with --controls: the ours front's error on every face (192 searches per seed: slow)")
    ap.add_argument("--per-seed", action="store_true", help="print one line per seed and arm")
    ap.add_argument("--json", default=None, help="write every seed's scores to this file")
    ap.add_argument("--combine", nargs="+", default=None, help="report the runs in these --json files; fit nothing")
    ap.add_argument("--quick", action="store_true", help="one seed, tiny SPOs: check that the script runs to its end")
    args = ap.parse_args(argv)
    if args.combine:
        runs = []
        for f in args.combine:
            try:
                runs.append(json.loads(Path(f).read_text())["rows"])
            except (OSError, ValueError, KeyError) as e:
                print(f"spo_agreement: cannot read --combine file {f}: {e}", file=sys.stderr)
                return 2
        report(with_constant(merge(runs)))
        return 0
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or set(variants) - {*PRESETS, "none"} or ("none" in variants and len(variants) > 1):
        print(f"spo_agreement: --variants takes ours, paper and/or readme, or none (the controls alone), "
              f"got {args.variants!r}", file=sys.stderr)
        return 2
    rules = tuple(r.strip() for r in args.rules.split(",") if r.strip())
    if not rules or set(rules) - set(RULE_NAMES):
        print(f"spo_agreement: --rules takes elimination and/or ratio, got {args.rules!r}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    global REFERENCE_Z
    REFERENCE_Z = args.reference_z
    import torch

    torch.set_num_threads(args.threads)
    seeds = [0] if args.quick else parse_seeds(args.seeds)
    print(f"synthetic regime I {DATA}, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), variants {variants}, CPU, "
          f"torch threads {args.threads}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
    rows: list[dict] = []
    t = time.perf_counter()
    for s in seeds:
        row: dict = {}
        for k, v in enumerate(variants):
            params = {**json.loads(args.params), **({"steps": args.paper_steps} if v == "paper" else {}),
                      **(QUICK[v] if args.quick and v in QUICK else {})}
            r = run_seed(s, v, params, controls=args.controls and k == 0, front=args.front_error or args.quick,
                         rules=rules)
            row.update({**r, f"{v} fit_s": r.pop("fit_s")})
        rows.append(row)
        if args.per_seed:
            keys = [k for k in row if isinstance(row[k], dict)]
            print(f"  seed {s} exact CE {row['exact']}; "
                  + "; ".join(f"{v} fit {row[f'{v} fit_s']:.0f} s" for v in variants) + "; "
                  + "; ".join(f"{k}: F1 {row[k]['f1']:.2f} CE {row[k]['partition']}" for k in keys), flush=True)
        if args.json:
            head = json.dumps({"data": DATA, "variants": variants, "paper_steps": args.paper_steps,
                               "reference_z": REFERENCE_Z})[:-1]
            Path(args.json).write_text(head + ', "rows": [\n' + ",\n".join(json.dumps(r, separators=(",", ":"))
                                                                           for r in rows) + "\n]}\n")
    for v in variants:
        fits = [r[f"{v} fit_s"] for r in rows]
        print(f"{v}: fit {np.median(fits):.1f} s median per seed")
    print(f"{time.perf_counter() - t:.0f} s in all (load average now {os.getloadavg()[0]:.1f})")
    report(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
