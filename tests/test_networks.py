"""Benefit graphs and equilibria as networkx graphs and GraphML (coalitions.networks)."""

from __future__ import annotations

import subprocess
import sys

import networkx as nx
import pytest
from conftest import EXAMPLES

import coalitions as co
from coalitions import cli
from coalitions.bitmask import members
from coalitions.networks import NETWORKX_HINT, graphml

TIE = str(EXAMPLES / "tie.json")
ME = str(EXAMPLES / "mean-estimation-5-5-25.json")


@pytest.mark.parametrize("path", [TIE, ME])
def test_benefit_graph_to_networkx_has_the_edges_of_the_graph(path):
    game = co.read_game(path)
    bg = co.ExactOracle(game).benefit_graph(game.grand)
    g = bg.to_networkx()
    assert isinstance(g, nx.DiGraph)
    assert sorted(g.nodes) == sorted(game.clients)
    assert sorted(g.edges) == sorted((game.clients[j], game.clients[i]) for j, i in bg.edges)
    for i, c in bg.collaborators:
        assert g.nodes[game.clients[i]]["ocs_size"] == len(members(c))
        assert set(g.predecessors(game.clients[i])) == {game.clients[j] for j in members(c)}


def test_equilibrium_to_networkx_places_every_client_in_its_coalition():
    game = co.read_game(TIE)
    eq = co.solve(game)
    g = eq.to_networkx()
    assert g.graph["found_by"] == "peeling" and g.graph["certified"] == "yes"
    blocks = {}
    for name, data in g.nodes(data=True):
        blocks.setdefault(data["coalition"], set()).add(name)
        assert data["round"] >= 1
    assert sorted(map(sorted, blocks.values())) == sorted(map(sorted, eq.blocks()))
    assert sorted(g.edges) == sorted(eq.graphs[0].to_networkx().edges)


def test_graphml_round_trips_through_networkx():
    eq = co.solve(co.read_game(ME))
    g = eq.to_networkx()
    back = nx.parse_graphml(graphml(g))
    assert sorted(back.edges) == sorted(g.edges)
    assert nx.get_edge_attributes(back, "ambiguous") == nx.get_edge_attributes(g, "ambiguous")
    assert {n: d["payoff"] for n, d in back.nodes(data=True)} == pytest.approx(
        {n: d["payoff"] for n, d in g.nodes(data=True)})


@pytest.mark.parametrize("command", ["graph", "solve"])
def test_cli_writes_graphml(capsys, command):
    rc = cli.main([command, TIE, "--format", "graphml"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    g = nx.parse_graphml(out)
    assert sorted(g.nodes) == ["c0", "c1", "c2"]
    assert ">True<" not in out and ">False<" not in out  # XML Schema booleans are lower case


def test_without_networkx_the_cli_says_which_extra_in_one_line(tmp_path):
    blocker = tmp_path / "networkx.py"
    blocker.write_text("raise ModuleNotFoundError(\"No module named 'networkx'\", name='networkx')\n")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from coalitions.cli import main; sys.exit(main())"
    r = subprocess.run([sys.executable, "-c", code, "graph", TIE, "--format", "graphml"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"coalitions: error: {NETWORKX_HINT}"]


def test_importing_the_core_does_not_load_networkx():
    code = "import sys, coalitions, coalitions.cli; assert 'networkx' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
