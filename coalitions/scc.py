"""Strongly connected components by Tarjan's algorithm, iteratively.

docs/concepts.md §3 (peeling).  A recursive Tarjan overflows Python's stack on long paths;
this one keeps its own explicit stack of ``(node, iterator over successors)``
frames, so its depth is limited only by memory.

Each node gets a discovery ``index`` and a ``lowlink``, the smallest index
reachable through the DFS subtree and one back edge to a node still on the
component stack.  A node whose lowlink equals its index is the root of a
component; the component is popped off the stack.  Components come out in
reverse topological order of the condensation: a component is emitted only
after every component it reaches.

Examples
--------
>>> graph = {0: [1], 1: [2], 2: [0, 3], 3: []}
>>> strongly_connected_components(graph)
[frozenset({3}), frozenset({0, 1, 2})]
>>> source_components(graph)
[frozenset({0, 1, 2})]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)

__all__ = ["strongly_connected_components", "source_components"]


def strongly_connected_components(graph: Mapping[Node, Iterable[Node]]) -> list[frozenset[Node]]:
    """Strongly connected components of a directed graph, in reverse topological order.

    Parameters
    ----------
    graph : mapping
        ``graph[u]`` lists the successors of ``u``.  Every successor must itself be a key.

    Returns
    -------
    list of frozenset
        The components; each appears after all components it has an edge into.
    """
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out: list[frozenset] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        frames = [(root, iter(graph[root]))]
        while frames:
            node, succ = frames[-1]
            advanced = False
            for w in succ:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    frames.append((w, iter(graph[w])))
                    advanced = True
                    break
                if w in on_stack and index[w] < low[node]:
                    low[node] = index[w]
            if advanced:
                continue
            frames.pop()
            if frames:
                parent = frames[-1][0]
                if low[node] < low[parent]:
                    low[parent] = low[node]
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(frozenset(comp))
    return out


def source_components(graph: Mapping[Node, Iterable[Node]]) -> list[frozenset[Node]]:
    """Components with no edge entering them from another component.

    In a benefit graph (edge ``j → i``: ``j`` is a necessary collaborator of
    ``i``) these are the groups that need nobody outside themselves.
    """
    comps = strongly_connected_components(graph)
    where = {u: k for k, c in enumerate(comps) for u in c}
    entered = set()
    for u, succ in graph.items():
        for w in succ:
            if where[u] != where[w]:
                entered.add(where[w])
    return [c for k, c in enumerate(comps) if k not in entered]
