"""Benefit graphs and equilibria as networkx graphs and GraphML (docs/formats.md).

The one module of the core that reaches beyond numpy, and only when called: networkx is
imported inside the functions (``pip install 'collaboration-equilibrium[graph]'``), so
``import coalitions`` stays numpy-only.  Nodes are client names; an edge ``j → i`` means
``j ∈ OCS_i(R)``, ``j`` is a necessary collaborator of ``i`` (Cui et al., KDD 2022, the
benefit graph ``BG(R)``; docs/concepts.md §2).  Every attribute is a ``str``, ``int``,
``float`` or ``bool``, so that the graphs write to GraphML as they are.

Examples
--------
>>> from coalitions.game import Game
>>> from coalitions.graph import ExactOracle
>>> g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 0}})
>>> sorted(benefit_graph_to_networkx(ExactOracle(g).benefit_graph(0b11)).edges)
[('b', 'a')]
"""

from __future__ import annotations

import re

from .bitmask import members
from .errors import InputError

__all__ = ["benefit_graph_to_networkx", "equilibrium_to_networkx", "estimate_to_networkx", "graphml", "NETWORKX_HINT"]

NETWORKX_HINT = "networkx is not installed: pip install 'collaboration-equilibrium[graph]'"


def _networkx():
    try:
        import networkx
    except ModuleNotFoundError:
        raise InputError(NETWORKX_HINT) from None
    return networkx


def _add_edges(nx_graph, graph) -> None:
    """The edges of ``BG(R)``, each marked ``ambiguous`` when its head's OCS is not unique."""
    names, amb = graph.clients, graph.ambiguous
    for j, i in graph.edges:
        nx_graph.add_edge(names[j], names[i], ambiguous=i in amb)


def benefit_graph_to_networkx(graph):
    """``BG(R)`` as a :class:`networkx.DiGraph`.

    Parameters
    ----------
    graph : coalitions.graph.BenefitGraph

    Returns
    -------
    networkx.DiGraph
        One node per member ``i`` of ``R`` (named by the client, attribute ``ocs_size``
        ``= |OCS_i(R)|`` and ``ambiguous``); an edge ``j → i`` for each ``j ∈ OCS_i(R)``,
        with ``ambiguous`` true when ``i`` has more than one smallest collaborator set.
        Graph attributes: ``within`` (the clients of ``R``, comma-separated).
    """
    nx = _networkx()
    names, amb = graph.clients, graph.ambiguous
    out = nx.DiGraph(within=",".join(names[i] for i in members(graph.within)))
    for i, c in graph.collaborators:
        out.add_node(names[i], ocs_size=len(members(c)), ambiguous=i in amb)
    _add_edges(out, graph)
    return out


def equilibrium_to_networkx(eq):
    """A collaboration equilibrium as a :class:`networkx.DiGraph` over all clients.

    Parameters
    ----------
    eq : coalitions.equilibrium.Equilibrium

    Returns
    -------
    networkx.DiGraph
        Node attributes: ``coalition`` (index into ``eq.partition``), ``round`` (the
        peeling round that placed the client, 0 if found by enumeration), ``payoff``
        (its payoff in its coalition) and ``mau`` (``MAU_i(all)``).  Edges: those of
        ``BG(all)`` (none when peeling did not run).  Graph attributes: ``semantics``,
        ``found_by``, ``tol`` and ``certified`` (``"yes"``, ``"no"`` or ``"skipped"``).
    """
    nx = _networkx()
    game = eq.game
    cert = eq.certificate
    out = nx.DiGraph(semantics=eq.semantics, found_by=eq.found_by, tol=float(eq.tol),
                     certified="skipped" if cert is None else ("yes" if cert.holds else "no"))
    rnd, payoffs, mau = eq.round_of(), eq.payoffs, eq.mau_all
    for b, k in enumerate(eq.masks):
        for i in members(k):
            out.add_node(game.clients[i], coalition=b, round=int(rnd[i]), payoff=float(payoffs[i]),
                         mau=float(mau[i]))
    if eq.graphs:
        _add_edges(out, eq.graphs[0])
    return out


def estimate_to_networkx(estimate):
    """A learned estimate's equilibrium as a :class:`networkx.DiGraph` over all clients.

    Parameters
    ----------
    estimate : coalitions.estimate.Estimate

    Returns
    -------
    networkx.DiGraph
        Node attributes: ``coalition`` (index of the client's coalition, coalitions ordered by
        their first client), ``round`` (the peeling round that placed it), ``ocs_size`` and
        ``ambiguous`` as in :func:`benefit_graph_to_networkx`.  Edges: the learned ``BG(all)``.
        Graph attributes: ``learned`` (true), ``method``, ``found_by`` and ``certified``
        (``"unavailable"``: an estimate holds no values to certify against).
    """
    nx = _networkx()
    bg, names = estimate.benefit_graph, estimate.clients
    out = nx.DiGraph(learned=True, method=estimate.method, found_by="peeling the learned benefit graph",
                     certified="unavailable")
    rnd, ocs = estimate.round_of(), dict(bg.collaborators)
    for b, k in enumerate(estimate.masks):
        for i in members(k):
            out.add_node(names[i], coalition=b, round=int(rnd[i]), ocs_size=len(members(ocs.get(i, 0))),
                         ambiguous=i in bg.ambiguous)
    _add_edges(out, bg)
    return out


def graphml(nx_graph) -> str:
    """GraphML text of a graph made by this module (attributes typed, keys declared).

    Booleans are written ``true``/``false`` as the GraphML schema (XML Schema's ``boolean``)
    requires; networkx writes Python's ``True``/``False``, which stricter readers refuse.
    """
    nx = _networkx()
    lines = list(nx.generate_graphml(nx_graph))
    flags = [m.group(1) for m in map(re.compile(r'<key id="([^"]+)".*attr.type="boolean"').search, lines) if m]
    text = "\n".join(lines)
    for key in flags:
        for value in ("True", "False"):
            text = text.replace(f'<data key="{key}">{value}</data>', f'<data key="{key}">{value.lower()}</data>')
    return text + "\n"
