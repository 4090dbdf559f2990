"""coalitions.scc: iterative Tarjan, cross-checked against networkx and scipy (docs/concepts.md §3)."""

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from coalitions.scc import source_components, strongly_connected_components


@st.composite
def digraphs(draw, max_nodes=30):
    n = draw(st.integers(0, max_nodes))
    if n == 0:
        return {}
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    graph = {u: [] for u in range(n)}
    for u, w in edges:
        graph[u].append(w)
    return graph


def _partition(comps):
    return sorted(sorted(c) for c in comps)


def test_docstring_example():
    graph = {0: [1], 1: [2], 2: [0, 3], 3: []}
    assert strongly_connected_components(graph) == [frozenset({3}), frozenset({0, 1, 2})]
    assert source_components(graph) == [frozenset({0, 1, 2})]


def test_empty_and_self_loops_and_hashable_nodes():
    assert strongly_connected_components({}) == []
    assert source_components({}) == []
    g = {"a": ["a", "b"], "b": ["b"]}
    assert _partition(strongly_connected_components(g)) == [["a"], ["b"]]
    assert source_components(g) == [frozenset({"a"})]


@given(digraphs())
@settings(max_examples=150, deadline=None)
def test_agrees_with_networkx_and_scipy(graph):
    comps = strongly_connected_components(graph)
    nodes = [u for c in comps for u in c]
    assert sorted(nodes) == sorted(graph)  # each node exactly once
    g = nx.DiGraph()
    g.add_nodes_from(graph)
    g.add_edges_from((u, w) for u, ws in graph.items() for w in ws)
    assert _partition(comps) == _partition(nx.strongly_connected_components(g))
    n = len(graph)
    if n:
        rows = [u for u, ws in graph.items() for _ in ws]
        cols = [w for ws in graph.values() for w in ws]
        m = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
        k, labels = connected_components(m, directed=True, connection="strong")
        assert k == len(comps)
        for c in comps:
            assert len({labels[u] for u in c}) == 1


@given(digraphs())
@settings(max_examples=100, deadline=None)
def test_reverse_topological_order_and_sources(graph):
    comps = strongly_connected_components(graph)
    where = {u: k for k, c in enumerate(comps) for u in c}
    for u, ws in graph.items():
        for w in ws:
            assert where[w] <= where[u]  # a component comes after every component it reaches
    entered = {where[w] for u, ws in graph.items() for w in ws if where[u] != where[w]}
    expect = [c for k, c in enumerate(comps) if k not in entered]
    assert source_components(graph) == expect
    g = nx.DiGraph()
    g.add_nodes_from(graph)
    g.add_edges_from((u, w) for u, ws in graph.items() for w in ws)
    cond = nx.condensation(g)
    nx_sources = {frozenset(cond.nodes[c]["members"]) for c in cond if cond.in_degree(c) == 0}
    assert set(source_components(graph)) == nx_sources


def test_long_path_without_recursion():
    n = 100_000
    path = {i: [i + 1] for i in range(n - 1)}
    path[n - 1] = []
    comps = strongly_connected_components(path)
    assert len(comps) == n
    assert comps[0] == frozenset({n - 1}) and comps[-1] == frozenset({0})
    assert source_components(path) == [frozenset({0})]


def test_long_cycle_is_one_component():
    n = 100_000
    cycle = {i: [(i + 1) % n] for i in range(n)}
    comps = strongly_connected_components(cycle)
    assert len(comps) == 1 and len(comps[0]) == n
