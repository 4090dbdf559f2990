"""Looking for a collaboration equilibrium under a training budget, on a lazy game (docs/scale.md).

The rules are those of docs/concepts.md §3 under *measured* payoffs: member ``i`` of a
coalition ``C`` gets ``v_i(C)``, the value of the model trained on ``C`` (the
``shared`` semantics of docs/concepts.md §1; it is also the ``personalized`` payoff wherever the
source's learner returns, for each member, the best model of the coalition's Pareto
front, which the paper's embedding property provides).  Every comparison is the
noise-aware one of :mod:`coalitions.noise`, per comparison (family ``"comparison"``:
the wider families need every coalition of a client):

* ``C`` **blocks** ``P`` when every ``i ∈ C`` has
  ``v_i(C) − v_i(P(i)) > tol + z·se_i(C, P(i))``;
* ``K' ⊊ K`` **splits off** block ``K`` (an inner-agreement violation) when no member
  of ``K'`` is significantly worse: ``v_i(K') + z·se_i(K', K) ≥ v_i(K) − tol``.

With ``z = 0``, or exact values, these are the point-value rules with ``tol``.

The search (:func:`search`) starts from a partition, checks each block's inner agreement
(every sub-coalition of a block of at most ``exact_inner_up_to`` clients; of a larger
block its leave-one-out sub-coalitions, plus ``inner_draws`` drawn ones if asked) and splits a block that fails; then it looks for a blocking coalition where
one is likely — the edges of a given benefit graph (``P(i) ∪ {j}`` and ``P(i) ∪ P(j)`` for
``j → i``), each block with one client added, the unions of two blocks, each block less
one client, each client alone, then ``N`` draws from the certificate's distribution — measuring the
candidates in batches.  Before training new candidates it checks every coalition measured
so far against the current partition (free: a coalition that did not block an earlier
partition may block this one).  On blocking coalitions it forms the strongest one (highest
weakest-member z-score, then margin, then the smaller bitmask) — ``C`` becomes a block and
every block it cut keeps its remaining members — and, in the same step, every further one
whose members' blocks the earlier ones did not cut (each still blocks when formed), so
blocks merge in few steps; the changed blocks are checked again.  A
partition already visited is never formed again (no cycling).  When no candidate blocks,
each block larger than ``exact_inner_up_to`` whose every sub-coalition still fits in the
search's share has them all checked, as the certificate will check them, and is split on
the smallest that splits off.  When the share is spent (or such a check overruns it), the
last search goes on checking its blocks whole on ``reserve``, the certificate's coalitions for
the singletons and the blocks, less those still unmeasured: the certificate would spend them
on the same checks, and reads them back for free.  It stops when a full pass finds nothing (``"stable"``: no
candidate blocks, every block passes its inner checks), when every blocking coalition found leads back to a visited partition
(``"cycle"``), or when its share of the budget is spent (``"budget"``).

The run counts the distinct coalitions it *uses*, whether the cache had them or the
source trained them, so that its decisions — and with a given seed its result — do not
depend on what an earlier, interrupted run left in the cache; that cache only saves the
trainings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .bitmask import members, popcount, submasks
from .measured import MeasuredGame
from .noise import _ratio
from .pac import DEFAULT_DISTRIBUTION, draw_coalitions

__all__ = ["Ledger", "Rules", "SearchResult", "search", "blocking", "inner_violations", "STOPS"]

#: Why a search stopped (module docstring).
STOPS = ("stable", "cycle", "budget")


@dataclass(eq=False)
class Ledger:
    """The coalitions one run uses, against its budget (mutable: a run's account).

    Attributes
    ----------
    cache : MeasuredGame
    budget : int
        Distinct coalitions the whole run may use.
    limit : int
        What the current phase may reach (the search leaves the certificate its share).
    used : list of int
        The coalitions used so far, in the order first used.
    trained : int
        How many of them the source trained (the rest the cache held).
    """

    cache: MeasuredGame
    budget: int
    limit: int
    save_to: str | os.PathLike | None = None
    progress: Callable[[int, int], None] | None = None
    used: list = field(default_factory=list)
    trained: int = 0

    def __post_init__(self) -> None:
        self._seen: set[int] = set(self.used)

    @property
    def count(self) -> int:
        """Distinct coalitions used."""
        return len(self.used)

    def room(self) -> int:
        """Coalitions the phase may still use."""
        return max(0, self.limit - len(self.used))

    def unused(self, masks: Sequence[int] | np.ndarray) -> list[int]:
        """The distinct coalitions of ``masks`` this run has not used, in order."""
        out: list[int] = []
        seen: set[int] = set()
        for m in masks:
            m = int(m)
            if m not in self._seen and m not in seen:
                seen.add(m)
                out.append(m)
        return out

    def take(self, masks: Sequence[int] | np.ndarray) -> np.ndarray:
        """Use the coalitions of ``masks`` in order while the phase has room; return those usable (measured)."""
        out: list[int] = []
        new: list[int] = []
        fresh: set[int] = set()
        for m in masks:
            m = int(m)
            if m not in self._seen and m not in fresh:
                if len(self.used) + len(new) >= self.limit:
                    break
                new.append(m)
                fresh.add(m)
            out.append(m)
        if new:
            self.trained += self.cache.measure(np.array(new, dtype=np.int64))
            self.used.extend(new)
            self._seen.update(new)
            if self.save_to is not None:
                self.cache.save(self.save_to)
            if self.progress is not None:
                self.progress(len(self.used), self.budget)
        return np.array(out, dtype=np.int64)


@dataclass(frozen=True)
class Rules:
    """The comparison rules: tolerance and level (module docstring)."""

    tol: float = 1e-9
    z: float = 0.0


def _block_of(partition: Sequence[int], n: int) -> np.ndarray:
    where = np.zeros(n, dtype=np.int64)
    for k in partition:
        for i in members(k):
            where[i] = k
    return where


def blocking(cache: MeasuredGame, partition: Sequence[int], cands: np.ndarray, rules: Rules
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For measured coalitions ``cands``: do they block ``partition`` (all blocks measured)?

    Returns
    -------
    blocks : ndarray of bool
    score : ndarray of float
        The weakest member's gain in standard errors, ``min_i (d_i − tol) / se_i``
        (``±inf`` without noise).
    margin : ndarray of float
        The weakest member's gain ``min_i d_i − tol``.
    """
    n = cache.n
    cands = np.asarray(cands, dtype=np.int64)
    where = _block_of(partition, n)
    v = cache.values(cands)
    now = cache.values(where)[np.arange(n), np.arange(n)]
    score = np.full(cands.size, np.inf)
    margin = np.full(cands.size, np.inf)
    ok = np.ones(cands.size, dtype=bool)
    for i in range(n):
        inside = ((cands >> i) & 1).astype(bool)
        if not inside.any():
            continue
        d = v[i, inside] - now[i] - rules.tol
        se = cache.diff_se(i, cands[inside], np.full(int(inside.sum()), where[i]))
        ok[inside] &= d > rules.z * se
        score[inside] = np.minimum(score[inside], _ratio(d, se))
        margin[inside] = np.minimum(margin[inside], d)
    ok &= ~np.isin(cands, np.asarray(partition, dtype=np.int64))
    return ok, score, margin


def inner_violations(cache: MeasuredGame, block: int, subs: np.ndarray, rules: Rules) -> np.ndarray:
    """Which measured proper sub-coalitions ``subs`` of ``block`` split off with no member significantly worse."""
    subs = np.asarray(subs, dtype=np.int64)
    v = cache.values(subs)
    now = cache.values(np.array([block]))[:, 0]
    ok = np.ones(subs.size, dtype=bool)
    for i in members(block):
        inside = ((subs >> i) & 1).astype(bool)
        if not inside.any():
            continue
        se = cache.diff_se(i, subs[inside], np.full(int(inside.sum()), block))
        ok[inside] &= v[i, inside] + rules.z * se >= now[i] - rules.tol
    return ok


def proper_subsets(block: int) -> np.ndarray:
    """Every non-empty ``K' ⊊ K``, ascending."""
    return submasks(block)[1:-1]


def sampled_subsets(rng: np.random.Generator, block: int, count: int) -> np.ndarray:
    """``count`` proper non-empty sub-coalitions of ``block`` drawn uniformly (with replacement)."""
    mem = np.array(members(block), dtype=np.int64)
    out = np.zeros(0, dtype=np.int64)
    while out.size < count:
        bits = rng.random((2 * count, mem.size)) < 0.5
        masks = (bits.astype(np.int64) << mem[None, :]).sum(axis=1)
        masks = masks[(masks != 0) & (masks != block)]
        out = np.concatenate([out, masks])
    return out[:count]


@dataclass(frozen=True)
class SearchResult:
    """Where a search stopped.

    Attributes
    ----------
    partition : tuple of int
        Blocks ordered by their lowest member.
    stopped : {"stable", "cycle", "budget"}
    repairs : int
        Partitions formed after the start (blocking coalitions formed and blocks split).
    trainings : int
        Distinct coalitions the search used.
    """

    partition: tuple[int, ...]
    stopped: str
    repairs: int
    trainings: int


def _canonical(blocks) -> tuple[int, ...]:
    return tuple(sorted((int(k) for k in blocks), key=lambda k: k & -k))


def _candidates(partition: tuple[int, ...], n: int, edges: Sequence[tuple[int, int]], rng: np.random.Generator,
                distribution: str) -> list[int]:
    """The ordered candidates of one pass (module docstring), blocks and duplicates left out."""
    where = _block_of(partition, n)
    groups: list[list[int]] = [[], [], [], [], []]
    for j, i in edges:
        if where[i] != where[j]:
            groups[0] += [int(where[i]) | (1 << j), int(where[i] | where[j])]
    groups[1] += [a | b for x, a in enumerate(partition) for b in partition[x + 1:]]
    for k in partition:
        groups[2] += [k | (1 << j) for j in range(n) if not k >> j & 1]
        if popcount(np.array([k]))[0] > 1:
            groups[2] += [k & ~(1 << j) for j in members(k)]
    groups[2] += [1 << i for i in range(n)]   # individual rationality: the certificate checks it, so must the search
    if n >= 2:
        groups[3] += [int(m) for m in draw_coalitions(rng, n, n, distribution, partition)]
    for g in groups[1:3]:
        order = rng.permutation(len(g))
        g[:] = [g[x] for x in order]
    seen = set(partition)
    out = []
    for g in groups:
        for m in g:
            if m not in seen:
                seen.add(m)
                out.append(m)
    return out


def _form_known(ledger: Ledger, partition: tuple[int, ...], rules: Rules, move: Callable[[list], bool]) -> bool:
    """Form the strongest coalition already measured that blocks ``partition`` (no training); False if none.

    Every coalition the run has used stays measured; one that did not block an earlier
    partition may block this one (its members' blocks changed).  Checking them all costs
    arithmetic only, so the search trains new candidates only when none of them blocks.
    """
    known = np.array(ledger.used, dtype=np.int64)
    if not known.size:
        return False
    ok, score, margin = blocking(ledger.cache, partition, known, rules)
    idx = np.flatnonzero(ok)
    order = [int(known[x]) for x in sorted(idx.tolist(), key=lambda x: (-score[x], -margin[x], int(known[x])))]
    return _form(order, partition, move)


def _form(order: list[int], partition: tuple[int, ...], move: Callable[[list], bool]) -> bool:
    """Form blocking coalitions ``order`` (strongest first) on ``partition``: as many disjoint ones as stay blocking.

    The first is formed; each next one too when none of its members' blocks was cut by those
    formed before it, so that its members' payoffs are the ones it was found blocking and it
    still blocks: one step of several formations, each valid in turn (blocks merge in
    ``O(log N)`` steps instead of one merge per step).  When the resulting partition was
    visited, each blocker alone is tried in order (the search never forms a visited partition).
    """
    if not order:
        return False
    block_of = {i: b for b in partition for i in members(b)}
    touched: set[int] = set()
    chosen: list[int] = []
    for c in order:
        mine = {block_of[i] for i in members(c)}
        if mine & touched:
            continue
        chosen.append(c)
        touched |= {b for b in partition if b & c}
    union = 0
    for c in chosen:
        union |= c
    if len(chosen) > 1 and move(chosen + [b & ~union for b in partition if b & ~union]):
        return True
    for c in order:
        if move([c] + [b & ~c for b in partition if b & ~c]):
            return True
    return False


def search(ledger: Ledger, start: Sequence[int], rules: Rules, rng: np.random.Generator, *,
           edges: Sequence[tuple[int, int]] = (), distribution: str = DEFAULT_DISTRIBUTION,
           exact_inner_up_to: int = 4, inner_draws: int = 0, batch: int = 16, reserve: int = 0) -> SearchResult:
    """Repair ``start`` towards a partition no candidate blocks, within ``ledger.limit`` (module docstring).

    Parameters
    ----------
    ledger : Ledger
        The run's account; the search uses at most ``ledger.limit`` coalitions in all.
    start : sequence of int
        The starting partition (bitmask blocks covering every client).
    rules : Rules
    rng : numpy.random.Generator
        The search's own draws (candidate order, D draws, sampled inner checks).
    edges : sequence of (j, i)
        A benefit graph's edges ``j → i``, looked along first.
    distribution : str
        The D of the candidates' draws (:mod:`coalitions.pac`).
    exact_inner_up_to : int
        Blocks of at most this many clients have every sub-coalition checked each time they
        change (where their ``2^|K| − 2`` sub-coalitions fit in ``ledger.limit``; else as a
        larger block); a larger block has them all checked once no candidate blocks, where
        they fit in what is left of the share.
    inner_draws : int
        Sub-coalitions drawn for a larger block besides its ``|K|`` leave-one-out ones (default
        none: the search re-checks a block every time it changes, the certificate draws once).
    batch : int
        Candidates measured at once.
    reserve : int
        Coalitions beyond ``ledger.limit`` that the certificate keeps for the singletons and the
        partition's blocks (``2N`` on the last search that :func:`coalitions.sampled_ce.sample_ce` runs).
        When the search's share is spent, what of it is measured already (every singleton and
        block asked by then) pays for checking the blocks whole, as the certificate would: a block
        that fails is split there, on coalitions the certificate then reads back for free.
    """
    n = ledger.cache.n
    partition = _canonical(start)
    visited = {frozenset(partition)}
    repairs = 0
    stopped = "budget"

    def move(new_blocks) -> bool:
        nonlocal partition, repairs
        new = _canonical(new_blocks)
        if frozenset(new) in visited:
            return False
        visited.add(frozenset(new))
        partition, repairs = new, repairs + 1
        return True

    def split_on(k: int, subs: np.ndarray) -> bool:
        """Split block ``k`` on its smallest sub-coalition in ``subs`` (measured) that splits off."""
        bad = subs[inner_violations(ledger.cache, k, subs, rules)]
        for sub in sorted(bad.tolist(), key=lambda m: (int(popcount(np.array([m]))[0]), m)):
            if move([b for b in partition if b != k] + [sub, k & ~sub]):
                return True
        return False

    def whole_inner(spare: bool = False) -> bool:
        """Check every sub-coalition of each larger block wherever they fit, as the certificate will.

        ``spare``: the share is spent; spend the measured part of ``reserve`` too, and check the
        smaller blocks (those a split made) as well: their sub-coalitions are measured already.
        """
        limit = ledger.limit
        if spare:
            pending = len(ledger.unused([1 << i for i in range(n)])) + len(ledger.unused(list(partition)))
            ledger.limit = limit + max(0, int(reserve) - pending)
        try:
            return _whole_inner(spare)
        finally:
            ledger.limit = limit

    def _whole_inner(spare: bool) -> bool:
        for k in sorted(partition, key=lambda b: (int(popcount(np.array([b]))[0]), b)):
            size = int(popcount(np.array([k]))[0])
            # counted before any is listed (a 50-client block has 10^15), as in the certificate
            if size < 2 or (size <= exact_inner_up_to and not spare) or (1 << size) - 2 > ledger.room() + ledger.count:
                continue
            subs = proper_subsets(k)
            if len(ledger.unused(subs.tolist())) > ledger.room():
                continue
            if split_on(k, ledger.take(subs.tolist())):
                return True
        return False

    while True:
        got = ledger.take(list(partition))
        if got.size < len(partition):
            break
        split = False
        for k in partition:
            size = int(popcount(np.array([k]))[0])
            if size < 2:
                continue
            if size <= exact_inner_up_to and (1 << size) - 2 <= ledger.limit:   # listed only where they can fit
                subs = proper_subsets(k)
            else:
                leave_one = np.array([k & ~(1 << j) for j in members(k)], dtype=np.int64)
                subs = np.concatenate([leave_one, sampled_subsets(rng, k, inner_draws)])
            subs = ledger.take(list(dict.fromkeys(int(s) for s in subs)))
            if not subs.size:
                continue
            if split_on(k, subs):
                split = True
                break
        if split:
            continue
        if _form_known(ledger, partition, rules, move):   # a coalition measured earlier blocks: free
            continue
        cands = _candidates(partition, n, edges, rng, distribution)
        formed = found_any = exhausted = False
        for start_at in range(0, len(cands), batch):
            part = ledger.take(cands[start_at:start_at + batch])
            if part.size:
                ok, score, margin = blocking(ledger.cache, partition, part, rules)
                if ok.any():
                    found_any = True
                    idx = np.flatnonzero(ok)
                    order = [int(part[x]) for x in sorted(idx.tolist(), key=lambda x: (-score[x], -margin[x],
                                                                                        int(part[x])))]
                    if _form(order, partition, move):
                        formed = True
                        break
            if part.size < len(cands[start_at:start_at + batch]):
                exhausted = True
                break
        if formed:
            continue
        if exhausted:
            stopped = "budget"
        elif found_any:
            stopped = "cycle"
            break
        elif whole_inner(spare=True):   # no candidate blocks: a larger block's sub-coalitions, where they fit
            if ledger.count <= ledger.limit:
                continue
            stopped = "budget"   # it took some of the reserve: no more candidates, only the checks below
        else:
            stopped = "stable"
            break
        while reserve and whole_inner(spare=True):   # the share is spent: split what the certificate would refuse
            pass
        break
    return SearchResult(partition, stopped, repairs, ledger.count)
