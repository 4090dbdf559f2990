"""The collaboration equilibrium of a game, with its certificate (docs/concepts.md §3).

:func:`solve` peels the game (the paper's Algorithm 1 with the shrink step) and
certifies the partition against both CE axioms.  Under ``personalized``
semantics peeling always yields a CE.  Under ``shared`` semantics it may not:
when peeling stalls or its partition fails an axiom, :func:`solve` falls back to
exhaustive enumeration (up to ``max_enumerate`` clients) and raises
:class:`~coalitions.errors.NoEquilibrium` when no CE exists.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> ce = solve(mean_estimation([5, 5, 5]))
>>> ce.blocks(), ce.certificate.holds, ce.certificate.method
([['0', '1', '2']], True, 'exhaustive')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import certificate as streamed
from .axioms import AxiomReport, inner_agreement, outer_agreement
from .brute_force import MAX_ENUMERATE, bell, equilibrium_masks
from .certificate import Closest
from .errors import InputError, NoEquilibrium
from .game import Game
from .graph import BenefitGraph
from .noise import Comparison
from .partition import Partition, block_of, canonical
from .payoffs import check_semantics, mau_at, payoff_at
from .peeling import peel

__all__ = ["Certificate", "Equilibrium", "solve", "certify"]


@dataclass(frozen=True)
class Certificate:
    """Both CE axioms checked for a partition, with witnesses of any violation.

    On a game that carries its measurement uncertainty (:mod:`coalitions.noise`)
    the axioms are checked at the significance level ``z``, and the certificate
    also says how close the partition comes to breaking each of them
    (``closest_inner``, ``closest_outer``) and whether it is a CE of the point
    values alone (``point_holds``).

    Attributes
    ----------
    inner, outer : AxiomReport
        The two axioms, at level ``z``.
    z : float
        The significance level (0: point values).
    noisy : bool
        The comparisons used standard errors (``z > 0`` and the game carries them).
    closest_inner, closest_outer : Closest or None
        The sub-coalition nearest to splitting off and the coalition nearest to
        blocking, with their z-scores (noisy certificates only).
    point_holds : bool or None
        Both axioms hold on the point values (noisy certificates only).
    family : str or None
        Which comparisons the level covers at once (:mod:`coalitions.noise`; noisy certificates only).
    thresholds : tuple of float or None
        Each client's threshold ``c_i(z)`` on ``d / se`` for that family (noisy certificates only);
        the z-scores of ``closest_*`` are on the scale of ``z`` (significant above ``z``).
    """

    inner: AxiomReport
    outer: AxiomReport
    z: float = 0.0
    noisy: bool = False
    closest_inner: Closest | None = None
    closest_outer: Closest | None = None
    point_holds: bool | None = None
    family: str | None = None
    thresholds: tuple[float, ...] | None = None

    @property
    def holds(self) -> bool:
        return self.inner.holds and self.outer.holds

    @property
    def method(self) -> str:
        """``"exhaustive"`` when every (sub-)coalition was checked, else ``"sampled"``."""
        return "exhaustive" if self.inner.method == self.outer.method == "exhaustive" else "sampled"

    @property
    def confirmed(self) -> bool | None:
        """Every potential blocking coalition is *refuted* at level ``z`` (noisy certificates with detail).

        Outer agreement at ``z`` says that no coalition blocks *significantly*: a claim
        of absence, whose error is a matter of power once true gains fall within the
        noise.  Confirmation is the claim of presence that answers it: every coalition
        outside the partition has a member whose best gain there is significantly
        *below* ``tol``, ``closest_outer.score < −z`` (an equivalence test with margin
        ``tol``: a member who is indifferent, gain 0, is refuted only when ``tol``
        exceeds ``z`` standard errors).  Inner agreement at ``z`` is already such a
        claim (each split-off sub-coalition has a member who loses significantly).
        ``None`` where it was not computed (an exact game, or ``detail=False``).
        """
        if not self.noisy or self.point_holds is None:
            return None
        c = self.closest_outer
        return self.holds and (c is None or c.score < -self.z)

    @property
    def verdict(self) -> str:
        """What the certificate proves, from strongest to weakest.

        On a measured game: ``"stable at z = …"`` (holds at ``z`` and every potential
        blocker refuted: :attr:`confirmed`), ``"not significantly blocked at z = …"``
        (holds at ``z``, but some coalition lies within the noise of blocking; also what a
        certificate made without detail says where it holds), ``"holds on point values
        only"``, or ``"fails"`` (``"not stable at z = …"`` without detail).  On an exact
        game: ``"holds"`` or ``"fails"``.
        """
        if not self.noisy:
            return "holds" if self.holds else "fails"
        level = f"z = {self.z:g}" + ("" if self.family in (None, "comparison") else f", {self.family}-wise")
        if self.holds:
            return f"stable at {level}" if self.confirmed else f"not significantly blocked at {level}"
        if self.point_holds is None:  # certified without detail
            return f"not stable at {level}"
        return "holds on point values only" if self.point_holds else "fails"


def certify(game: Game, partition, semantics: str = "personalized", tol: float = 1e-9,
            exhaustive_up_to: int | None = None, seed: int = 0,
            chunk: int = streamed.DEFAULT_CHUNK, *, z: float | None = None, detail: bool = True) -> Certificate:
    """Check inner and outer agreement of ``partition``.

    When every coalition may be enumerated (``exhaustive_up_to`` is None or at
    least ``N``) both axioms are checked by :mod:`coalitions.certificate`, which
    streams over the coalitions client by client in chunks of ``chunk`` and holds
    no payoff table; otherwise by the sampling checks of :mod:`coalitions.axioms`.
    The reports are the same either way where both enumerate everything.

    ``z`` is the significance level (:mod:`coalitions.noise`): 1.96 by default
    when the game carries its uncertainty, else 0.  A noise-aware certificate
    enumerates every (sub-)coalition whatever ``exhaustive_up_to`` says, and adds
    the closest potential violation of each axiom with its z-score and the verdict
    on the point values; ``detail=False`` leaves those out (``closest_*`` and
    ``point_holds`` None), for callers that need the verdict alone, such as the
    support's one solve per replicate.
    """
    cmp = Comparison(game, tol, z)
    if cmp.noisy:
        inner = streamed.inner_agreement(game, partition, semantics, tol, chunk=chunk, z=cmp.level)
        outer = streamed.outer_agreement(game, partition, semantics, tol, chunk=chunk, z=cmp.level)
        u = game.uncertainty
        family = dict(family=u.family, thresholds=tuple(float(c) for c in u.critical(cmp.level)))
        if not detail:
            return Certificate(inner, outer, z=cmp.level, noisy=True, **family)
        point = certify(game, partition, semantics, tol, exhaustive_up_to, seed, chunk, z=0.0)
        return Certificate(inner, outer, z=cmp.level, noisy=True, **family,
                           closest_inner=streamed.closest_inner(game, partition, semantics, tol, cmp.level),
                           closest_outer=streamed.closest_outer(game, partition, semantics, tol, cmp.level),
                           point_holds=point.holds)
    if exhaustive_up_to is None or game.n <= exhaustive_up_to:
        return Certificate(streamed.inner_agreement(game, partition, semantics, tol, chunk=chunk, z=0.0),
                           streamed.outer_agreement(game, partition, semantics, tol, chunk=chunk, z=0.0),
                           z=cmp.level)
    return Certificate(
        inner_agreement(game, partition, semantics, tol, exhaustive_up_to=exhaustive_up_to, seed=seed),
        outer_agreement(game, partition, semantics, tol, exhaustive_up_to=exhaustive_up_to, seed=seed),
        z=cmp.level)


@dataclass(frozen=True)
class Equilibrium:
    """A partition of the clients with how it was found and the proof that it is a CE.

    Attributes
    ----------
    game : Game
    semantics : str
    tol : float
    masks : tuple of int
        The coalitions as bitmasks over ``game.clients``, ordered by lowest member (the core's
        form; :attr:`partition` is the same partition by name).
    rounds : tuple of tuple of int
        The coalitions peeled in each round, as bitmasks (empty when found by enumeration).
    graphs : tuple of BenefitGraph
        ``BG(R)`` of each peeling round.
    found_by : str
        ``"peeling"`` or ``"enumeration"``.
    certificate : Certificate or None
        ``None`` when certification was skipped.
    z : float
        The significance level of every comparison (0: point values; :mod:`coalitions.noise`).
    """

    game: Game
    semantics: str
    tol: float
    masks: tuple[int, ...]
    rounds: tuple[tuple[int, ...], ...]
    graphs: tuple[BenefitGraph, ...]
    found_by: str
    certificate: Certificate | None
    z: float = 0.0

    @property
    def partition(self) -> Partition:
        """The partition: blocks as frozensets of client names, in canonical order."""
        return Partition(self.game.clients, self.masks)

    def blocks(self) -> list[list[str]]:
        """The partition as lists of client names."""
        return [self.game.names(k) for k in self.masks]

    def __repr__(self) -> str:
        verdict = "not certified" if self.certificate is None else self.certificate.verdict
        return (f"Equilibrium(partition={str(self.partition)!r}, semantics={self.semantics!r}, tol={self.tol:g}, "
                f"z={self.z:g}, found_by={self.found_by!r}, certificate={verdict!r}, clients={self.game.n})")

    @property
    def payoffs(self) -> np.ndarray:
        """Each client's payoff in its coalition."""
        where = block_of(self.game, self.masks)
        return np.array([payoff_at(self.game, i, int(where[i]), self.semantics) for i in range(self.game.n)])

    @property
    def mau_all(self) -> np.ndarray:
        """Each client's ``MAU_i(all)``: the best it could hope for."""
        return np.array([mau_at(self.game, i, self.game.grand) for i in range(self.game.n)])

    def to_networkx(self):
        """The clients with coalition, round and payoffs, and ``BG(all)``'s edges, as a
        :class:`networkx.DiGraph` (see :func:`coalitions.networks.equilibrium_to_networkx`)."""
        from .networks import equilibrium_to_networkx

        return equilibrium_to_networkx(self)

    def round_of(self) -> np.ndarray:
        """Peeling round (1-based) in which each client was placed; 0 if found by enumeration."""
        out = np.zeros(self.game.n, dtype=int)
        for r, ks in enumerate(self.rounds, start=1):
            for k in ks:
                for i in range(self.game.n):
                    if (k >> i) & 1:
                        out[i] = r
        return out


def solve(game: Game, semantics: str = "personalized", tol: float = 1e-9, certify_result: bool = True,
          exhaustive_up_to: int | None = None, max_enumerate: int = MAX_ENUMERATE, seed: int = 0,
          progress=None, *, z: float | None = None, detail: bool = True) -> Equilibrium:
    """Find a collaboration equilibrium and certify it.

    Parameters
    ----------
    game : Game
    semantics : {"personalized", "shared"}
    tol : float
        Absolute tolerance (docs/concepts.md §1), ``≥ 0``.
    certify_result : bool
        Check both axioms (exhaustively up to ``exhaustive_up_to`` clients).
    exhaustive_up_to : int, optional
        Enumerate (sub-)coalitions over at most this many clients; sample beyond.
    max_enumerate : int
        Under ``shared`` semantics, the largest game searched exhaustively when
        peeling gives no CE.
    seed : int
        Seed for sampled certificates.
    progress : callable, optional
        ``progress(done, total)`` during exhaustive enumeration.
    z : float, optional
        Significance level of every comparison (:mod:`coalitions.noise`): 1.96 by
        default when the game carries its measurement uncertainty, else 0.  ``z = 0``
        gives the point-value answer.
    detail : bool
        Give a noise-aware certificate its closest calls and point-value verdict
        (:func:`certify`); ``False`` when only the partition and whether it holds matter.

    Raises
    ------
    NoEquilibrium
        Exhaustive enumeration found no CE.
    InputError
        Bad arguments, or enumeration needed beyond ``max_enumerate`` clients.

    Notes
    -----
    At a significance level (a game with uncertainty) "not significantly
    different" is not transitive either: when no partition is stable at ``z``
    under ``personalized`` semantics, ``solve`` returns the peeled partition with
    a certificate whose verdict says so, rather than raising.

    Under ``personalized`` semantics with ``tol = 0`` peeling always yields a CE
    (docs/concepts.md §3).  With ``tol > 0`` "within tolerance" is not transitive and the
    peeled partition can fail the certificate (three clients suffice); ``solve``
    then searches all partitions like under ``shared`` semantics, or, above
    ``max_enumerate`` clients, returns the peeled partition with its failed
    certificate so that the caller can report it.  A tolerance of one payoff
    step or more can leave a game with no CE at all; ``NoEquilibrium`` says so.
    """
    check_semantics(semantics)
    if not (isinstance(tol, (int, float)) and np.isfinite(tol) and tol >= 0):
        raise InputError(f"tolerance must be a finite number >= 0, got {tol!r}")
    level = Comparison(game, tol, z).level
    result = peel(game, semantics, tol, z=level)
    cert = None
    if result.complete:
        partition = canonical(result.partition)
        if certify_result or semantics == "shared":
            cert = certify(game, partition, semantics, tol, exhaustive_up_to, seed, z=level, detail=detail)
        peeled = Equilibrium(game, semantics, tol, partition,
                             tuple(r.stable for r in result.rounds if r.stable),
                             tuple(r.graph for r in result.rounds), "peeling",
                             cert if certify_result else None, level)
        if cert is None or cert.holds:
            return peeled
        if semantics == "personalized" and game.n > max_enumerate:
            return peeled  # a tolerance > 0 is not transitive: report the failed certificate as it is
    if game.n > max_enumerate:
        why = "stalled" if not result.complete else "gave a partition that is not a CE"
        raise InputError(f"peeling {why} under shared semantics, and exhaustive search of {game.n} clients "
                         f"({bell(game.n):,} partitions) exceeds the limit of {max_enumerate} "
                         "(raise --max-enumerate)")
    found = equilibrium_masks(game, semantics, tol, max_clients=max_enumerate, progress=progress, z=level)
    if not found:
        if result.complete and semantics == "personalized" and Comparison(game, tol, level).noisy:
            return peeled  # no partition is stable at z: the peeled one, with a certificate that says so
        raise NoEquilibrium(f"no collaboration equilibrium exists under {semantics} semantics "
                            f"(all {bell(game.n):,} partitions checked)")
    partition = found[0]
    cert = certify(game, partition, semantics, tol, z=level, detail=detail) if certify_result else None
    return Equilibrium(game, semantics, tol, partition, (), tuple(r.graph for r in result.rounds),
                       "enumeration", cert, level)
