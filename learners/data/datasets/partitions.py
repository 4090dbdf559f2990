r"""Label-skew partitions: how many samples of each class every client holds (docs/learners-data.md).

A partition scheme turns the label vector of a pool of samples into a count
matrix ``counts`` of shape ``(K, C)`` (samples of class ``c`` held by client
``k``) and, where the scheme plants one, a partition of the clients into
groups; :func:`assign` then draws disjoint sample indices that realise the
counts.  Schemes (all from one ``numpy.random.Generator``):

``pathological`` (McMahan et al. 2017, §3, "pathological non-IID")
    Sort the samples by label and cut them into ``2K`` shards; every client
    gets two random shards, so every client holds two classes and the clients'
    class pairs overlap at random.  Shards are cut *within* classes (a shard
    never straddles two classes, so "two classes per client" holds exactly for
    any class sizes): class ``c`` is cut into ``s_c`` near-equal shards, with
    every class getting one shard and the remaining ``2K − C`` shards going one
    at a time to the class whose shards are then largest (``n_c / (s_c + 1)``
    largest; ties at random) — McMahan's equal-size cut when the classes are
    balanced and ``C`` divides ``2K``.  When ``2K < C``, ``2K`` classes are
    drawn at random, one shard (the whole class) each, and the others are left
    out.  Clients draw their two shards in turn, uniformly among the remaining
    shards of two *different* classes, among the draws that keep the rest
    completable: a class with as many shards left as clients left must be in
    the draw, which with ``s_c ≤ K`` always leaves a valid draw.  No planted
    groups: overlapping pairs plant no partition.
``twins``
    The shuffled classes are dealt to clients in pairs: client ``k`` gets
    classes ``π(2k mod C)`` and ``π(2k+1 mod C)``, each class shared evenly by
    its holders.  With ``K = C`` clients this makes ``C/2`` pairs of clients
    with identical class pairs and disjoint pairs across them (the planted
    groups: clients holding the same pair).  This was ``pathological`` before
    the shards; it is kept under its own name.
``practical`` (Huang et al. 2021, FedAMP, §5 "practical non-IID")
    Clients are cut into ``groups`` contiguous groups; the shuffled classes are
    cut into ``groups`` blocks of dominant classes.  Each client draws
    ``DOMINANCE`` (80 %) of its samples evenly from its group's dominant classes
    and the rest evenly from the other classes; every client gets the same
    number of samples, the largest the class counts allow.  Planted groups:
    the groups.
``dirichlet`` (Hsu et al. 2019)
    Each class is split among the clients in proportions
    ``q ~ Dirichlet(alpha·1)``; redrawn until every client holds at least
    ``MIN_SAMPLES`` samples.  No planted groups.

:func:`cap_counts` then subsamples every client holding more than ``samples``
samples to exactly ``samples``, keeping its class proportions up to rounding
(largest remainders).
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError
from coalitions.params import ParameterError

__all__ = ["PARTITIONS", "DOMINANCE", "MIN_SAMPLES", "partition_counts", "assign", "cap_counts",
           "shards_per_class", "draw_shard_pairs"]

PARTITIONS = ("pathological", "practical", "dirichlet", "twins")
MIN_SAMPLES = 10
DOMINANCE = 0.8


def shards_per_class(sizes, n_shards: int, n_clients: int, rng: np.random.Generator) -> np.ndarray:
    r"""Number of shards ``s_c`` cut from each class (sum ``n_shards``, each ``≤ n_clients``).

    With ``n_shards ≥ C``: one shard per class, then each further shard to the
    class maximising ``n_c / (s_c + 1)`` among those with ``s_c < n_clients``
    (D'Hondt's rule: it keeps the shards as equal in size as whole shards per
    class allow), ties broken by a random order of the classes.  With
    ``n_shards < C``: ``n_shards`` classes drawn at random, one shard each.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    C = len(sizes)
    s = np.zeros(C, dtype=np.int64)
    if n_shards < C:
        s[rng.choice(C, size=n_shards, replace=False)] = 1
        return s
    s[:] = 1
    tie = rng.permutation(C)  # a random priority among equal quotients
    for _ in range(n_shards - C):
        quotient = np.where(s < n_clients, sizes / (s + 1.0), -np.inf)
        best = np.flatnonzero(quotient == quotient.max())
        s[best[np.argmin(tie[best])]] += 1
    return s


def draw_shard_pairs(shards, rng: np.random.Generator) -> np.ndarray:
    """Classes of the two shards of each client, ``(K, 2)``, two different classes per client.

    ``shards[c]`` shards of class ``c``, ``sum = 2K`` and ``max ≤ K``.  Client
    after client, a pair of shards of two different classes is drawn with
    probability proportional to ``m_a · m_b`` (``m``: shards left), among the
    pairs that contain every class with ``m_c = r`` (``r``: clients left, this
    one included); afterwards ``max m ≤ r − 1``, so the draw never gets stuck.
    """
    m = np.array(shards, dtype=np.int64)
    K = int(m.sum()) // 2
    if m.sum() != 2 * K or (K and m.max() > K):
        raise ValueError(f"shards {m.tolist()} cannot be paired into {K} clients of two classes")
    pairs = np.zeros((K, 2), dtype=np.int64)
    for k in range(K):
        r = K - k
        W = np.outer(m, m).astype(np.float64)
        np.fill_diagonal(W, 0.0)
        W = np.triu(W)  # each unordered pair once
        for c in np.flatnonzero(m == r):  # a class that must be drawn now
            keep = np.zeros_like(W, dtype=bool)
            keep[c, :] = keep[:, c] = True
            W[~keep] = 0.0
        flat = rng.choice(W.size, p=W.ravel() / W.sum())
        a, b = divmod(int(flat), len(m))
        pairs[k] = a, b
        m[a] -= 1
        m[b] -= 1
    return pairs


def _pathological(n_clients, labels, rng):
    classes, sizes = np.unique(labels, return_counts=True)
    if len(classes) < 2:
        raise ParameterError("partition", f"{{name}} pathological needs two classes or more, the data has {len(classes)}")
    s = shards_per_class(sizes, 2 * n_clients, n_clients, rng)
    if np.any(s > sizes):
        c = int(np.flatnonzero(s > sizes)[0])
        raise ParameterError("clients", f"{{name}} {n_clients}: class {classes[c]} has {sizes[c]} samples, "
                             f"fewer than its {s[c]} shards")
    pairs = draw_shard_pairs(s, rng)
    counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
    for c in np.flatnonzero(s):
        holders = np.flatnonzero((pairs == c).any(axis=1))
        shard_sizes = np.array([len(a) for a in np.array_split(np.arange(sizes[c]), s[c])], dtype=np.int64)
        counts[holders, c] = rng.permutation(shard_sizes)
    return counts, None


def _twins(n_clients, labels, rng):
    classes = np.unique(labels)
    order = rng.permutation(classes)
    held = [{order[(2 * k) % len(order)], order[(2 * k + 1) % len(order)]} for k in range(n_clients)]
    counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
    for ci, c in enumerate(classes):
        holders = [k for k in range(n_clients) if c in held[k]]
        if holders:
            avail = int(np.sum(labels == c))
            share = np.full(len(holders), avail // len(holders))
            share[: avail % len(holders)] += 1
            counts[holders, ci] = share
    groups = {}
    for k, h in enumerate(held):
        groups.setdefault(tuple(sorted(int(c) for c in h)), []).append(k)
    return counts, list(groups.values())


def _practical(n_clients, labels, n_groups, rng):
    classes = np.unique(labels)
    C = len(classes)
    if not 1 <= n_groups <= min(n_clients, C):
        raise ParameterError("groups", f"{{name}} must be in 1..{min(n_clients, C)} for {n_clients} clients and {C} "
                             f"classes, got {n_groups}")
    member_groups = np.array_split(np.arange(n_clients), n_groups)
    dominant = np.array_split(rng.permutation(C), n_groups)
    P = np.zeros((n_clients, C))
    for g, ks in enumerate(member_groups):
        dom = np.zeros(C, dtype=bool)
        dom[dominant[g]] = True
        share = np.where(dom, DOMINANCE / dom.sum(), (1 - DOMINANCE) / max(1, C - dom.sum()))
        if dom.all():
            share = np.full(C, 1.0 / C)
        P[ks] = share
    avail = np.array([np.sum(labels == c) for c in classes], dtype=float)
    per_client = np.floor(np.min(avail / P.sum(axis=0)))
    counts = np.floor(P * per_client).astype(np.int64)
    return counts, [list(map(int, ks)) for ks in member_groups]


def _dirichlet(n_clients, labels, alpha, rng):
    classes = np.unique(labels)
    for _ in range(1000):
        counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
        for ci, c in enumerate(classes):
            avail = int(np.sum(labels == c))
            q = rng.dirichlet(np.full(n_clients, alpha))
            cuts = np.floor(np.cumsum(q) * avail).astype(np.int64)
            cuts[-1] = avail
            counts[:, ci] = np.diff(np.concatenate([[0], cuts]))
        if counts.sum(axis=1).min() >= MIN_SAMPLES:
            return counts, None
    raise ParameterError("alpha", f"{{name}} {alpha}: no Dirichlet draw in 1000 gave every one of {n_clients} clients "
                         f"{MIN_SAMPLES} samples; raise --alpha or lower --clients")


def partition_counts(labels, clients: int, partition: str, groups: int, alpha: float, rng):
    """``(counts, planted)``: samples of each class per client ``(K, C)`` and planted groups (indices or None)."""
    if partition == "pathological":
        return _pathological(clients, labels, rng)
    if partition == "twins":
        return _twins(clients, labels, rng)
    if partition == "practical":
        return _practical(clients, labels, groups, rng)
    if partition == "dirichlet":
        return _dirichlet(clients, labels, alpha, rng)
    raise ParameterError("partition", f"{{name}} must be one of {', '.join(PARTITIONS)}, got {partition!r}")


def cap_counts(counts, samples: int, rng: np.random.Generator) -> np.ndarray:
    r"""``counts`` with every row summing to more than ``samples`` cut down to exactly ``samples``.

    Row ``k`` with total ``n_k > samples`` becomes ``⌊samples · counts[k, c] / n_k⌋``
    plus one for the classes with the largest remainders (ties in a random
    order), so the client keeps its class proportions up to rounding and never
    gains a class.  Rows at or below ``samples`` are unchanged.
    """
    counts = np.array(counts, dtype=np.int64)
    out = counts.copy()
    for k, row in enumerate(counts):
        n = int(row.sum())
        if n <= samples:
            continue
        quota = samples * row / n
        base = np.floor(quota).astype(np.int64)
        rest = samples - int(base.sum())
        order = np.lexsort((rng.permutation(len(row)), -(quota - base)))
        base[order[:rest]] += 1
        out[k] = base
    return out


def assign(labels, counts, rng) -> list[np.ndarray]:
    """Disjoint sample indices per client: ``counts[k, c]`` samples of class ``c`` to client ``k``."""
    classes = np.unique(labels)
    out: list[list[np.ndarray]] = [[] for _ in range(counts.shape[0])]
    for ci, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.concatenate([[0], np.cumsum(counts[:, ci])])
        if cuts[-1] > idx.size:
            raise InputError(f"class {c}: {cuts[-1]} samples asked, {idx.size} available")
        for k in range(counts.shape[0]):
            out[k].append(idx[cuts[k]:cuts[k + 1]])
    return [np.sort(np.concatenate(p)) for p in out]
