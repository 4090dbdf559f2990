"""The CE paper's synthetic linear regression (Cui et al. 2022, §5.1; docs/learners-data.md).

Each client ``m`` has features ``x ~ U[-1, 1]^dim`` and a ground-truth weight
``u_m = v + N(0, rho^2 I)`` around a shared ``v ~ U[0, 1)^dim``.  Labels are
``y = x·u_m + eps`` for the unflipped clients and ``y = -x·u_m + eps`` for the
clients in ``flipped``, with ``eps ~ N(0, noise^2)``.  With ``groups=G`` instead, clients
are split into ``G`` contiguous groups of (nearly) equal size and group ``g`` has
``y = x·u_m + eps`` with ``u_m = s_g ⊙ v + N(0, rho^2 I)`` for a sign vector ``s_g`` of
independent random signs, except that groups 0 and 1 are the unflipped and the flipped clients
above (the two-group case is the flipped construction), so any two groups disagree on about half of the weights or more: a
planted federation with ``G`` conflicting tasks of any size (``clients`` up to 62).  Small ``rho`` and few
samples make clients with the same sign help each other; many samples and large
``rho`` make everyone learn alone (the paper's Table 1).

Defaults follow the paper's public code (the ``std`` and ``sigma`` arguments
of its ``main.py``, both 0.1; its labels add ``N(0, sigma²)`` noise, so the
noise standard deviation is ``0.1² = 0.01``): ``rho=0.1``, ``noise=0.01``, and
``samples=10`` (< 21 unknowns: a client alone cannot fit its model).  The
sample count of the paper's Table 1 is not preserved; with these defaults the
exhaustive linear oracle gives the paper's CE ``{0,1,2},{3,4,5}`` on most but
not all seeds, and ``samples=1000, rho=1`` gives everyone alone on every seed
0–19 (docs/learners-data.md, ``benchmarks/synthetic_ce.py``).  The former
defaults ``rho=0.01`` (CE ``{0,1,2},{3,4,5}`` on every seed 0–19) stay
reachable with ``rho=0.01``.

Validation data (``val``): an integer ``k`` draws ``k`` fresh points per client
from its own distribution (default 1000, a precise game); a fraction ``"1/6"``
(or a float in ``(0, 1)``) instead holds out ``floor(fraction · samples)`` of
the client's ``samples`` drawn training points, as the paper's code does
(``int(len(train) / 6)`` points of the target client's training data), so the
client trains on the rest.

Randomness: one :class:`numpy.random.SeedSequence` from ``seed`` spawns one
stream for ``v`` and one per client, and each client draws ``u_m`` first and
then its train, validation and test sets in that order, so ``v`` and every
``u_m`` do not depend on ``samples``, ``val`` or ``test``.  The sign vectors of groups
``g ≥ 2`` come from one more stream spawned after the clients' (so the two-group case and
``flipped`` draw exactly as before).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coalitions.learners.data.datasets._common import MAX_CLIENTS, check_float, check_int
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.params import ParameterError

__all__ = ["synthetic", "DEFAULTS", "PAPER_VAL"]

DEFAULTS = dict(clients=6, samples=10, rho=0.1, dim=20, noise=0.01, flipped=None, val=1000,
                test=1000, seed=0, groups=None)
#: The paper's code's validation share: ``int(len(train) / 6)`` of a client's training points.
PAPER_VAL = "1/6"


def _val(val, samples: int) -> tuple[int, int | None]:
    """``(fresh, held)``: fresh validation points to draw, or training points to hold out."""
    shown = repr(val).replace("{", "{{").replace("}", "}}")  # literal inside a ParameterError template
    if isinstance(val, str):
        text = val.strip()
        try:
            if "/" in text:
                a, b = text.split("/")
                frac = int(a) / int(b)
            elif text.isdigit():
                return check_int("val", int(text), 1), None
            else:
                frac = float(text)
        except (ValueError, ZeroDivisionError):
            raise ParameterError("val", f"{{name}} must be a count or a fraction such as 1/6, got {shown}") from None
    elif isinstance(val, (float, np.floating)):
        frac = float(val)
    else:
        return check_int("val", val, 1), None
    if not 0.0 < frac < 1.0:
        raise ParameterError("val", f"{{name}} as a fraction must lie strictly between 0 and 1, got {shown}")
    held = int(np.floor(frac * samples + 1e-9))
    if held < 1 or held >= samples:
        raise ParameterError("val", f"{{name}} {shown}: holding out {held} of {samples} training points per client "
                             "leaves no validation or no training data; raise samples")
    return 0, held


def _flipped(flipped, clients: int) -> tuple[int, ...]:
    if flipped is None:
        return tuple(range(clients // 2, clients))
    if isinstance(flipped, str):
        text = flipped.strip()
        try:
            flipped = [int(s) for s in text.split(",")] if text else []
        except ValueError:
            raise ParameterError("flipped", f"{{name}} must be comma-separated client indices, got {text!r}") from None
    out = []
    for f in flipped:
        if isinstance(f, bool) or not isinstance(f, (int, np.integer)) or not 0 <= f < clients:
            raise ParameterError("flipped", f"{{name}} names client {f!r}, not one of 0..{clients - 1}")
        if int(f) in out:
            raise ParameterError("flipped", f"{{name}} names client {f} twice")
        out.append(int(f))
    return tuple(sorted(out))


def synthetic(clients: int = 6, samples: int = 10, rho: float = 0.1, dim: int = 20,
              noise: float = 0.01, flipped: Sequence[int] | str | None = None, val: int | float | str = 1000,
              test: int = 1000, seed: int = 0, groups: int | None = None) -> Federation:
    """The CE paper's six-client linear regression (docs/learners-data.md).

    Parameters
    ----------
    clients : int
        Number of clients ``N`` (named ``"0"``, ..., ``"N-1"``).
    samples : int
        Training samples per client (before a fractional ``val`` holds some out).
    rho : float
        Standard deviation of each client's weight around the shared ``v``
        (0.1, the paper's code; the former default was 0.01).
    dim : int
        Feature dimension (20 in the paper).
    noise : float
        Standard deviation of the label noise ``eps``.
    flipped : sequence of int or "i,j,..." or None
        Clients whose labels are negated; ``None`` means the second half,
        ``range(N // 2, N)`` (the paper's ``3,4,5`` for six clients).
    val : int, float or str
        Validation data per client.  An integer (or a string of digits): that
        many fresh points from the client's own distribution.  A fraction
        ``"p/q"`` or a float in ``(0, 1)``: ``floor(fraction · samples)`` of the
        client's drawn training points are held out as its validation set, as
        in the paper's code (``val="1/6"``, :data:`PAPER_VAL`).
    test : int
        Test points per client, from the client's own distribution.
    seed : int
    groups : int, optional
        ``G`` conflicting groups of contiguous clients (module docstring), in place of
        ``flipped``; ``None``: the two groups of ``flipped``.

    Returns
    -------
    Federation
        Task ``"regression"``, metric ``"mse"``; ``planted_groups`` = the
        unflipped clients and the flipped clients (empty groups left out), or the ``G`` groups.
    """
    clients = check_int("clients", clients, 1, MAX_CLIENTS)
    samples = check_int("samples", samples, 1)
    dim = check_int("dim", dim, 1)
    fresh, held = _val(val, samples)
    test = check_int("test", test, 1)
    seed = check_int("seed", seed, 0)
    rho = check_float("rho", rho)
    noise = check_float("noise", noise)
    if groups is not None:
        groups = check_int("groups", groups, 1, clients)
        if flipped is not None:
            raise ParameterError("groups", "{name} and flipped are two ways of planting groups: give one")
        label = np.repeat(np.arange(groups), [len(b) for b in np.array_split(np.arange(clients), groups)])
        flip: tuple[int, ...] = tuple(int(m) for m in np.flatnonzero(label == 1))
    else:
        flip = _flipped(flipped, clients)
        label = np.isin(np.arange(clients), flip).astype(int)
    from coalitions.resources import check_memory

    # every client's float32 rows kept, plus one split drawn in float64 and its float32 copy
    rows = clients * (samples + fresh + test)
    check_memory(4 * rows * dim + 12 * max(samples, fresh, test) * dim + 16 * dim,
                 f"--dim {dim}: {clients} clients' {rows:,} rows of {dim:,} features")
    # spawn(k + 2)[:k + 1] are spawn(k + 1)'s children: the extra stream changes no earlier draw
    streams = np.random.SeedSequence(seed).spawn(clients + 2)
    v = np.random.default_rng(streams[0]).random(dim)
    # groups 0 and 1: y = ±x·u_m with u_m around v (the paper's construction, bit for bit);
    # group g ≥ 2: u_m around s_g ⊙ v, random signs s_g
    signs = np.ones((max(int(label.max()) + 1, 2), dim))
    if len(signs) > 2:
        signs[2:] = np.random.default_rng(streams[clients + 1]).choice([-1.0, 1.0], size=(len(signs) - 2, dim))
    out = []
    for m in range(clients):
        rng = np.random.default_rng(streams[m + 1])
        u = signs[label[m]] * v + rng.normal(0.0, rho, dim)
        sign = -1.0 if label[m] == 1 else 1.0
        drawn = []
        for n in (samples, fresh, test):
            X = rng.uniform(-1.0, 1.0, (n, dim))
            y = sign * (X @ u) + rng.normal(0.0, noise, n)
            drawn.append((X.astype(np.float32), y.astype(np.float32)))
        (Xt, yt), (Xv, yv), test_xy = drawn
        if held is not None:  # the paper's code: a random share of the training points
            order = rng.permutation(samples)
            Xv, yv = Xt[order[:held]], yt[order[:held]]
            keep = np.sort(order[held:])
            Xt, yt = Xt[keep], yt[keep]
        out.append(Client(str(m), Split(Xt, yt), Split(Xv, yv), Split(*test_xy)))
    names = [str(m) for m in range(clients)]
    planted = tuple(g for g in (tuple(names[m] for m in np.flatnonzero(label == k)) for k in range(int(label.max()) + 1))
                    if g)
    options = dict(clients=clients, samples=samples, rho=rho, dim=dim, noise=noise, flipped=list(flip),
                   val=fresh if held is None else str(val), test=test, seed=seed)
    if groups is not None:  # absent otherwise: earlier federations keep their options
        options["groups"] = groups
    return Federation("synthetic", "regression", "mse", tuple(out), None, planted, options)
