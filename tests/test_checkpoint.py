"""The one checkpoint format (coalitions/learners/training/checkpoint.py)."""

import math

import numpy as np
import pytest
import torch

from coalitions.errors import InputError
from coalitions.learners.training.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    federation_arrays,
    fingerprint,
    load_state,
    save_state,
)


def _state():
    return {"params": {"w": torch.randn(3, 4, dtype=torch.float64), "b": torch.arange(3)},
            "history": [torch.eye(2), torch.zeros(2, 2)], "guarded": 2, "ema": np.array([[1.5, math.nan]]),
            "tags": ("a", None, True, 0.1)}


def test_state_round_trips_exactly(tmp_path):
    path = tmp_path / "ck"
    state = _state()
    save_state(path, "k", 5, state, {"loss_history": [0.5, math.nan]})
    assert not list(tmp_path.glob("*.tmp"))
    progress, back, meta = load_state(path, "k")
    assert progress == 5 and back["guarded"] == 2 and back["tags"] == ["a", None, True, 0.1]
    for k in ("w", "b"):
        assert isinstance(back["params"][k], torch.Tensor) and torch.equal(back["params"][k], state["params"][k])
        assert back["params"][k].dtype == state["params"][k].dtype
    assert all(torch.equal(a, b) for a, b in zip(back["history"], state["history"], strict=True))
    assert isinstance(back["ema"], np.ndarray) and np.array_equal(back["ema"], state["ema"], equal_nan=True)
    assert meta["loss_history"][0] == 0.5 and math.isnan(meta["loss_history"][1])
    with np.load(path, allow_pickle=False) as z:
        assert str(z["format"]) == CHECKPOINT_FORMAT


def test_a_missing_file_is_no_checkpoint_and_others_are_refused(tmp_path):
    assert load_state(tmp_path / "none", "k") is None
    save_state(tmp_path / "ck", "k", 1, {"x": np.zeros(2)})
    with pytest.raises(InputError, match="checkpoint of a different run"):
        load_state(tmp_path / "ck", "other")
    (tmp_path / "junk").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a readable checkpoint"):
        load_state(tmp_path / "junk", "k")
    np.savez(tmp_path / "old.npz", key=np.array("k"), done=np.zeros(2, bool))  # an older layout
    with pytest.raises(InputError, match="not a checkpoint of this toolkit"):
        load_state(tmp_path / "old.npz", "k")
    torch.save({"key": "k", "round": 1, "state": {}, "meta": {}}, tmp_path / "old.pt")  # 0.1.0's learners
    with pytest.raises(InputError, match="not a checkpoint of this toolkit"):
        load_state(tmp_path / "old.pt", "k")


def test_a_state_holding_something_else_is_refused(tmp_path):
    with pytest.raises(TypeError, match="cannot hold a set"):
        save_state(tmp_path / "ck", "k", 1, {"x": {1, 2}})


def test_fingerprint_sees_settings_and_bytes():
    a = np.arange(4.0)
    assert fingerprint({"x": 1}, [a]) == fingerprint({"x": 1}, [a.copy()])
    assert fingerprint({"x": 1}, [a]) != fingerprint({"x": 2}, [a])
    assert fingerprint({"x": 1}, [a]) != fingerprint({"x": 1}, [a.astype(np.float32)])
    assert fingerprint({"x": 1}, [a]) != fingerprint({"x": 1}, [a.reshape(2, 2)])


def test_federation_arrays_cover_every_split():
    from learner_fixtures import blobs

    fed = blobs(sizes=(5, 6))
    arrays = federation_arrays(fed)
    assert len(arrays) == 2 * 3 * 2 and arrays[0] is fed.clients[0].train.X


def test_chunk_checkpoint_resumes_and_refuses_another_layout(tmp_path):
    ck = Checkpoint(tmp_path / "o.npz", "k", {"val": (2, 4)}, 3)
    ck.arrays["val"][0] = 1.0
    ck.done[1] = True
    ck.save()
    back = Checkpoint(tmp_path / "o.npz", "k", {"val": (2, 4)}, 3).load()
    assert back.done.tolist() == [False, True, False] and back.arrays["val"][0].tolist() == [1.0] * 4
    with pytest.raises(InputError, match="different run"):
        Checkpoint(tmp_path / "o.npz", "k", {"val": (2, 4)}, 4).load()
