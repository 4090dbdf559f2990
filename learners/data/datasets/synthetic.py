"""The CE paper's synthetic linear regression (Cui et al. 2022, §5.1; docs/learners-data.md).

Each client ``m`` has features ``x ~ U[-1, 1]^dim`` and a ground-truth weight
``u_m = v + N(0, rho^2 I)`` around a shared ``v ~ U[0, 1)^dim``.  Labels are
``y = x·u_m + eps`` for the unflipped clients and ``y = -x·u_m + eps`` for the
clients in ``flipped``, with ``eps ~ N(0, noise^2)``.  Small ``rho`` and few
samples make clients with the same sign help each other; many samples and large
``rho`` make everyone learn alone (the paper's Table 1).  The defaults
(``samples=10`` < 21 unknowns, ``rho=0.01``) give the collaborative regime,
CE ``{0,1,2},{3,4,5}``; ``samples=1000, rho=1`` gives everyone alone — both on
every seed 0–19 with the exhaustive linear oracle (docs/learners-data.md).

Randomness: one :class:`numpy.random.SeedSequence` from ``seed`` spawns one
stream for ``v`` and one per client, and each client draws ``u_m`` first and
then its train, validation and test sets in that order, so ``v`` and every
``u_m`` do not depend on ``samples``, ``val`` or ``test``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coalitions.learners.data.datasets._common import check_float, check_int
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.params import ParameterError

__all__ = ["synthetic", "DEFAULTS"]

DEFAULTS = dict(clients=6, samples=10, rho=0.01, dim=20, noise=0.01, flipped=None, val=1000,
                test=1000, seed=0)


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


def synthetic(clients: int = 6, samples: int = 10, rho: float = 0.01, dim: int = 20,
              noise: float = 0.01, flipped: Sequence[int] | str | None = None, val: int = 1000,
              test: int = 1000, seed: int = 0) -> Federation:
    """The CE paper's six-client linear regression (docs/learners-data.md).

    Parameters
    ----------
    clients : int
        Number of clients ``N`` (named ``"0"``, ..., ``"N-1"``).
    samples : int
        Training samples per client.
    rho : float
        Standard deviation of each client's weight around the shared ``v``.
    dim : int
        Feature dimension (20 in the paper).
    noise : float
        Standard deviation of the label noise ``eps``.
    flipped : sequence of int or "i,j,..." or None
        Clients whose labels are negated; ``None`` means the second half,
        ``range(N // 2, N)`` (the paper's ``3,4,5`` for six clients).
    val, test : int
        Validation and test points per client, from the client's own distribution.
    seed : int

    Returns
    -------
    Federation
        Task ``"regression"``, metric ``"mse"``; ``planted_groups`` = the
        unflipped clients and the flipped clients (empty groups left out).
    """
    clients = check_int("clients", clients, 1, 26)
    samples = check_int("samples", samples, 1)
    dim = check_int("dim", dim, 1)
    val = check_int("val", val, 1)
    test = check_int("test", test, 1)
    seed = check_int("seed", seed, 0)
    rho = check_float("rho", rho)
    noise = check_float("noise", noise)
    flip = _flipped(flipped, clients)
    streams = np.random.SeedSequence(seed).spawn(clients + 1)
    v = np.random.default_rng(streams[0]).random(dim)
    out = []
    for m in range(clients):
        rng = np.random.default_rng(streams[m + 1])
        u = v + rng.normal(0.0, rho, dim)
        sign = -1.0 if m in flip else 1.0
        splits = []
        for n in (samples, val, test):
            X = rng.uniform(-1.0, 1.0, (n, dim))
            y = sign * (X @ u) + rng.normal(0.0, noise, n)
            splits.append(Split(X.astype(np.float32), y.astype(np.float32)))
        out.append(Client(str(m), *splits))
    names = [str(m) for m in range(clients)]
    groups = tuple(g for g in (tuple(n for m, n in enumerate(names) if m not in flip),
                               tuple(names[m] for m in flip)) if g)
    options = dict(clients=clients, samples=samples, rho=rho, dim=dim, noise=noise, flipped=list(flip),
                   val=val, test=test, seed=seed)
    return Federation("synthetic", "regression", "mse", tuple(out), None, groups, options)
