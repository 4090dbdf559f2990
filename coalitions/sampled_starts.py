"""A sampled equilibrium searched from several starts, the best certified one kept (docs/scale.md).

One search of :func:`coalitions.sampled_ce.sample_ce` repairs one starting partition;
where it ends depends on where it starts (a learned method's partition, peeling on what
is measured, everyone alone).  :func:`sample_ce_from_starts` runs the search from each of
``k`` starts over one cache (a coalition one search measured is read back by the next),
certifies every partition found, and keeps the best by a rule fixed before any
certificate is drawn:

1. a partition whose certificate holds before one whose certificate does not;
2. then the smaller certified blocking share ``ε``;
3. then the better utilitarian welfare ``Σ_i v_i(B(i))`` on the measured (point) values
   (larger for a gain, smaller for a loss: the source's ``sense``);
4. then the earlier start.

**Why the confidence is split.**  Each certificate alone says "the ``D``-share of
coalitions that block this partition is at most ``ε_j``", wrong with probability at most
``δ_j``.  Choosing among the ``k`` certificates after seeing them would keep the one whose
sample happened to miss its blockers, so the statement about the chosen one needs all of
them at once.  Each is drawn at ``δ_j = δ / k``; by the union bound all ``k`` hold
together with probability at least ``1 − δ``, and so does the chosen one, whichever the
rule picks (Bonferroni).  The price is ``m = ⌈ln(δ/k) / ln(1 − ε)⌉`` draws instead of
``⌈ln δ / ln(1 − ε)⌉``: at ``ε = 0.01, δ = 0.05`` three starts take 408 draws instead
of 299.  Under ``D = "uniform-size"`` the draws do not depend on the partition, so all
candidates are judged on the same draws and they are trained once; under ``"mixed"``
each candidate's neighbourhood draws are its own.

The searches draw no coalition from the certificates' stream, so the certificates stay
independent of the searches (:mod:`coalitions.sampled_certificate`).

Examples
--------
>>> from coalitions.lazy_analytic import PlantedSource
>>> src = PlantedSource((3, 3, 3), seed=2)
>>> r = sample_ce_from_starts(src, 600, ["c0,c1,c2,c3,c4,c5,c6,c7,c8", None], epsilon=0.05, delta=0.05)
>>> r.best.blocks(), r.chosen, r.best.certificate.delta, r.delta
([['c0', 'c1', 'c2'], ['c3', 'c4', 'c5'], ['c6', 'c7', 'c8']], 0, 0.025, 0.05)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .bitmask import members
from .errors import InputError
from .lazy import ValueSource, check_source
from .measured import MeasuredGame
from .sampled_ce import SampledEquilibrium, parse_start, run_searches, sampled_text, sampled_to_json

__all__ = ["MultiStartEquilibrium", "sample_ce_from_starts", "multistart_to_json", "multistart_text",
           "CHOICE_RULE"]

#: The rule that picks the kept candidate, in words (recorded in the result's JSON).
CHOICE_RULE = ("certified first, then the smallest certified epsilon, then the best welfare on measured values "
               "(in the source's sense), then the earliest start")


@dataclass(frozen=True)
class MultiStartEquilibrium:
    """The candidates of a search from several starts and the one kept.

    Attributes
    ----------
    candidates : tuple of SampledEquilibrium
        One per distinct start, in the order given; each certificate at ``delta / k``.
    chosen : int
        Index of the kept candidate (:data:`CHOICE_RULE`).
    welfare : tuple of float
        Each candidate's ``Σ_i v_i(B(i))`` on the measured values, in the source's sense.
    delta : float
        The confidence every statement holds at jointly (``1 − delta``), the kept one's included.
    duplicates : int
        Starts given more than once, dropped before the confidence was split.
    """

    candidates: tuple[SampledEquilibrium, ...]
    chosen: int
    welfare: tuple[float, ...]
    delta: float
    duplicates: int = 0

    @property
    def best(self) -> SampledEquilibrium:
        """The kept candidate."""
        return self.candidates[self.chosen]

    @property
    def holds(self) -> bool:
        """The kept candidate's certificate holds (at ``delta / k``, so jointly at ``delta``)."""
        return self.best.holds

    @property
    def trainings(self) -> int:
        """Distinct coalitions the whole run used: every search and every certificate."""
        return sum(c.trainings for c in self.candidates)


def _welfare(cache: MeasuredGame, partition: tuple[int, ...]) -> float:
    vals = cache.raw_values(np.asarray(partition, dtype=np.int64))
    return float(sum(vals[i, x] for x, k in enumerate(partition) for i in members(k)))


def _key(r: SampledEquilibrium, welfare: float, sense: str, j: int) -> tuple:
    return (not r.holds, r.certificate.epsilon, welfare if sense == "min" else -welfare, j)


def sample_ce_from_starts(source: ValueSource, budget: int, starts: Sequence, epsilon: float = 0.01,
                          delta: float = 0.05, *, edges: Sequence[Sequence[tuple[int, int]]] | None = None,
                          z: float | None = None, tol: float = 1e-9, distribution: str = "uniform-size",
                          seed: int = 0, cache: MeasuredGame | None = None,
                          save_to: str | os.PathLike | None = None,
                          progress: Callable[[int, int], None] | None = None, exact_inner_up_to: int = 4,
                          inner_draws: int = 64, batch: int = 16) -> MultiStartEquilibrium:
    """Search from each start, certify each partition at ``delta / k``, keep the best (module docstring).

    Parameters
    ----------
    source : ValueSource
    budget : int
        Distinct coalitions the whole run may use; at least
        ``required_budget(N, epsilon, delta, k, distribution)``
        (:func:`coalitions.sampled_ce.required_budget`), checked before anything trains.
        The searches share what the certificates leave: search ``j`` may reach
        ``(j + 1)/k`` of it, so what an earlier one leaves passes on.
    starts : sequence
        Starting partitions, each as :func:`coalitions.sampled_ce.sample_ce` takes ``start``
        (bitmasks, ``"A,B|C"``, lists of names) or ``None`` for everyone alone.  Repeated
        starts are dropped (with their edges) before ``k`` is counted.
    epsilon, delta : float
        The certificate asked for; ``1 − delta`` is the joint confidence.
    edges : sequence of edge lists, optional
        One benefit graph per start (``j → i``), looked along first by that start's search.
    z, tol, distribution, seed, cache, save_to, progress, exact_inner_up_to, inner_draws, batch
        As :func:`coalitions.sampled_ce.sample_ce`.  With one start the result's only
        candidate equals ``sample_ce``'s result.

    Returns
    -------
    MultiStartEquilibrium
    """
    source = check_source(source)
    if isinstance(starts, (str, bytes)) or not isinstance(starts, Sequence) or not starts:
        raise InputError("starts must be a non-empty list of starting partitions")
    graphs = [()] * len(starts) if edges is None else list(edges)
    if len(graphs) != len(starts):
        raise InputError(f"edges: {len(graphs)} benefit graphs for {len(starts)} starts")
    n = len(source.clients)
    alone = tuple(1 << i for i in range(n))
    begins: list = []
    lists: list = []
    seen: set = set()
    for s, g in zip(starts, graphs, strict=True):
        b = alone if s is None else parse_start(s, source.clients)
        if b in seen:
            continue
        seen.add(b)
        begins.append(b)
        lists.append(tuple(g))
    if cache is None:
        cache = MeasuredGame(check_source(source))
    found = run_searches(source, budget, epsilon, delta, begins, lists, z=z, tol=tol, distribution=distribution,
                         seed=seed, cache=cache, save_to=save_to, progress=progress,
                         exact_inner_up_to=exact_inner_up_to, inner_draws=inner_draws, batch=batch)
    welfare = tuple(_welfare(cache, r.masks) for r in found)
    chosen = min(range(len(found)), key=lambda j: _key(found[j], welfare[j], cache.sense, j))
    return MultiStartEquilibrium(tuple(found), chosen, welfare, float(delta), len(starts) - len(begins))


def multistart_to_json(r: MultiStartEquilibrium) -> dict:
    """The kept candidate as ``coalitions/sampled-equilibrium@1``, with a ``starts`` block (docs/formats.md)."""
    out = sampled_to_json(r.best)
    out["trainings"] = {**out["trainings"], "search": sum(c.search.trainings for c in r.candidates),
                        "certificate": sum(c.certificate.trainings for c in r.candidates), "total": r.trainings}
    out["starts"] = {
        "k": len(r.candidates), "duplicates_dropped": r.duplicates, "joint_delta": r.delta,
        "delta_each": r.best.certificate.delta, "chosen": r.chosen, "rule": CHOICE_RULE,
        "candidates": [{"start": c.start.lists(), "partition": c.blocks(), "holds": c.holds,
                        "stopped": c.search.stopped, "repairs": c.search.repairs,
                        "epsilon": c.certificate.epsilon, "blocking_draws": c.certificate.blocking_draws,
                        "m": c.certificate.m, "welfare": w,
                        "trainings": {"search": c.search.trainings, "certificate": c.certificate.trainings}}
                       for c, w in zip(r.candidates, r.welfare, strict=True)],
    }
    return out


def multistart_text(r: MultiStartEquilibrium) -> str:
    """The kept candidate's report, then one line a candidate and the joint confidence."""
    k = len(r.candidates)
    lines = [sampled_text(r.best), f"starts: {k} (each certificate at delta {r.best.certificate.delta:g}, "
                                   f"so every statement holds jointly with confidence {1 - r.delta:g})"
             + (f"; {r.duplicates} repeated start{'s' * (r.duplicates != 1)} dropped" if r.duplicates else "")]
    for j, (c, w) in enumerate(zip(r.candidates, r.welfare, strict=True)):
        part = " | ".join(",".join(b) for b in c.blocks())
        lines.append(f"  {'*' if j == r.chosen else ' '} start {j + 1}: {part}  ({c.search.stopped}, "
                     f"{c.search.repairs} repairs; {'certified' if c.holds else 'not certified'}, "
                     f"epsilon {c.certificate.epsilon:.4g}, {c.certificate.blocking_draws} of {c.certificate.m} "
                     f"block; welfare {w:.6g})")
    lines.append(f"coalitions used in all: {r.trainings} of {r.best.budget}")
    lines.append(f"kept: start {r.chosen + 1} ({CHOICE_RULE})")
    return "\n".join(lines)
