"""Test rows keep their source row numbers, so that a report pooling seeds counts distinct rows (issue 33)."""

from __future__ import annotations

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.learners.data.datasets import load
from coalitions.learners.data.federation import Split
from coalitions.learners.experiments.seedstats import distinct_test_rows


def _ids(name, seeds, **options):
    return [{c.name: c.test.ids for c in load(name, seed=s, **options).clients} for s in seeds]


def test_heart_draws_patients_again_and_counts_each_once():
    per_seed = _ids("heart", range(5))
    names = list(per_seed[0])
    distinct = distinct_test_rows(names, per_seed)
    for c in names:
        rows_over_seeds = sum(len(ids[c]) for ids in per_seed)
        assert distinct[c] < rows_over_seeds        # the splits reuse patients
        assert distinct[c] >= max(len(ids[c]) for ids in per_seed)
    fed = load("heart", seed=0)
    for c in fed.clients:   # the ids are disjoint between a client's splits
        assert not set(c.test.ids) & set(c.train.ids) and not set(c.test.ids) & set(c.val.ids)


def test_adults_test_rows_are_the_same_file_rows_every_seed():
    pytest.importorskip("sklearn")
    per_seed = _ids("adult", (0, 1), max_train=200)
    for c in per_seed[0]:
        assert np.array_equal(per_seed[0][c], per_seed[1][c])
    assert distinct_test_rows(list(per_seed[0]), per_seed) == {c: len(v) for c, v in per_seed[0].items()}


def test_a_split_checks_its_ids_and_a_source_without_them_is_unknown():
    X, y = np.zeros((3, 2), np.float32), np.zeros(3, np.int64)
    assert Split(X, y).ids is None and Split(X, y, [4, 5, 6]).ids.tolist() == [4, 5, 6]
    with pytest.raises(InputError, match="row ids"):
        Split(X, y, [1, 2])
    assert distinct_test_rows(["a"], [{"a": np.arange(3)}, {"a": None}]) == {"a": None}
