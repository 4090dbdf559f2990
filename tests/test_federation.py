"""Federation containers (learners/federation.py): validation and derived properties."""

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.learners.data.federation import Client, Federation, Split


def split(n=4, d=3, classes=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n) if classes is None else rng.integers(0, classes, n)
    return Split(X, y)


def fed(task="regression", metric="mse", n_classes=None, names=("a", "b"), **kw):
    classes = None if task == "regression" else n_classes
    clients = tuple(Client(n, split(classes=classes), split(classes=classes, seed=1), split(classes=classes, seed=2))
                    for n in names)
    return Federation("toy", task, metric, clients, n_classes, kw.get("planted"), kw.get("options", {}))


def test_split_casts_and_freezes():
    s = Split(np.arange(6).reshape(3, 2), np.array([0, 1, 1]))
    assert s.X.dtype == np.float32 and s.y.dtype == np.int64 and len(s) == 3
    r = Split(np.zeros((2, 1)), np.array([0.5, 1.5]))
    assert r.y.dtype == np.float32
    with pytest.raises(ValueError):
        s.X[0, 0] = 1.0


@pytest.mark.parametrize("X, y", [(np.zeros(3), np.zeros(3)), (np.zeros((3, 2)), np.zeros(2)),
                                  (np.zeros((3, 2)), np.zeros((3, 1)))])
def test_split_rejects_shapes(X, y):
    with pytest.raises(InputError):
        Split(X, y)


def test_properties():
    f = fed(planted=[["a", "b"]], options={"seed": 3})
    assert f.n == 2 and f.names == ("a", "b") and f.input_shape == (3,)
    assert f.sense == "min" and f.n_outputs == 1 and f.planted_groups == (("a", "b"),)
    assert list(f.sizes("val")) == [4, 4]
    c = fed("multiclass", "accuracy", 5)
    assert c.sense == "max" and c.n_outputs == 5
    b = fed("binary", "auc", 2)
    assert b.n_outputs == 1 and b.sense == "max"


@pytest.mark.parametrize("kw, msg", [
    (dict(task="ranking"), "task"),
    (dict(metric="r2"), "metric"),
    (dict(names=("a", "a")), "twice"),
    (dict(names=("a,b",)), "client name"),
    (dict(planted=[["a", "zz"]]), "zz"),
    (dict(task="binary", metric="auc", n_classes=3), "binary"),
])
def test_rejects(kw, msg):
    with pytest.raises(InputError, match=msg):
        fed(**kw)


def test_rejects_label_out_of_range_and_wrong_dtype():
    good = split(classes=3)
    bad = Split(np.zeros((2, 3)), np.array([0, 7]))
    with pytest.raises(InputError, match="'x'.*labels"):
        Federation("t", "multiclass", "accuracy", (Client("x", good, bad, good),), 3)
    with pytest.raises(InputError, match="dtype"):
        Federation("t", "regression", "mse", (Client("x", good, good, good),))


def test_rejects_shape_mismatch_and_empty():
    a = split()
    with pytest.raises(InputError, match="'y'.*shape"):
        Federation("t", "regression", "mse", (Client("x", a, a, a), Client("y", split(d=5), a, a)))
    with pytest.raises(InputError, match="no clients"):
        Federation("t", "regression", "mse", ())
    empty = Split(np.zeros((0, 3)), np.zeros(0))
    with pytest.raises(InputError, match="empty val"):
        Federation("t", "regression", "mse", (Client("x", a, empty, a),))


def test_docstring_examples():
    import doctest

    import coalitions.learners.data.federation

    assert doctest.testmod(coalitions.learners.data.federation).failed == 0
