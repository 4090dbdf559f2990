"""coalitions.render: text tables and Graphviz DOT."""

import re

from coalitions.axioms import inner_agreement, outer_agreement
from coalitions.equilibrium import solve
from coalitions.game import Game
from coalitions.graph import ExactOracle
from coalitions.render import equilibrium_dot, equilibrium_text, fmt, graph_dot, graph_text, report_text, table


def check_dot(text: str, nodes) -> None:
    """A structural check of DOT: balanced braces, every edge between declared quoted nodes."""
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    quoted = set(re.findall(r'"((?:[^"\\]|\\.)*)"\s*(?:\[|;)', text))
    for j, i in re.findall(r'"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"', text):
        assert j in nodes and i in nodes
    assert set(nodes) <= quoted | {j for j, _ in re.findall(r'"([^"]*)" -> "([^"]*)"', text)}


def test_fmt_and_table():
    assert fmt(1 / 3) == "0.333333" and fmt(2.0) == "2" and fmt(-1e-12) == "-1e-12"
    t = table(["a", "long header"], [(1, "x"), ("wide cell", 2)])
    lines = t.splitlines()
    assert lines[0].split() == ["a", "long", "header"] and set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].startswith("1          x") and all(l == l.rstrip() for l in lines)
    assert table(["h"], []) == "h\n-"


def test_equilibrium_text(tie_game):
    text = equilibrium_text(solve(tie_game))
    assert "found by peeling: c0,c2 | c1" in text
    rows = {l.split()[0]: l.split() for l in text.splitlines() if l.startswith("c")}
    # client, coalition, payoff, MAU(all), round, gain over alone, contribution to the coalition
    assert rows["c0"] == ["c0", "c0,c2", "3", "3", "1", "1", "2"]
    assert rows["c1"] == ["c1", "c1", "2", "3", "2", "0", "0"]
    assert rows["c2"] == ["c2", "c0,c2", "2", "2", "1", "2", "1"]
    carries = text[text.index("who carries whom"):text.index("certificate")].splitlines()
    assert [l.split() for l in carries if l.startswith("  c")] == [["c0", "-", "2"], ["c2", "1", "-"]]
    assert "inner agreement: holds" in text and "outer agreement: holds" in text
    assert "certificate (exhaustive)" in text


def test_report_text_witnesses(tie_game):
    text = report_text(tie_game, inner_agreement(tie_game, [0b111]))
    assert text.splitlines()[0].startswith("inner agreement: VIOLATED (exhaustive, 6 checked, 1 violations)")
    assert "{c0,c2} can leave {c0,c1,c2} with nobody losing: c0 3 vs 3 now, c2 2 vs 2 now" in text
    text = report_text(tie_game, outer_agreement(tie_game, [1, 2, 4], max_witnesses=1))
    assert "{c0,c2} blocks: c0 3 vs 2 now, c2 2 vs 0 now" in text and "... and 1 more" in text


def test_graph_text_shows_ambiguity(tie_game):
    text = graph_text(ExactOracle(tie_game).benefit_graph(0b111))
    assert "ambiguous: {c1} / {c2}" in text
    assert "edges: c0->c1, c0->c2, c1->c0, c2->c1" in text
    alone = graph_text(ExactOracle(tie_game).benefit_graph(0b010))
    assert "edges: (none)" in alone


def test_dot_outputs(tie_game):
    eq = solve(tie_game)
    dot = equilibrium_dot(eq)
    check_dot(dot, tie_game.clients)
    assert dot.count("subgraph cluster_") == 2 and 'label="round 1"' in dot and 'label="round 2"' in dot
    g = graph_dot(ExactOracle(tie_game).benefit_graph(0b111))
    check_dot(g, tie_game.clients)
    assert '"c1" -> "c0" [style=dashed];' in g  # edges into c0, whose OCS is ambiguous, are dashed
    assert '"c0" -> "c1";' in g


def test_dot_quotes_odd_names():
    g = Game.from_mapping(['say "hi"', "back\\slash"], {
        'say "hi"': {'say "hi"': 0, 'say "hi",back\\slash': 1},
        "back\\slash": {"back\\slash": 0, 'say "hi",back\\slash': 1}})
    dot = equilibrium_dot(solve(g))
    assert '"say \\"hi\\""' in dot and '"back\\\\slash"' in dot
    check_dot(dot, ['say \\"hi\\"', "back\\\\slash"])
