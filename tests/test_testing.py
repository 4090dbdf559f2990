"""coalitions.testing: the assertions' witnesses, the strategies' validity and shrinking, the plugin."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.testing import (
    CertificateFailure,
    assert_core_stable,
    assert_equilibrium,
    assert_individually_rational,
    assert_individually_stable,
    assert_inner_agreement,
    assert_nash_stable,
    assert_outer_agreement,
    assert_same_benefit_graph,
    assert_same_partition,
)
from coalitions.testing.strategies import estimates, games, partitions, planted_games

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
ME = co.mean_estimation([5, 5, 25], clients=["a", "b", "c"])  # a loss game; its CE is a,b|c
#: a is worse off with b than alone; b gains (higher is better).
UNEQUAL = co.Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 0.5}, "b": {"b": 1, "a,b": 2}})


def _message(check, game, partition) -> str:
    with pytest.raises(CertificateFailure) as err:
        check(game, partition)
    return str(err.value)


@pytest.mark.parametrize("check", [assert_equilibrium, assert_inner_agreement, assert_outer_agreement,
                                   assert_individually_rational])
def test_the_ce_axioms_hold_on_the_equilibrium(check):
    check(ME, "a,b|c")
    check(ME, co.solve(ME))  # an Equilibrium is a partition too


@pytest.mark.parametrize("check", [assert_nash_stable, assert_individually_stable, assert_core_stable])
def test_the_classic_notions_pass_where_they_hold(check):
    apart = co.Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 0}, "b": {"b": 1, "a,b": 0}})
    check(apart, "a|b", semantics="shared")  # both lose together: nobody moves, no coalition blocks
    if check is not assert_nash_stable:
        check(UNEQUAL, "a|b", semantics="shared")  # b would gain with a, but a refuses


def test_outer_agreement_names_the_blocking_coalition_and_both_payoffs():
    msg = _message(assert_outer_agreement, ME, "a,c|b")
    assert msg == ("outer agreement fails for a,c|b (exhaustive: 1 of 7 coalitions violate)\n"
                   "  coalition {a,b} blocks: a: 1.5 in {a,b} < 1.72222 in {a,c}; b: 1.5 in {a,b} < 2 alone")


def test_inner_agreement_names_the_block_and_the_sub_coalition():
    msg = _message(assert_inner_agreement, ME, [["a", "b", "c"]])
    assert msg.splitlines()[1] == ("  block {a,b,c} splits: {a,b} leaves with nobody losing: "
                                   "a: 1.5 in {a,b} = 1.5 in {a,b,c}; b: 1.5 in {a,b} = 1.5 in {a,b,c}")


def test_individual_rationality_in_a_max_game_reads_greater():
    with pytest.raises(CertificateFailure) as err:
        assert_individually_rational(UNEQUAL, "a,b", semantics="shared")
    assert str(err.value).splitlines()[1] == "  client a is worse off than alone: a: 1 alone > 0.5 in {a,b}"
    assert_individually_rational(UNEQUAL, "a,b")  # personalized: a keeps its own model, 1 = 1


def test_moves_name_the_mover_and_the_receiving_block():
    with pytest.raises(CertificateFailure) as err:
        assert_nash_stable(UNEQUAL, "a|b")
    assert err.value.args[0].splitlines()[1] == ("  client b gains by joining {a}: b: 2 in {a,b} > 1 alone; "
                                                 "the block they join: a: 1 in {a,b} = 1 alone")
    assert_individually_stable(UNEQUAL, "a|b", semantics="shared")  # a refuses b: 0.5 < 1
    stable = _message(assert_individually_stable, ME, "a|b|c")
    assert "client a gains by joining {b}: a: 1.5 in {a,b} < 2 alone; and they accept: b: 1.5" in stable


def test_long_witness_lists_are_cut_to_one_screen():
    msg = _message(assert_nash_stable, ME, "a|b|c")
    assert msg.count("\n") == 4 and msg.endswith("... and 3 more")


def test_assert_equilibrium_explains_each_failing_axiom_and_keeps_the_reports():
    with pytest.raises(CertificateFailure) as err:
        assert_equilibrium(ME, "a|b|c")
    assert str(err.value).startswith("not a collaboration equilibrium (personalized, tol=1e-09):\nouter agreement")
    assert [r.name for r in err.value.reports] == ["outer_agreement"]
    assert isinstance(err.value, AssertionError)


def test_same_partition_ignores_order_and_shows_the_difference():
    assert_same_partition("c|b,a", [["a", "b"], ["c"]])
    assert_same_partition(co.solve(ME), (0b011, 0b100), clients=ME.clients)
    with pytest.raises(AssertionError, match=r"only in the first: \{a,b\}\n.*only in the second: \{a\}, \{b\}"):
        assert_same_partition("a,b|c", "a|b|c")
    with pytest.raises(TypeError, match="clients="):
        assert_same_partition((3, 4), "a,b|c")


def test_same_benefit_graph_compares_edges_by_name():
    whole = co.ExactOracle(ME).benefit_graph(ME.grand)
    assert_same_benefit_graph(whole, whole)
    none = co.BenefitGraph(ME.clients, ME.grand, ((0, 0), (1, 0), (2, 0)))
    with pytest.raises(AssertionError, match="only in the first: a->b, a->c, b->a\n  edges only in the second: none"):
        assert_same_benefit_graph(whole, none)
    assert_same_benefit_graph(whole, none, within=["b", "c"])  # b and c need a, not each other


# ---------------------------------------------------------------------------- strategies
@given(games(max_n=4, sense=None), st.data())
@settings(max_examples=60, deadline=None)
def test_strategies_draw_valid_objects(game, data):
    assert 1 <= game.n <= 4 and game.sense in ("max", "min")
    part = data.draw(partitions(game))
    assert sum(part) == game.grand and all(a & b == 0 for a in part for b in part if a != b)
    noisy = data.draw(estimates(game, noise=0.1))
    inside = ~np.isnan(game.values)
    assert np.all(np.abs(noisy.values[inside] - game.values[inside]) <= 0.1)


@given(games(max_n=4, semantics="shared"))
@settings(max_examples=30, deadline=None)
def test_games_for_a_semantics_have_an_equilibrium_under_it(game):
    assert_equilibrium(game, co.equilibria(game, "shared")[0], semantics="shared")


def test_games_shrink_to_the_smallest_valid_game():
    small = find(games(max_n=6), lambda g: g.n >= 3)
    assert small.n == 3 and np.nanmax(np.abs(small.values)) == 0  # three clients, every value 0


def test_partitions_shrink_to_the_grand_coalition():
    assert find(partitions(5), lambda p: True) == (0b11111,)


@given(planted_games(max_groups=3, max_size=2))
@settings(max_examples=15, deadline=None)
def test_noise_free_planted_games_have_their_groups_as_ce(game):
    sizes = game.provenance["groups"]
    bounds = np.cumsum([0, *sizes])
    assert_equilibrium(game, [game.clients[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)])


# ---------------------------------------------------------------------------- the plugin
def test_the_plugin_reads_games_and_reports_a_failed_certificate(tmp_path):
    co.write_game(ME, tmp_path / "me.json")
    (tmp_path / "test_user.py").write_text(
        "from coalitions.testing import assert_equilibrium\n"
        "def test_pinned(game_from):\n"
        "    assert_equilibrium(game_from('me.json'), 'a,c|b')\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "coalition {a,b} blocks: a: 1.5 in {a,b} < 1.72222 in {a,c}; b: 1.5 in {a,b} < 2 alone" in run.stdout
    assert "assertions.py" not in run.stdout  # the witness, not a traceback through the package


# ---------------------------------------------------------------------------- docs/testing.md
DOC = (Path(__file__).resolve().parent.parent / "docs" / "testing.md").read_text(encoding="utf-8")


def test_the_messages_on_the_page_are_what_the_assertions_print():
    import coalitions.testing as ct

    scope = {**{n: getattr(ct, n) for n in ct.__all__}, "co": co, "game": co.read_game(EXAMPLES / "mean-estimation-5-5-25.json"),
             "unequal": UNEQUAL}
    shown = re.findall(r"^>>> (.*)\n((?:(?!```).+\n)+)", DOC, flags=re.M)
    assert len(shown) == 9
    for code, text in shown:
        with pytest.raises(AssertionError) as err:
            exec(code, scope)
        assert f"{type(err.value).__name__}: {err.value}\n" == text, code


def test_the_worked_examples_on_the_page_pass(tmp_path):
    files = re.findall(r"```python\n# file: (\S+)\n(.*?)```", DOC, flags=re.S)
    assert [name for name, _ in files] == ["test_my_learner.py", "test_relabelling.py", "test_pinned_ce.py"]
    for name, code in files:
        (tmp_path / name).write_text(code)
    shutil.copy(EXAMPLES / "mean-estimation-5-5-25.json", tmp_path)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout
    assert "3 passed" in run.stdout
