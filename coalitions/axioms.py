"""Checks of a partition against the CE axioms and classic stability notions (docs/concepts.md §3).

For a partition ``P`` with ``P(i)`` the block holding client ``i`` and payoffs
under the chosen semantics:

* **Inner agreement** — for every ``K ∈ P`` and every non-empty ``K' ⊊ K`` some
  ``i ∈ K'`` has ``payoff_i(K') < payoff_i(K) − tol``.
* **Outer agreement** — no ``K' ∉ P`` has ``payoff_i(K') > payoff_i(P(i)) + tol``
  for all ``i ∈ K'`` (no blocking coalition; core stability).
* **Individual rationality** — ``payoff_i(P(i)) ≥ payoff_i({i}) − tol``.
* **Nash stability** — no ``i`` strictly gains by moving to another block or
  going alone: ``payoff_i(K ∪ {i}) > payoff_i(P(i)) + tol`` for no ``K ∈ P ∪ {∅}``.
* **Individual stability** — no such move that also leaves every member of the
  receiving block at least as well off (within ``tol``).
* **Strict core** — no ``K'`` with every member weakly better (``≥ −tol``) and
  one strictly better (``> +tol``).

Each check returns an :class:`AxiomReport` with witnesses.  Sub-coalitions and
coalitions are enumerated exhaustively over at most ``exhaustive_up_to`` clients
(all of them by default) and sampled beyond that, in which case the report's
``method`` is ``"sampled"``.  All work is vectorised over bitmasks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .bitmask import contains, members, submasks
from .errors import InputError
from .game import Game
from .partition import block_of, check_partition
from .payoffs import payoff_table

__all__ = ["Violation", "AxiomReport", "inner_agreement", "outer_agreement",
           "individual_rationality", "nash_stability", "individual_stability", "strict_core",
           "all_checks"]


@dataclass(frozen=True)
class Violation:
    """A witness that a partition breaks a condition.

    Attributes
    ----------
    coalition : int
        Inner agreement: the block that splits.  Outer agreement / strict core:
        the blocking coalition.  Nash / individual stability: the block the
        client moves into (0 = going alone).  Individual rationality: ``{i}``.
    subcoalition : int
        Inner agreement: the sub-coalition that can leave with nobody losing
        (else 0).
    client : int
        The deviating client for the single-client notions (else -1).
    payoffs : tuple of (int, float, float)
        ``(member, payoff after the deviation, payoff now)`` for each member concerned.
    """

    coalition: int
    subcoalition: int = 0
    client: int = -1
    payoffs: tuple[tuple[int, float, float], ...] = ()


@dataclass(frozen=True)
class AxiomReport:
    """Outcome of one check: does it hold, how it was checked, and witnesses.

    ``clients`` (the game's names; not part of equality) lets the report speak in names:
    :meth:`named_witnesses` and the repr; the witnesses themselves keep the core's bitmasks.
    """

    name: str
    holds: bool
    method: str  # "exhaustive" or "sampled"
    checked: int  # number of coalitions (or moves) examined
    violations: int  # number found among those examined
    witnesses: tuple[Violation, ...] = field(default=())
    clients: tuple[str, ...] = field(default=(), compare=False)

    def named_witnesses(self) -> list[dict]:
        """Each witness by client name: ``coalition`` and ``subcoalition`` (frozensets; ``None`` where
        unused), the deviating ``client`` (or ``None``) and ``payoffs`` ``{name: (after, now)}``."""
        if not self.clients:
            raise InputError(f"this {self.name} report was made without the game's client names")
        names = self.clients

        def group(mask: int):
            return frozenset(names[i] for i in members(mask)) if mask else None

        return [{"coalition": group(v.coalition), "subcoalition": group(v.subcoalition),
                 "client": names[v.client] if v.client >= 0 else None,
                 "payoffs": {names[i]: (after, now) for i, after, now in v.payoffs}} for v in self.witnesses]

    def __repr__(self) -> str:
        shown = ""
        if self.witnesses and self.clients:
            first = self.named_witnesses()[0]
            what = ",".join(c for c in self.clients if c in (first["coalition"] or ()))
            shown = f", first witness {{{what}}}" if what else ""
        return (f"AxiomReport({self.name!r}, holds={self.holds}, method={self.method!r}, checked={self.checked}, "
                f"violations={self.violations}{shown})")


def _limit_ok(n: int, exhaustive_up_to: int | None) -> bool:
    return exhaustive_up_to is None or n <= exhaustive_up_to


def _sample_submasks(pool: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Random sub-coalitions of ``pool`` (uniform over its subsets, duplicates removed)."""
    bits = np.array(members(pool), dtype=np.int64)
    pick = rng.integers(0, 2, size=(samples, bits.size), dtype=np.int64)
    return np.unique((pick << bits).sum(axis=1))


def _witness_payoffs(payoff, mask, now) -> tuple:
    return tuple((i, float(payoff[i, mask]), float(now[i])) for i in members(mask))


def inner_agreement(game: Game, partition: Iterable[int], semantics: str = "personalized",
                    tol: float = 1e-9, exhaustive_up_to: int | None = None, samples: int = 4096,
                    seed: int = 0, max_witnesses: int = 10) -> AxiomReport:
    """Inner agreement: no sub-coalition of a block can split off without someone losing."""
    partition = check_partition(game, partition)
    pay = payoff_table(game, semantics)
    rng = np.random.default_rng(seed)
    sampled = False
    checked = found = 0
    witnesses: list[Violation] = []
    for k in partition:
        size = bin(k).count("1")
        if _limit_ok(size, exhaustive_up_to):
            subs = submasks(k)[1:-1]
        else:
            sampled = True
            subs = _sample_submasks(k, samples, rng)
            subs = subs[(subs != 0) & (subs != k)]
        nobody_loses = np.ones(subs.size, dtype=bool)
        for i in members(k):
            has = contains(subs, i)
            nobody_loses &= ~has | (pay[i, subs] >= pay[i, k] - tol)
        bad = subs[nobody_loses]
        checked += subs.size
        found += bad.size
        now = pay[:, k]
        for s in bad[: max(0, max_witnesses - len(witnesses))]:
            witnesses.append(Violation(coalition=k, subcoalition=int(s),
                                       payoffs=_witness_payoffs(pay, int(s), now)))
    return AxiomReport("inner_agreement", found == 0, "sampled" if sampled else "exhaustive",
                       checked, found, tuple(witnesses), clients=tuple(game.clients))


def _candidate_coalitions(n: int, exhaustive_up_to, samples, rng):
    if _limit_ok(n, exhaustive_up_to):
        return np.arange(1, 1 << n, dtype=np.int64), False
    draws = np.unique(rng.integers(1, 1 << n, size=samples, dtype=np.int64))
    return draws, True


def _current(game, partition, pay):
    where = block_of(game, partition)
    return pay[np.arange(game.n), where]


def _coalition_scan(game, partition, semantics, exhaustive_up_to, samples, seed):
    """Payoff table, current payoffs, and the coalitions to scan (all, or a sample)."""
    partition = check_partition(game, partition)
    pay = payoff_table(game, semantics)
    now = _current(game, partition, pay)
    masks, sampled = _candidate_coalitions(game.n, exhaustive_up_to, samples, np.random.default_rng(seed))
    return pay, now, masks, sampled


def outer_agreement(game: Game, partition: Iterable[int], semantics: str = "personalized",
                    tol: float = 1e-9, exhaustive_up_to: int | None = None, samples: int = 100_000,
                    seed: int = 0, max_witnesses: int = 10) -> AxiomReport:
    """Outer agreement: no coalition makes every one of its members strictly better off."""
    pay, now, masks, sampled = _coalition_scan(game, partition, semantics, exhaustive_up_to, samples, seed)
    blocking = np.ones(masks.size, dtype=bool)
    for i in range(game.n):
        has = contains(masks, i)
        blocking &= ~has | (pay[i, masks] > now[i] + tol)
    bad = masks[blocking]
    wit = tuple(Violation(coalition=int(m), payoffs=_witness_payoffs(pay, int(m), now))
                for m in bad[:max_witnesses])
    return AxiomReport("outer_agreement", bad.size == 0, "sampled" if sampled else "exhaustive",
                       int(masks.size), int(bad.size), wit, clients=tuple(game.clients))


def strict_core(game: Game, partition: Iterable[int], semantics: str = "personalized",
                tol: float = 1e-9, exhaustive_up_to: int | None = None, samples: int = 100_000,
                seed: int = 0, max_witnesses: int = 10) -> AxiomReport:
    """Strict core: no coalition with every member weakly and one strictly better off."""
    pay, now, masks, sampled = _coalition_scan(game, partition, semantics, exhaustive_up_to, samples, seed)
    weak = np.ones(masks.size, dtype=bool)
    strict = np.zeros(masks.size, dtype=bool)
    for i in range(game.n):
        has = contains(masks, i)
        p = pay[i, masks]
        weak &= ~has | (p >= now[i] - tol)
        strict |= has & (p > now[i] + tol)
    bad = masks[weak & strict]
    wit = tuple(Violation(coalition=int(m), payoffs=_witness_payoffs(pay, int(m), now))
                for m in bad[:max_witnesses])
    return AxiomReport("strict_core", bad.size == 0, "sampled" if sampled else "exhaustive",
                       int(masks.size), int(bad.size), wit, clients=tuple(game.clients))


def individual_rationality(game: Game, partition: Iterable[int], semantics: str = "personalized",
                           tol: float = 1e-9, max_witnesses: int = 10) -> AxiomReport:
    """Individual rationality: nobody is worse off than alone."""
    partition = check_partition(game, partition)
    pay = payoff_table(game, semantics)
    now = _current(game, partition, pay)
    alone = pay[np.arange(game.n), 1 << np.arange(game.n)]
    bad = np.flatnonzero(alone > now + tol)
    wit = tuple(Violation(coalition=1 << int(i), client=int(i),
                          payoffs=((int(i), float(alone[i]), float(now[i])),)) for i in bad[:max_witnesses])
    return AxiomReport("individual_rationality", bad.size == 0, "exhaustive", game.n, int(bad.size), wit,
                       clients=tuple(game.clients))


def _moves(game, partition, pay, tol, need_consent: bool, max_witnesses: int):
    now = _current(game, partition, pay)
    where = block_of(game, partition)
    checked = found = 0
    witnesses: list[Violation] = []
    for i in range(game.n):
        for k in (0,) + tuple(partition):
            if k == where[i] or (k == 0 and where[i] == 1 << i):
                continue
            checked += 1
            target = k | (1 << i)
            if not pay[i, target] > now[i] + tol:
                continue
            if need_consent and any(pay[j, target] < pay[j, k] - tol for j in members(k)):
                continue
            found += 1
            if len(witnesses) < max_witnesses:
                rows = ((i, float(pay[i, target]), float(now[i])),) + tuple(
                    (j, float(pay[j, target]), float(pay[j, k])) for j in members(k))
                witnesses.append(Violation(coalition=int(k), client=i, payoffs=rows))
    return checked, found, tuple(witnesses)


def nash_stability(game: Game, partition: Iterable[int], semantics: str = "personalized",
                   tol: float = 1e-9, max_witnesses: int = 10) -> AxiomReport:
    """Nash stability: no client strictly gains by joining another block or going alone."""
    partition = check_partition(game, partition)
    c, f, w = _moves(game, partition, payoff_table(game, semantics), tol, False, max_witnesses)
    return AxiomReport("nash_stability", f == 0, "exhaustive", c, f, w, clients=tuple(game.clients))


def individual_stability(game: Game, partition: Iterable[int], semantics: str = "personalized",
                         tol: float = 1e-9, max_witnesses: int = 10) -> AxiomReport:
    """Individual stability: no strictly improving move the receiving block would accept."""
    partition = check_partition(game, partition)
    c, f, w = _moves(game, partition, payoff_table(game, semantics), tol, True, max_witnesses)
    return AxiomReport("individual_stability", f == 0, "exhaustive", c, f, w, clients=tuple(game.clients))


def all_checks(game: Game, partition: Iterable[int], semantics: str = "personalized",
               tol: float = 1e-9, exhaustive_up_to: int | None = None, seed: int = 0) -> dict[str, AxiomReport]:
    """Every check above, keyed by name."""
    up = exhaustive_up_to
    return {
        "inner_agreement": inner_agreement(game, partition, semantics, tol, up, seed=seed),
        "outer_agreement": outer_agreement(game, partition, semantics, tol, up, seed=seed),
        "individual_rationality": individual_rationality(game, partition, semantics, tol),
        "nash_stability": nash_stability(game, partition, semantics, tol),
        "individual_stability": individual_stability(game, partition, semantics, tol),
        "strict_core": strict_core(game, partition, semantics, tol, up, seed=seed),
    }
