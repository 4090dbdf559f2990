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

__all__ = ["report_markdown", "rebuild", "fmt_stat", "published_markdown"]


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
    for m, a in s.get("agreement", {}).items():
        first = runs[0]["methods"][m]
        rows.append([labels.get(m, m), f"{a['same_partition']} / {len(runs)}", fmt_stat(a["edge_f1"], 2),
                     fmt_stat(a["ari"], 2), f"`{_blocks(first['partition'], cell=True)}`",
                     f"{a['is_exact_ce']} / {len(runs)}"])
    if not rows:
        return []
    return (["### Each learner's benefit graph and equilibrium against the exact game", "",
             "Same CE: seeds on which the learner's equilibrium is the exact one. Edge F1 and ARI "
             "(adjusted Rand index of the two partitions) as in `coalitions compare`. Stable: seeds on "
             "which the learner's partition passes both axioms in the exact game (certified "
             "exhaustively), whether or not it is the CE that peeling finds.", ""]
            + _table(["learner", "same CE", "edge F1", "ARI", f"its CE (seed {runs[0]['seed']})",
                      "stable in the exact game"], rows) + [""])


def _utility_section(reg: dict) -> list[str]:
    s = reg["summary"]
    cols = s["columns"]
    n = len(reg["runs"])
    rows = [[c] + [fmt_stat(s["test"][col][c]) for col in cols] for c in reg["clients"]]
    rows.append(["**mean**"] + [fmt_stat(s["test"][col]["mean"]) for col in cols])
    spread = f"mean ± sample std over {n} seeds" if n > 1 else "one seed"
    return ([f"### Test {reg['metric']} per client ({_better(reg['metric'])}; {spread})", "",
             "CE: each client's model in the exact equilibrium. The learners' figures are their own "
             "personalised models.", ""] + _table(["client"] + cols, rows) + [""])


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
                  f"`{_blocks(pub['ce_partition'][reg['name']])}`. Ours: "
                  + ", ".join(f"`{p}` ({k}/{len(runs)} seeds)" for p, k in ours_p.items()) + ".", ""]
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
             "Ours: " + ", ".join(f"`{p}` ({k}/{len(reg['runs'])} seeds)" for p, k in ours.items()) + ".", ""]
            + _table(["client", "method", "paper", "ours"], rows) + [""])


def _published_digits(results: dict) -> list[str]:
    pub = results["published"]
    reg = results["regimes"][0]
    t = reg["summary"]["test"]
    rows = [[col, pub["accuracy"].get(col, "–"), _pct(t[col]["mean"])] for col in reg["summary"]["columns"]]
    mean = {col: t[col]["mean"]["mean"] for col in reg["summary"]["columns"] if t[col]["mean"]["mean"] is not None}
    checks = []
    if "Local" in mean and "FedAvg" in mean:
        checks.append(f"FedAvg below Local: {'yes' if mean['FedAvg'] < mean['Local'] else 'no'} "
                      f"({100 * mean['FedAvg']:.1f} vs {100 * mean['Local']:.1f})")
    for col, v in mean.items():
        if col not in ("Local", "FedAvg", "CE") and "Local" in mean:
            checks.append(f"{col} above Local: {'yes' if v > mean['Local'] else 'no'} ({100 * v:.1f})")
    ours = results["experiment"]
    return ([f"Paper, {pub['table']} (CIFAR-10, 10 clients with 2 classes each; mean test accuracy, %), "
             f"beside ours on {ours}. The paper's ordering: {pub['ordering']}.", ""]
            + _table(["method", "paper (CIFAR-10)", f"ours ({ours})"], rows) + [""]
            + ["Ordering on our data: " + "; ".join(checks) + ".", ""])


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
        figs = [f for f in results.get("figures", []) if f.startswith(reg["name"] + "-") and f.endswith(".png")]
        if figs:
            lines += ["### Figures", ""] + [f"![{f}]({f})" for f in figs] + [""]
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
