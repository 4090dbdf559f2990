"""A collaboration equilibrium sampled under a training budget, with a statistical certificate (docs/scale.md).

:func:`sample_ce` runs the search of :mod:`coalitions.sampled` over a lazy game
(:mod:`coalitions.lazy`) and then the certificate of
:mod:`coalitions.sampled_certificate`, drawn after the search from its own stream.
The budget is the number of distinct coalitions the run may use (train, or read from
a cache of an earlier run); before anything trains it must cover the certificate
(:func:`required_budget`), else :class:`~coalitions.errors.InputError`.

Examples
--------
>>> from coalitions.lazy_analytic import PlantedSource
>>> r = sample_ce(PlantedSource((3, 3, 3), seed=2), budget=400, epsilon=0.05, delta=0.05, seed=0)
>>> r.blocks(), r.certificate.m, r.certificate.holds
([['c0', 'c1', 'c2'], ['c3', 'c4', 'c5'], ['c6', 'c7', 'c8']], 59, True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .bitmask import members
from .errors import InputError
from .lazy import ValueSource, check_source
from .measured import MeasuredGame
from .noise import DEFAULT_Z, check_z
from .pac import DISTRIBUTIONS, check_probability, draws_for
from .partition import Partition
from .sampled import Ledger, Rules, SearchResult, search
from .sampled_certificate import SampledCertificate, certify_sampled, outer_draws_needed

__all__ = ["SAMPLED_FORMAT", "SampledEquilibrium", "sample_ce", "required_budget", "sampled_to_json",
           "sampled_text", "parse_start"]

SAMPLED_FORMAT = "coalitions/sampled-equilibrium@1"


def required_budget(n: int, epsilon: float, delta: float, starts: int = 1, distribution: str = "uniform-size") -> int:
    """The least budget :func:`sample_ce` accepts: the certificate's draws, the ``N`` singletons, ``N`` blocks.

    ``m = ⌈ln δ / ln(1 − ε)⌉`` draws (:func:`coalitions.pac.draws_for`), or every coalition of
    two or more clients when fewer, plus ``2N``.  For a search from ``starts`` starting
    partitions (:func:`coalitions.sampled_starts.sample_ce_from_starts`) each certificate is
    drawn at ``δ / starts``, each candidate's ``N`` blocks are reserved, and under the
    ``"mixed"`` distribution (whose draws depend on the partition) each candidate's draws;
    under ``"uniform-size"`` the candidates share one set of draws.
    """
    k = int(starts)
    m = outer_draws_needed(n, draws_for(epsilon, delta / k))
    return m * (1 if distribution == "uniform-size" else k) + n + k * n


@dataclass(frozen=True)
class SampledEquilibrium:
    """A partition found under a budget and its statistical certificate.

    Attributes
    ----------
    clients : tuple of str
    partition : Partition
        The partition found, by client name (:attr:`masks`: its bitmask blocks).
    start : Partition
        The partition the search started from.
    search : SearchResult
        Why it stopped, the repairs made, the coalitions it used.
    certificate : SampledCertificate
    budget : int
    seed : int
    source : dict
        The source's provenance.
    trained : int
        Coalitions the source trained in this call (the rest came from the cache); not
        part of the result's equality, so a resumed run equals an uninterrupted one.
    """

    clients: tuple[str, ...]
    partition: Partition
    start: Partition
    search: SearchResult
    certificate: SampledCertificate
    budget: int
    seed: int
    source: dict
    trained: int = field(default=0, compare=False)

    def names(self, mask: int) -> list[str]:
        """Member names of a coalition."""
        return [self.clients[i] for i in members(mask)]

    @property
    def masks(self) -> tuple[int, ...]:
        """The partition as bitmask blocks over :attr:`clients`, ordered by lowest member."""
        return self.partition.masks

    def blocks(self) -> list[list[str]]:
        """The partition as lists of names."""
        return self.partition.lists()

    @property
    def trainings(self) -> int:
        """Distinct coalitions used: search and certificate."""
        return self.search.trainings + self.certificate.trainings

    @property
    def holds(self) -> bool:
        """The certificate holds (:attr:`SampledCertificate.holds`)."""
        return self.certificate.holds


def parse_start(start: object, clients: Sequence[str]) -> tuple[int, ...]:
    """A starting partition: bitmask blocks, ``"A,B|C"`` text or lists of names; every client in one block."""
    n = len(clients)
    index = {c: i for i, c in enumerate(clients)}
    if isinstance(start, str):
        start = [b.split(",") for b in start.split("|")]
    blocks = []
    for b in start:  # type: ignore[attr-defined]
        if isinstance(b, (int, np.integer)) and not isinstance(b, bool):
            blocks.append(int(b))
            continue
        mask = 0
        for name in b:
            name = str(name).strip()
            if name not in index:
                raise InputError(f"starting partition: unknown client {name!r}")
            mask |= 1 << index[name]
        blocks.append(mask)
    seen = 0
    for k in blocks:
        if k <= 0 or k >= 1 << n:
            raise InputError(f"starting partition: block {k} is empty or names clients outside the game")
        if seen & k:
            raise InputError(f"starting partition: client {clients[members(seen & k)[0]]!r} is in two blocks")
        seen |= k
    if seen != (1 << n) - 1:
        missing = members(((1 << n) - 1) & ~seen)[0]
        raise InputError(f"starting partition: client {clients[missing]!r} is in no block")
    return tuple(sorted(blocks, key=lambda k: k & -k))


def sample_ce(source: ValueSource, budget: int, epsilon: float = 0.01, delta: float = 0.05, *,
              start: object = None, edges: Sequence[tuple[int, int]] = (), z: float | None = None,
              tol: float = 1e-9, distribution: str = "uniform-size", seed: int = 0,
              cache: MeasuredGame | None = None, save_to: str | os.PathLike | None = None,
              progress: Callable[[int, int], None] | None = None, exact_inner_up_to: int = 4,
              inner_draws: int = 64, batch: int = 16) -> SampledEquilibrium:
    """Search a partition within ``budget`` coalitions and certify it from a fresh sample.

    Parameters
    ----------
    source : ValueSource
        The lazy game (:mod:`coalitions.lazy`).
    budget : int
        Distinct coalitions the run may use in all (search and certificate); at least
        :func:`required_budget`, checked before anything trains.
    epsilon, delta : float
        The certificate asked for: the blocking share under ``D`` at most ``epsilon``
        with confidence ``1 − delta``; they decide ``m``.
    start : optional
        Starting partition (bitmasks, ``"A,B|C"`` or lists of names); default singletons.
    edges : sequence of (j, i)
        A benefit graph (``j → i``: ``j`` helps ``i``) whose edges the search looks along first.
    z : float, optional
        Significance level of every comparison (:mod:`coalitions.noise`); default
        1.96 when the source gives standard errors or replicates, else 0.
    tol : float
        Absolute tolerance.
    distribution : {"uniform-size", "mixed"}
        ``D`` (:mod:`coalitions.pac`).
    seed : int
        Seeds the search's draws and, in a separate stream, the certificate's.
    cache : MeasuredGame, optional
        Measurements held already (e.g. :meth:`MeasuredGame.load` of an interrupted run);
        default an empty cache of ``source``.
    save_to : path, optional
        The cache is saved there after every batch measured, so that a run interrupted
        at any point resumes (``cache=MeasuredGame.load(save_to, source)``).
    progress : callable, optional
        ``progress(coalitions used, budget)`` after each batch.
    exact_inner_up_to, batch
        The search's inner checks (every sub-coalition of blocks up to this size each time
        they change, the leave-one-out ones beyond, and every sub-coalition of a larger block
        once nothing blocks, where they fit) and batch size (:func:`coalitions.sampled.search`).
    inner_draws : int
        The certificate's sub-coalitions drawn per block too large to check whole within the
        budget (:func:`coalitions.sampled_certificate.certify_sampled`).

    Returns
    -------
    SampledEquilibrium

    See Also
    --------
    coalitions.sampled_starts.sample_ce_from_starts : several starts, the best certified kept.
    """
    source = check_source(source)
    begin = parse_start(start, source.clients) if start is not None else None
    return run_searches(source, budget, epsilon, delta, [begin], [edges], z=z, tol=tol, distribution=distribution,
                        seed=seed, cache=cache, save_to=save_to, progress=progress,
                        exact_inner_up_to=exact_inner_up_to, inner_draws=inner_draws, batch=batch)[0]


def run_searches(source: ValueSource, budget: int, epsilon: float, delta: float, begins: Sequence,
                 edge_lists: Sequence[Sequence[tuple[int, int]]], *, z: float | None, tol: float, distribution: str,
                 seed: int, cache: MeasuredGame | None, save_to, progress, exact_inner_up_to: int, inner_draws: int,
                 batch: int) -> list[SampledEquilibrium]:
    """The searches of :func:`sample_ce` from each of ``begins`` (bitmask blocks; ``None``: singletons), then their certificates.

    One ledger and cache for all: a coalition measured for one search is read back by the
    next.  With ``k`` starts, search ``j`` may use the search's share of the budget up to
    ``⌊(j + 1)/k⌋`` of it (what an earlier one leaves passes on), from its own stream
    (``SeedSequence(seed).spawn(k + 1)``: child 0 for the first, ``j + 1`` for the others;
    child 1 is the certificates'); every certificate is drawn at ``delta / k`` from the same
    certificate stream, so that under ``"uniform-size"`` the candidates are judged on the same
    draws.  With one start this is :func:`sample_ce` exactly.
    """
    n = len(source.clients)
    epsilon = check_probability(epsilon, "epsilon")
    delta = check_probability(delta, "delta")
    if distribution not in DISTRIBUTIONS:
        raise InputError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise InputError(f"budget must be an integer, got {budget!r}")
    k = len(begins)
    each = delta / k
    m = draws_for(epsilon, each)
    need = required_budget(n, epsilon, delta, k, distribution)
    if budget < need:
        raise InputError(f"budget {budget} is below the {need} coalitions the certificate"
                         f"{'s of ' + str(k) + ' starts need' if k > 1 else ' needs'} "
                         f"(m = {outer_draws_needed(n, m)} draws for epsilon {epsilon:g} at delta {each:g}, "
                         f"{n} singletons and up to {n} blocks{' each' if k > 1 else ''})")
    tol = float(tol)
    if not (math.isfinite(tol) and tol >= 0):
        raise InputError(f"tol must be a finite number >= 0, got {tol!r}")
    for name, value in (("exact_inner_up_to", exact_inner_up_to), ("inner_draws", inner_draws), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (1 if name == "batch" else 0):
            raise InputError(f"{name} must be a non-negative integer{' >= 1' if name == 'batch' else ''}, got {value!r}")
    for edges in edge_lists:
        for j, i in edges:
            if not (0 <= int(i) < n and 0 <= int(j) < n):
                raise InputError(f"benefit-graph edge {j} -> {i} names clients outside the game")
    begins = [tuple(1 << i for i in range(n)) if b is None else tuple(b) for b in begins]
    if cache is None:
        cache = MeasuredGame(source)
    elif cache.source is not source:
        raise InputError("the cache was made for another source")
    share = int(budget) - need
    ledger = Ledger(cache, int(budget), share // k, save_to, progress)
    if z is None:
        # the first start's blocks, the first thing its search measures anyway, as many as its share holds: what
        # they are measured with (replicates, standard errors or exact values) decides the level of every comparison
        ledger.take(list(begins[0])[:ledger.room()])
        level = DEFAULT_Z if cache.kind not in (None, "exact") else 0.0
    else:
        level = check_z(z)
    rules = Rules(tol, level)
    streams = np.random.SeedSequence(int(seed)).spawn(k + 1)
    found = []
    for j, (begin, edges) in enumerate(zip(begins, edge_lists, strict=True)):
        before = 0 if j == 0 else ledger.count   # the first search's count includes the blocks taken above
        ledger.limit = share * (j + 1) // k
        # the last search's final whole-block checks may spend what of the certificates' reserve for the N
        # singletons and its own blocks is measured already (the draws and the other candidates' blocks stay
        # reserved); a sub-coalition checked then is read back by the certificate for free
        f = search(ledger, begin, rules, np.random.default_rng(streams[0 if j == 0 else j + 1]),
                   edges=[(int(a), int(b)) for a, b in edges], distribution=distribution,
                   exact_inner_up_to=int(exact_inner_up_to), batch=int(batch),
                   reserve=2 * n if j == k - 1 else 0)
        found.append(replace(f, trainings=f.trainings - before))
    if z is None and cache.kind is None:   # the searches measured nothing: the certificates' blocks decide
        ledger.limit = ledger.budget
        for f in found:
            ledger.take(list(f.partition))
        rules = Rules(tol, DEFAULT_Z if cache.kind != "exact" else 0.0)
    certs = []
    budget_all = ledger.budget
    per_later = n + (0 if distribution == "uniform-size" else outer_draws_needed(n, m))
    for j, f in enumerate(found):
        # what the later candidates' certificates were promised (their blocks, and under "mixed" their own draws)
        # is held back, so that this one's inner checks, which take what is left, cannot spend it
        ledger.budget = budget_all - per_later * (k - 1 - j)
        certs.append(certify_sampled(ledger, f.partition, rules, np.random.default_rng(streams[1]), m=m, delta=each,
                                     requested_epsilon=epsilon, distribution=distribution,
                                     inner_draws=int(inner_draws)))
    ledger.budget = budget_all
    clients = tuple(source.clients)
    return [SampledEquilibrium(clients, Partition(clients, f.partition), Partition(clients, b), f, c, int(budget),
                               int(seed), dict(cache.provenance), ledger.trained)
            for b, f, c in zip(begins, found, certs, strict=True)]


def _names(r: SampledEquilibrium, mask: int) -> list[str]:
    return r.names(mask)


def sampled_to_json(r: SampledEquilibrium) -> dict:
    """``coalitions/sampled-equilibrium@1`` (docs/formats.md)."""
    c = r.certificate

    def witness(b):
        return {"coalition": _names(r, b.coalition),
                "payoffs": {r.clients[i]: {"coalition": new, "block": old} for i, new, old in b.payoffs}}

    return {
        "format": SAMPLED_FORMAT,
        "semantics": c.semantics,
        "clients": list(r.clients),
        "partition": r.blocks(),
        "holds": r.holds,
        "search": {"start": r.start.lists(), "stopped": r.search.stopped,
                   "repairs": r.search.repairs, "trainings": r.search.trainings},
        "certificate": {
            "method": "sampled",
            "drawn_after_search": True,
            "outer_agreement": c.outer_agreement,
            "inner_agreement": c.inner_agreement,
            "epsilon": c.epsilon, "delta": c.delta, "requested_epsilon": c.requested_epsilon,
            "m": c.m, "blocking_draws": c.blocking_draws, "distinct": c.distinct,
            "outer_method": c.outer_method, "distribution": c.distribution,
            "z": c.z, "family": c.family, "tol": c.tol,
            "blockers": [witness(b) for b in c.blockers],
            "individual_rationality": {"checked": len(r.clients), "blocking": [witness(b) for b in c.individual]},
            "inner": [{"block": _names(r, x.block), "method": x.method, "checked": x.checked, "of": x.total,
                       "violations": x.found, "witnesses": [_names(r, s) for s in x.violations]} for x in c.inner],
            "trainings": c.trainings,
        },
        "trainings": {"search": r.search.trainings, "certificate": c.trainings, "total": r.trainings,
                      "budget": r.budget},
        "seed": r.seed,
        "source": r.source,
    }


def sampled_text(r: SampledEquilibrium) -> str:
    """The result for people: partition, certificate, trainings."""
    c = r.certificate
    part = " | ".join(",".join(b) for b in r.blocks())
    lines = [f"partition: {part}",
             f"search: {r.search.stopped} after {r.search.repairs} repairs, {r.search.trainings} coalitions",
             f"outer agreement: {c.blocking_draws} of {c.m} coalitions "
             f"{'checked' if c.outer_method == 'exhaustive' else 'drawn from D (' + c.distribution + ')'} block; "
             + (f"blocking share under D = {c.epsilon:.4g} (every coalition checked)" if c.outer_method == "exhaustive"
                else f"blocking share <= {c.epsilon:.4g} with confidence {1 - c.delta:g}")
             + (f" (asked: {c.requested_epsilon:g})" if c.requested_epsilon is not None else ""),
             f"individual rationality: {len(r.clients) - len(c.individual)} of {len(r.clients)} singletons content"]
    for b in c.blockers:
        lines.append("  blocks: {" + ",".join(_names(r, b.coalition)) + "}: "
                     + "; ".join(f"{r.clients[i]}: {new:.6g} vs {old:.6g}" for i, new, old in b.payoffs))
    for x in c.inner:
        lines.append(f"inner agreement of {{{','.join(_names(r, x.block))}}}: {x.method}, {x.checked} of {x.total} "
                     f"sub-coalitions, {x.found} violation{'s' * (x.found != 1)}")
    lines.append(f"rules: z = {c.z:g} ({c.family}), tol = {c.tol:g}, payoff = the coalition's own model ({c.semantics})")
    lines.append(f"coalitions used: {r.search.trainings} search + {c.trainings} certificate = {r.trainings} "
                 f"of {r.budget} ({r.trained} trained now)")
    lines.append(f"certified: {'yes' if r.holds else 'no'}")
    return "\n".join(lines)
