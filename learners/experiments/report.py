"""``report.md`` of a reproduction: pure functions from a results dict to Markdown.

The results are the JSON of a :class:`~coalitions.learners.experiments.results.Reproduction`
(``coalitions/reproduction@1``); nothing here trains or imports torch, so a
report can be rebuilt from a committed ``results.json``::

    python -c "from coalitions.learners.experiments.report import rebuild; rebuild('docs/results/synthetic')"
"""

from __future__ import annotations

import math
from pathlib import Path

from coalitions.files import write_text

__all__ = ["report_markdown", "rebuild", "fmt_stat", "published_markdown", "verdicts"]


def convergence_note(reg: dict, budget: dict, last: float = 0.2, tol: float = 0.01) -> str:
    """A sentence on whether each learner's validation loss had settled when its budget ran out.

    From the first run's curves (:func:`~coalitions.learners.experiments.figures.convergence_series`):
    a curve whose mean validation loss fell by more than ``tol`` (relative) over the last
    ``last`` share of its points is *still falling*, so its utilities are limited by the
    budget.  Curves with fewer than five points are not judged.  ``""`` without curves.
    """
    from coalitions.learners.experiments.figures import convergence_series

    series = convergence_series(reg, budget.get("steps_per_client"))
    falling, settled, short = [], [], []
    for label, (_, y) in series.items():
        if len(y) < 5:
            short.append(label)
            continue
        k = max(1, int(round(last * len(y))))
        before, end = y[-k - 1], y[-1]
        drop = (before - end) / abs(before) if before else 0.0
        (falling if drop > tol else settled).append((label, drop))
    if not (falling or settled):
        return ""
    seed = reg["runs"][0].get("seed", 0)
    head = (f"Convergence (seed {seed}): a learner whose mean validation loss fell by more than "
            f"{tol:.0%} over the last {last:.0%} of its budget is still falling.")
    parts = [head]
    if falling:
        parts.append("Still falling, so its utilities here are limited by the matched budget: "
                     + ", ".join(f"{lab} ({-d:.0%})" for lab, d in falling) + ".")
    if settled:
        parts.append("Settled: " + ", ".join(lab for lab, _ in settled) + ".")
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
    """``A,B | C``; in a table cell the bar is escaped."""
    return (" \\| " if cell else " | ").join(",".join(b) for b in p)


def _set(names) -> str:
    return "{" + ",".join(names) + "}"


def _table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _better(metric: str | None) -> str:
    return "lower is better" if metric == "mse" else "higher is better"


def _support_sentence(runs: list[dict]) -> str:
    """The support of each seed's exact CE over its bootstrap replicates (docs/concepts.md §6), if recorded."""
    sup = [r["exact"].get("support") for r in runs]
    if any(s is None for s in sup):
        return ""
    first = sup[0]
    per_seed = ", ".join(f"{s['partition']:.2f}" for s in sup)
    blocks = ", ".join(f"{{{k}}} {v:.2f}" for k, v in first["coalitions"].items())
    return (f" Support of each seed's CE over {first['replicates']} bootstrap replicates of the validation sets "
            f"(the share whose CE is the same partition; docs/concepts.md §6): {per_seed}; seed "
            f"{runs[0]['seed']}'s coalitions: {blocks}.")


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
    return lines + [""]


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
    """``mean [lo, hi]`` of an interval record (``–`` where the metric is undefined)."""
    if not c or c.get("estimate") is None:
        return "–"
    return f"{_g(c['estimate'])} [{_g(c['low'])}, {_g(c['high'])}]"


def _interval_section(reg: dict) -> list[str]:
    st = reg["summary"].get("statistics")
    if not st:
        return []
    cols = st["columns"]
    n = len(reg["runs"])
    rows = []
    for c in reg["clients"]:
        sizes = next(iter(st["intervals"].values()))[c]["n_samples"]
        rows.append([c] + [_interval(st["intervals"][col].get(c)) for col in cols]
                    + [str(sizes[0]) if len(set(sizes)) == 1 else "–".join(map(str, (min(sizes), max(sizes))))])
    what = (f"the mean over {n} seeds of the client's test {reg['metric']}" if n > 1
            else f"the client's test {reg['metric']} (one seed)")
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
    return lines + _table(["client"] + cols + ["test samples per seed"], rows) + [""]


MAJORITY = "Majority class"


def verdicts(reg: dict, against: str = "Local") -> str:
    """One sentence per reference: which columns are significantly better or worse than ``against``, with p-values.

    Built only from the regime's paired tests (``summary.statistics.tests``): a column is
    called better or worse only when its two-sided Wilcoxon p-value is below α.
    """
    st = reg["summary"].get("statistics") or {}
    groups: dict[str, list[str]] = {"better": [], "worse": [], "no significant difference": [], "not testable": []}
    for col, tests in st.get("tests", {}).items():
        t = tests.get(against)
        if t is None:
            continue
        if t["direction"] == "not testable":
            groups["not testable"].append(f"{col} ({t['n_used']} non-zero of {t['n_pairs']} pairs)")
        else:
            groups[t["direction"]].append(f"{col} (p = {_p(t['p'])})")
    if not any(groups.values()):
        return ""
    ref = "the majority class" if against == MAJORITY else against
    parts = [f"{k} than {ref}: " + ", ".join(v) if k in ("better", "worse") else f"{k}: " + ", ".join(v)
             for k, v in groups.items() if v]
    return (f"Against {ref} (two-sided Wilcoxon signed-rank over client × seed pairs, α = {st['alpha']:g}): "
            + "; ".join(parts) + ".")


def _tests_section(reg: dict) -> list[str]:
    st = reg["summary"].get("statistics")
    if not st or not st.get("tests"):
        return []
    rows = []
    for col, tests in st["tests"].items():
        for ref, t in tests.items():
            rows.append([col, ref, _g(t["statistic"]), _p(t["p"]), f"{t['n_used']} / {t['n_pairs']}"
                         + (f" ({t['missing']} missing)" if t["missing"] else ""),
                         _g(t["mean_difference"]), t["direction"]])
    sentences = [v for v in (verdicts(reg, "Local"), verdicts(reg, MAJORITY)) if v]
    return (["### Paired tests", "",
             f"Each column's test {reg['metric']} against Local's (and the majority class's) on the same client "
             f"and seed: W+ is the rank sum of the pairs where the column is better, p two-sided; pairs: non-zero "
             f"differences / all pairs (zeros are dropped: identical results carry no evidence); mean difference "
             f"oriented so that positive is better. \"better\"/\"worse\" only when p < {st['alpha']:g}; "
             "\"not testable\" when so few pairs differ that no p-value could reach it.", ""]
            + _table(["column", "against", "W+", "p", "pairs", "mean difference", "verdict"], rows) + [""]
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


def _utility_section(reg: dict) -> list[str]:
    s = reg["summary"]
    cols = s["columns"]
    n = len(reg["runs"])
    rows = [[c] + [fmt_stat(s["test"][col][c]) for col in cols] for c in reg["clients"]]
    rows.append(["**mean**"] + [fmt_stat(s["test"][col]["mean"]) for col in cols])
    spread = f"mean ± sample std over {n} seeds" if n > 1 else "one seed"
    return ([f"### Test {reg['metric']} per client ({_better(reg['metric'])}; {spread})", "",
             "CE: each client's model in the exact equilibrium. The learners' figures are their own "
             "personalised models.", ""] + (["CE (ours): SPO's models in SPO's own CE (the paper's row).", ""]
                                             if "CE (ours)" in cols else [])
            + _table(["client"] + cols, rows) + [""])


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
    lines = [f"Paper, {pub['table']}: the OCS of each client and the MSE of its model in the CE, "
             "beside ours (exact game; mean ± std over our seeds).", ""]
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
            rows.append([c, " or ".join(sorted(ocs)), paper, fmt_stat(reg["summary"]["test"]["CE"][c])
                         if "CE" in reg["summary"]["test"] else "–"])
        lines += _table(["client", "our OCS (all seeds)", "paper: CE MSE", "ours: CE test MSE"], rows) + [""]
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
    for client, paper in pub["accuracy"].items():
        for col in ("Local", "SPO", "CE"):
            rows.append([client, col, paper[col], _pct(t.get(col, {}).get(client))])
    ours = reg["summary"].get("exact_partitions", {})
    return ([f"Paper, {pub['table']} (test accuracy, %), beside ours (mean ± std over seeds). Paper's CE: "
             f"`{_blocks(pub['ce_partition'])}` (the non-PhD client gains nothing from the PhD client). "
             "Ours: " + _ours(reg, ours) + ".", ""]
            + _table(["client", "method", "paper", "ours"], rows) + [""])


def _published_digits(results: dict) -> list[str]:
    pub = results["published"]
    reg = results["regimes"][0]
    t = reg["summary"]["test"]
    rows = [[col, pub["accuracy"].get(col, "–"), _pct(t[col]["mean"])] for col in reg["summary"]["columns"]]
    mean = {col: t[col]["mean"]["mean"] for col in reg["summary"]["columns"] if t[col]["mean"]["mean"] is not None}
    tests = (reg["summary"].get("statistics") or {}).get("tests", {})
    checks = []
    for col, v in mean.items():
        if col == "Local" or "Local" not in mean:
            continue
        t = tests.get(col, {}).get("Local")
        if t is None:
            verdict = "no paired test recorded"
        elif t["direction"] in ("better", "worse"):
            verdict = f"{'above' if t['direction'] == 'better' else 'below'} Local, p = {_p(t['p'])}"
        elif t["direction"] == "not testable":
            verdict = f"not testable ({t['n_used']} of {t['n_pairs']} client × seed pairs differ)"
        else:
            verdict = f"no significant difference from Local, p = {_p(t['p'])}"
        checks.append(f"{col} {100 * v:.1f} vs Local {100 * mean['Local']:.1f}: {verdict}")
    ours = results["experiment"]
    return ([f"Paper, {pub['table']} (CIFAR-10, 10 clients with 2 classes each; mean test accuracy, %), "
             f"beside ours on {ours}. The paper's ordering: {pub['ordering']}.", ""]
            + _table(["method", "paper (CIFAR-10)", f"ours ({ours})"], rows) + [""]
            + ["Ordering on our data (mean test accuracy, %; two-sided Wilcoxon signed-rank over client × seed "
               "pairs against Local): " + "; ".join(checks) + ".", ""])


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
        figs = [f for f in results.get("figures", []) if f.startswith(reg["name"] + "-") and f.endswith(".png")]
        if figs:
            lines += ["### Figures", ""] + [f"![{f}]({f})" for f in figs] + [""]
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

    folder = Path(folder)
    path = folder / "report.md"
    write_text(path, report_markdown(read_results(folder / "results.json").to_json()))
    return str(path)
