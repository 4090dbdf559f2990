"""The CE certificate streamed client by client, in chunks of coalitions (docs/concepts.md §3).

Inner and outer agreement, and the shrink step of peeling, all ask one kind of
question of a set of coalitions: does *every* member ``r`` of a coalition ``M``
have ``payoff_r(M)`` above a threshold ``c_r`` (``>`` or ``≥``)?  Under
``personalized`` semantics the payoff is a maximum over sub-coalitions, and

.. math::  \\mathrm{MAU}_r(M) \\ge c_r \\iff \\exists\\, S \\subseteq M,\\ r \\in S:\\ v_r(S) \\ge c_r ,

so the answer for member ``r`` is the subset-OR ("zeta") transform of the boolean
row ``g_r(S) = [v_r(S) ≥ c_r]``, and the answer for ``M`` is the AND of those rows
over the members of ``M``.  This module computes that AND one client at a time:
the working memory is two boolean arrays of ``2^N`` entries (32 MiB at
``N = 24``) instead of an ``N × 2^N`` float64 payoff table (3 GiB), and each pass
moves one byte per coalition instead of eight.  Under ``shared`` semantics the
payoff is ``v_r(M)`` itself and no transform is needed.

The transform goes over the coalitions in *chunks* of ``chunk`` consecutive
bitmasks (a power of two): the comparison with the threshold and the passes over
the bits below ``log2(chunk)`` run chunk by chunk while the chunk is in cache,
then the passes over the higher bits run across chunks.  The result does not
depend on the chunk size; the tests check that it equals the table-based checks
of :mod:`coalitions.axioms` for every chunk size.

The decisions are exact: a threshold is a float64 number, and a float32 game's
values are compared with it through :func:`coalitions.precision.exact_threshold`,
which decides exactly as the float64 comparison of the table-based checks.  Witness payoffs are evaluated one by one
(:func:`coalitions.payoffs.payoff_at`).

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([5, 5, 25])
>>> outer_agreement(g, [0b011, 0b100]).holds, inner_agreement(g, [0b011, 0b100]).holds
(True, True)
>>> outer_agreement(g, [0b001, 0b010, 0b100]).witnesses[0].coalition   # {0, 1} blocks
3
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .axioms import AxiomReport, Violation
from .bitmask import members, popcount, submasks
from .game import Game
from .noise import Comparison
from .partition import block_of, check_partition
from .payoffs import check_semantics, mau_at, model_at, payoff_at
from .precision import exact_threshold

__all__ = ["DEFAULT_CHUNK", "Closest", "all_members_pass", "inner_agreement", "outer_agreement", "shrink",
           "closest_inner", "closest_outer"]

#: Coalitions per chunk: 2^16 booleans (64 KiB) stay in a core's L2 cache.
DEFAULT_CHUNK = 1 << 16


def check_chunk(chunk: int) -> int:
    """``chunk`` as an int, which must be a power of two ``≥ 1``."""
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"chunk must be a power of two >= 1, got {chunk!r}")
    return int(chunk)


def _or_pass(g: np.ndarray, b: int) -> None:
    """In place: every entry whose index has bit ``b`` takes the OR with the entry without it."""
    view = g.reshape(-1, 2, 1 << b)
    np.bitwise_or(view[:, 1, :], view[:, 0, :], out=view[:, 1, :])


# Byte j of a little-endian 64-bit word holds entry 8w + j; the entries with bit b of j set
# are the bytes selected by _BYTE_MASKS[b], and the entry without bit b sits 8·2^b bits lower.
_BYTE_MASKS = (np.uint64(0xFF00FF00FF00FF00), np.uint64(0xFFFF0000FFFF0000), np.uint64(0xFFFFFFFF00000000))
_WORDS = sys.byteorder == "little"


def _zeta_or(g: np.ndarray, lo: int, hi: int) -> None:
    """Subset-OR passes over bits ``lo .. hi-1`` of the index of a boolean array, in place.

    Eight booleans are read as one 64-bit word where the array allows it: bits 0–2
    of the index are then shifts inside a word, bit ``b ≥ 3`` is bit ``b − 3`` of the
    word index, so each pass moves an eighth of the elements.
    """
    if not _WORDS or g.size < 8:
        for b in range(lo, hi):
            _or_pass(g, b)
        return
    w = g.view(np.uint64)
    for b in range(lo, min(hi, 3)):
        w |= (w << np.uint64(8 << b)) & _BYTE_MASKS[b]
    for b in range(max(lo, 3), hi):
        _or_pass(w, b - 3)


def all_members_pass(rows: Callable[[int], np.ndarray], k: int, thresholds: Sequence[float] | np.ndarray,
                     strict: bool, cumulative: bool, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
    """For every local coalition ``M ⊆ {0..k-1}``: does each member ``r ∈ M`` pass?

    Parameters
    ----------
    rows : callable
        ``rows(r)`` gives member ``r``'s values on all ``2^k`` local coalitions
        (index = local bitmask), NaN where ``r`` is not a member.  Called once per ``r``.
    k : int
        Number of members (local bits).
    thresholds : sequence of float
        ``c_r`` for each member, compared in float64.
    strict : bool
        ``payoff > c`` (True) or ``payoff ≥ c`` (False).
    cumulative : bool
        Payoff is ``max_{S ⊆ M, r ∈ S} v_r(S)`` (personalized) rather than ``v_r(M)`` (shared).
    chunk : int
        Power of two: coalitions handled per chunk.

    Returns
    -------
    ndarray of bool, shape (2**k,)
        ``out[M] = ∀ r ∈ M: payoff_r(M) (> or ≥) c_r``; ``out[0]`` is True (no member).
    """
    size = 1 << k
    c = min(check_chunk(chunk), size)
    low = c.bit_length() - 1
    compare = np.greater if strict else np.greater_equal
    ok = np.ones(size, dtype=bool)
    g = np.empty(size, dtype=bool)
    for r in range(k):
        row = rows(r)
        t = exact_threshold(thresholds[r], row.dtype, strict)  # decides as the float64 threshold does
        for start in range(0, size, c):
            part = g[start:start + c]
            compare(row[start:start + c], t, out=part)  # NaN (r ∉ S) compares False
            if cumulative:
                _zeta_or(part, 0, low)
        if cumulative:
            _zeta_or(g, low, k)
        g.reshape(-1, 2, 1 << r)[:, 0, :] = True  # coalitions without r put no condition on r
        ok &= g
    return ok


def _local_rows(game: Game, coalition: int) -> tuple[np.ndarray, tuple[int, ...], Callable[[int], np.ndarray]]:
    """Sub-coalitions of ``coalition`` (ascending: local bit ``r`` is its ``r``-th member) and their rows."""
    mem = members(coalition)
    if coalition == game.grand:  # local masks are the masks themselves: the rows as they are, no gather
        return np.arange(1 << game.n, dtype=np.int64), mem, lambda r: game.values[r]
    subs = submasks(coalition)
    return subs, mem, lambda r: game.values[mem[r], subs]


def _noisy_rows(cmp: Comparison, subs: np.ndarray, mem: Sequence[int], refs: Sequence[int],
                sign: float) -> Callable[[int], np.ndarray]:
    """Rows ``v_r(S) ± z·se_r(S, ref_r)`` over ``subs`` for local member ``r`` (NaN where ``r ∉ S``).

    ``sign = +1`` ("raised") decides "not significantly worse than the reference"
    against the threshold ``v_r(ref) − tol``; ``sign = −1`` ("lowered") decides
    "significantly better" against ``v_r(ref) + tol`` (:class:`coalitions.noise.Comparison`).
    """
    def rows(r: int) -> np.ndarray:
        i = mem[r]
        if sign > 0:
            return cmp.raised(i, subs, refs[r])
        return cmp.lowered(i, subs, refs[r])

    return rows


@dataclass(frozen=True)
class Closest:
    """The coalition that comes closest to breaking an axiom at a significance level.

    Attributes
    ----------
    kind : {"inner", "outer"}
    coalition : int
        Outer: the potential blocking coalition.  Inner: the block it would split from.
    subcoalition : int
        Inner: the sub-coalition that would split off (0 for outer).
    score : float
        Outer: the weakest member's best gain in standard errors,
        ``min_{i ∈ C} max_{S ⊆ C} (d_i(S, ref_i) − tol) / se_i``; the coalition blocks
        at level ``z`` iff ``score > z``.  Inner: the largest loss of a member in
        standard errors, ``max_{i ∈ K'} min_{S ⊆ K'} (d_i(ref_i, S) − tol) / se_i``;
        ``K'`` splits off with nobody losing at level ``z`` iff ``score ≤ z``.
        ``±inf`` where a difference has no noise.
    members : tuple of (int, float)
        Each member's own score.
    comparisons : int
        How many (sub-)coalitions were scored.
    """

    kind: str
    coalition: int
    subcoalition: int
    score: float
    members: tuple[tuple[int, float], ...]
    comparisons: int


def _zeta(a: np.ndarray, k: int, fn) -> None:
    """In place: ``a[M] = fn over a[S], S ⊆ M`` for a float array over ``2^k`` local coalitions."""
    for b in range(k):
        view = a.reshape(-1, 2, 1 << b)
        fn(view[:, 1, :], view[:, 0, :], out=view[:, 1, :])


def closest_outer(game: Game, partition: Iterable[int], semantics: str = "personalized", tol: float = 1e-9,
                  z: float | None = None) -> Closest | None:
    """The coalition outside ``partition`` whose weakest member gains the most, in standard errors.

    ``None`` when every coalition is a block of the partition (one client).  The
    scores are read from the game's uncertainty (:mod:`coalitions.noise`); for an
    exact game they are ``±inf`` or 0.
    """
    check_semantics(semantics)
    partition = check_partition(game, partition)
    cmp = Comparison(game, tol, z)
    where = block_of(game, partition)
    n = game.n
    masks = np.arange(1 << n, dtype=np.int64)
    score = np.full(1 << n, np.inf)
    for i in range(n):
        ref = model_at(game, i, int(where[i]), semantics)
        row = cmp.gain_score(i, masks, ref)
        row[np.isnan(row)] = -np.inf
        if semantics == "personalized":
            _zeta(row, n, np.maximum)
        row.reshape(-1, 2, 1 << i)[:, 0, :] = np.inf  # coalitions without i put no condition on i
        np.minimum(score, row, out=score)
    candidate = np.ones(1 << n, dtype=bool)
    candidate[0] = False
    candidate[list(partition)] = False
    if not candidate.any():
        return None
    score[~candidate] = -np.inf
    best = int(np.flatnonzero(candidate)[np.argmax(score[candidate])])
    mem = tuple((i, float(_member_gain(cmp, game, i, best, model_at(game, i, int(where[i]), semantics), semantics)))
                for i in members(best))
    return Closest("outer", best, 0, float(score[best]), mem, (1 << n) - 1 - len(partition))


def _member_gain(cmp: Comparison, game: Game, i: int, coalition: int, ref: int, semantics: str) -> float:
    subs = np.array([coalition]) if semantics == "shared" else submasks(coalition & ~(1 << i)) | (1 << i)
    return float(np.max(cmp.gain_score(i, subs, ref)))


def _member_loss(cmp: Comparison, game: Game, i: int, coalition: int, ref: int, semantics: str) -> float:
    subs = np.array([coalition]) if semantics == "shared" else submasks(coalition & ~(1 << i)) | (1 << i)
    return float(np.min(cmp.loss_score(i, subs, ref)))


def closest_inner(game: Game, partition: Iterable[int], semantics: str = "personalized", tol: float = 1e-9,
                  z: float | None = None) -> Closest | None:
    """The sub-coalition of a block that comes closest to splitting off with nobody losing.

    Its score is its members' largest loss in standard errors (smallest over all
    sub-coalitions of all blocks); ``None`` when every block is a single client.
    """
    check_semantics(semantics)
    partition = check_partition(game, partition)
    cmp = Comparison(game, tol, z)
    found: tuple[float, int, int] | None = None
    checked = 0
    for k in partition:
        mem = members(k)
        if len(mem) < 2:
            continue
        subs = submasks(k)
        kk = len(mem)
        score = np.full(subs.size, -np.inf)
        for r, i in enumerate(mem):
            row = cmp.loss_score(i, subs, model_at(game, i, k, semantics))
            row[np.isnan(row)] = np.inf
            if semantics == "personalized":
                _zeta(row, kk, np.minimum)
            row.reshape(-1, 2, 1 << r)[:, 0, :] = -np.inf
            np.maximum(score, row, out=score)
        inside = score[1:-1]  # neither the empty set nor K itself splits off
        checked += inside.size
        j = 1 + int(np.argmin(inside))
        if found is None or score[j] < found[0]:
            found = (float(score[j]), k, int(subs[j]))
    if found is None:
        return None
    value, k, sub = found
    mem_scores = tuple((i, _member_loss(cmp, game, i, sub, model_at(game, i, k, semantics), semantics))
                       for i in members(sub))
    return Closest("inner", k, sub, value, mem_scores, checked)


def shrink(game: Game, coalition: int, within: int, semantics: str = "personalized", tol: float = 1e-9,
           chunk: int = DEFAULT_CHUNK, *, z: float | None = None) -> int | None:
    """Streamed twin of :func:`coalitions.graph.shrink_to_minimal` (docs/concepts.md §3, the shrink step).

    The smallest ``K* ⊆ K`` (then the smallest bitmask) whose every member has
    ``payoff_i(K*) ≥ MAU_i(R) − tol``; ``None`` when ``K`` itself fails.  At a
    significance level ``z`` on a game with uncertainty, "reaches ``MAU_i(R)``"
    means: some ``S ⊆ K*`` holding ``i`` is not significantly worse than
    ``i``'s best model in ``R`` (:mod:`coalitions.noise`).
    """
    check_semantics(semantics)
    subs, mem, rows = _local_rows(game, coalition)
    thresholds = [mau_at(game, i, within) - tol for i in mem]
    cmp = Comparison(game, tol, z)
    if cmp.noisy:
        refs = [model_at(game, i, within, "personalized") for i in mem]
        rows = _noisy_rows(cmp, subs, mem, refs, +1.0)
    ok = all_members_pass(rows, len(mem), thresholds, False, semantics == "personalized", chunk)
    if not ok[-1]:
        return None
    ok[0] = False
    cand = np.flatnonzero(ok)
    sizes = popcount(cand)
    return int(subs[cand[sizes == sizes.min()].min()])


def _witness_payoffs(game, semantics, mask, now) -> tuple:
    return tuple((i, payoff_at(game, i, mask, semantics), float(now[i])) for i in members(mask))


def inner_agreement(game: Game, partition: Iterable[int], semantics: str = "personalized", tol: float = 1e-9,
                    chunk: int = DEFAULT_CHUNK, max_witnesses: int = 10, *, z: float | None = None) -> AxiomReport:
    """Inner agreement checked exhaustively, block by block, member by member (docs/concepts.md §3).

    For block ``K`` and each non-empty ``K' ⊊ K``: a violation when every
    ``i ∈ K'`` has ``payoff_i(K') ≥ payoff_i(K) − tol``.  Same report as
    :func:`coalitions.axioms.inner_agreement` with every sub-coalition enumerated.
    At a level ``z`` on a game with uncertainty a member loses only when every
    ``S ⊆ K'`` is significantly worse than its model in ``K`` (:mod:`coalitions.noise`).
    """
    check_semantics(semantics)
    partition = check_partition(game, partition)
    cmp = Comparison(game, tol, z)
    checked = found = 0
    witnesses: list[Violation] = []
    for k in partition:
        subs, mem, rows = _local_rows(game, k)
        if cmp.noisy:
            rows = _noisy_rows(cmp, subs, mem, [model_at(game, i, k, semantics) for i in mem], +1.0)
        now = np.full(game.n, np.nan)
        for i in mem:
            now[i] = payoff_at(game, i, k, semantics)
        nobody_loses = all_members_pass(rows, len(mem), [now[i] - tol for i in mem], False,
                                        semantics == "personalized", chunk)
        bad = subs[1:-1][nobody_loses[1:-1]]  # the empty set and K itself are not sub-coalitions
        checked += subs.size - 2
        found += bad.size
        for s in bad[: max(0, max_witnesses - len(witnesses))]:
            witnesses.append(Violation(coalition=k, subcoalition=int(s),
                                       payoffs=_witness_payoffs(game, semantics, int(s), now)))
    return AxiomReport("inner_agreement", found == 0, "exhaustive", checked, found, tuple(witnesses),
                       clients=tuple(game.clients))


def outer_agreement(game: Game, partition: Iterable[int], semantics: str = "personalized", tol: float = 1e-9,
                    chunk: int = DEFAULT_CHUNK, max_witnesses: int = 10, *, z: float | None = None) -> AxiomReport:
    """Outer agreement checked over all ``2^N − 1`` coalitions, client by client (docs/concepts.md §3).

    A coalition blocks when every member ``i`` has ``payoff_i(K') > payoff_i(P(i)) + tol``.
    Same report as :func:`coalitions.axioms.outer_agreement` with every coalition enumerated.
    At a level ``z`` on a game with uncertainty a member prefers ``K'`` only when some
    ``S ⊆ K'`` is significantly better than its model in ``P(i)`` (:mod:`coalitions.noise`).
    """
    check_semantics(semantics)
    partition = check_partition(game, partition)
    where = block_of(game, partition)
    now = np.array([payoff_at(game, i, int(where[i]), semantics) for i in range(game.n)])
    cmp = Comparison(game, tol, z)
    def rows(r: int) -> np.ndarray:
        return game.values[r]

    if cmp.noisy:
        everyone = np.arange(1 << game.n, dtype=np.int64)
        refs = [model_at(game, i, int(where[i]), semantics) for i in range(game.n)]
        rows = _noisy_rows(cmp, everyone, range(game.n), refs, -1.0)  # type: ignore[assignment]
    blocking = all_members_pass(rows, game.n, now + tol, True, semantics == "personalized", chunk)
    blocking[0] = False
    bad = np.flatnonzero(blocking)
    wit = tuple(Violation(coalition=int(m), payoffs=_witness_payoffs(game, semantics, int(m), now))
                for m in bad[:max_witnesses])
    return AxiomReport("outer_agreement", bad.size == 0, "exhaustive", (1 << game.n) - 1, int(bad.size), wit,
                       clients=tuple(game.clients))
