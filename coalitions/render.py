"""Human-readable renderings: text tables and Graphviz DOT.

DOT output draws each coalition as a cluster (labelled with its peeling round)
and the benefit graph's edges ``j → i``; render it with
``dot -Tpng file.dot -o file.png``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .bitmask import members
from .contribution import benefits, contributions, total_contributions

__all__ = ["table", "equilibrium_text", "equilibrium_dot", "graph_text", "graph_dot",
           "report_text", "fmt", "carries_text", "support_text", "certificate_text", "learned_equilibrium_text",
           "learned_equilibrium_dot"]


def fmt(x: float) -> str:
    """A number in at most 6 significant digits."""
    return f"{x:.6g}"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A left-aligned plain-text table."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[k]) for r in cells)) if cells else len(h) for k, h in enumerate(header)]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _yes(b: bool) -> str:
    return "holds" if b else "VIOLATED"


def report_text(game, report) -> str:
    """One line per check, then its witnesses."""
    out = [f"{report.name.replace('_', ' ')}: {_yes(report.holds)} "
           f"({report.method}, {report.checked:,} checked, {report.violations:,} violations)"]
    for v in report.witnesses:
        who = game.key(v.coalition) if v.coalition else "(alone)"
        if v.subcoalition:
            head = f"  {{{game.key(v.subcoalition)}}} can leave {{{who}}} with nobody losing:"
        elif v.client >= 0:
            head = f"  {game.clients[v.client]} gains by moving to {{{who}}}:"
        else:
            head = f"  {{{who}}} blocks:"
        pays = ", ".join(f"{game.clients[i]} {fmt(a)} vs {fmt(b)} now" for i, a, b in v.payoffs)
        out.append(f"{head} {pays}")
    if report.violations > len(report.witnesses):
        out.append(f"  ... and {report.violations - len(report.witnesses):,} more")
    return "\n".join(out)


def equilibrium_text(eq) -> str:
    """Table of client, coalition, payoff, MAU(all), round, then the certificate."""
    game = eq.game
    where = {i: k for k in eq.masks for i in members(k)}
    rnd = eq.round_of()
    pay = eq.payoffs
    best = eq.mau_all
    gain = benefits(game, eq.masks, eq.semantics)
    given = total_contributions(game, eq.masks, eq.semantics)
    rows = [(c, game.key(where[i]), fmt(pay[i]), fmt(best[i]), rnd[i] or "-", fmt(gain[i]), fmt(given[i]))
            for i, c in enumerate(game.clients)]
    level = f", z {eq.z:g}" if game.uncertainty is not None else ""
    head = (f"Collaboration equilibrium ({eq.semantics} semantics, tol {eq.tol:g}{level}), "
            f"found by {eq.found_by}: " + " | ".join(game.key(k) for k in eq.masks))
    parts = [head, "", table(["client", "coalition", "payoff", "MAU(all)", "round", "gain", "contribution"], rows)]
    carries = carries_text(game, eq.masks, eq.semantics)
    if carries:
        parts += ["", carries]
    if eq.certificate is not None:
        parts += ["", certificate_text(game, eq.certificate)]
    return "\n".join(parts)


def _noise_source(game) -> str:
    u = game.uncertainty
    if u is None:
        return "exact game"
    if u.kind == "replicates":
        return f"paired standard errors from {u.replicates.b} bootstrap replicates"
    return "one standard error per value, values independent"


def _z(x: float, kind: str) -> str:
    """A member's z-score; ``±inf`` (a difference without noise) in words."""
    if x == float("inf"):
        return "certain (no noise)"
    if x == float("-inf"):
        return "none" if kind == "loss" else "certainly worse (no noise)"
    return fmt(x)


def _family_text(cert) -> str:
    """What the level covers, with the thresholds it sets on ``d / se``."""
    if cert.family in (None, "comparison"):
        return "per comparison"
    c = cert.thresholds or ()
    if cert.family == "game" or len(set(c)) <= 1:
        at = f"threshold {c[0]:.2f}" if c else ""
    else:
        at = f"thresholds {min(c):.2f}-{max(c):.2f}"
    scope = "all comparisons of the game at once" if cert.family == "game" else "each client's comparisons at once"
    return f"for {scope} ({at} standard errors; z-scores below are on the scale of z)"


def certificate_text(game, cert) -> str:
    """Both axioms with their witnesses; for a measured game, the level, the verdict and the closest calls."""
    if not cert.noisy:
        head = f"certificate ({cert.method}{', z 0: point values' if game.uncertainty is not None else ''}):"
        return "\n".join([head, report_text(game, cert.inner), report_text(game, cert.outer)])
    out = [f"certificate ({cert.method}, at z {cert.z:g} {_family_text(cert)}, {_noise_source(game)}):",
           report_text(game, cert.inner), report_text(game, cert.outer), f"verdict: {cert.verdict}"]
    c = cert.closest_outer
    if c is not None:
        who = ", ".join(f"{game.clients[i]} {_z(x, 'gain')}" for i, x in c.members)
        out.append(f"  closest to blocking: {{{game.key(c.coalition)}}}, its weakest member gains "
                   f"{_z(c.score, 'gain')} standard errors ({who}); a coalition blocks when this exceeds z, "
                   "and is refuted when it is below -z")
    c = cert.closest_inner
    if c is not None:
        who = ", ".join(f"{game.clients[i]} {_z(x, 'loss')}" for i, x in c.members)
        out.append(f"  closest to splitting: {{{game.key(c.subcoalition)}}} from {{{game.key(c.coalition)}}}, "
                   f"its members' largest loss is {_z(c.score, 'loss')} standard errors ({who}); a "
                   "sub-coalition splits off when this is at most z")
    out.append(f"  on point values alone (z 0): {'a CE' if cert.point_holds else 'not a CE'}")
    return "\n".join(out)


def support_text(game, sup, over: str = "bootstrap replicates of the validation sets") -> str:
    """The support of a CE (:class:`coalitions.support.Support`): its partition's share, then each coalition's.

    Indented, so that no line starts with a client name.  ``over`` names what was resampled.
    """
    count = lambda share: f"{share:.2f} ({round(share * sup.b)} of {sup.b})"
    rows = [[f"{{{game.key(k)}}}", count(s)] for k, s in sup.coalition_shares.items()]
    rows.append(["the partition", count(sup.partition_share)])
    out = [f"support over {sup.b} {over}, each solved like the game:",
           "the share of them whose equilibrium holds the coalition / is the same partition", ""]
    out += ["  " + line for line in table(["coalition", "support"], rows).splitlines()]
    if sup.without_ce:
        out += ["", f"  {sup.without_ce} of {sup.b} replicates have no collaboration equilibrium"]
    return "\n".join(out)


def carries_text(game, partition, semantics: str = "personalized", max_members: int = 12) -> str:
    """Who carries whom: per coalition of two or more, what each member loses if another leaves.

    Row ``i``, column ``j``: ``payoff_j(K) − payoff_j(K ∖ {i})`` (:mod:`coalitions.contribution`).
    Indented, so that no line starts with a client name.  A coalition of more than
    ``max_members`` gets one line pointing to the JSON output instead of its table.
    """
    c = contributions(game, partition, semantics)
    blocks = [k for k in partition if k & (k - 1)]
    if not blocks:
        return ""
    out = ["who carries whom: what each member (column) would lose if the client in the row left;",
           "contribution = the row's total, gain = payoff - payoff alone"]
    for k in blocks:
        ms = members(k)
        if len(ms) > max_members:
            out += ["", f"  {{{game.key(k)}}}: {len(ms)} members, too many for a table (--format json: carries)"]
            continue
        rows = [[game.clients[i]] + ["-" if i == j else fmt(c[i, j]) for j in ms] for i in ms]
        sub = table([f"{{{game.key(k)}}}"] + [game.clients[j] for j in ms], rows)
        out += [""] + ["  " + line for line in sub.splitlines()]
    return "\n".join(out)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _graph_lines(graph, indent="  ") -> list[str]:
    names = graph.clients
    amb = graph.ambiguous
    lines = []
    for j, i in graph.edges:
        style = " [style=dashed]" if i in amb else ""
        lines.append(f"{indent}{_q(names[j])} -> {_q(names[i])}{style};")
    return lines


def equilibrium_dot(eq) -> str:
    """DOT: coalitions as clusters labelled with round and payoffs, edges of ``BG(all)``."""
    game = eq.game
    rnd = eq.round_of()
    lines = ["digraph equilibrium {", "  rankdir=LR;", '  node [shape=ellipse, fontname="Helvetica"];',
             f'  label={_q(f"collaboration equilibrium ({eq.semantics}); edge j -> i: j is a necessary collaborator of i")};']
    for n, k in enumerate(eq.masks):
        r = rnd[members(k)[0]]
        lab = f"round {r}" if r else "coalition"
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={_q(lab)}; style=rounded; color=gray40;")
        for i in members(k):
            label = _q(game.clients[i])[:-1] + "\\n" + fmt(eq.payoffs[i]) + '"'
            lines.append(f"    {_q(game.clients[i])} [label={label}];")
        lines.append("  }")
    if eq.graphs:
        lines += _graph_lines(eq.graphs[0])
    lines.append("}")
    return "\n".join(lines) + "\n"


def learned_equilibrium_text(estimate, source: str = "") -> str:
    """An estimate's partition (clearly learned, not certified), each client's metric, and ``BG(all)``."""
    from .estimate import NOT_CERTIFIED

    e, names = estimate, estimate.clients
    blocks = e.masks
    where = {i: k for k in blocks for i in members(k)}
    rnd = e.round_of()
    util = e.utilities
    rows = [(c, ",".join(names[j] for j in members(where[i])), rnd[i] or "-", fmt(util["val"][c]),
             fmt(util["test"][c])) for i, c in enumerate(names)]
    of = f" {source}" if source else ""
    head = (f"Learned collaboration equilibrium (estimate{of}, method {e.method}), found by peeling the learned "
            "benefit graph: " + " | ".join(",".join(names[j] for j in members(k)) for k in blocks))
    better = "higher" if e.sense == "max" else "lower"
    return "\n".join([head, NOT_CERTIFIED, "",
                      table(["client", "coalition", "round", f"val {e.metric}", f"test {e.metric}"], rows),
                      f"(the learner's own {e.metric} per client, {better} is better: not values of a game)", "",
                      graph_text(e.benefit_graph)])


def learned_equilibrium_dot(estimate) -> str:
    """DOT of an estimate: its coalitions as clusters labelled with their round, the learned ``BG(all)``."""
    e, names = estimate, estimate.clients
    rnd = e.round_of()
    title = f"learned equilibrium ({e.method}), not certified; edge j -> i: j is a necessary collaborator of i"
    lines = ["digraph learned_equilibrium {", "  rankdir=LR;", '  node [shape=ellipse, fontname="Helvetica"];',
             f"  label={_q(title)};"]
    for n, k in enumerate(e.masks):
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={_q(f'round {rnd[members(k)[0]]}')}; style=rounded; color=gray40;")
        lines += [f"    {_q(names[i])};" for i in members(k)]
        lines.append("  }")
    lines += _graph_lines(e.benefit_graph)
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_text(graph) -> str:
    """Each member's OCS, whether it is ambiguous, and the edge list."""
    names = graph.clients
    amb = graph.ambiguous
    rows = []
    for i, c in graph.collaborators:
        alts = ""
        if i in amb:
            alts = "ambiguous: " + " / ".join("{" + ",".join(names[j] for j in members(a)) + "}" for a in amb[i])
        rows.append((names[i], "{" + ",".join(names[j] for j in members(c)) + "}", alts))
    within = ",".join(names[i] for i in members(graph.within))
    edges = ", ".join(f"{names[j]}->{names[i]}" for j, i in graph.edges) or "(none)"
    return "\n".join([f"Benefit graph within {{{within}}} (edge j->i: j is in OCS of i)", "",
                      table(["client", "OCS", "note"], rows), "", f"edges: {edges}"])


def graph_dot(graph) -> str:
    """DOT of ``BG(R)``; edges into a client with an ambiguous OCS are dashed."""
    names = graph.clients
    lines = ["digraph benefit_graph {", '  node [shape=ellipse, fontname="Helvetica"];']
    for i in members(graph.within):
        lines.append(f"  {_q(names[i])};")
    lines += _graph_lines(graph)
    lines.append("}")
    return "\n".join(lines) + "\n"
