"""Label-skew partitions (learners/data/datasets/partitions.py): McMahan's shards, twins, the cap."""

import importlib.util
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.learners.data.datasets import load
from coalitions.learners.data.datasets.partitions import (
    assign,
    cap_counts,
    draw_shard_pairs,
    partition_counts,
    shards_per_class,
)

needs_digits = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn not installed")


def client_classes(fed):
    return [frozenset(np.concatenate([c.train.y, c.val.y, c.test.y]).tolist()) for c in fed.clients]


# ---------------------------------------------------------------------------- shards per class
def brute_force_maximin(sizes, n_shards, cap):
    """Largest smallest mean shard size min_c n_c / s_c over all allocations with 1 <= s_c <= cap."""
    best = -1.0
    for s in itertools.product(range(1, cap + 1), repeat=len(sizes)):
        if sum(s) == n_shards:
            best = max(best, min(n / k for n, k in zip(sizes, s, strict=True)))
    return best


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=5), st.integers(1, 6), st.integers(0, 2**31))
def test_shards_per_class_keeps_shards_as_large_as_possible(sizes, clients, seed):
    n_shards = 2 * clients
    s = shards_per_class(sizes, n_shards, clients, np.random.default_rng(seed))
    assert s.sum() == n_shards and s.max() <= clients
    if n_shards < len(sizes):  # a random choice of classes, one shard (the whole class) each
        assert sorted(set(s.tolist())) == [0, 1]
        return
    assert s.min() >= 1
    # D'Hondt's rule maximises the smallest mean shard size (brute force over every allocation)
    ours = min(n / k for n, k in zip(sizes, s.tolist(), strict=True))
    assert ours == pytest.approx(brute_force_maximin(sizes, n_shards, clients))


def test_shards_per_class_balanced_is_mcmahan():
    # balanced classes and C | 2K: every class cut into 2K / C equal shards, as sorting and cutting does
    for clients in (5, 10, 15):
        s = shards_per_class([700] * 10, 2 * clients, clients, np.random.default_rng(0))
        assert s.tolist() == [2 * clients // 10] * 10
    # ties are broken at random: which classes get the extra shards varies with the seed
    extra = {tuple(shards_per_class([50] * 10, 14, 7, np.random.default_rng(seed)).tolist()) for seed in range(20)}
    assert len(extra) > 5


# ---------------------------------------------------------------------------- pairing shards
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=2, max_size=7), st.integers(0, 2**31))
def test_draw_shard_pairs_uses_every_shard_once_two_classes_per_client(shards, seed):
    m = np.array(shards)
    if m.sum() % 2 or m.max() > m.sum() // 2:  # no way to give every client two different classes
        with pytest.raises(ValueError, match="cannot be paired"):
            draw_shard_pairs(m, np.random.default_rng(seed))
        return
    pairs = draw_shard_pairs(m, np.random.default_rng(seed))
    assert pairs.shape == (m.sum() // 2, 2)
    assert np.all(pairs[:, 0] != pairs[:, 1])
    assert np.array_equal(np.bincount(pairs.ravel(), minlength=len(m)), m)


def test_draw_shard_pairs_is_uniform_over_matchings_of_single_shards():
    # four classes with one shard each: the three ways of pairing them are equally likely
    seen = {}
    rng = np.random.default_rng(12)
    for _ in range(3000):
        p = draw_shard_pairs([1, 1, 1, 1], rng)
        key = frozenset(frozenset(r.tolist()) for r in p)
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 3
    assert all(abs(v / 3000 - 1 / 3) < 0.04 for v in seen.values())


def test_draw_shard_pairs_forced_classes():
    # two classes with K shards each: every client must get one of each
    pairs = draw_shard_pairs([4, 4], np.random.default_rng(0))
    assert sorted(map(tuple, np.sort(pairs, axis=1).tolist())) == [(0, 1)] * 4
    # a class with as many shards as clients is in every pair
    pairs = draw_shard_pairs([3, 1, 1, 1], np.random.default_rng(1))
    assert np.all((pairs == 0).any(axis=1))


# ---------------------------------------------------------------------------- the pathological scheme
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 13), st.lists(st.integers(30, 90), min_size=10, max_size=10))
def test_pathological_two_classes_per_client_from_2k_shards(seed, clients, sizes):
    labels = np.repeat(np.arange(10), sizes)
    counts, planted = partition_counts(labels, clients, "pathological", 3, 1.0, np.random.default_rng(seed))
    assert planted is None
    assert np.all(np.count_nonzero(counts, axis=1) == 2)  # two classes per client, exactly
    assert np.count_nonzero(counts) == 2 * clients        # 2K shards, one per (client, class) held
    used = counts.sum(axis=0)
    if 2 * clients >= 10:  # every class cut completely into shards
        assert np.array_equal(used, sizes)
    else:  # 2K whole classes, the others left out
        assert np.count_nonzero(used) == 2 * clients
        assert all(u in (0, n) for u, n in zip(used, sizes, strict=True))
    for c in range(10):  # a class's shards differ by at most one sample
        held = counts[:, c][counts[:, c] > 0]
        assert held.size == 0 or held.max() - held.min() <= 1
    owned = assign(labels, counts, np.random.default_rng(seed + 1))
    allidx = np.concatenate(owned)
    assert len(np.unique(allidx)) == len(allidx)  # no sample in two clients


def test_pathological_refusals_name_the_parameter():
    with pytest.raises(InputError, match="^partition pathological needs two classes"):
        partition_counts(np.zeros(50, np.int64), 3, "pathological", 3, 1.0, np.random.default_rng(0))
    with pytest.raises(InputError, match="^clients 4: class 1 has 2 samples, fewer than its 4 shards"):
        partition_counts(np.array([0] * 50 + [1] * 2), 4, "pathological", 3, 1.0, np.random.default_rng(0))


@needs_digits
def test_pathological_pairs_overlap_at_random_across_seeds():
    pairs = []
    for seed in range(8):
        fed = load("digits", partition="pathological", clients=10, seed=seed)
        held = client_classes(fed)
        assert all(len(h) == 2 for h in held)
        assert fed.planted_groups is None
        assert sum(len(c.train) + len(c.val) + len(c.test) for c in fed.clients) == 1797
        pairs.append(tuple(sorted(tuple(sorted(h)) for h in held)))
        # every class is held by two clients (20 shards of 10 classes) ...
        assert sorted(c for h in held for c in h) == sorted(list(range(10)) * 2)
    assert len(set(pairs)) == 8  # ... in a different arrangement on every seed
    # and the pairs overlap: on most seeds some two clients share exactly one class (twins never do)
    def overlapping(h):
        return any(len(a & b) == 1 for a, b in itertools.combinations(h, 2))
    assert sum(overlapping([frozenset(p) for p in ps]) for ps in pairs) >= 6


@needs_digits
def test_twins_keeps_the_old_split():
    fed = load("digits", partition="twins", clients=10, seed=3)
    held = client_classes(fed)
    assert fed.planted_groups == (("0", "5"), ("1", "6"), ("2", "7"), ("3", "8"), ("4", "9"))
    for g in fed.planted_groups:  # twins hold the same pair; pairs of different groups are disjoint
        assert held[int(g[0])] == held[int(g[1])] and len(held[int(g[0])]) == 2
    assert len(set().union(*held)) == 10


@needs_digits
@pytest.mark.parametrize("partition", ["pathological", "twins", "practical", "dirichlet"])
def test_splits_are_stratified_and_single_class_splits_truthful(partition):
    fed = load("digits", partition=partition, clients=10, seed=2, alpha=0.3)
    direct = tuple((c.name, part) for c in fed.clients for part in ("val", "test")
                   if len(set(getattr(c, part).y.tolist())) < 2)
    assert fed.single_class_splits == direct
    for c in fed.clients:
        train = set(c.train.y.tolist())
        every = set(np.concatenate([c.train.y, c.val.y, c.test.y]).tolist())
        assert train == every  # training keeps every class the client holds
        for part in ("val", "test"):  # each class of >= 3 samples reaches both evaluation splits
            y = np.concatenate([c.train.y, c.val.y, c.test.y])
            big = {k for k in every if np.sum(y == k) >= 3}
            assert big <= set(getattr(c, part).y.tolist())
    if partition in ("pathological", "twins"):
        assert fed.single_class_splits == ()


# ---------------------------------------------------------------------------- the cap on samples per client
@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 6), st.integers(1, 60))
def test_cap_counts(seed, clients, samples):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 30, (clients, 5)) * (rng.random((clients, 5)) < 0.7)
    capped = cap_counts(counts, samples, np.random.default_rng(seed + 1))
    for row, new in zip(counts, capped, strict=True):
        n = row.sum()
        if n <= samples:
            assert np.array_equal(row, new)
        else:
            assert new.sum() == samples
            assert np.all(new <= row) and np.all(np.abs(new - samples * row / n) < 1)


@needs_digits
def test_samples_caps_each_client_in_its_class_proportions():
    full = load("digits", partition="practical", clients=6, groups=2, seed=1)
    fed = load("digits", partition="practical", clients=6, groups=2, samples=100, seed=1)
    assert fed.options["samples"] == 100 and "samples" not in full.options
    for a, b in zip(full.clients, fed.clients, strict=True):
        ya = np.concatenate([a.train.y, a.val.y, a.test.y])
        yb = np.concatenate([b.train.y, b.val.y, b.test.y])
        assert len(yb) == 100
        assert np.all(np.abs(np.bincount(yb, minlength=10) - 100 * np.bincount(ya, minlength=10) / len(ya)) < 1)
    with pytest.raises(InputError, match="^samples must be"):
        load("digits", samples=3)
