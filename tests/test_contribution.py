"""coalitions.contribution: benefit over being alone and who carries whom, on hand-worked games."""

import json

import numpy as np
import pytest
from conftest import any_games, naive_partitions, naive_payoff, to_mask
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import TIE, run

import coalitions as co
from coalitions.contribution import benefits, contributions, total_contributions

# b lowers everyone's value in the grand coalition under model sharing: v_b(abc) = 0.5 < v_b(bc) = 2
HURT = co.Game.from_mapping(["a", "b", "c"], {
    "a": {"a": 1, "a,b": 3, "a,c": 2, "a,b,c": 4},
    "b": {"b": 1, "a,b": 1, "b,c": 2, "a,b,c": 0.5},
    "c": {"c": 0, "a,c": 1, "b,c": 0, "a,b,c": 3},
})


def test_tie_game_by_hand(tie_game):
    part = [0b101, 0b010]  # the CE {c0,c2},{c1}; MAU: c0 {c0}:2 {c0,c2}:3, c2 {c2}:0 {c0,c2}:2
    assert benefits(tie_game, part).tolist() == [1, 0, 2]
    c = contributions(tie_game, part)
    assert c[0, 2] == 2 and c[2, 0] == 1  # c2 loses 2 without c0; c0 loses 1 without c2
    assert np.isnan(c[0, 0]) and np.isnan(c[0, 1]) and np.isnan(c[1]).all()
    assert total_contributions(tie_game, part).tolist() == [2, 0, 1]


def test_three_member_coalition_by_hand():
    shared = contributions(HURT, [0b111], "shared")
    #          a leaves: b 0.5-2, c 3-0    b leaves: a 4-2, c 3-1     c leaves: a 4-3, b 0.5-1
    expect = [[np.nan, -1.5, 3.0], [2.0, np.nan, 2.0], [1.0, -0.5, np.nan]]
    np.testing.assert_array_equal(shared, expect)
    assert total_contributions(HURT, [0b111], "shared").tolist() == [1.5, 4.0, 0.5]
    assert benefits(HURT, [0b111], "shared").tolist() == [3.0, -0.5, 3.0]
    # personalized: b uses its best model on the front, MAU_b(abc) = 2, so nobody hurts b
    pers = contributions(HURT, [0b111], "personalized")
    np.testing.assert_array_equal(pers, [[np.nan, 0.0, 3.0], [2.0, np.nan, 2.0], [1.0, 1.0, np.nan]])
    assert benefits(HURT, [0b111]).tolist() == [3.0, 1.0, 3.0]


@given(any_games(max_n=5), st.sampled_from(["personalized", "shared"]), st.data())
@settings(max_examples=80, deadline=None)
def test_against_the_definition(game, semantics, data):
    part = data.draw(st.sampled_from(list(naive_partitions(range(game.n)))))
    masks = [to_mask(k) for k in part]
    b, c = benefits(game, masks, semantics), contributions(game, masks, semantics)
    for k in part:
        for i in k:
            assert b[i] == naive_payoff(game, semantics, i, k) - naive_payoff(game, semantics, i, {i})
            for j in range(game.n):
                if j in k and j != i:
                    assert c[i, j] == naive_payoff(game, semantics, j, k) - naive_payoff(game, semantics, j, k - {i})
                else:
                    assert np.isnan(c[i, j])
    if semantics == "personalized":
        assert np.all(np.nan_to_num(c) >= 0)  # monotone payoffs: nobody is hurt by a partner


def test_solve_json_keeps_its_fields_and_adds_contributions(capsys):
    rc, out, _ = run(capsys, "solve", TIE, "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["payoffs"] == {"c0": 3.0, "c1": 2.0, "c2": 2.0} and doc["certificate"]["method"]
    assert doc["benefit"] == {"c0": 1.0, "c1": 0.0, "c2": 2.0}
    assert doc["contribution"] == {"c0": 2.0, "c1": 0.0, "c2": 1.0}
    assert doc["carries"] == {"c0": {"c2": 2.0}, "c1": {}, "c2": {"c0": 1.0}}


def test_solve_text_shows_who_carries_whom(capsys, tmp_path):
    path = tmp_path / "hurt.json"
    co.write_game(HURT, path)
    rc, out, _ = run(capsys, "solve", path)  # personalized: the CE is the grand coalition
    assert rc == 0 and "found by peeling: a,b,c" in out
    rows = {l.split()[0]: l.split()[-2:] for l in out.splitlines() if l[:2] in ("a ", "b ", "c ")}
    assert rows == {"a": ["3", "3"], "b": ["1", "4"], "c": ["3", "2"]}  # gain, contribution
    carries = out[out.index("who carries whom"):out.index("certificate")].splitlines()
    assert [l.split() for l in carries if l.startswith("  ")] == [
        ["{a,b,c}", "a", "b", "c"], ["-------", "-", "-", "-"],
        ["a", "-", "0", "3"], ["b", "2", "-", "2"], ["c", "1", "1", "-"]]


@pytest.mark.parametrize("semantics", ["personalized", "shared"])
def test_singletons_carry_nothing(semantics):
    g = co.mean_estimation([25, 25, 25])
    assert benefits(g, [1, 2, 4], semantics).tolist() == [0, 0, 0]
    assert total_contributions(g, [1, 2, 4], semantics).tolist() == [0, 0, 0]


def test_large_coalitions_point_to_json():
    from coalitions.render import carries_text

    g = co.planted([4, 2], noise=0.0)
    text = carries_text(g, [0b001111, 0b110000], max_members=3)
    assert "{c0,c1,c2,c3}: 4 members, too many for a table (--format json: carries)" in text
    assert "  {c4,c5}  c4" in text
