"""The coalitions/estimate@1 format (coalitions/estimate.py) and the weight oracle (coalitions/oracles.py)."""

import copy
import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.estimate import (
    Estimate,
    build_estimate,
    estimate_from_json,
    estimate_to_json,
    read_estimate,
    write_estimate,
)
from coalitions.graph import BenefitGraph, ExactOracle
from coalitions.oracles import StructuralOracle, WeightOracle
from coalitions.partition import canonical
from coalitions.peeling import peel_oracle

NAMES = ("a", "b", "c", "d")


def ocs(oracle, within):
    return dict(oracle.benefit_graph(within).collaborators)


# --------------------------------------------------------------------------- weight oracle
W = np.array([
    [0.50, 0.40, 0.10, 0.00],   # a: b passes 0.7 relative (0.8), c does not (0.2)
    [0.30, 0.40, 0.30, 0.00],   # b: a and c at 0.75 relative
    [0.05, 0.05, 0.20, 0.70],   # c: d is 3.5 times c's own weight
    [0.00, 0.00, 0.00, 1.00],   # d: alone
])


def test_relative_rule_on_hand_made_matrix():
    o = WeightOracle(NAMES, W, "relative", 0.7)
    assert ocs(o, 0b1111) == {0: 0b0010, 1: 0b0101, 2: 0b1000, 3: 0}
    assert o.benefit_graph(0b1111).edges == ((0, 1), (1, 0), (2, 1), (3, 2))


def test_relative_rule_is_invariant_to_renormalisation_over_R():
    o = WeightOracle(NAMES, W, "relative", 0.7)
    # within {a, b, c}: same ratios, d simply absent
    assert ocs(o, 0b0111) == {0: 0b0010, 1: 0b0101, 2: 0}
    assert ocs(o, 0b0101) == {0: 0, 2: 0}


def test_relative_rule_with_zero_self_weight_takes_every_positive_weight():
    w = np.array([[0.0, 0.6, 0.4], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    o = WeightOracle(["x", "y", "z"], w, "relative", 0.7)
    assert ocs(o, 0b111)[0] == 0b110


def test_absolute_rule_sees_the_renormalisation():
    o = WeightOracle(NAMES, W, "absolute", 0.35)
    assert ocs(o, 0b1111) == {0: 0b0010, 1: 0, 2: 0b1000, 3: 0}
    # within {a, b, c}, row b stays (0.3, 0.4, 0.3); row c becomes (1/6, 1/6, 2/3)
    assert ocs(o, 0b0111) == {0: 0b0010, 1: 0, 2: 0}
    # within {a, c}: row a becomes (5/6, 1/6): c fails 0.35; row c (0.2, 0.8): a fails
    assert ocs(o, 0b0101) == {0: 0, 2: 0}
    o2 = WeightOracle(NAMES, W, "absolute", 0.15)
    assert ocs(o2, 0b0101) == {0: 0b0100, 2: 0b0001}


def test_mass_rule_takes_the_smallest_set_holding_the_share():
    w = np.array([
        [0.2, 0.5, 0.2, 0.1],   # off-diagonal 0.8: b alone holds 0.5/0.8 = 62.5 %
        [0.1, 0.1, 0.4, 0.4],   # off-diagonal 0.9: c, d tie at 44.4 % each
        [0.3, 0.3, 0.4, 0.0],   # off-diagonal 0.6: a, b tie at 50 % each
        [0.0, 0.0, 0.0, 1.0],   # no off-diagonal mass: no collaborators
    ])
    o = WeightOracle(NAMES, w, "mass", 0.4)
    # ties go to the lower index: b takes c (not d), c takes a (not b)
    assert ocs(o, 0b1111) == {0: 0b0010, 1: 0b0100, 2: 0b0001, 3: 0}
    o = WeightOracle(NAMES, w, "mass", 0.6)
    assert ocs(o, 0b1111) == {0: 0b0010, 1: 0b1100, 2: 0b0011, 3: 0}
    o = WeightOracle(NAMES, w, "mass", 0.9)
    # a: b (0.625) + c (0.875) < 0.9, so d too; b: c + d = 8/9 < 0.9 -> a too
    assert ocs(o, 0b1111) == {0: 0b1110, 1: 0b1101, 2: 0b0011, 3: 0}
    o = WeightOracle(NAMES, w, "mass", 1.0)
    assert ocs(o, 0b1111)[0] == 0b1110
    # within {a, c}: a's off-diagonal mass is c alone
    assert ocs(WeightOracle(NAMES, w, "mass", 0.6), 0b0101) == {0: 0b0100, 2: 0b0001}


def test_weight_oracle_drives_peeling_and_caches():
    o = WeightOracle(NAMES, W, "relative", 0.7)
    p = peel_oracle(o)
    assert sorted(p.partition) == sorted([0b0011, 0b1000, 0b0100])
    assert o.benefit_graph(0b1111) is o.benefit_graph(0b1111)


@pytest.mark.parametrize("bad, msg", [
    (np.array([[0.5, 0.6], [0.5, 0.5]]), "row of client 'x' sums to 1.1"),
    (np.array([[1.2, -0.2], [0.5, 0.5]]), "negative"),
    (np.array([[np.nan, 1.0], [0.5, 0.5]]), "non-finite"),
    (np.ones((3, 3)) / 3, "2x2"),
])
def test_weight_matrix_validation(bad, msg):
    with pytest.raises(InputError, match=msg):
        WeightOracle(["x", "y"], bad)


def test_weight_oracle_rule_and_threshold_validation():
    w = np.eye(2)
    with pytest.raises(InputError, match="rule"):
        WeightOracle(["x", "y"], w, "median")
    with pytest.raises(InputError, match="threshold"):
        WeightOracle(["x", "y"], w, "absolute", -1.0)
    with pytest.raises(InputError, match=r"threshold must be a number in \(0, 1\]"):
        WeightOracle(["x", "y"], w, "mass", 1.5)


@st.composite
def weight_matrices(draw):
    n = draw(st.integers(2, 6))
    raw = np.array(draw(st.lists(st.lists(st.floats(0, 1), min_size=n, max_size=n), min_size=n, max_size=n)))
    raw[np.arange(n), np.arange(n)] += 1e-3
    return raw / raw.sum(axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(weight_matrices(), st.sampled_from(["relative", "absolute", "mass", "uniform"]), st.floats(0.05, 1.0),
       st.integers(1, 63))
def test_weight_oracle_properties(w, rule, thr, within):
    n = w.shape[0]
    within &= (1 << n) - 1
    if within == 0:
        within = 1
    names = [f"c{i}" for i in range(n)]
    g = WeightOracle(names, w, rule, thr).benefit_graph(within)
    assert [i for i, _ in g.collaborators] == [i for i in range(n) if within >> i & 1]
    for i, c in g.collaborators:
        assert c & within == c and not c >> i & 1       # collaborators inside R, never i itself
    if rule == "relative":                               # ratios ignore renormalisation
        full = dict(WeightOracle(names, w, rule, thr).benefit_graph((1 << n) - 1).collaborators)
        for i, c in g.collaborators:
            assert c == full[i] & within


# --------------------------------------------------------------------------- estimate files
def make_estimate(**over) -> Estimate:
    o = WeightOracle(NAMES, W, "relative", 0.7)
    p = peel_oracle(o)
    kw = dict(clients=NAMES, method="test", config={"lr": 0.1, "nested": {"k": [1, 2]}}, weights=W,
              utilities={"val": {c: 0.5 + i / 10 for i, c in enumerate(NAMES)},
                         "test": {"a": 0.4, "b": float("nan"), "c": 0.6, "d": 0.7}},
              metric="auc", sense="max", benefit_graph=o.benefit_graph(0b1111), partition=p.partition,
              rounds=tuple(r.stable for r in p.rounds), planted_groups=(("a", "b"), ("c", "d")),
              extra={"history": [[1.0, 2.0]]})
    kw.update(over)
    return Estimate(**kw)


def test_round_trip(tmp_path):
    e = make_estimate()
    path = tmp_path / "e.json"
    write_estimate(e, path)
    back = read_estimate(path)
    assert back.clients == e.clients and back.method == e.method and back.config == e.config
    np.testing.assert_array_equal(back.weights, e.weights)
    assert back.utilities["val"] == e.utilities["val"]
    assert np.isnan(back.utilities["test"]["b"]) and back.utilities["test"]["a"] == 0.4
    assert back.benefit_graph.collaborators == e.benefit_graph.collaborators
    assert back.masks == e.masks and back.rounds == e.rounds
    assert back.planted_groups == e.planted_groups and back.extra == e.extra
    assert back.metric == "auc" and back.sense == "max"
    assert json.loads(path.read_text())["format"] == "coalitions/estimate@1"


def test_round_trip_without_weights_or_planted_groups(tmp_path):
    e = make_estimate(weights=None, planted_groups=None)
    path = tmp_path / "e.json"
    write_estimate(e, path)
    back = read_estimate(path)
    assert back.weights is None and back.planted_groups is None


def _mutations():
    """(name, function mutating the JSON dict, words the one-line error must contain)."""
    def setk(key, value):
        def f(d):
            d[key] = value
        return f

    def delk(key):
        def f(d):
            del d[key]
        return f

    def path_set(keys, value):
        def f(d):
            x = d
            for k in keys[:-1]:
                x = x[k]
            x[keys[-1]] = value
        return f

    return [
        ("format", setk("format", "coalitions/estimate@2"), "unknown format"),
        *[(f"missing {k}", delk(k), f"missing field '{k}'") for k in
          ("clients", "method", "config", "metric", "sense", "weights", "utilities", "benefit_graph",
           "partition", "rounds")],
        ("clients not list", setk("clients", "a,b"), "field 'clients'"),
        ("clients twice", setk("clients", ["a", "a", "c", "d"]), "listed twice"),
        ("client comma", setk("clients", ["a", "b,x", "c", "d"]), "may not contain"),
        ("method empty", setk("method", ""), "field 'method'"),
        ("config not object", setk("config", [1]), "field 'config'"),
        ("extra not object", setk("extra", 3), "field 'extra'"),
        ("metric", setk("metric", 3), "field 'metric'"),
        ("sense", setk("sense", "up"), "field 'sense'"),
        ("weights not list", setk("weights", "x"), "field 'weights'"),
        ("weights shape", setk("weights", [[1.0]]), "4x4"),
        ("weights string", path_set(["weights", 1, 2], "0.3"), "client 'b'"),
        ("weights row sum", path_set(["weights", 2, 3], 0.9), "row of client 'c' sums"),
        ("weights negative", path_set(["weights", 0], [1.5, -0.5, 0.0, 0.0]), "negative"),
        ("utilities not object", setk("utilities", []), "field 'utilities'"),
        ("utilities no test", lambda d: d["utilities"].pop("test"), "utilities.test"),
        ("utilities lacks client", lambda d: d["utilities"]["val"].pop("c"), "lacks client 'c'"),
        ("utilities unknown client", path_set(["utilities", "val", "zz"], 1.0), "unknown client 'zz'"),
        ("utilities string", path_set(["utilities", "test", "a"], "0.5"), "client 'a' is not a number"),
        ("utilities bool", path_set(["utilities", "test", "a"], True), "client 'a' is not a number"),
        ("graph not object", setk("benefit_graph", []), "field 'benefit_graph'"),
        ("graph lacks client", lambda d: d["benefit_graph"]["ocs"].pop("d"), "lacks client 'd'"),
        ("graph unknown", path_set(["benefit_graph", "ocs", "a"], ["zz"]), "unknown client 'zz'"),
        ("graph self", path_set(["benefit_graph", "ocs", "a"], ["a"]), "lists the client itself"),
        ("graph edges", path_set(["benefit_graph", "edges"], [["c", "a"]]), "disagrees"),
        ("partition overlap", setk("partition", [["a", "b"], ["b", "c", "d"]]), "two blocks"),
        ("partition missing", setk("partition", [["a", "b"], ["c"]]), "'d' is in no block"),
        ("partition unknown", setk("partition", [["a", "b", "zz"], ["c", "d"]]), "unknown client 'zz'"),
        ("partition empty block", setk("partition", [[], ["a", "b", "c", "d"]]), "field 'partition[0]'"),
        ("rounds differ", setk("rounds", [[["a", "b", "c", "d"]]]), "field 'rounds'"),
        ("rounds not list", setk("rounds", {}), "field 'rounds'"),
        ("planted unknown", setk("planted_groups", [["a", "zz"]]), "unknown client 'zz'"),
        ("planted twice", setk("planted_groups", [["a", "b"], ["b"]]), "two groups"),
        ("planted not list", setk("planted_groups", "a,b"), "field 'planted_groups'"),
    ]


@pytest.mark.parametrize("name, mutate, words", _mutations(), ids=[m[0] for m in _mutations()])
def test_every_malformed_field_is_reported_with_file_and_field(tmp_path, name, mutate, words):
    data = json.loads(json.dumps(estimate_to_json(make_estimate()), allow_nan=True).replace("NaN", "null"))
    data = copy.deepcopy(data)
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        read_estimate(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    assert words in msg, msg


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_estimate(tmp_path / "none.json")
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_estimate(p)
    with pytest.raises(InputError, match="cannot write"):
        write_estimate(make_estimate(), tmp_path / "no" / "dir" / "e.json")


def test_estimate_validates_itself():
    with pytest.raises(InputError, match="sense"):
        make_estimate(sense="up")
    with pytest.raises(InputError, match="in no block"):
        make_estimate(partition=(0b0011,), rounds=((0b0011,),))
    with pytest.raises(InputError, match="utilities"):
        make_estimate(utilities={"val": {}, "test": {}})
    with pytest.raises(InputError, match="BG\\(all"):
        make_estimate(benefit_graph=BenefitGraph(NAMES, 0b0111, ((0, 0), (1, 0), (2, 0))))


def test_reading_an_estimate_needs_no_torch(tmp_path):
    path = tmp_path / "e.json"
    write_estimate(make_estimate(), path)
    import subprocess

    code = ("import sys; from coalitions.estimate import read_estimate; "
            f"read_estimate({str(path)!r}); import coalitions.compare; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_from_json_accepts_a_dict_directly():
    e = estimate_from_json(json.loads(json.dumps(estimate_to_json(make_estimate(weights=None)))
                                      .replace("NaN", "null")))
    assert e.clients == NAMES


# --------------------------------------------------------------------------- build_estimate
UTIL = {"val": {c: 1.0 for c in NAMES}, "test": {c: 0.5 for c in NAMES}}


@st.composite
def tied_weights(draw):
    """Rows of small integers, normalised: equal weights (ties) are common."""
    n = draw(st.integers(1, 6))
    raw = np.array(draw(st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n), min_size=n, max_size=n)),
                   dtype=float)
    raw[np.arange(n), np.arange(n)] += 1
    return raw / raw.sum(axis=1, keepdims=True)


@given(tied_weights(), st.sampled_from(["relative", "absolute", "mass"]), st.sampled_from([0.25, 0.5, 1.0]))
@settings(max_examples=60, deadline=None)
def test_build_estimate_is_bg_all_and_peeling_of_the_oracle(w, rule, thr):
    names = [f"c{i}" for i in range(w.shape[0])]
    oracle = WeightOracle(names, w, rule, thr)
    util = {"val": {c: 0.0 for c in names}, "test": {c: 0.0 for c in names}}
    e = build_estimate(oracle, method="m", config={"k": 1}, utilities=util, metric="mse", sense="min", weights=w)
    grand = (1 << len(names)) - 1
    peeling = peel_oracle(WeightOracle(names, w, rule, thr))   # a fresh oracle: nothing cached
    assert e.benefit_graph.collaborators == oracle.benefit_graph(grand).collaborators
    assert e.masks == canonical(peeling.partition)  # by its first client, whatever order peeling found
    assert e.rounds == tuple(r.stable for r in peeling.rounds if r.stable)
    assert np.array_equal(e.weights, w) and e.config == {"k": 1} and e.extra == {}
    back = estimate_from_json(json.loads(json.dumps(estimate_to_json(e))))
    assert back.masks == e.masks and back.benefit_graph.edges == e.benefit_graph.edges


def test_build_estimate_takes_a_peeling_already_run_and_extras():
    oracle = WeightOracle(NAMES, W, "relative", 0.7)
    p = peel_oracle(oracle)
    e = build_estimate(oracle, method="m", config={}, utilities=UTIL, metric="accuracy", sense="max",
                       weights=W, planted_groups=[["a", "b"], ["c", "d"]], extra={"x": [1]}, peeling=p)
    assert e.masks == canonical(p.partition) and e.extra == {"x": [1]} and e.planted_groups == (("a", "b"), ("c", "d"))


def test_build_estimate_of_a_structural_oracle():
    together = build_estimate(StructuralOracle(NAMES, True), method="fedavg", config={}, utilities=UTIL,
                              metric="mse", sense="min")
    alone = build_estimate(StructuralOracle(NAMES, False), method="local", config={}, utilities=UTIL,
                           metric="mse", sense="min")
    assert together.blocks() == [list(NAMES)] and together.weights is None
    assert alone.blocks() == [[c] for c in NAMES] and alone.benefit_graph.edges == ()


def test_build_estimate_on_an_exact_oracle_matches_solve():
    import coalitions as co

    game = co.mean_estimation([5, 5, 25, 3])
    util = {"val": {c: 0.0 for c in game.clients}, "test": {c: 0.0 for c in game.clients}}
    e = build_estimate(ExactOracle(game), method="exact", config={}, utilities=util, metric="mse", sense="min")
    assert sorted(e.masks) == sorted(co.solve(game).masks)
