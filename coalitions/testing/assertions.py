"""Assertions of the collaboration-equilibrium axioms with readable witnesses (docs/testing.md).

Each ``assert_*`` runs the matching check of :mod:`coalitions.axioms` and, when it fails,
raises :class:`CertificateFailure` (an ``AssertionError``) whose message names the axiom,
the violating coalition or client and the payoffs on both sides of every comparison, e.g.::

    outer agreement fails (exhaustive: 1 of 7 coalitions blocks)
      coalition {a,c} blocks: a: 0.71 > 0.64 in {a,b}; c: 0.9 > 0.88 alone

Payoffs are shown in the game's own sense: for a loss game (``sense="min"``) the numbers
are the losses and the comparisons read ``<``.  The axioms are those of Cui et al.
(KDD 2022), "Collaboration Equilibrium in Federated Learning", §3 (inner and outer agreement) and the classic
hedonic-game notions (Bogomolnaia & Jackson 2002) that :mod:`coalitions.axioms` checks.
NumPy only: importing this module never loads hypothesis, pytest or PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .. import certificate as streamed
from ..axioms import (
    AxiomReport,
    Violation,
    individual_rationality,
    individual_stability,
    nash_stability,
    strict_core,
)
from ..bitmask import members
from ..equilibrium import certify
from ..game import Game
from ..graph import BenefitGraph
from ..partition import Partition, block_of, parse_partition

__all__ = ["CertificateFailure", "assert_equilibrium", "assert_inner_agreement", "assert_outer_agreement",
           "assert_individually_rational", "assert_nash_stable", "assert_individually_stable",
           "assert_core_stable", "assert_same_benefit_graph", "assert_same_partition", "explain"]

#: Witnesses spelled out in one message (the rest are counted), so a failure fits one screen.
SHOWN = 3


class CertificateFailure(AssertionError):
    """A partition fails an axiom; ``reports`` holds the failing :class:`AxiomReport` objects."""

    def __init__(self, message: str, reports: Sequence[AxiomReport] = ()):
        super().__init__(message)
        self.reports = tuple(reports)


def _blocks(game: Game, partition) -> tuple[int, ...]:
    """Bitmask blocks from masks, ``"a,b|c"``, name lists, or anything with ``partition``."""
    if isinstance(partition, str):
        return parse_partition(game, partition)
    partition = getattr(partition, "partition", partition)
    parts = list(partition)
    if all(isinstance(k, int) for k in parts):
        return tuple(int(k) for k in parts)
    return parse_partition(game, [[str(c) for c in p] for p in parts])


def _set(game: Game, mask: int) -> str:
    return "{" + ",".join(game.names(mask)) + "}"


def _num(game: Game, x: float) -> str:
    return f"{(-x if game.sense == 'min' else x):.6g}"


def _where(game: Game, i: int, mask: int) -> str:
    return "alone" if mask == 1 << i else f"in {_set(game, mask)}"


def _row(game: Game, i: int, new: float, new_mask: int, old: float, old_mask: int) -> str:
    """``name: new where > old where``, the relation read from the numbers as shown (``=`` when they
    print alike, as ties within the tolerance do)."""
    a, b = _num(game, new), _num(game, old)
    shown_a, shown_b = float(a), float(b)
    rel = "=" if a == b else ">" if shown_a > shown_b else "<"
    return f"{game.clients[i]}: {a} {_where(game, i, new_mask)} {rel} {b} {_where(game, i, old_mask)}"


def _witness(game: Game, report: AxiomReport, v: Violation, where) -> str:
    """One line per witness: who deviates where, and each member's payoff after vs before."""
    rows = v.payoffs
    if report.name == "inner_agreement":
        parts = [_row(game, i, a, v.subcoalition, b, v.coalition) for i, a, b in rows]
        return f"block {_set(game, v.coalition)} splits: {_set(game, v.subcoalition)} leaves with nobody losing: " \
            + "; ".join(parts)
    if report.name in ("outer_agreement", "strict_core"):
        verb = "blocks" if report.name == "outer_agreement" else "weakly blocks"
        parts = [_row(game, i, a, v.coalition, b, int(where[i])) for i, a, b in rows]
        return f"coalition {_set(game, v.coalition)} {verb}: " + "; ".join(parts)
    if report.name == "individual_rationality":
        (i, a, b), = rows
        return f"client {game.clients[i]} is worse off than alone: " + _row(game, i, a, 1 << i, b, int(where[i]))
    # Nash / individual stability: the mover first, then the receiving block's members.
    (i, a, b), *hosts = rows
    target = v.coalition | (1 << i)
    move = "going alone" if v.coalition == 0 else f"joining {_set(game, v.coalition)}"
    text = f"client {game.clients[i]} gains by {move}: " + _row(game, i, a, target, b, int(where[i]))
    if hosts:
        label = "; and they accept: " if report.name == "individual_stability" else "; the block they join: "
        text += label + "; ".join(_row(game, j, x, target, y, v.coalition)
                                                   for j, x, y in hosts)
    return text


def explain(game: Game, partition, report: AxiomReport) -> str:
    """The readable failure message of one report (empty when the axiom holds)."""
    if report.holds:
        return ""
    where = block_of(game, _blocks(game, partition))
    unit = {"nash_stability": "moves", "individual_stability": "moves",
            "individual_rationality": "clients"}.get(report.name, "coalitions")
    title = report.name.replace("_", " ").replace("nash", "Nash")
    head = (f"{title} fails for {_partition_text(game, _blocks(game, partition))} "
            f"({report.method}: {report.violations} of {report.checked} {unit} violate)")
    lines = [head] + ["  " + _witness(game, report, v, where) for v in report.witnesses[:SHOWN]]
    if report.violations > SHOWN:
        lines.append(f"  ... and {report.violations - SHOWN} more")
    return "\n".join(lines)


def _partition_text(game: Game, blocks: Iterable[int]) -> str:
    return "|".join(",".join(game.names(k)) for k in blocks)


def _assert(check: Callable[..., AxiomReport], game: Game, partition, **options) -> None:
    blocks = _blocks(game, partition)
    report = check(game, blocks, **options)
    if not report.holds:
        raise CertificateFailure(explain(game, blocks, report), [report])


def assert_inner_agreement(game: Game, partition, *, semantics: str = "personalized", tol: float = 1e-9,
                           z: float | None = None) -> None:
    """Fail unless no sub-coalition of a block can split off with nobody losing (CE axiom 1).

    ``z``: the significance level (:mod:`coalitions.noise`; 1.96 by default for a game that
    carries its uncertainty, else 0): a member loses only when it loses significantly.
    """
    _assert(streamed.inner_agreement, game, partition, semantics=semantics, tol=tol, z=z)


def assert_outer_agreement(game: Game, partition, *, semantics: str = "personalized", tol: float = 1e-9,
                           z: float | None = None) -> None:
    """Fail unless no coalition makes every member strictly better off (CE axiom 2, the core).

    ``z``: as for :func:`assert_inner_agreement`; a coalition blocks only when every member gains
    significantly.
    """
    _assert(streamed.outer_agreement, game, partition, semantics=semantics, tol=tol, z=z)


def assert_individually_rational(game: Game, partition, *, semantics: str = "personalized",
                                 tol: float = 1e-9) -> None:
    """Fail unless every client is at least as well off as alone."""
    _assert(individual_rationality, game, partition, semantics=semantics, tol=tol)


def assert_nash_stable(game: Game, partition, *, semantics: str = "personalized", tol: float = 1e-9) -> None:
    """Fail unless no client gains by joining another block or going alone."""
    _assert(nash_stability, game, partition, semantics=semantics, tol=tol)


def assert_individually_stable(game: Game, partition, *, semantics: str = "personalized",
                               tol: float = 1e-9) -> None:
    """Fail unless no client gains by a move that the receiving block accepts."""
    _assert(individual_stability, game, partition, semantics=semantics, tol=tol)


def assert_core_stable(game: Game, partition, *, semantics: str = "personalized", tol: float = 1e-9) -> None:
    """Fail unless the partition is in the strict core: no coalition leaves every member weakly and
    one strictly better off (outer agreement is the weak core; this is the stronger notion)."""
    _assert(strict_core, game, partition, semantics=semantics, tol=tol)


def assert_equilibrium(game: Game, partition, *, semantics: str = "personalized", tol: float = 1e-9,
                       z: float | None = None) -> None:
    """Fail unless ``partition`` is a collaboration equilibrium: inner and outer agreement both hold.

    Both axioms are checked exhaustively (:func:`coalitions.equilibrium.certify`) and every
    failing one is explained in the message.  On a game that carries its measurement
    uncertainty they are checked at the level ``z`` (1.96 by default; ``z=0``: point values).
    """
    blocks = _blocks(game, partition)
    cert = certify(game, blocks, semantics, tol, z=z)
    failed = [r for r in (cert.inner, cert.outer) if not r.holds]
    if failed:
        text = "\n".join(explain(game, blocks, r) for r in failed)
        at = f", z={cert.z:g}" if cert.noisy else ""
        raise CertificateFailure(f"not a collaboration equilibrium ({semantics}, tol={tol:g}{at}):\n{text}", failed)


def _named_partition(p, clients: Sequence[str] | None) -> frozenset[frozenset[str]]:
    if isinstance(p, Partition):
        return frozenset(p)
    if isinstance(p, str):
        pass
    elif hasattr(p, "blocks") and callable(p.blocks):
        p = p.blocks()
    elif hasattr(p, "partition") and hasattr(p, "clients"):
        clients, p = p.clients, p.partition
    if isinstance(p, str):
        return frozenset(frozenset(c.strip() for c in b.split(",")) for b in p.split("|"))
    out = []
    for block in p:
        if isinstance(block, int):
            if clients is None:
                raise TypeError("bitmask partitions need clients= to be compared by name")
            out.append(frozenset(clients[i] for i in members(block)))
        else:
            out.append(frozenset(str(c) for c in block))
    return frozenset(out)


def _show_blocks(blocks: Iterable[frozenset[str]]) -> str:
    return ", ".join("{" + ",".join(sorted(b)) + "}" for b in sorted(blocks, key=sorted)) or "nothing"


def assert_same_partition(a, b, *, clients: Sequence[str] | None = None) -> None:
    """Fail unless two partitions have the same blocks, whatever their order.

    Each may be ``"a,b|c"``, a list of name lists, an :class:`~coalitions.Equilibrium` or
    :class:`~coalitions.estimate.Estimate`, or bitmask blocks (then ``clients`` names the bits).
    """
    x, y = _named_partition(a, clients), _named_partition(b, clients)
    if x != y:
        raise AssertionError(f"partitions differ: {_show_blocks(x)} vs {_show_blocks(y)}\n"
                             f"  blocks only in the first: {_show_blocks(x - y)}\n"
                             f"  blocks only in the second: {_show_blocks(y - x)}")


def _edges(g, within: set[str] | None) -> set[tuple[str, str]]:
    graph = getattr(g, "benefit_graph", g)
    if not isinstance(graph, BenefitGraph):
        raise TypeError(f"expected a BenefitGraph or an object with one, got {type(g).__name__}")
    named = {(graph.clients[j], graph.clients[i]) for j, i in graph.edges}
    if within is not None:
        named = {(j, i) for j, i in named if j in within and i in within}
    return named


def assert_same_benefit_graph(a, b, *, within: Iterable[str] | None = None) -> None:
    """Fail unless two benefit graphs have the same edges ``j → i`` (``j`` in ``OCS_i``), by client name.

    ``a`` and ``b`` are :class:`~coalitions.graph.BenefitGraph` objects or anything holding one as
    ``benefit_graph`` (an :class:`~coalitions.estimate.Estimate`); ``within`` compares only the
    edges between those clients.
    """
    keep = None if within is None else {str(c) for c in within}
    x, y = _edges(a, keep), _edges(b, keep)
    if x != y:
        def show(edges):
            return ", ".join(f"{j}->{i}" for j, i in sorted(edges)) or "none"
        raise AssertionError(f"benefit graphs differ{'' if keep is None else ' within ' + ','.join(sorted(keep))}:\n"
                             f"  edges only in the first: {show(x - y)}\n"
                             f"  edges only in the second: {show(y - x)}")


def assert_sampled_stable(result, *, epsilon: float | None = None, inner_exhaustive: bool = False) -> None:
    """Fail unless a sampled equilibrium's certificate holds (:func:`coalitions.sample_ce`).

    Parameters
    ----------
    result : coalitions.SampledEquilibrium
    epsilon : float, optional
        The bound on the blocking share under ``D`` to reach (default: the one the run asked for).
    inner_exhaustive : bool
        Also require every block's inner agreement to have been checked exhaustively.

    The message names what fails: the blocking coalitions found in the sample (each
    member's value in it and in its block), the singletons that block, the blocks whose
    sub-coalitions split off, or ``ε`` above the bound asked.
    """
    c = result.certificate
    want = c.requested_epsilon if epsilon is None else float(epsilon)
    problems = []
    for b in (*c.blockers, *c.individual):
        rows = "; ".join(f"{result.clients[i]}: {new:.6g} in it vs {old:.6g} in its block" for i, new, old in b.payoffs)
        problems.append(f"  {{{','.join(result.names(b.coalition))}}} blocks: {rows}")
    for x in c.inner:
        if x.found:
            subs = ", ".join("{" + ",".join(result.names(s)) + "}" for s in x.violations[:SHOWN])
            problems.append(f"  block {{{','.join(result.names(x.block))}}}: {x.found} sub-coalitions split off "
                            f"({x.method}, {x.checked} of {x.total} checked): {subs}")
        elif inner_exhaustive and x.method != "exhaustive":
            problems.append(f"  block {{{','.join(result.names(x.block))}}}: inner agreement only sampled "
                            f"({x.checked} of {x.total} sub-coalitions)")
    if want is not None and c.epsilon > want:
        problems.append(f"  epsilon {c.epsilon:.4g} > {want:g} ({c.blocking_draws} of {c.m} draws block, "
                        f"delta {c.delta:g})")
    if problems:
        part = " | ".join(",".join(b) for b in result.blocks())
        raise CertificateFailure(f"sampled certificate fails for {part} (D = {c.distribution}, z = {c.z:g}):\n"
                                 + "\n".join(problems))
