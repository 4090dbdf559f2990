"""A new user's first hour, replayed: the three jobs the toolkit exists for, through the command line alone.

README's first command (``coalitions reproduce synthetic --quick``) is run by ``tests/test_reproduce.py``
(and checked to be the README's there).  This file follows a user from there, with only the docs:

1. **compute an equilibrium** of a game they wrote by hand (docs/formats.md's example, in JSON), with
   its certificate, in text and JSON, and as a graph for networkx;
2. **verify the axioms in their own tests**: a pytest file written as docs/testing.md shows, with the
   shipped assertions and strategies, run by pytest in its own process (the plugin loads itself);
3. **compare a learned benefit graph with the exhaustive one**: ``oracle`` then ``learn`` on the same
   data, ``compare``, and the learned estimate solved and exported as GraphML, read back by networkx.

Each output is checked for what a user reads in it, not for its layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import run_as_command

#: docs/formats.md's hand-written game: the mean-estimation game of sizes (5, 5, 25), as MSE (a loss).
HAND_WRITTEN = {
    "format": "coalitions/game@1",
    "clients": ["a", "b", "c"],
    "sense": "min",
    "values": {
        "a": {"a": 2.0, "a,b": 1.5, "a,c": 1.72, "a,b,c": 1.55},
        "b": {"b": 2.0, "a,b": 1.5, "b,c": 1.72, "a,b,c": 1.55},
        "c": {"c": 0.4, "a,c": 0.389, "b,c": 0.389, "a,b,c": 0.408},
    },
}


def test_job_1_an_equilibrium_of_a_hand_written_game(tmp_path):
    nx = pytest.importorskip("networkx")
    game = tmp_path / "game.json"
    game.write_text(json.dumps(HAND_WRITTEN), encoding="utf-8")
    rc, out, err = run_as_command("solve", game)
    assert rc == 0 and err == ""
    assert "a,b | c" in out.splitlines()[0]
    assert "inner agreement: holds" in out and "outer agreement: holds" in out
    rc, out, _ = run_as_command("solve", game, "--format", "json")
    eq = json.loads(out)
    assert rc == 0 and eq["partition"] == [["a", "b"], ["c"]]
    assert eq["certificate"]["inner_agreement"] and eq["certificate"]["outer_agreement"]
    rc, _, _ = run_as_command("graph", game, "--format", "graphml", "-o", tmp_path / "bg.graphml")
    g = nx.read_graphml(tmp_path / "bg.graphml")
    assert rc == 0 and set(g.nodes) == {"a", "b", "c"}
    assert g.has_edge("b", "a") and g.has_edge("a", "b")  # a and b each need the other
    rc, out, _ = run_as_command("verify", game, "--partition", "a|b|c")
    assert rc == 1 and "outer agreement: VIOLATED" in out and "{a,b} blocks" in out  # the user's wrong guess is refuted, with witnesses


def test_job_2_the_axioms_in_the_users_own_tests(tmp_path):
    pytest.importorskip("hypothesis")
    own = tmp_path / "test_my_federation.py"
    own.write_text(textwrap.dedent('''
        import coalitions as co
        from hypothesis import given, settings
        from coalitions.testing import assert_equilibrium, assert_individually_rational, assert_same_partition
        from coalitions.testing.strategies import games


        def test_our_consortium_is_stable():
            game = co.mean_estimation([5, 5, 25], clients=["a", "b", "c"])
            assert_equilibrium(game, "a,b|c")
            assert_same_partition(co.solve(game), "a,b|c")


        def test_a_wrong_guess_is_refuted():
            game = co.mean_estimation([5, 5, 25], clients=["a", "b", "c"])
            try:
                assert_equilibrium(game, "a|b|c")
            except AssertionError as e:
                assert "blocks" in str(e)
            else:
                raise AssertionError("a|b|c passed")


        @settings(max_examples=20, deadline=None)
        @given(games(max_n=4))
        def test_the_solver_is_individually_rational(game):
            assert_individually_rational(game, co.solve(game))
        '''), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(own)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_job_3_a_learned_graph_against_the_exhaustive_one(tmp_path):
    nx = pytest.importorskip("networkx")
    pytest.importorskip("torch")
    game, est = tmp_path / "game.json", tmp_path / "est.json"
    rc, _, err = run_as_command("oracle", "synthetic", "-o", game)
    assert rc == 0 and "wrote" in err
    rc, _, err = run_as_command("learn", "synthetic", "--method", "fedamp", "--steps", "3", "-o", est)
    assert rc == 0 and "wrote" in err
    rc, out, _ = run_as_command("compare", est, game, "--format", "json")
    cmp = json.loads(out)
    assert rc == 0
    assert 0.0 <= cmp["edge_f1"] <= 1.0 and cmp["data"]["checked"] and cmp["data"]["same"]  # the same data
    assert cmp["partition_exact"] == [["0", "1", "2"], ["3", "4", "5"]]  # the paper's two groups
    rc, out, _ = run_as_command("solve", est)
    assert rc == 0 and "not certified" in out  # an estimate holds no coalition values
    rc, _, _ = run_as_command("graph", est, "--format", "graphml", "-o", tmp_path / "learned.graphml")
    g = nx.read_graphml(tmp_path / "learned.graphml")
    assert rc == 0 and set(g.nodes) == {str(i) for i in range(6)}
    assert g.graph["learned_by"] == "fedamp"
