"""What every baseline of the paper's tables shares: resume from a checkpoint, seeds, the CLI (docs/learners-baselines.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.cli import main
from coalitions.learners.methods.registry import METHODS
from coalitions.learners.training.engine import flatten

NEW = ("fedprox", "ditto", "fedper", "lg-fedavg", "qffl", "afl", "per-fedavg", "pfedme", "pfedhn")
KW = dict(protocol=sgd_protocol(4, (9, 12, 7, 10), model="mlp", hidden=8, batch_size=6), seed=1, engine="batched")


class Stop(Exception):
    pass


def _stop_at(k):
    def progress(done, total):
        if done == k:
            raise Stop
    return progress


@pytest.mark.parametrize("name", NEW)
def test_resume_from_checkpoint_equals_an_uninterrupted_run(name, tmp_path):
    cls = METHODS[name].estimator_class()
    fed = blobs(sizes=(9, 12, 7, 10))
    whole = cls(**KW).fit(fed)
    path = tmp_path / "ck.npz"
    with pytest.raises(Stop):
        cls(checkpoint=path, progress=_stop_at(2), **KW).fit(fed)
    resumed = cls(checkpoint=path, **KW).fit(fed)
    assert resumed.resumed_from_ == 2
    assert torch.equal(flatten(resumed.params_), flatten(whole.params_))
    assert resumed.utilities_ == whole.utilities_ and resumed.loss_history_ == whole.loss_history_
    assert json.dumps(resumed.estimate_.extra.get("lambda")) == json.dumps(whole.estimate_.extra.get("lambda"))
    other = cls(**{**KW, "seed": 2}).fit(fed)
    assert not torch.equal(flatten(other.params_), flatten(whole.params_))
    e = whole.estimate_
    assert e.method == name and e.weights is None and e.config["graph"] == "structural"
    assert e.blocks() == [list(fed.names)]      # one shared model / body / hypernetwork: everybody
    assert all(np.isfinite(v) for v in whole.utilities_["test"].values())


@pytest.mark.parametrize("name, flags", [("fedprox", ["--mu", "0.1"]), ("afl", ["--lambda-lr", "0.2"]),
                                         ("pfedme", ["--pfedme-lambda", "5", "--inner-tol", "0.01"]),
                                         ("pfedhn", ["--client-embed", "4"])])
def test_learn_runs_each_baseline_and_refuses_a_foreign_option(name, flags, tmp_path, capsys):
    out = tmp_path / "e.json"
    rc = main(["learn", "synthetic", "--method", name, "--steps", "2", "--device", "cpu", *flags, "-o", str(out)])
    assert rc == 0 and json.loads(out.read_text())["method"] == name
    capsys.readouterr()
    rc = main(["learn", "synthetic", "--method", name, "--steps", "2", "--ditto-lambda", "1", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--ditto-lambda does not apply to --method " + name in err


def test_a_bad_parameter_is_named_on_the_command_line(tmp_path, capsys):
    rc = main(["learn", "synthetic", "--method", "qffl", "--q", "-1", "--steps", "1", "-o", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("coalitions: error:") and "--q" in err and err.count("\n") == 1


def test_method_flags_never_collide_with_dataset_flags():
    from coalitions.learners.data.datasets import OPTIONS
    from coalitions.learners.methods.registry import all_options

    flags = {o.flag for o in all_options()}
    assert not flags & {o.flag for o in OPTIONS}
    # a flag two methods share means the same estimator parameter in both
    for m in METHODS.values():
        for o in m.options:
            assert {x.arg for x in all_options() if x.flag == o.flag} == {o.arg}
