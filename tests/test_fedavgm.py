"""FedAvgM, the worked example of docs/adding-a-method.md: its server step, FedAvg at beta 0, the command line.

Over Flower it needs no test of its own: ``tests/test_rounds.py`` runs every method written as steps
(FedAvgM included, through the registry) over an in-memory Flower grid against ``fit``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_line, run_as_command

torch = pytest.importorskip("torch")

from learner_fixtures import blobs, sgd_protocol  # noqa: E402

from coalitions.learners.methods.baselines import FedAvg  # noqa: E402
from coalitions.learners.methods.fedavgm import FedAvgM  # noqa: E402
from coalitions.learners.training.engine import flatten  # noqa: E402
from coalitions.params import ParameterError  # noqa: E402

SIZES = (9, 12, 7, 10)
KW = dict(protocol=sgd_protocol(4, SIZES, model="mlp", hidden=8, batch_size=6), seed=1, engine="batched",
          device="cpu")


def test_the_server_step_is_a_heavy_ball_step_on_the_average():
    m = FedAvgM(server_momentum=0.5, server_lr=2.0)
    m.train_sizes_ = np.array([1, 3])
    w, v = {"a": torch.tensor([[1.0, 2.0]])}, {"a": torch.tensor([[0.5, -1.0]])}
    models = {"a": torch.tensor([[0.0, 0.0], [2.0, 4.0]])}           # their average by size: [1.5, 3.0]
    out = m.server_step({"global": w, "velocity": v, "model": models, "site_opt": "kept"}, 0)
    v_new = 0.5 * v["a"] + (w["a"] - torch.tensor([[1.5, 3.0]]))       # [-0.25, -1.5]
    torch.testing.assert_close(out["velocity"]["a"], v_new)
    torch.testing.assert_close(out["global"]["a"], w["a"] - 2.0 * v_new)
    assert "model" not in out and out["site_opt"] == "kept"


def test_zero_momentum_is_fedavg():
    fed = blobs(sizes=SIZES)
    a, b = FedAvgM(server_momentum=0.0, **KW).fit(fed), FedAvg(**KW).fit(fed)
    torch.testing.assert_close(flatten(a.global_), flatten(b.global_), atol=1e-6, rtol=0)
    assert a.utilities_ == b.utilities_
    np.testing.assert_allclose(a.loss_history_, b.loss_history_, atol=1e-6)


def test_momentum_changes_the_model_and_a_checkpoint_resumes_it(tmp_path):
    fed = blobs(sizes=SIZES)
    whole = FedAvgM(**KW).fit(fed)
    assert not torch.allclose(flatten(whole.global_), flatten(FedAvg(**KW).fit(fed).global_))

    class Stop(Exception):
        pass

    def stop_at_2(done, total):
        if done == 2:
            raise Stop

    path = tmp_path / "ck.npz"
    with pytest.raises(Stop):
        FedAvgM(checkpoint=path, progress=stop_at_2, **KW).fit(fed)
    resumed = FedAvgM(checkpoint=path, **KW).fit(fed)          # the velocity is in the checkpoint too
    assert resumed.resumed_from_ == 2 and torch.equal(flatten(resumed.global_), flatten(whole.global_))
    e = whole.estimate_
    assert e.method == "fedavgm" and e.weights is None and e.blocks() == [list(fed.names)]


@pytest.mark.parametrize("params, name", [({"server_momentum": 1.0}, "server_momentum"),
                                          ({"server_momentum": -0.1}, "server_momentum"),
                                          ({"server_lr": 0.0}, "server_lr")])
def test_bad_parameters_are_refused_by_name(params, name):
    with pytest.raises(ParameterError, match=name):
        FedAvgM(**params, **KW).fit(blobs(sizes=SIZES))


def test_learn_runs_it_and_refuses_a_bad_momentum_in_one_line(tmp_path):
    out = tmp_path / "e.json"
    rc, _, err = run_as_command("learn", "synthetic", "--method", "fedavgm", "--server-momentum", "0.5",
                                "--steps", "2", "--device", "cpu", "-o", out)
    assert rc == 0, err
    assert json.loads(out.read_text())["method"] == "fedavgm"
    rc, _, err = run_as_command("learn", "synthetic", "--method", "fedavgm", "--server-momentum", "1",
                                "--steps", "2", "-o", tmp_path / "f.json")
    assert rc == 2 and "--server-momentum" in one_line(err), err
