"""Welfare: the social optimum, and what stability costs (docs/concepts.md §4, "Welfare").

For weights ``ω_i > 0`` the welfare of a partition ``P`` is

.. math::  W(P) = \\sum_i ω_i \\, \\mathrm{payoff}_i(P(i)) = \\sum_{K \\in P} w(K),
           \\qquad w(K) = \\sum_{i \\in K} ω_i \\, \\mathrm{payoff}_i(K),

in the game's internal higher-is-better units; for a loss game (``sense =
"min"``) ``−W(P) = Σ_i ω_i·err_i`` is the *cost*.  The optimum maximises ``W``
over all Bell(N) partitions by the classic coalition-structure dynamic programme
(Yeh, BIT 1986; the anchor of IDP / ODP-IP, Rahwan et al.):

.. math::  f(∅) = 0, \\qquad f(S) = \\max_{K ⊆ S,\\; \\min S ∈ K} \\; w(K) + f(S \\setminus K),

whose ``K`` must hold the lowest member of ``S`` so that each partition is
built once.  The pairs ``(S, K)`` number ``(3^N − 1)/2``; they are taken a
popcount layer at a time (``f`` of smaller sets is final by then) and, inside a
layer, as a ``(sets × sub-masks)`` array: no Python loop per partition or per
set.  Optimal partitions are recovered by walking down from the grand
coalition through every ``K`` with ``w(K) + f(S∖K) ≥ f(S) − tol``, which yields
every partition within ``tol`` of the optimum (and possibly a few within
``N·tol``, discarded by an exact check).

The *price of anarchy* of a stability notion is the worst stable partition's
cost over the optimum's, the *price of stability* the best one's (docs/concepts.md §4); for
a gain game, the optimum's welfare over the stable one's.  Both are ``≥ 1``.
In internal units: when every welfare involved is negative (a cost)
``PoX = W(stable) / W(opt)``, when every one is positive ``PoX = W(opt) / W(stable)``,
and when they change sign or one is zero the ratio measures nothing and is
``None``, with a note.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([1, 8, 15])
>>> r = welfare(g, semantics="shared", stability="individual_stability")
>>> r.quantity, [g.names(k) for k in r.optima[0]], round(r.optimum, 4)
('cost', [['0', '1', '2']], 3.7604)
>>> [[g.names(k) for k in p] for p, cost in r.stable], round(r.price_of_stability, 4)
([[['0', '2'], ['1']]], 1.1343)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .bitmask import all_masks, popcount, submasks
from .brute_force import MAX_ENUMERATE, bell
from .errors import InputError
from .game import Game
from .numbers import finite, to_float
from .partition import check_partition
from .payoffs import check_semantics, payoff_table
from .stable import NOTIONS, stable_partitions

__all__ = ["WelfareReport", "welfare", "resolve_weights", "coalition_welfare", "partition_welfare",
           "structure_values", "optimal_partitions", "price", "welfare_to_json", "welfare_text",
           "WELFARE_FORMAT"]

WELFARE_FORMAT = "coalitions/welfare@1"

#: Pairs (set, sub-mask) formed at once in the dynamic programme (about 8 bytes × 6 arrays each).
CHUNK = 1 << 21


def resolve_weights(game: Game, spec: str | Sequence[float] | Mapping[str, float] = "uniform") -> np.ndarray:
    """Each client's weight ``ω_i > 0``.

    Parameters
    ----------
    spec : str, sequence or mapping
        ``"uniform"`` (all 1); ``"sizes"``, the sample counts the game records in
        its provenance (``provenance["sizes"]``, written by ``coalitions game
        mean-estimation`` and ``coalitions oracle``); ``"a=3,b=5"`` or a mapping
        naming every client; or one number per client.
    """
    n = game.n
    if isinstance(spec, str) and spec == "uniform":
        return np.ones(n)
    if isinstance(spec, str) and spec == "sizes":
        sizes = game.provenance.get("sizes")
        if sizes is None:
            raise InputError("the game records no sample counts ('sizes' in its provenance); "
                             "give the weights as name=number pairs")
        if not isinstance(sizes, (list, tuple)) or len(sizes) != n:
            raise InputError(f"the game's provenance 'sizes' must list {n} sample counts, got {sizes!r}")
        values = sizes
    elif isinstance(spec, str):
        values = _parse_pairs(game, spec)
    elif isinstance(spec, Mapping):
        unknown = [k for k in spec if k not in game.index]
        if unknown:
            raise InputError(f"unknown client {unknown[0]!r}")
        missing = [c for c in game.clients if c not in spec]
        if missing:
            raise InputError(f"client {missing[0]!r} has no weight")
        values = [spec[c] for c in game.clients]
    else:
        values = list(spec)
        if len(values) != n:
            raise InputError(f"{len(values)} weights for {n} clients")
    out = np.empty(n)
    for i, x in enumerate(values):
        what = f"weight of client {game.clients[i]!r}"
        out[i] = to_float(x, what)
        if not out[i] > 0:
            raise InputError(f"{what} must be a positive number, got {x!r}")
    return out


def _parse_pairs(game: Game, text: str) -> list[float]:
    """``"a=3,b=5"`` naming every client once; the weights in client order."""
    got: dict[str, float] = {}
    for item in text.split(","):
        name, eq, num = item.rpartition("=")  # a client's name may itself hold "="
        name = name.strip()
        if not eq or not name:
            raise InputError(f"expected 'uniform', 'sizes' or name=number pairs like a=3,b=5, got {text!r}")
        if name not in game.index:
            raise InputError(f"unknown client {name!r}")
        if name in got:
            raise InputError(f"client {name!r} is given twice")
        try:
            got[name] = float(num)
        except ValueError:
            raise InputError(f"weight of client {name!r} is not a number: {num.strip()!r}") from None
    missing = [c for c in game.clients if c not in got]
    if missing:
        raise InputError(f"client {missing[0]!r} has no weight")
    return [got[c] for c in game.clients]


def coalition_welfare(game: Game, weights: np.ndarray, semantics: str = "personalized") -> np.ndarray:
    """``w[K] = Σ_{i∈K} ω_i·payoff_i(K)`` for every coalition bitmask (``w[0] = 0``)."""
    pay = payoff_table(game, semantics)
    return finite(lambda: np.nansum(np.asarray(weights, float)[:, None] * pay, axis=0),
                  lambda at: f"the weighted welfare of coalition {game.key(at[0])!r}")


def partition_welfare(game: Game, partition, weights: np.ndarray, semantics: str = "personalized") -> float:
    """``W(P) = Σ_{K∈P} w(K)`` in internal (higher-is-better) units."""
    pay = payoff_table(game, semantics)
    blocks = check_partition(game, partition)
    return float(finite(lambda: sum(weights[i] * pay[i, k] for k in blocks for i in range(game.n) if k >> i & 1),
                        "the weighted welfare of the partition"))


def _bits(masks: np.ndarray, count: int) -> np.ndarray:
    """``(len(masks), count)``: the single-bit masks of each mask's members, lowest first."""
    out = np.zeros((masks.size, count), dtype=np.int64)
    rest = masks.copy()
    for k in range(count):
        out[:, k] = rest & -rest
        rest ^= out[:, k]
    return out


def structure_values(w: np.ndarray, chunk: int = CHUNK,
                     progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """``f[S]``: the best welfare of a partition of ``S``, for every bitmask ``S``.

    Parameters
    ----------
    w : ndarray of shape (2**N,)
        ``w[K]``, the welfare of coalition ``K`` (``w[0]`` is ignored).
    chunk : int
        Largest number of ``(S, K)`` pairs held at once.
    progress : callable, optional
        ``progress(done, total)`` after each popcount layer, in pairs.
    """
    size = w.size
    n = size.bit_length() - 1
    masks = all_masks(n)
    pc = popcount(masks)
    f = np.zeros(size)
    inner_bits = max(0, int(chunk).bit_length() - 1)
    total, done = (3 ** n - 1) // 2, 0
    for p in range(1, n + 1):
        layer = masks[pc == p]
        low = layer & -layer
        q = p - 1  # free bits: K is the lowest member plus any sub-mask of the other q members
        bits = _bits(layer ^ low, q)
        inner = min(q, inner_bits)
        rows = max(1, (1 << inner_bits) >> inner)
        best = np.empty(layer.size)
        for start in range(0, layer.size, rows):
            stop = min(start + rows, layer.size)
            sub = np.zeros((stop - start, 1), dtype=np.int64)
            for k in range(inner):  # the 2^inner sub-masks of the first `inner` free bits, by doubling
                sub = np.concatenate([sub, sub | bits[start:stop, k:k + 1]], axis=1)
            sets = layer[start:stop, None]
            sub |= low[start:stop, None]
            top = np.full(stop - start, -np.inf)
            for h in range(1 << (q - inner)):  # the remaining free bits, a Python loop only beyond `chunk`
                high = np.zeros(stop - start, dtype=np.int64)
                for k in range(q - inner):
                    if h >> k & 1:
                        high |= bits[start:stop, inner + k]
                K = sub | high[:, None]
                np.maximum(top, (w[K] + f[sets ^ K]).max(axis=1), out=top)
            best[start:stop] = top
        f[layer] = best
        done += layer.size << q
        if progress is not None:
            progress(done, total)
    return f


def optimal_partitions(w: np.ndarray, f: np.ndarray, tol: float = 1e-9,
                       limit: int = 20) -> tuple[list[tuple[int, ...]], bool]:
    """Every partition whose welfare is within ``tol`` of ``f[all]`` (at most ``limit`` of them).

    A partition ``P`` within ``tol`` of the optimum has, at every step of the
    walk, ``w(K) + f(S∖K) ≥ W(P restricted to S) ≥ f(S) − tol``, so the walk that
    follows every such ``K`` finds it; each walk's end is then checked exactly.

    Returns
    -------
    partitions : list of tuple of int
        Canonical bitmask blocks, sorted.
    truncated : bool
        More exist than ``limit`` (or the walk was cut short).
    """
    full = w.size - 1
    target = f[full] - tol
    found: list[tuple[int, ...]] = []
    stack: list[tuple[int, tuple[int, ...], float]] = [(full, (), 0.0)]
    walks = 0
    while stack:
        s, blocks, got = stack.pop()
        if s == 0:
            walks += 1
            if got >= target:
                found.append(tuple(sorted(blocks, key=lambda k: k & -k)))
            if len(found) > limit or walks > 50 * limit:
                return sorted(found)[:limit], True
            continue
        low = s & -s
        ks = submasks(s ^ low) | low
        with np.errstate(over="ignore"):  # a sum beyond -1.8e308 is -inf: far from optimal, correctly
            vals = w[ks] + f[s ^ ks]
        for k in ks[vals >= f[s] - tol][::-1]:
            stack.append((s ^ int(k), blocks + (int(k),), got + float(w[k])))
    return sorted(found), False


def price(optimum: float, stable: float, tol: float = 0.0) -> float | None:
    """The price of one stable partition against the optimum, in internal welfare units.

    ``stable / optimum`` when both are negative (costs), ``optimum / stable`` when both
    are positive (gains), ``1.0`` when they are within ``tol``, else ``None``.
    """
    optimum, stable = float(optimum), float(stable)
    if abs(optimum - stable) <= tol:
        return 1.0
    if optimum < 0 and stable < 0:
        return float(finite(lambda: np.float64(stable) / optimum, "the price (stable over optimal welfare)"))
    if optimum > 0 and stable > 0:
        return float(finite(lambda: np.float64(optimum) / stable, "the price (optimal over stable welfare)"))
    return None


@dataclass(frozen=True)
class WelfareReport:
    """The optimum, the stable partitions and the two prices, in reporting units.

    Welfares are reported as the positive *cost* ``Σ ω_i·err_i`` for a loss game
    (``quantity == "cost"``) and as ``Σ ω_i·v_i`` for a gain game.

    Attributes
    ----------
    game : Game
    semantics, stability : str
    tol : float
    weights : ndarray
    quantity : {"cost", "welfare"}
    optimum : float
        The optimal cost (lowest) or welfare (highest).
    optima : tuple of tuple of int
        Every optimal partition (up to the listing limit), canonical blocks.
    optima_truncated : bool
    stable : tuple of (partition, float) or None
        Every stable partition with its cost / welfare, best first; ``None`` when the
        game was too large to enumerate.
    price_of_anarchy, price_of_stability : float or None
    notes : tuple of str
    """

    game: Game
    semantics: str
    stability: str
    tol: float
    weights: np.ndarray
    quantity: str
    optimum: float
    optima: tuple[tuple[int, ...], ...]
    optima_truncated: bool
    stable: tuple[tuple[tuple[int, ...], float], ...] | None
    price_of_anarchy: float | None
    price_of_stability: float | None
    notes: tuple[str, ...] = field(default=())


def welfare(game: Game, weights: str | Sequence[float] | Mapping[str, float] = "uniform",
            semantics: str = "personalized", stability: str = "ce", tol: float = 1e-9,
            max_enumerate: int = MAX_ENUMERATE, max_optima: int = 20,
            progress: Callable[[int, int], None] | None = None,
            enumeration_progress: Callable[[int, int], None] | None = None, *,
            z: float | None = None) -> WelfareReport:
    """The social optimum, every stable partition's welfare, and the prices of anarchy and stability.

    Parameters
    ----------
    game : Game
    weights : "uniform", "sizes", "a=3,b=5", mapping or sequence
        See :func:`resolve_weights`.
    semantics : {"personalized", "shared"}
    stability : {"ce", "core", "individual_stability", "nash_stability"}
        The notion a stable partition satisfies (:mod:`coalitions.stable`).
    tol : float
        Payoffs within ``tol`` are equal in the stability checks; welfares within
        ``tol`` are equal when listing optima.
    max_enumerate : int
        Largest game whose partitions are enumerated for the stable ones; above
        it only the optimum is computed and the prices are ``None``.
    max_optima : int
        Most optimal partitions listed.
    z : float, optional
        Significance level of the ``"ce"`` notion (:func:`coalitions.stable.stable_partitions`).
    progress, enumeration_progress : callable, optional
        ``progress(done, total)`` during the dynamic programme, and during the
        enumeration of partitions.
    """
    check_semantics(semantics)
    if stability not in NOTIONS:
        raise InputError(f"stability notion must be one of {', '.join(NOTIONS)}, got {stability!r}")
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise InputError(f"tolerance must be a finite number >= 0, got {tol!r}")
    omega = resolve_weights(game, weights)
    w = coalition_welfare(game, omega, semantics)
    f = finite(lambda: structure_values(w, progress=progress), "the welfare of a partition (a sum of coalitions)")
    optima, truncated = optimal_partitions(w, f, tol, max_optima)
    loss = game.sense == "min"
    sign = -1.0 if loss else 1.0  # internal welfare → reported cost / welfare
    notes = []
    stable = poa = pos = None
    if game.n > max_enumerate:
        notes.append(f"stable partitions not enumerated: {game.n} clients ({bell(game.n):,} partitions) "
                     f"exceed the limit of {max_enumerate}")
    else:
        found = stable_partitions(game, stability, semantics, tol, max_clients=max_enumerate,
                                  progress=enumeration_progress, z=z)
        sums = finite(lambda: np.array([w[list(p)].sum() for p in found]), "the welfare of a stable partition")
        scored = sorted(zip(found, sums.tolist(), strict=True), key=lambda t: -t[1])
        stable = tuple((p, sign * x) for p, x in scored)
        if not scored:
            notes.append(f"no partition is {stability.replace('_', ' ') if stability != 'ce' else 'a CE'} "
                         f"under {semantics} semantics")
        else:
            pos = price(f[-1], scored[0][1], tol)
            poa = price(f[-1], scored[-1][1], tol)
            if pos is None or poa is None:
                pos = poa = None
                notes.append("welfares change sign (or one is zero): the prices are undefined")
    if truncated:
        notes.append(f"more than {max_optima} optimal partitions: the first {max_optima} are listed")
    return WelfareReport(game, semantics, stability, tol, omega, "cost" if loss else "welfare",
                         sign * float(f[-1]), tuple(optima), truncated, stable, poa, pos, tuple(notes))


def _names(game: Game, partition) -> list[list[str]]:
    return [game.names(k) for k in partition]


def _notion(stability: str) -> str:
    return "CE" if stability == "ce" else stability.replace("_", " ")


def welfare_to_json(report: WelfareReport) -> dict:
    """``coalitions/welfare@1``: the objective, the optimum (and every tie), the stable partitions, the prices.

    ``welfare`` fields hold the positive cost for a loss game (``objective.quantity == "cost"``).
    """
    game = report.game
    entry = lambda p, x: {"partition": _names(game, p), "welfare": x}  # noqa: E731
    return {
        "format": WELFARE_FORMAT,
        "objective": {"quantity": report.quantity, "sense": game.sense, "semantics": report.semantics,
                      "stability": report.stability, "tol": report.tol,
                      "weights": {c: float(report.weights[i]) for i, c in enumerate(game.clients)}},
        "optimum": entry(report.optima[0], report.optimum),
        "optima": [entry(p, report.optimum) for p in report.optima],
        "optima_truncated": report.optima_truncated,
        "stable": None if report.stable is None else [entry(p, x) for p, x in report.stable],
        "price_of_anarchy": report.price_of_anarchy,
        "price_of_stability": report.price_of_stability,
        "notes": list(report.notes),
    }


def welfare_text(report: WelfareReport, max_rows: int = 20) -> str:
    """The objective, the optimum, each stable partition with its ratio to the optimum, the prices."""
    from .partition import format_partition
    from .render import fmt, table

    game = report.game
    q = report.quantity
    weights = ("uniform" if np.all(report.weights == 1) else
               ", ".join(f"{c}={fmt(report.weights[i])}" for i, c in enumerate(game.clients)))
    what = ("cost = sum of w_i * err_i, lower is better" if q == "cost"
            else "welfare = sum of w_i * v_i, higher is better")
    sign = -1.0 if q == "cost" else 1.0
    lines = [f"Welfare ({report.semantics} semantics, tol {report.tol:g}): {what}; weights {weights}", ""]
    optima = [format_partition(game, p) for p in report.optima]
    lines.append(f"optimum: {optima[0]} ({q} {fmt(report.optimum)})" if len(optima) == 1 else
                 f"optimum: {q} {fmt(report.optimum)}, {len(optima)} partitions tie: " + "; ".join(optima))
    if report.stable is not None:
        lines += ["", f"{len(report.stable)} stable partition{'' if len(report.stable) == 1 else 's'} "
                      f"({_notion(report.stability)}):"]
        rows = []
        for p, x in report.stable[:max_rows]:
            r = price(sign * report.optimum, sign * x, report.tol)
            rows.append((format_partition(game, p), fmt(x), "-" if r is None else fmt(r)))
        if rows:
            lines += ["", table(["partition", q, "ratio to optimum"], rows)]
        if len(report.stable) > max_rows:
            lines.append(f"... and {len(report.stable) - max_rows:,} more (--format json lists them all)")
        lines.append("")
        show = lambda r: "undefined" if r is None else fmt(r)  # noqa: E731
        lines.append(f"price of anarchy: {show(report.price_of_anarchy)}    "
                     f"price of stability: {show(report.price_of_stability)}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
