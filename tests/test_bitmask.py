"""coalitions.bitmask: coalitions as integer bitmasks (docs/concepts.md §1)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.bitmask import all_masks, contains, mask_of, members, popcount, submasks


def test_members_and_mask_of_examples():
    assert members(0) == ()
    assert members(0b1011) == (0, 1, 3)
    assert members(np.int64(6)) == (1, 2)
    assert mask_of([]) == 0
    assert mask_of([3, 0, 1]) == 0b1011
    assert mask_of(np.array([2, 2])) == 4  # a repeated index sets its bit once


@given(st.integers(0, 2**40))
@settings(max_examples=200, deadline=None)
def test_members_mask_of_round_trip(mask):
    ms = members(mask)
    assert list(ms) == sorted(ms)
    assert mask_of(ms) == mask
    assert len(ms) == bin(mask).count("1")


@given(st.integers(0, 2**12 - 1))
@settings(max_examples=200, deadline=None)
def test_submasks_are_exactly_the_subsets_ascending(mask):
    subs = submasks(mask)
    naive = [s for s in range(mask + 1) if s & ~mask == 0]
    assert subs.dtype == np.int64
    assert subs.tolist() == naive
    assert subs.size == 2 ** bin(mask).count("1")


def test_submasks_of_empty_set():
    assert submasks(0).tolist() == [0]


def test_popcount_all_masks_contains():
    masks = all_masks(5)
    assert masks.tolist() == list(range(32))
    assert popcount(masks).tolist() == [bin(m).count("1") for m in range(32)]
    assert popcount(np.array([2**40 - 1])).tolist() == [40]
    for i in range(5):
        assert contains(masks, i).tolist() == [bool((m >> i) & 1) for m in range(32)]
    assert contains(masks, 0).dtype == bool
    assert all_masks(0).tolist() == [0]
