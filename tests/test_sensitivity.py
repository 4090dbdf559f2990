"""The learned equilibrium across a weight rule's threshold, and the null-reference rule (coalitions/sensitivity.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.oracles import WeightOracle
from coalitions.peeling import peel_oracle
from coalitions.sensitivity import default_thresholds, sensitivity_table, threshold_sensitivity


@st.composite
def weight_matrices(draw):
    """Row-stochastic matrices with ties: entries from a small set (zeros included)."""
    n = draw(st.integers(2, 6))
    raw = np.array(draw(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n),
                                 min_size=n, max_size=n)))
    raw[np.arange(n), np.arange(n)] += 0.25
    return raw / raw.sum(axis=1, keepdims=True)


def naive_edges(w, rule, t):
    """``BG(all)`` by the rules' definitions, entry by entry (no renormalisation within all)."""
    n = w.shape[0]
    out = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if rule == "relative":
                ok = w[i, j] >= t * w[i, i] if w[i, i] > 0 else w[i, j] > 0
            elif rule == "absolute":
                ok = w[i, j] >= t
            else:  # uniform
                ok = w[i, j] > 0 and w[i, j] >= t / n
            if ok:
                out.append((j, i))
    return sorted(out)


@settings(max_examples=80, deadline=None)
@given(weight_matrices(), st.sampled_from(["relative", "absolute", "uniform", "mass"]),
       st.lists(st.floats(0.01, 3.0), min_size=1, max_size=6))
def test_rows_are_the_oracle_and_peeling_at_each_threshold(w, rule, ts):
    if rule == "mass":
        ts = [min(t, 1.0) for t in ts]
    names = [f"c{i}" for i in range(w.shape[0])]
    rows = threshold_sensitivity(names, w, rule, ts)
    assert [r.threshold for r in rows] == sorted(set(ts))
    for r in rows:
        oracle = WeightOracle(names, w, rule, r.threshold)
        assert r.partition == peel_oracle(oracle).partition
        if rule != "mass":
            # naive_edges compares exactly; the oracle renormalises rows that already sum to 1 ± 1e-16
            assert set(r.edges) ^ set(naive_edges(w, rule, r.threshold)) <= {
                (j, i) for j, i in naive_edges(w, rule, r.threshold * (1 - 1e-9))
                if (j, i) not in naive_edges(w, rule, r.threshold * (1 + 1e-9))}
    # a larger threshold never adds an edge (a larger mass share never removes one)
    for a, b in zip(rows, rows[1:], strict=False):
        small, large = set(a.edges), set(b.edges)
        assert (small <= large) if rule == "mass" else (large <= small)


def test_extremes_say_alone_and_together():
    w = np.array([[0.4, 0.3, 0.3], [0.2, 0.5, 0.3], [0.25, 0.25, 0.5]])
    rows = threshold_sensitivity("abc", w, "relative", [0.0, 0.5, 1.01])
    assert rows[0].n_edges == 6 and rows[0].blocks("abc") == [["a", "b", "c"]]
    assert rows[-1].n_edges == 0 and sorted(rows[-1].blocks("abc")) == [["a"], ["b"], ["c"]]


def test_uniform_rule_sees_the_restriction_where_the_ratio_does_not():
    """Client 0 draws most on 1, then on 2: without 1, the null rule finds 2; the ratio rule never does."""
    row = [0.35, 0.35, 0.2, 0.1 / 3, 0.1 / 3, 0.1 / 3]
    w = np.eye(6)
    w[0] = row
    without_1 = 0b111101
    uni = WeightOracle("abcdef", w, "uniform")            # w̃_0j ≥ 1.5/|R|
    assert dict(uni.benefit_graph(0b111111).collaborators)[0] == 0b10     # 1.5/6 = 0.25: only 1
    assert dict(uni.benefit_graph(without_1).collaborators)[0] == 0b100   # 0.2/0.65 ≥ 1.5/5: now 2
    rel = WeightOracle("abcdef", w, "relative")
    assert dict(rel.benefit_graph(0b111111).collaborators)[0] == 0b10
    assert dict(rel.benefit_graph(without_1).collaborators)[0] == 0       # 0.2/0.35 < 0.7 in every R


def test_uniform_rule_on_uninformative_weights_has_no_edge():
    w = np.full((4, 4), 0.25)
    assert WeightOracle("abcd", w, "uniform").benefit_graph(0b1111).edges == ()
    assert WeightOracle("abcd", w, "uniform", 1.0).benefit_graph(0b1111).edges != ()


def test_default_grids_hold_the_default_and_bad_input():
    from coalitions.oracles import DEFAULT_THRESHOLDS

    for rule, t in DEFAULT_THRESHOLDS.items():
        assert t in default_thresholds(rule)
    with pytest.raises(InputError, match="rule"):
        threshold_sensitivity("ab", np.eye(2), "median")
    with pytest.raises(InputError, match="at least one"):
        threshold_sensitivity("ab", np.eye(2), "relative", [])
    with pytest.raises(InputError, match="threshold"):
        threshold_sensitivity("ab", np.eye(2), "mass", [1.5])


def test_table_marks_the_threshold_used():
    w = np.array([[0.5, 0.5], [0.5, 0.5]])
    rows = threshold_sensitivity("ab", w, "relative", [0.7, 1.5])
    text = sensitivity_table("ab", rows, "relative", used=0.7)
    assert text.splitlines()[1].split() == ["0.7*", "2", "a,b"]
    assert text.splitlines()[2].split() == ["1.5", "0", "a", "|", "b"]


def test_learn_prints_the_sensitivity_table_and_records_it(tmp_path, capsys):
    from coalitions.cli import main
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    args = ["learn", "synthetic", "--method", "fedamp-heuristic", "--samples", "100", "--rho", "0.01",
            "--steps", "30", "--batch-size", "100", "--optimizer", "sgd", "--lr", "0.1",
            "--momentum", "0.9", "--schedule", "constant", "--weight-decay", "0", "--sensitivity", "-o", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:2] == ["threshold", "edges"]
    assert ["0.7*", "12", "0,1,2", "|", "3,4,5"] in [line.split() for line in text]
    rec = read_estimate(out).extra["sensitivity"]
    assert rec["rule"] == "relative" and rec["threshold_used"] == 0.7
    assert [r["threshold"] for r in rec["rows"]] == sorted(r["threshold"] for r in rec["rows"])
    used = next(r for r in rec["rows"] if r["threshold"] == 0.7)
    assert used["partition"] == read_estimate(out).blocks()
    # a method without weights has no threshold: one line naming the flag, exit 2
    assert main(["learn", "synthetic", "--method", "local", "--steps", "1", "--sensitivity", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("coalitions: error: --sensitivity")
