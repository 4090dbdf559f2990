"""coalitions.game: the exhaustive game, its constructors and validation (docs/concepts.md §1, docs/formats.md)."""

import dataclasses

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.game import MAX_CLIENTS, Game, coalition_key, parse_coalition

TWO = {"a": {"a": 1, "a,b": 2}, "b": {"b": 1.5, "b,a": 0}}


def test_from_mapping_layout():
    g = Game.from_mapping(["a", "b"], TWO)
    assert g.clients == ("a", "b") and g.n == 2 and g.grand == 3 and g.sense == "max"
    assert g.values.shape == (2, 4) and g.values.dtype == np.float64
    expect = np.array([[np.nan, 1, np.nan, 2], [np.nan, np.nan, 1.5, 0]])
    np.testing.assert_array_equal(g.values, expect)  # NaN exactly where i is not in the mask


def test_constructors_agree():
    arr = np.array([[np.nan, 1, np.nan, 2], [np.nan, np.nan, 1.5, 0]])
    a = Game.from_array(arr, ["a", "b"])
    b = Game.from_mapping(["a", "b"], TWO)
    table = {(0, frozenset({0})): 1, (0, frozenset({0, 1})): 2, (1, frozenset({1})): 1.5, (1, frozenset({0, 1})): 0}
    c = Game.from_callable(["a", "b"], lambda i, s: table[(i, s)])
    for g in (b, c):
        np.testing.assert_array_equal(a.values, g.values)
        assert g.clients == a.clients


def test_from_array_ignores_values_outside_membership():
    arr = np.arange(8, dtype=float).reshape(2, 4)  # entries where i ∉ mask are junk
    g = Game.from_array(arr)
    assert g.clients == ("0", "1")
    assert np.isnan(g.values[0, [0, 2]]).all() and np.isnan(g.values[1, [0, 1]]).all()
    assert g.values[0, 1] == 1 and g.values[1, 3] == 7


def test_sense_min_negates_and_raw_values_restore():
    arr = np.array([[np.nan, 1.0, np.nan, 0.25], [np.nan, np.nan, 2.0, 3.0]])
    g = Game.from_array(arr, ["a", "b"], sense="min")
    assert g.sense == "min"
    assert g.value("a", "a") == -1.0 and g.value("a", "a,b") == -0.25  # higher is better inside
    np.testing.assert_array_equal(g.raw_values(), arr)
    m = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 0.25}, "b": {"b": 2, "a,b": 3}}, sense="min")
    np.testing.assert_array_equal(m.values, g.values)


def test_values_are_read_only_and_copied():
    arr = np.array([[np.nan, 1.0, np.nan, 2.0], [np.nan, np.nan, 1.0, 0.0]])
    g = Game.from_array(arr)
    arr[0, 1] = 99
    assert g.values[0, 1] == 1.0
    with pytest.raises(ValueError):
        g.values[0, 1] = 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.sense = "min"  # frozen


def test_access_helpers():
    g = Game.from_mapping(["a", "b", "c"], {
        c: {k: 0.0 for k in ["a", "b", "c", "a,b", "a,c", "b,c", "a,b,c"] if c in k.split(",")}
        for c in "abc"})
    assert g.coalition("c,a") == 0b101
    assert g.coalition(["b"]) == 0b010
    assert g.coalition([0, 2]) == 0b101  # indices are accepted in lists
    assert g.coalition(6) == 6
    assert g.names(0b110) == ["b", "c"] and g.key(0b101) == "a,c"
    assert coalition_key(0b011, g.clients) == "a,b"
    assert g.index == {"a": 0, "b": 1, "c": 2}
    assert g.value(2, 0b100) == 0.0
    assert repr(g) == "Game(clients=['a', 'b', 'c'], sense='max')"
    for bad in (0, 8, -1):
        with pytest.raises(InputError, match="bitmask"):
            g.coalition(bad)
    with pytest.raises(InputError, match="does not contain client 'a'"):
        g.value("a", "b,c")


@pytest.mark.parametrize("key, fault", [
    ("a,zz", "unknown client 'zz'"),
    ("a,a", "client 'a' twice"),
    ("a,", "empty member name"),
    ("", "empty member name"),
    ([], "empty member name"),
    ([0, 5], "unknown client index 5"),
])
def test_parse_coalition_rejects(key, fault):
    with pytest.raises(InputError, match=fault):
        parse_coalition(key, {"a": 0, "b": 1})


def test_parse_coalition_accepts_spaces_and_any_order():
    assert parse_coalition(" b , a ", {"a": 0, "b": 1}) == 3


@pytest.mark.parametrize("clients, fault", [
    ([], "non-empty list"),
    ("ab", "non-empty list"),
    (["a", "a"], "'a' is listed twice"),
    (["a", ""], "non-empty string"),
    (["a", 3], "non-empty string"),
    (["a,b"], "may not contain"),
    (["a|b"], "may not contain"),
    ([" a"], "may not contain"),
])
def test_bad_client_names(clients, fault):
    with pytest.raises(InputError, match=fault):
        Game.from_mapping(clients, {})


def test_too_many_clients_refused_before_allocation():
    with pytest.raises(InputError, match=str(MAX_CLIENTS)):
        Game.from_mapping([f"c{i}" for i in range(MAX_CLIENTS + 1)], {})


@pytest.mark.parametrize("values, fault", [
    ({"a": {"a": 1, "a,b": 2}}, "no values given for client 'b'"),
    ({"a": {"a": 1}, "b": {"b": 1, "a,b": 0}}, "client 'a' for coalition 'a,b' is missing"),
    ({**TWO, "z": {"z": 1}}, "unknown client 'z'"),
    ({"a": {"a": 1, "a,b": 2, "b": 3}, "b": TWO["b"]}, "'b' listed under client 'a' does not contain 'a'"),
    ({"a": {"a": 1, "a,b": 2, "b,a": 2}, "b": TWO["b"]}, "'b,a' of client 'a' is given twice"),
    ({"a": {"a": "1", "a,b": 2}, "b": TWO["b"]}, "not a number: '1'"),
    ({"a": {"a": None, "a,b": 2}, "b": TWO["b"]}, "not a number: None"),
    ({"a": {"a": True, "a,b": 2}, "b": TWO["b"]}, "not a number: True"),
    ({"a": {"a": float("nan"), "a,b": 2}, "b": TWO["b"]}, "not finite"),
    ({"a": {"a": float("-inf"), "a,b": 2}, "b": TWO["b"]}, "not finite"),
    ({"a": {"a": 10**400, "a,b": 2}, "b": TWO["b"]}, "too large"),
    ({"a": [1, 2], "b": TWO["b"]}, "values of client 'a' must be a mapping"),
    ({"a": {1: 1, "a,b": 2}, "b": TWO["b"]}, "must be a string"),
    ([("a", 1)], "'values' must be a mapping"),
])
def test_from_mapping_rejects(values, fault):
    with pytest.raises(InputError, match=fault) as err:
        Game.from_mapping(["a", "b"], values)
    assert "\n" not in str(err.value)


def test_bad_sense_and_shape():
    with pytest.raises(InputError, match="'sense' must be"):
        Game.from_mapping(["a", "b"], TWO, sense="maximize")
    with pytest.raises(InputError, match="'sense' must be"):
        Game.from_array(np.zeros((1, 2)), sense="low")
    with pytest.raises(InputError, match="shape"):
        Game.from_array(np.zeros((2, 3)))
    with pytest.raises(InputError, match="shape"):
        Game.from_array(np.zeros(4))
    with pytest.raises(InputError, match="shape"):
        Game(("a", "b"), np.zeros((2, 2)))


def test_from_array_rejects_nonfinite_inside():
    arr = np.array([[np.nan, 1, np.nan, np.inf], [np.nan, np.nan, 1, 0]])
    with pytest.raises(InputError, match=r"client '0' for coalition '0,1' is not finite \(inf\)"):
        Game.from_array(arr)
    arr[0, 3] = np.nan
    with pytest.raises(InputError, match="missing"):
        Game.from_array(arr)


def test_from_callable_rejects_non_numbers_and_counts_calls():
    calls = []

    def v(i, s):
        calls.append((i, s))
        return len(s)

    g = Game.from_callable(3, v)
    assert len(calls) == 3 * 2**2 and len(set(calls)) == len(calls)
    assert g.value(0, [0, 1, 2]) == 3.0 and g.clients == ("0", "1", "2")
    with pytest.raises(InputError, match="not a number: 'x'"):
        Game.from_callable(2, lambda i, s: "x")
    with pytest.raises(InputError, match="client '0' for coalition '0' is (missing|not finite)"):
        Game.from_callable(2, lambda i, s: float("nan"))
    with pytest.raises(InputError, match=r"client '0' for coalition '0' is not finite \(-inf\)"):
        Game.from_callable(2, lambda i, s: -np.inf)


def test_provenance_kept():
    g = Game.from_mapping(["a", "b"], TWO, provenance={"source": "test"})
    assert g.provenance == {"source": "test"}
