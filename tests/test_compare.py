"""Scoring an estimate against the exact game (coalitions/compare.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.compare import KEYS, adjusted_rand_index, compare, compare_text, edge_scores
from coalitions.errors import InputError
from coalitions.estimate import Estimate
from coalitions.graph import BenefitGraph

# a: best with b (3); b: best with a (2); c: best alone (5).  CE {a,b} | {c}; exact edges b->a, a->b.
VALUES = {
    "a": {"a": 1, "a,b": 3, "a,c": 0, "a,b,c": 2},
    "b": {"b": 1, "a,b": 2, "b,c": 0, "a,b,c": 1},
    "c": {"c": 5, "a,c": 1, "b,c": 2, "a,b,c": 4},
}
GAME = co.Game.from_mapping(["a", "b", "c"], VALUES)


def estimate(clients, ocs: dict, partition, weights=None):
    """An Estimate over `clients` with OCS and blocks given by names."""
    idx = {c: i for i, c in enumerate(clients)}
    mask = lambda names: sum(1 << idx[n] for n in names)  # noqa: E731
    graph = BenefitGraph(tuple(clients), (1 << len(clients)) - 1,
                         tuple((idx[c], mask(ocs[c])) for c in clients))
    blocks = tuple(mask(b) for b in partition)
    util = {c: 0.0 for c in clients}
    return Estimate(clients=tuple(clients), method="hand", config={}, weights=weights,
                    utilities={"val": util, "test": util}, metric="accuracy", sense="max",
                    benefit_graph=graph, partition=blocks, rounds=(blocks,))


def test_perfect_estimate_scores_one_and_no_regret():
    e = estimate(["a", "b", "c"], {"a": ["b"], "b": ["a"], "c": []}, [["a", "b"], ["c"]])
    r = compare(e, GAME)
    assert set(KEYS) <= set(r)
    assert r["edge_precision"] == r["edge_recall"] == r["edge_f1"] == 1.0
    assert r["ocs_exact"] == 1.0 and r["same_partition"] is True and r["ari"] == 1.0
    assert r["regret"] == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_clients_are_matched_by_name_in_any_order():
    e = estimate(["c", "a", "b"], {"a": ["b"], "b": ["a"], "c": []}, [["c"], ["b", "a"]])
    r = compare(e, GAME)
    assert r["edge_f1"] == 1.0 and r["same_partition"] and r["ocs_exact"] == 1.0


def test_wrong_estimate_gives_the_hand_computed_numbers():
    # learned edges b->a, c->a, a->c; exact b->a, a->b: 1 hit of 3 learned, of 2 exact
    e = estimate(["a", "b", "c"], {"a": ["b", "c"], "b": [], "c": ["a"]}, [["a", "c"], ["b"]])
    r = compare(e, GAME)
    assert r["edge_precision"] == pytest.approx(1 / 3)
    assert r["edge_recall"] == pytest.approx(1 / 2)
    assert r["edge_f1"] == pytest.approx(0.4)            # 2 * (1/3)(1/2) / (1/3 + 1/2)
    assert r["ocs_exact"] == 0.0
    assert r["same_partition"] is False
    # labels exact (0,0,1), learned (0,1,0): table [[1,1],[1,0]], index 0, expected 1/3, max 1
    assert r["ari"] == pytest.approx(-0.5)
    # personalized: a 3 -> MAU_a({a,c}) = 1; b 2 -> 1; c 5 -> MAU_c({a,c}) = 5
    assert r["regret"] == {"a": pytest.approx(2.0), "b": pytest.approx(1.0), "c": pytest.approx(0.0)}
    assert r["partition_exact"] == [["a", "b"], ["c"]] and r["partition_learned"] == [["a", "c"], ["b"]]


def test_regret_under_shared_semantics_uses_the_coalitions_own_values():
    e = estimate(["a", "b", "c"], {"a": ["b", "c"], "b": [], "c": ["a"]}, [["a", "c"], ["b"]])
    assert co.solve(GAME, "shared").blocks() == [["a", "b"], ["c"]]
    r = compare(e, GAME, semantics="shared")
    # shared: a v({a,b}) = 3 vs v({a,c}) = 0; b 2 vs v({b}) = 1; c 5 vs v({a,c}) = 1
    assert r["regret"] == {"a": pytest.approx(3.0), "b": pytest.approx(1.0), "c": pytest.approx(4.0)}


def test_regret_is_in_higher_is_better_units_for_a_loss_game():
    g = co.Game.from_mapping(["x", "y"], {"x": {"x": 1.0, "x,y": 0.5}, "y": {"y": 0.2, "x,y": 0.4}}, sense="min")
    # x wants y (0.5 < 1), y is better alone (0.2): CE x | y.  Learned: x,y together.
    e = estimate(["x", "y"], {"x": ["y"], "y": ["x"]}, [["x", "y"]])
    r = compare(e, g)
    assert r["partition_exact"] == [["x"], ["y"]]
    # personalized: MAU_x({x,y}) = -0.5 > -1: x gains 0.5 (regret -0.5); y keeps -0.2 (regret 0)
    assert r["regret"] == {"x": pytest.approx(-0.5), "y": pytest.approx(0.0)}
    assert r["edge_precision"] == 0.5 and r["edge_recall"] == 1.0


def test_edge_conventions_without_edges():
    assert edge_scores(set(), set()) == (1.0, 1.0, 1.0)
    assert edge_scores(set(), {(0, 1)}) == (1.0, 0.0, 0.0)
    assert edge_scores({(0, 1)}, set()) == (0.0, 1.0, 0.0)
    assert edge_scores({(0, 1)}, {(1, 0)}) == (0.0, 0.0, 0.0)
    alone = co.mean_estimation([25, 25, 25], clients=["a", "b", "c"])   # everyone alone, no edges
    e = estimate(["a", "b", "c"], {"a": [], "b": [], "c": []}, [["a"], ["b"], ["c"]])
    r = compare(e, alone)
    assert (r["edge_precision"], r["edge_recall"], r["edge_f1"], r["ari"]) == (1.0, 1.0, 1.0, 1.0)


def test_ambiguous_exact_ocs_accepts_any_tied_set():
    # v_a ties between {a,b} and {a,c}: either learned OCS counts as exact
    g = co.Game.from_mapping(["a", "b", "c"], {
        "a": {"a": 0, "a,b": 2, "a,c": 2, "a,b,c": 1},
        "b": {"b": 1, "a,b": 0, "b,c": 0, "a,b,c": 0},
        "c": {"c": 1, "a,c": 0, "b,c": 0, "a,b,c": 0}})
    for other in ("b", "c"):
        e = estimate(["a", "b", "c"], {"a": [other], "b": [], "c": []}, [["a"], ["b"], ["c"]])
        assert compare(e, g)["ocs_exact"] == 1.0


def test_mismatched_client_names_are_input_errors():
    e = estimate(["a", "b", "z"], {"a": [], "b": [], "z": []}, [["a"], ["b"], ["z"]])
    with pytest.raises(InputError, match="client 'z' of the estimate is not in the game"):
        compare(e, GAME)
    e = estimate(["a", "b"], {"a": [], "b": []}, [["a"], ["b"]])
    with pytest.raises(InputError, match="client 'c' of the game is not in the estimate"):
        compare(e, GAME)


def test_ari_hand_computed():
    # exact {0,1,2},{3,4,5}; learned {0,1},{2,3},{4,5}: table [[2,1,0],[0,1,2]]
    # index = C(2,2)+C(2,2) = 2; rows 2*C(3,2) = 6; cols 3*C(2,2) = 3; expected 6*3/C(6,2) = 1.2
    # max (6+3)/2 = 4.5: ARI = (2 - 1.2)/(4.5 - 1.2) = 8/33
    assert adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) == pytest.approx(8 / 33)
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    assert adjusted_rand_index([0, 1, 2], [0, 1, 2]) == 1.0     # all singletons on both sides
    assert adjusted_rand_index([0, 0, 0], [1, 1, 1]) == 1.0     # one block on both sides
    assert adjusted_rand_index([0, 1, 2, 3], [0, 0, 0, 0]) == 0.0


labelings = st.integers(2, 9).flatmap(
    lambda n: st.tuples(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                        st.lists(st.integers(0, 3), min_size=n, max_size=n)))


@settings(max_examples=100, deadline=None)
@given(labelings)
def test_ari_properties(pair):
    a, b = (np.array(x) for x in pair)
    ari = adjusted_rand_index(a, b)
    assert ari == pytest.approx(adjusted_rand_index(b, a))                 # symmetric
    assert ari == pytest.approx(adjusted_rand_index(a, (b * 7 + 3) % 11))  # relabelling
    assert ari <= 1.0 + 1e-12
    assert adjusted_rand_index(a, a) == 1.0
    same = len({(x, y) for x, y in zip(a, b, strict=True)}) == len(set(a)) == len(set(b))
    assert (ari == pytest.approx(1.0)) == same


@settings(max_examples=60, deadline=None)
@given(labelings)
def test_ari_matches_scikit_learn(pair):
    metrics = pytest.importorskip("sklearn.metrics")
    a, b = pair
    assert adjusted_rand_index(a, b) == pytest.approx(metrics.adjusted_rand_score(a, b), abs=1e-12)


def test_text_report_lists_every_client():
    e = estimate(["a", "b", "c"], {"a": ["b", "c"], "b": [], "c": ["a"]}, [["a", "c"], ["b"]])
    text = compare_text(compare(e, GAME))
    assert "precision 0.333" in text and "same partition: no" in text
    for c in "abc":
        assert f"\n  {c} " in text


def test_compare_command(tmp_path, capsys):
    import json

    from coalitions.cli import main
    from coalitions.estimate import write_estimate

    game = tmp_path / "g.json"
    co.write_game(GAME, game)
    est = tmp_path / "e.json"
    write_estimate(estimate(["a", "b", "c"], {"a": ["b", "c"], "b": [], "c": ["a"]}, [["a", "c"], ["b"]]), est)
    assert main(["compare", str(est), str(game), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "coalitions/comparison@1" and out["edge_f1"] == pytest.approx(0.4)
    assert out["regret"]["a"] == pytest.approx(2.0) and out["same_partition"] is False
    assert main(["compare", str(est), str(game)]) == 0
    assert "adjusted Rand index -0.500" in capsys.readouterr().out

    other = tmp_path / "z.json"
    write_estimate(estimate(["a", "b", "z"], {"a": [], "b": [], "z": []}, [["a"], ["b"], ["z"]]), other)
    assert main(["compare", str(other), str(game)]) == 2
    err = capsys.readouterr().err.strip()
    assert "client 'z'" in err and "\n" not in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "coalitions/estimate@1"}')
    assert main(["compare", str(bad), str(game)]) == 2
    assert "missing field 'clients'" in capsys.readouterr().err


@pytest.mark.parametrize("semantics", ["personalized", "shared"])
def test_an_exact_equilibrium_already_solved_gives_the_same_comparison(semantics):
    e = estimate(["a", "b", "c"], {"a": [], "b": ["c"], "c": []}, [["a"], ["b", "c"]])
    solved = co.solve(GAME, semantics)
    assert compare(e, GAME, semantics, exact=solved) == compare(e, GAME, semantics)


def test_an_exact_equilibrium_of_another_game_or_semantics_is_refused():
    e = estimate(["a", "b", "c"], {"a": ["b"], "b": ["a"], "c": []}, [["a", "b"], ["c"]])
    other = co.Game.from_mapping(["a", "b", "c"], VALUES)
    for eq in (co.solve(other), co.solve(GAME, "shared"), co.solve(GAME, tol=1e-3)):
        with pytest.raises(InputError, match="another game, semantics, tolerance or level z"):
            compare(e, GAME, exact=eq)
