"""The allocator setting of the exact game (learners/training/allocator.py) changes no value.

``tests/data/exact_personal_game.npz`` holds two small personal-head games (4 clients, an MLP,
12 steps, 3 bootstrap replicates) computed with main's code at commit 71edf57 before the
setting existed (script: the ``_games`` function below, run there); the games now must equal
them to the bit.
"""
import platform
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from learner_fixtures import blobs, regression  # noqa: E402

from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.training.allocator import keep_freed_memory  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "exact_personal_game.npz"


def _games() -> dict:
    out = {}
    for name, fed in (("blobs", blobs(sizes=(14, 10, 12, 9), dim=4, classes=3)),
                      ("regression", regression(sizes=(10, 14, 9, 11)))):
        p = TrainingProtocol(model="mlp", hidden=8, steps=12)
        o = ExhaustiveOracle(heads="personal", protocol=p, replicates=3, device="cpu", seed=1, threads=1).fit(fed)
        out.update({f"{name}_val": o.values_val_, f"{name}_test": o.values_test_,
                    f"{name}_replicates": o.replicates_.values})
    return out


def test_game_is_the_same_to_the_bit_with_freed_memory_kept():
    ref = np.load(REFERENCE)
    got = _games()
    if platform.libc_ver()[0] == "glibc":  # the oracle turned it on; a second call reports it in force
        assert keep_freed_memory()
    assert sorted(got) == sorted(ref.files)
    for k in ref.files:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
