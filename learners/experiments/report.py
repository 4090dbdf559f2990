"""``report.md`` of a reproduction: pure functions from a results dict to Markdown.

The results are the JSON of a :class:`~coalitions.learners.experiments.results.Reproduction`
(``coalitions/reproduction@1``); nothing here trains or imports torch, so a
report can be rebuilt from a committed ``results.json``::

    python -c "from coalitions.learners.experiments.report import rebuild; rebuild('docs/results/synthetic')"

A ``results.json`` written before the seed-level statistics gets them recomputed on the way
(:func:`~coalitions.learners.experiments.seedstats.refresh_results`: no training; each seed's
federation is rebuilt from its data seed for the test sizes and the majority class).
"""

from __future__ import annotations

import math
from pathlib import Path

from coalitions.files import write_text

__all__ = ["report_markdown", "rebuild", "fmt_stat", "published_markdown", "verdicts", "ce_minus_local"]


def _lr_section(reg: dict, labels: dict) -> list[str]:
    """The rate each column chose on validation and where it stopped, per seed.

    A cell is the chosen rate (from ``lr_tuning``, else the rate the column trained at), followed by
    ``@ step`` where the column records its stopping step, and ``(max)`` when it never stopped: the
    budget, not the validation loss, ended it.  A closing sentence names those columns.
    """
    runs = reg.get("runs") or []

    def cell(r: dict, m: str) -> dict:
        return (r.get("methods") or {}).get(m) or {}

    methods = [m for m in (runs[0].get("methods") or {})
               if any(cell(r, m).get("lr_tuning") or cell(r, m).get("stopping") for r in runs)] if runs else []
    if not methods:
        return []
    grid = next((cell(r, m)["lr_tuning"]["grid"] for r in runs for m in methods if cell(r, m).get("lr_tuning")),
                None)
    lead = (f"Every learner column trained once per rate of the grid {', '.join(f'{g:g}' for g in grid)} (the "
            "same step budget each time) and kept the rate whose kept models (where early stopping left them) have "
            "the lowest mean tuning loss over clients. " if grid else "")
    out = ["### Learning rates chosen on validation", "",
           lead + "A cell is the rate kept, `@ step` where the column stopped early on its tuning loss, "
           "`(max)` where it hit the maximum without stopping. Test data are never read.", "",
           "| column | " + " | ".join(f"seed {r['seed']}" for r in runs) + " |",
           "| --- |" + " --- |" * len(runs)]
    at_max = []
    per_client = False
    for m in methods:
        cells = []
        for r in runs:
            t, stop = cell(r, m).get("lr_tuning"), cell(r, m).get("stopping")
            text = _lr_cell(t, stop)
            per_client = per_client or (stop or {}).get("stopped_at_clients") is not None
            if stop and stop.get("hit_max") and labels.get(m, m) not in at_max:
                at_max.append(labels.get(m, m))
            cells.append(text)
        out.append(f"| {labels.get(m, m)} | " + " | ".join(cells) + " |")
    out.append("")
    if per_client:
        out += ["Local tunes each client on its own tuning rows, as the exact game tunes its single-client models: "
                "its cell gives each client's rate and stopping step, in client order.", ""]
    if at_max:
        out += [f"Hit the maximum step budget without stopping (on at least one seed): {', '.join(at_max)}; "
                "their rows may be limited by the budget, not by the method.", ""]
    return out


def _lr_cell(tuning: dict | None, stop: dict | None) -> str:
    """One column's rate and stop on one seed: ``0.05 @ 120``, ``0.05 (max)``; per client ``0.05 @ 40, 0.15 @ 12``."""
    stop = stop or {}
    rates, steps = stop.get("lr_clients"), stop.get("stopped_at_clients")
    if steps is not None:   # a column tuned per client (Local)
        chosen = (tuning or {}).get("chosen")
        if isinstance(chosen, dict):
            rates = list(chosen.values())
        rates = rates if rates is not None else [stop.get("lr")] * len(steps)
        return ", ".join(f"{'—' if lr is None else format(lr, 'g')} @ {s}" for lr, s in zip(rates, steps, strict=True))
    lr = tuning["chosen"] if tuning else stop.get("lr")
    text = "—" if lr is None else f"{lr:g}"
    if stop:
        text += " (max)" if stop.get("hit_max") else f" @ {stop['stopped_at']}"
    return text


def convergence_note(reg: dict, budget: dict, last: float = 0.2, tol: float = 0.01, learned: float = 0.05) -> str:
    """A sentence on whether each learner's validation loss had settled when its budget ran out.

    From the first run's curves (:func:`~coalitions.learners.experiments.figures.convergence_series`):
    a curve whose mean validation loss fell by more than ``tol`` (relative) over the last
    ``last`` share of its points is *still falling*, so its utilities are limited by the
    budget; one that rose by more than ``tol`` over that share is *rising* (it has passed its best:
    under a patience the kept model is an earlier one); one that fell by less than ``learned``
    (relative) from its first point to its last is *flat*: it did not learn what the loss
    measures, which is not "settled".  Curves with fewer than five points are not judged.
    ``""`` without curves.
    """
    from coalitions.learners.experiments.figures import convergence_series

    series = convergence_series(reg, budget.get("steps_per_client"))
    falling, rising, settled, short, flat = [], [], [], [], []
    for label, (_, y) in series.items():
        if len(y) < 5:
            short.append(label)
            continue
        k = max(1, int(round(last * len(y))))
        before, end = y[-k - 1], y[-1]
        drop = (before - end) / abs(before) if before else 0.0
        overall = (y[0] - end) / abs(y[0]) if y[0] else 0.0
        if drop > tol:
            falling.append((label, drop))
        elif drop < -tol:
            rising.append((label, drop))
        elif overall < learned:
            flat.append(label)
        else:
            settled.append((label, drop))
    if not (falling or rising or settled or flat):
        return ""
    seed = reg["runs"][0].get("seed", 0)
    head = (f"Convergence (seed {seed}): a learner whose mean validation loss fell by more than "
            f"{tol:.0%} over the last {last:.0%} of its budget is still falling.")
    parts = [head]
    if falling:
        parts.append("Still falling, so its utilities here are limited by the matched budget: "
                     + ", ".join(f"{lab} ({-d:.0%})" for lab, d in falling) + ".")
    if rising:
        parts.append("Rising (past its best, the validation loss went up over the last "
                     f"{last:.0%}): " + ", ".join(f"{lab} (+{-d:.0%})" for lab, d in rising) + ".")
    if settled:
        parts.append("Settled: " + ", ".join(lab for lab, _ in settled) + ".")
    if flat:
        parts.append(f"Flat (validation loss fell by less than {learned:.0%} over the whole budget: not learning, "
                     "not settled): " + ", ".join(flat) + ".")
    if short:
        parts.append("Too few points to judge: " + ", ".join(short) + ".")
    return " ".join(parts)


def _g(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}"


def fmt_stat(s: dict | None, digits: int = 3) -> str:
    """``mean ± std`` of a :func:`coalitions.learners.experiments.runner.summarize` cell (``mean`` alone for one seed)."""
    if not s or s.get("mean") is None:
        return "–"
    if s.get("n", 0) > 1:
        return f"{_g(s['mean'], digits)} ± {_g(s['std'], 2)}"
    return _g(s["mean"], digits)


def _blocks(p, cell: bool = False) -> str:
    """``A,B | C`` in one order (:func:`~.results.partition_key`); in a table cell the bar is escaped."""
    from coalitions.learners.experiments.results import partition_key

    return partition_key(p, " \\| " if cell else " | ")


def _set(names) -> str:
    return "{" + ",".join(names) + "}"


def _table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _better(metric: str | None) -> str:
    return "lower is better" if metric == "mse" else "higher is better"


def _support_sentence(runs: list[dict], key: str | None = None) -> str:
    """The exact CE's two supports, each saying what it measures (docs/concepts.md §6).

    Over validation resamples: per seed, the share of bootstrap replicates of the validation
    rows (the trained models fixed) whose CE is that seed's CE — a game far from every tie scores
    1.00 whatever retraining would give.  Over retraining: the share of seeds (new split, new
    initialisation) whose CE is each partition.  ``key="loss"``: the validation-loss game's.
    """
    from coalitions.learners.experiments.statistics import retraining_support

    games = [r["exact"] if key is None else r["exact"].get(key) for r in runs]
    if any(g is None for g in games):
        return ""
    retrain = retraining_support([_blocks(g["partition"]) for g in games])
    text = (" Support over retraining (share of the seeds — each a new split and initialisation, every model "
            "trained again — whose CE is the partition): " + ", ".join(f"`{p}` {v:.2f}" for p, v in retrain.items())
            + f" ({len(runs)} seed{'s' if len(runs) != 1 else ''}).")
    sup = [g.get("support") for g in games]
    if any(s is None for s in sup):
        return text
    first = sup[0]
    per_seed = ", ".join(f"{s['partition']:.2f}" for s in sup)
    blocks = ", ".join(f"{{{k}}} {v:.2f}" for k, v in first["coalitions"].items())
    return (text + f" Support over validation resamples (per seed, the share of {first['replicates']} bootstrap "
            f"replicates of the validation rows, the trained models held fixed, whose CE is that seed's CE; it "
            f"measures how close the validation values sit to a tie, not what retraining would give): "
            f"{per_seed}; seed {runs[0]['seed']}'s coalitions: {blocks}.")


def _exact_section(reg: dict) -> list[str]:
    runs = reg["runs"]
    ex = runs[0]["exact"]
    s = reg["summary"]
    counts = ", ".join(f"`{p}` on {k} of {len(runs)}" for p, k in s["exact_partitions"].items())
    lines = ["### The exact game", "",
             f"Every subset of clients trained (the exhaustive oracle, docs/concepts.md §5); the game is the "
             f"validation {reg['metric']}. Exact CE over the seeds: {counts}. Seed {runs[0]['seed']}: "
             f"CE `{_blocks(ex['partition'])}`, certificate "
             f"{'holds' if ex['certificate'] else 'FAILS'} (exhaustive), peeling rounds "
             + "; ".join(f"{k + 1}: " + ", ".join(_set(c) for c in r) for k, r in enumerate(ex["rounds"]))
             + (f"; ambiguous OCS: {', '.join(ex['ambiguous'])}" if ex["ambiguous"] else "") + "."
             + _support_sentence(runs), ""]
    rows = []
    for c in reg["clients"]:
        rows.append([c, _set(ex["ocs"][c]), _set(ex["model_in_ce"][c]),
                     " / ".join(_g(ex["val"][k][c]) for k in ("local", "ce", "all")),
                     " / ".join(_g(ex["test"][k][c]) for k in ("local", "ce", "all"))])
    lines += _table(["client", "OCS", "model in CE", f"val {reg['metric']}: alone / CE / all",
                     f"test {reg['metric']}: alone / CE / all"], rows)
    return lines + [""] + _loss_game_section(reg)


def _loss_game_section(reg: dict) -> list[str]:
    """The validation-loss game of the same subset models beside the accuracy game (where recorded)."""
    runs = reg["runs"]
    if not all(r["exact"].get("loss") for r in runs):
        return []
    rows = []
    for r in runs:
        acc, loss = r["exact"], r["exact"]["loss"]
        ce_acc = [acc["test"]["ce"][c] for c in reg["clients"]]
        ce_loss = [loss["test"]["ce"][c] for c in reg["clients"]]
        rows.append([str(r["seed"]), f"`{_blocks(acc['partition'], cell=True)}`",
                     _g(sum(ce_acc) / len(ce_acc)), f"`{_blocks(loss['partition'], cell=True)}`",
                     _g(sum(ce_loss) / len(ce_loss)),
                     _g(sum(loss["val"]["local"].values()) / len(reg["clients"])) + " / "
                     + _g(sum(loss["val"]["ce"].values()) / len(reg["clients"]))])
    models = (1 << len(reg["clients"])) - 1
    return (["### The accuracy game and the validation-loss game side by side", "",
             f"Both are exact games of the same {models} trained subset models: v_i(S) is client i's validation "
             f"{reg['metric']}, ℓ_i(S) its mean validation cross-entropy (lower is better; "
             "`ExhaustiveOracle(loss_game=True)`). The CE column of every table is the accuracy game's, as in the "
             "paper; the loss game's CE is shown here with the test accuracy of the models it assigns. "
             + _primary_sentence(reg)
             + _support_sentence(runs, "loss"), ""]
            + _table(["seed", f"CE of the {reg['metric']} game", f"its mean test {reg['metric']}",
                      "CE of the loss game", f"its mean test {reg['metric']}",
                      "mean val loss: alone / in the loss CE"], rows) + [""])


def _primary_sentence(reg: dict) -> str:
    """Which game is this regime's primary one, chosen before the runs on held-out splits (or that none was)."""
    primary = reg.get("primary_game")
    if primary is None:
        return ("No primary game was chosen for this regime on held-out data splits (its exact games cost too much "
                "to measure there), so neither game is preferred; the metric game is shown first, as in the paper.")
    game = "validation-loss game" if primary == "loss" else f"{reg['metric']} game"
    return (f"The primary game of this regime is the **{game}**: the one whose benefit graph reproduced itself "
            "better under validation resampling on data splits 100–104, which no report uses, chosen before these "
            "runs (docs/results.md, \"The primary game\"). " + _family_sentence(reg))


def _family_sentence(reg: dict) -> str:
    """Which comparisons the level covers at once in this regime's exact games, and why."""
    family = reg.get("family", "comparison")
    said = {"comparison": "per comparison", "client": "client-wise (all of a client's comparisons at once)",
            "game": "game-wise (all comparisons of the game at once)"}[family]
    return (f"Its exact games are solved at z = 1.96 {said}: the narrowest family under which the primary game's "
            "CE kept a support of at least 0.8 over validation resampling on those held-out splits "
            "(docs/results.md, \"The family of comparisons\").")


def _agreement_section(reg: dict, labels: dict) -> list[str]:
    s = reg["summary"]
    runs = reg["runs"]
    rows = []
    rules = s.get("spo_rules") or {}
    for m, a in s.get("agreement", {}).items():
        first = runs[0]["methods"][m]
        label = labels.get(m, m)
        used = next((r for r in rules.values() if r["used"]), None) if m == "spo" else None
        rows.append([label + (f" — {_rule_name(used)} (used)" if used else ""), f"{a['same_partition']} / {len(runs)}",
                     fmt_stat(a["edge_f1"], 2), fmt_stat(a["ari"], 2),
                     f"`{_blocks(first['partition'], cell=True)}`", f"{a['is_exact_ce']} / {len(runs)}"])
        if m == "spo":
            for r in rules.values():
                if not r["used"]:
                    rows.append([f"{label} — {_rule_name(r)} (not used)", _count(r["same_partition"], r["seeds"]),
                                 _g(r["edge_f1"], 2), "–", f"`{_blocks(r['partition'], cell=True)}`",
                                 _count(r.get("is_exact_ce"), r["seeds"])])
    if not rows:
        return []
    return (["### Each learner's benefit graph and equilibrium against the exact game", "",
             "Same CE: seeds on which the learner's equilibrium is the exact one. Edge F1 and ARI "
             "(adjusted Rand index of the two partitions) as in `coalitions compare`. Stable: seeds on "
             "which the learner's partition passes both axioms in the exact game (certified "
             "exhaustively), whether or not it is the CE that peeling finds.", ""]
            + _table(["learner", "same CE", "edge F1", "ARI", f"its CE (seed {runs[0]['seed']})",
                      "stable in the exact game"], rows) + [""])


def _count(k, n) -> str:
    return "–" if k is None else f"{k} / {n}"


def _rule_name(rule: dict) -> str:
    """Short name of an SPO rule record: the paper's ratio rule or backward elimination, with its setting."""
    if "threshold" in rule:
        return f"paper's ratio rule d_j/d_i ≥ {rule['threshold']:g}"
    return f"backward elimination (tol {rule.get('tol', 0):g})"


def _p(p) -> str:
    if p is None:
        return "–"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def _interval(c: dict | None) -> str:
    """``mean [lo, hi]`` of an interval record (``–`` where the metric is undefined; the mean alone without bounds)."""
    if not c or c.get("estimate") is None:
        return "–"
    if c.get("low") is None:
        return _g(c["estimate"])
    return f"{_g(c['estimate'])} [{_g(c['low'])}, {_g(c['high'])}]"


def ce_minus_local(reg: dict, brief: bool = False) -> str:
    """A sentence: CE − Local (mean over clients, oriented so that positive is better) with its seed-level interval.

    From the seed-level test of the regime's primary column (its primary game's CE; ``CE`` in older results)
    against ``Local`` (``ci``: Student-t over the seeds); ``""`` without one.  The first table states the primary
    test in full (its level, its family, the difference it could detect); ``brief`` gives the difference, its
    interval and its verdict only, for the tables after it.
    """
    seed = (reg["summary"].get("statistics") or {}).get("seed") or {}
    col = (seed.get("primary") or ["CE"])[0]
    t = (seed.get("seed_tests") or {}).get(col, {}).get("Local")
    if t is None:
        return ""
    lo, hi = (t.get("ci") or [None, None])[:2]
    level = 100 * (1 - seed.get("alpha", 0.05))
    bounds = (f", {level:g}% interval over the {t['n_seeds']} seeds [{_g(lo)}, {_g(hi)}]" if lo is not None
              else " (one seed: no interval)")
    sign = "higher" if reg.get("metric") != "mse" else "lower"
    text = (f"{col} − Local (each seed's difference of client means, positive: the CE's {reg.get('metric')} is "
            f"better, i.e. {sign}): {_g(t['mean_difference'])}{bounds}")
    if brief or not t.get("primary"):   # brief: the tables after the first, which states the primary test in full
        return text + f"; verdict: {t['direction']}" + (" (the primary test)." if t.get("primary") else ".")
    text = (f"**Primary test**, fixed before the runs: the primary game's CE (column {col}) against Local, paired "
            f"t-test over the seeds at α = {seed.get('alpha', 0.05):g}, outside the Holm family. " + text
            + f", p = {_p(t['p'])}; verdict: **{t['direction']}**")
    if t.get("detectable") is not None and t["direction"] in ("inconclusive", "better", "worse"):
        text += (f" (with the observed spread of the seed differences it detects a true difference of "
                 f"{_g(t['detectable'])} with {100 * t['power']:g}% power)")
    return text + "."


def _binomial_section(reg: dict) -> list[str]:
    """Per-client Clopper–Pearson intervals of test accuracy and bootstrap intervals of the mean over clients."""
    seed = (reg["summary"].get("statistics") or {}).get("seed") or {}
    binom, means = seed.get("binomial"), seed.get("mean_intervals") or {}
    if not binom:
        return []
    cols = list(binom)
    n = len(reg["runs"])
    rows = []
    for c in reg["clients"]:
        cells = []
        for col in cols:
            b = binom[col].get(c)
            cells.append("–" if b is None else f"{_g(b['estimate'])} [{_g(b['low'])}, {_g(b['high'])}]")
        sizes = {(binom[col][c]["n"], binom[col][c].get("rows_over_seeds", binom[col][c]["n"]))
                 for col in cols if c in binom[col]}
        rows.append([c] + cells + [(f"{next(iter(sizes))[0]} of {next(iter(sizes))[1]}" if len(sizes) == 1 else "–")])
    rows.append(["**mean over clients**"] + [_interval(means.get(col)) for col in cols] + [""])
    pooled = f"pooled over its {n} seeds" if n > 1 else "on one seed"
    sentence = ce_minus_local(reg, brief=True)
    return ([f"### Test accuracy per client with {100 * seed['level']:g}% intervals (higher is better)", "",
             f"Client rows: the share of the client's test samples classified right ({pooled}), with the "
             "Clopper–Pearson (exact binomial) interval (`scipy.stats.binomtest(...).proportion_ci(method=\"exact\")`) "
             "over the client's **distinct** test rows: where the seeds test the same rows (a fixed test file) or "
             "reuse some (patients drawn again by each split), pooling seeds repeats rows and adds no test "
             "evidence, so the interval counts each row once (last column: distinct rows of rows × seeds). "
             "Never [1, 1]. The variation between seeds is what the seed-level tests below measure. "
             "Mean over clients: the mean over seeds of each seed's client mean, with a Student-t interval over "
             "the seeds (the replicates; the clients are a fixed set, not a sample). CE: each client's model in "
             "the exact equilibrium." + (f" {MAJORITY}: each client's most frequent training label predicted for "
                                         "every test sample." if MAJORITY in cols else ""), ""]
            + _table(["client"] + cols + ["distinct test rows (of rows × seeds)"], rows) + [""]
            + ([sentence, ""] if sentence else []))


def _interval_section(reg: dict) -> list[str]:
    st = reg["summary"].get("statistics")
    if not st:
        return []
    if (st.get("seed") or {}).get("binomial"):
        return _binomial_section(reg)
    cols = st["columns"]
    n = len(reg["runs"])
    rows = []
    for c in reg["clients"]:
        sizes = next(iter(st["intervals"].values()))[c]["n_samples"]
        rows.append([c] + [_interval(st["intervals"][col].get(c)) for col in cols]
                    + [str(sizes[0]) if len(set(sizes)) == 1 else "–".join(map(str, (min(sizes), max(sizes))))])
    what = (f"the mean over {n} seeds of the client's test {reg['metric']}" if n > 1
            else f"the client's test {reg['metric']} (one seed)")
    sentence = ce_minus_local(reg, brief=True)
    lines = [f"### Test {reg['metric']} per client with {100 * st['level']:g}% bootstrap intervals "
             f"({_better(reg['metric'])})", "",
             f"`mean [lo, hi]`: {what}, and the {100 * (1 - st['level']) / 2:g}% and "
             f"{100 * (1 + st['level']) / 2:g}% quantiles of {st['n_boot']} two-stage bootstrap replicates "
             "(seeds resampled, then each drawn seed's test samples; "
             "`coalitions.learners.experiments.statistics.bootstrap_interval`)"
             + (". With one seed only the test samples are resampled: the interval leaves out the variation "
                "between splits and initialisations" if n == 1 else "")
             + ". CE: each client's model in the exact equilibrium, trained again from the same seed (largest "
             f"difference between a metric recomputed from the stored outputs and the recorded one: "
             f"{st['outputs_check']:.1g})."
             + (f" {MAJORITY}: each client's most frequent training label predicted for every test sample."
                if MAJORITY in cols else "")
             + (" A constant predictor (the majority class) has AUC 0.5 on every client."
                if reg["metric"] == "auc" else ""), ""]
    return lines + _table(["client"] + cols + ["test samples per seed"], rows) + [""] + ([sentence, ""] if sentence
                                                                                          else [])


MAJORITY = "Majority class"


def verdicts(reg: dict, against: str = "Local") -> str:
    """One sentence per reference: which columns are significantly better or worse than ``against``, with p-values.

    Built only from the regime's seed-level tests (``summary.statistics.seed.seed_tests``): a
    column is called better or worse only when its Holm-adjusted p-value is below α and the
    regime has at least ``min_seeds`` seeds ("underpowered" otherwise); results equal within
    the tie tolerance are "identical".
    """
    seed = (reg["summary"].get("statistics") or {}).get("seed") or {}
    groups: dict[str, list[str]] = {"better": [], "worse": [], "no significant difference": [], "identical": [],
                                    "underpowered": []}
    for col, tests in seed.get("seed_tests", {}).items():
        t = tests.get(against)
        if t is None or t.get("primary"):   # the primary test has its own sentence (ce_minus_local)
            continue
        if t["direction"] == "identical":
            groups["identical"].append(col)
        elif t["direction"] == "underpowered":
            groups["underpowered"].append(f"{col} (raw p = {_p(t['p'])})")
        else:
            groups[t["direction"]].append(f"{col} (p = {_p(t['p'])}, Holm {_p(t.get('p_holm'))})")
    if not any(groups.values()):
        return ""
    ref = "the majority class" if against == MAJORITY else against
    names = {"identical": f"identical to {ref} within the tie tolerance",
             "underpowered": f"underpowered (fewer than {seed['min_seeds']} seeds: no verdict)"}
    parts = [f"{k} than {ref}: " + ", ".join(v) if k in ("better", "worse") else f"{names.get(k, k)}: " + ", ".join(v)
             for k, v in groups.items() if v]
    return (f"Against {ref} (paired t-test over seeds, Holm-adjusted within the regime, α = {seed['alpha']:g}): "
            + "; ".join(parts) + ".")


def _tests_section(reg: dict) -> list[str]:
    seed = (reg["summary"].get("statistics") or {}).get("seed")
    if not seed or not seed.get("seed_tests"):
        return []
    rows = []
    for col, tests in seed["seed_tests"].items():
        for ref, t in tests.items():
            lo, hi = (t.get("ci") or [None, None])[:2]
            rows.append([f"{col} (primary)" if t.get("primary") else col, ref, str(t["n_seeds"]),
                         _g(t["mean_difference"]), "–" if lo is None else f"[{_g(lo)}, {_g(hi)}]",
                         _g(t["statistic"]), _p(t["p"]), "primary" if t.get("primary") else _p(t.get("p_holm")),
                         f"{t['n_tied']} / {t['n_pairs']}", t["direction"]])
    sentences = [v for v in (verdicts(reg, "Local"), verdicts(reg, MAJORITY)) if v]
    family = sum(1 for ts in seed["seed_tests"].values() for t in ts.values() if t.get("p_holm") is not None)
    if not family and all(t["direction"] != "identical" for ts in seed["seed_tests"].values() for t in ts.values()):
        return ["### Paired tests (seeds are the replicates)", "",
                f"Not run: {rows[0][2]} seed gives no seed-level difference to test (`--quick` runs one seed; the "
                "full run tests every column against Local and the majority class).", ""]
    return (["### Paired tests (seeds are the replicates)", "",
             f"Each column's test {reg['metric']} against Local's (and the majority class's). The clients of one "
             "seed share a split and an initialisation, so they are not independent replicates; the seeds are. "
             "Statistic: each seed's difference of client means (oriented so that positive is better), "
             "paired t-test over the seeds, two-sided; interval: Student-t over the seeds of that difference. p: raw; Holm: Holm–Bonferroni adjusted within this "
             f"regime's family of {family} test{'s' if family != 1 else ''}. \"better\"/\"worse\" only when the "
             f"Holm p < {seed['alpha']:g}; \"underpowered\" (no verdict) with fewer than {seed['min_seeds']} seeds; "
             f"\"identical\" when every client × seed pair agrees within a relative {seed['tie_rtol']:g} "
             "(tied pairs: those that do)."
             + (f" The row marked primary is the pre-specified primary test ({seed['primary'][0]} against Local): "
                f"decided on its raw p at α = {seed['alpha']:g}, outside the family, \"inconclusive\" when it cannot "
                "decide." if seed.get("primary") else ""), ""]
            + _table(["column", "against", "seeds", "mean difference", f"{100 * (1 - seed['alpha']):g}% interval",
                      "t", "p", "Holm p", "tied pairs", "verdict"], rows) + [""]
            + [" ".join(sentences), ""])


def _sensitivity_section(reg: dict, labels: dict) -> list[str]:
    sens = reg["summary"].get("sensitivity")
    if not sens:
        return []
    exact = "exact" in reg["runs"][0]
    first = reg["runs"][0]["seed"]
    lines = ["### Sensitivity to the weight rule's threshold", "",
             "A rule's threshold is a choice, not a fact of the data: each learner's benefit graph and CE at every "
             "threshold of its rule (`coalitions.sensitivity.threshold_sensitivity`, rows renormalised over R "
             "for R ⊊ all; SPO: the paper's ratio rule d_j/d_i ≥ t on its own searches); `*` marks the "
             "threshold used. Edges: mean over seeds of the edges of BG(all)"
             + ("; edge F1 against the exact game's BG(all) (mean over seeds) and the seeds on which the CE is "
                "the exact one." if exact else "."), ""]
    for m, sm in sens.items():
        lines += [f"**{labels.get(m, m)}**, {sm['rule']} rule:", ""]
        rows = []
        for r in sm["rows"]:
            mark = "*" if abs(r["threshold"] - sm["threshold_used"]) <= 1e-12 else ""
            row = [f"{r['threshold']:g}{mark}", _g(r["edges"]), f"`{_blocks(r['partition'], cell=True)}`"]
            if exact:
                row += [_g(r["edge_f1"], 2), _count(r["same_partition"], sm["seeds"])]
            rows.append(row)
        header = ["threshold", "edges", f"CE (seed {first})"] + (["edge F1 vs exact", "same CE as exact"]
                                                                 if exact else [])
        lines += _table(header, rows) + [""]
    return lines


def _spo_rules_section(reg: dict) -> list[str]:
    rules = reg["summary"].get("spo_rules")
    if not rules:
        return []
    exact = "exact" in reg["runs"][0]
    rows = []
    for r in rules.values():
        row = [r["label"], "yes" if r["used"] else "no (reported beside)", _g(r["edges"]),
               f"`{_blocks(r['partition'], cell=True)}`"]
        if exact:
            row += [_g(r["edge_f1"], 2), _count(r["same_partition"], r["seeds"]), _count(r.get("is_exact_ce"), r["seeds"])]
        rows.append(row)
    header = ["SPO's rule", "used", "edges", f"CE (seed {reg['runs'][0]['seed']})"] + (
        ["edge F1 vs exact", "same CE as exact", "stable in the exact game"] if exact else [])
    return (["### SPO: the paper's ratio rule beside backward elimination", "",
             "The same hypernetwork and direction searches read by both rules (the estimate's `extra.rules`).", ""]
            + _table(header, rows) + [""])


def _figure_captions(reg: dict, figs: list[str]) -> list[str]:
    """What the benefit-graph and utilities figures show (the weights figure has its own caption)."""
    seed = reg["runs"][0]["seed"]
    n = len(reg["runs"])
    out = []
    if f"{reg['name']}-benefit-graph.png" in figs:
        out.append(f"The benefit-graph figure is the exact game's BG(all) on seed {seed}: an arrow j → i where j is "
                   "in client i's optimal collaborator set, and the CE's coalitions as shaded clusters labelled "
                   "with the peeling round that removed them.")
    if f"{reg['name']}-utilities.png" in figs:
        out.append(f"The utilities figure is each client's test {reg['metric']} per column, the mean over "
                   f"{n} seed{'s' if n > 1 else ''}" + (" with bars of one sample standard deviation" if n > 1 else "")
                   + " (the table above gives the same numbers).")
    return out


def _weights_caption(reg: dict, labels: dict) -> str:
    """What the weights figure shows, and which columns it leaves out because they have no weights."""
    methods = reg["runs"][0]["methods"]
    shown = [labels.get(m, m) for m, s in methods.items() if s.get("weights") is not None]
    missing = [labels.get(m, m) for m, s in methods.items() if s.get("weights") is None]
    text = (f"The weights figure shows the exact benefit graph and the N×N weight matrix of {', '.join(shown)} "
            "(seed 0; row i: the weight of each client j in i's model).")
    if missing:
        text += (f" Not shown: {', '.join(missing)}, which learn no weight per pair of clients "
                 "(a shared model, per-client models, a mix of the two, or a hypernetwork).")
    return text


def _utility_section(reg: dict) -> list[str]:
    s = reg["summary"]
    cols = s["columns"]
    n = len(reg["runs"])
    rows = [[c] + [fmt_stat(s["test"][col][c]) for col in cols] for c in reg["clients"]]
    rows.append(["**mean**"] + [fmt_stat(s["test"][col]["mean"]) for col in cols])
    spread = f"mean ± sample std over {n} seeds" if n > 1 else "one seed"
    sentence = ce_minus_local(reg)
    return ([f"### Test {reg['metric']} per client ({_better(reg['metric'])}; {spread})", "",
             "CE: each client's model in the exact equilibrium. The learners' figures are their own "
             "personalised models.", ""]
            + (["CE (ours): SPO's hypernetwork read at the coalitions of SPO's own CE.", ""] if "CE (ours)" in cols
               else [])
            + (["CE (paper): SPO's CE with trained models, as the paper scores its CE: each client scored by the "
                "exact game's model it uses in SPO's partition, as CE scores the exact CE (its coalition's, or under "
                "personalized payoffs a sub-coalition's where that serves it better), so that it differs from CE by "
                "the partition alone.", ""]
               if "CE (paper)" in cols else [])
            + _table(["client"] + cols, rows) + [""] + ([sentence, ""] if sentence else []))


def _ours(reg: dict, partitions: dict) -> str:
    """Each exact CE over the seeds with its count and the mean support of those seeds' CEs (docs/concepts.md §6)."""
    runs = reg["runs"]
    out = []
    for p, k in partitions.items():
        sup = [r["exact"]["support"]["partition"] for r in runs
               if r["exact"].get("support") and _blocks(r["exact"]["partition"]) == p]
        extra = (f"; support {sum(sup) / len(sup):.2f}" + (" on average" if len(sup) > 1 else "")
                 if len(sup) == k else "")
        out.append(f"`{p}` ({k}/{len(runs)} seeds{extra})")
    return ", ".join(out)


def _published_synthetic(results: dict) -> list[str]:
    pub = results["published"]
    lines = [f"Paper, {pub['table']}: the OCS of each client and the MSE of its model in the CE, as SPO finds it "
             "(models trained on the CE's coalitions). Beside it, ours: CE (paper) — SPO's CE with models trained "
             "on its coalitions, the paper's definition —, CE (ours) — SPO's hypernetwork read at those coalitions "
             "— and the exact game's CE (every subset trained; the paper has no such column). Mean ± std over our "
             "seeds.", ""]
    for reg in results["regimes"]:
        if reg["name"] not in pub["ce_mse"]:
            continue
        runs = reg["runs"]
        ours_p = reg["summary"].get("exact_partitions", {})
        lines += [f"**{reg['title']}.** Paper's OCS: {pub['ocs'][reg['name']]}; paper's CE "
                  f"`{_blocks(pub['ce_partition'][reg['name']])}`. Ours: " + _ours(reg, ours_p) + ".", ""]
        rows = []
        for c, paper in zip(reg["clients"], pub["ce_mse"][reg["name"]], strict=False):
            ocs = {_set(r["exact"]["ocs"][c]) for r in runs}
            t = reg["summary"]["test"]
            rows.append([c, " or ".join(sorted(ocs)), paper,
                         *(fmt_stat(t[col][c]) if col in t else "–" for col in ("CE (paper)", "CE (ours)", "CE"))])
        lines += _table(["client", "our exact OCS (all seeds)", "paper: CE MSE", "ours: CE (paper) test MSE",
                         "ours: CE (ours) test MSE", "ours: exact CE test MSE"], rows) + [""]
    return lines


def _pct(s: dict | None) -> str:
    if not s or s.get("mean") is None:
        return "–"
    return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}" if s.get("n", 0) > 1 else f"{100 * s['mean']:.1f}"


def _published_adult(results: dict) -> list[str]:
    pub = results["published"]
    reg = results["regimes"][0]
    t = reg["summary"]["test"]
    rows = []
    # the paper's CE row is SPO's CE with models trained on its coalitions: our CE (paper); the exact CE beside it
    ours_cols = (("Local", "Local"), ("SPO", "SPO"), ("CE", "CE (paper)"), ("CE", "CE")) if "CE (paper)" in t else (
        ("Local", "Local"), ("SPO", "SPO"), ("CE", "CE"))
    for client, paper in pub["accuracy"].items():
        for col, ours_col in ours_cols:
            name = "CE (exact game)" if ours_col == "CE" and "CE (paper)" in t else ours_col
            rows.append([client, name, paper[col], _pct(t.get(ours_col, {}).get(client))])
    ours = reg["summary"].get("exact_partitions", {})
    return ([f"Paper, {pub['table']} (test accuracy, %), beside ours (mean ± std over seeds). Paper's CE: "
             f"`{_blocks(pub['ce_partition'])}` (the non-PhD client gains nothing from the PhD client). "
             "Ours: " + _ours(reg, ours) + ".", ""]
            + _table(["client", "method", "paper", "ours"], rows) + [""])


def _published_digits(results: dict) -> list[str]:
    pub = results["published"]
    ours = results["experiment"]
    lines = [f"Paper, {pub['table']} (CIFAR-10, 10 clients with 2 classes each; mean test accuracy, %), "
             f"beside ours on {ours}. The paper's ordering: {pub['ordering']}.", ""]
    for reg in results["regimes"]:
        t = reg["summary"]["test"]
        cols = reg["summary"]["columns"]
        means = ((reg["summary"].get("statistics") or {}).get("seed") or {}).get("mean_intervals") or {}
        # the paper's CE row is SPO's CE with trained models: our CE (paper) where the report has it
        paper_of = ({"CE (paper)": "CE", "CE": None} if "CE (paper)" in cols else {})
        rows = [[col, pub["accuracy"].get(paper_of.get(col, col), "–"), _pct(t[col]["mean"]),
                 _interval({k: None if means[col].get(k) is None else 100 * means[col][k]
                            for k in ("estimate", "low", "high")}) if col in means else "–"] for col in cols]
        lines += ([f"**{reg['title']}**", ""] if len(results["regimes"]) > 1 else [])
        lines += _table(["method", "paper (CIFAR-10)", f"ours ({ours}), mean ± std over seeds",
                         "ours, 95% interval (Student-t over seeds)"], rows) + [""]
        sentence = verdicts(reg, "Local")
        if sentence:
            lines += ["Ordering on our data: " + sentence, ""]
    return lines


PUBLISHED = {"synthetic": _published_synthetic, "adult": _published_adult, "digits": _published_digits,
             "fashion": _published_digits}


def published_markdown(results: dict) -> list[str]:
    """The paper's numbers beside ours, or a sentence saying there are none."""
    f = PUBLISHED.get(results["experiment"])
    if f is None or not results.get("published"):
        return ["The paper has no numbers for this experiment (see the notes above).", ""]
    return f(results)


def _compute(results: dict) -> str:
    total = results.get("compute_s")
    if total is None:
        return f"{results.get('elapsed_s', 0):.0f} s"
    text = f"{total:.0f} s of model fitting (oracle and learners)"
    if not results.get("compute_complete", True):
        text += " (some pieces have no recorded time)"
    return text + f", this invocation {results.get('elapsed_s', 0):.0f} s"


def report_markdown(results: dict) -> str:
    """The whole ``report.md``."""
    from coalitions.learners.experiments.catalogue import METHOD_LABELS

    mode = "quick" if results["quick"] else "full"
    lines = [f"# {results['title']}", "",
             f"`coalitions reproduce {results['experiment']}{' --quick' if results['quick'] else ''}` "
             f"({mode} settings): seeds {', '.join(map(str, results['seeds']))}, device "
             f"`{results['device']}`; {_compute(results)}.", ""]
    if results.get("notes"):
        lines += [results["notes"], ""]
    opts = {m: o for m, o in results["method_options"].items() if o}
    if opts:
        lines += ["Learner options (all others at their defaults): "
                  + "; ".join(f"{m}: " + ", ".join(f"{k}={v}" for k, v in o.items()) for m, o in opts.items())
                  + ".", ""]
    for reg in results["regimes"]:
        lines += [f"## {reg['title']}", ""]
        if "exact" in reg["runs"][0]:
            lines += _exact_section(reg)
            lines += _agreement_section(reg, METHOD_LABELS)
        lines += _utility_section(reg)
        lines += _interval_section(reg)
        lines += _tests_section(reg)
        lines += _sensitivity_section(reg, METHOD_LABELS)
        lines += _spo_rules_section(reg)
        lines += _lr_section(reg, METHOD_LABELS)
        figs = [f for f in results.get("figures", []) if f.startswith(reg["name"] + "-") and f.endswith(".png")]
        if figs:
            lines += ["### Figures", ""] + [f"![{f}]({f})" for f in figs] + [""]
            lines += [" ".join(_figure_captions(reg, figs)), ""]
            if f"{reg['name']}-weights.png" in figs:
                lines += [_weights_caption(reg, METHOD_LABELS), ""]
        if f"convergence_{reg['name']}.png" in results.get("figures", []):
            lines += [f"![validation loss per round](convergence_{reg['name']}.png)", ""]
            note = reg.get("convergence") or convergence_note(reg, (results.get("budget") or {}).get(reg["name"]) or {})
            lines += [note, ""] if note else []
    lines += ["## Published numbers", ""] + published_markdown(results)
    if results.get("plot_hint"):
        lines += ["## Figures", "", results["plot_hint"], ""]
    dots = [f for f in results.get("figures", []) if f.endswith(".dot")]
    if dots:
        lines += ["Graphviz sources: " + ", ".join(f"`{f}`" for f in dots)
                  + " (`dot -Tpng FILE.dot -o FILE.png`).", ""]
    return "\n".join(lines)


def rebuild(folder: str | Path) -> str:
    """Rewrite ``report.md`` in ``folder`` from its ``results.json``; returns the path."""
    from coalitions.learners.experiments.results import read_results
    from coalitions.learners.experiments.seedstats import refresh_results

    folder = Path(folder)
    path = folder / "report.md"
    results = read_results(folder / "results.json").to_json()
    if not all((r["summary"].get("statistics") or {}).get("seed") for r in results["regimes"]):
        # written before the seed-level statistics: recomputed (no training) and stored with the results
        from coalitions.learners.experiments.results import Reproduction, write_results

        results = refresh_results(results)
        write_results(Reproduction.from_json(results), folder / "results.json")
    write_text(path, report_markdown(results))
    return str(path)
