"""learners/reproduce.py, experiments.py, report.py, figures.py and ``coalitions reproduce``.

The end-to-end test runs ``coalitions reproduce synthetic --quick`` once (about 15 s on a
2-core CPU) and checks the report's structure and the exact CE of both regimes of the paper's
Table 1; a second run must read every piece back instead of training again.
"""

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from coalitions import cli  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.experiments import figures  # noqa: E402
from coalitions.learners.experiments.catalogue import EXPERIMENTS, METHOD_LABELS, get_experiment  # noqa: E402
from coalitions.learners.experiments.report import fmt_stat, report_markdown  # noqa: E402
from coalitions.learners.experiments.results import RESULTS_FORMAT, read_results  # noqa: E402
from coalitions.learners.experiments.runner import summarize  # noqa: E402

COLUMNS = ["Local", "FedAvg", "SPO", "CE (ours)", "CE (paper)", "CE", "FedAMP", "HeurFedAMP", "FedeRiCo (mean)",
           "FedeRiCo (sum)", "SuPerFed-MM"]
#: The statistics cover the columns with per-sample test outputs: not SPO's models in its own CE.
STAT_COLUMNS = [c for c in COLUMNS if c != "CE (ours)"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "synthetic"
    rc = cli.main(["reproduce", "synthetic", "--quick", "-o", str(out)])
    assert rc == 0
    return out


@pytest.mark.slow
def test_quick_synthetic_finds_the_papers_two_equilibria(quick):
    res = read_results(quick / "results.json").to_json()
    assert res["format"] == RESULTS_FORMAT and res["experiment"] == "synthetic" and res["quick"]
    assert [r["name"] for r in res["regimes"]] == ["few", "many"]
    few, many = res["regimes"]
    assert few["family"] == many["family"] == "comparison"
    ex = few["runs"][0]["exact"]
    assert ex["partition"] == [["0", "1", "2"], ["3", "4", "5"]] and ex["certificate"]
    # at the paper's rho = 0.1 (seed 0) every client's OCS is non-empty and inside its planted group
    # ({2}, {0}, {0,1}, {4,5}, {3,5}, {3,4}: not every same-group client is necessary)
    for c, ocs in ex["ocs"].items():
        group = {"0", "1", "2"} if c in "012" else {"3", "4", "5"}
        assert ocs and set(ocs) <= group - {c}, (c, ocs)
    assert many["runs"][0]["exact"]["partition"] == [[c] for c in "012345"]
    assert all(v == [] for v in many["runs"][0]["exact"]["ocs"].values())
    # in the CE each client's test MSE is far below its MSE alone (regime I) and equal to it (II)
    for c in "012345":
        assert ex["test"]["ce"][c] < 0.5 * ex["test"]["local"][c]
        m = many["runs"][0]["exact"]["test"]
        assert m["ce"][c] == m["local"][c]
    # the paper's CE: SPO's partition, each client scored by the exact game's model of its coalition there, so that
    # it is the exact CE's score wherever the partitions agree (regime II: everyone alone, SPO's CE on this seed)
    for reg in (few, many):
        run = reg["runs"][0]
        spo, exact = run["methods"]["spo"], run["exact"]
        paper = spo["ce_paper"]
        assert sorted(map(sorted, paper["partition"])) == sorted(map(sorted, spo["partition"]))
        for c, model in paper["models"].items():
            assert c in model and any(set(model) <= set(b) for b in paper["partition"] if c in b)
        same = sorted(map(sorted, paper["partition"])) == sorted(map(sorted, exact["partition"]))
        assert (paper["test"] == exact["test"]["ce"]) or not same
    assert sorted(map(sorted, many["runs"][0]["methods"]["spo"]["ce_paper"]["partition"])) == [[c] for c in "012345"]


def test_every_regime_has_a_family_fixed_by_the_rule():
    """``Regime.family``: the narrowest family whose held-out CE support reached 0.8 (docs/results.md)."""
    from coalitions.learners.experiments.catalogue import FAMILY_RULE
    from coalitions.noise import FAMILIES

    order, floor = FAMILY_RULE
    assert tuple(order) == ("comparison", "client", "game") and floor == 0.8 and set(order) == set(FAMILIES)
    chosen = {(e.name, r.name): r.family for e in EXPERIMENTS.values() for r in e.regimes}
    assert all(f in FAMILIES for f in chosen.values())
    # the one regime whose primary game fell below 0.8 per comparison and client-wise on splits 100-101
    assert {k for k, f in chosen.items() if f != "comparison"} == {("fashion", "dirichlet")}
    assert chosen[("fashion", "dirichlet")] == "game"


def test_a_regimes_family_is_how_its_exact_games_are_read():
    import numpy as np

    import coalitions as co
    from coalitions.learners.experiments.runner import _read_with_family
    from coalitions.noise import Uncertainty

    g = co.mean_estimation([5, 5, 25])
    measured = g.with_uncertainty(Uncertainty.from_se(g, np.where(np.isnan(g.values), np.nan, 0.1)))
    assert _read_with_family(measured, "game").uncertainty.family == "game"
    assert _read_with_family(measured, "comparison") is measured and _read_with_family(None, "game") is None
    assert _read_with_family(g, "game") is g          # an exact game has no comparisons to widen


@pytest.mark.slow
def test_quick_report_has_every_section_and_column(quick):
    res = read_results(quick / "results.json").to_json()
    for reg in res["regimes"]:
        s = reg["summary"]
        assert s["columns"] == COLUMNS
        for col in COLUMNS:
            for c in reg["clients"] + ["mean"]:
                assert s["test"][col][c]["n"] == 1 and s["test"][col][c]["mean"] is not None
        assert set(s["agreement"]) == set(res["methods"])
    text = (quick / "report.md").read_text()
    for heading in ("# Synthetic", "## I: few samples", "## II: many samples", "### The exact game",
                    "### Each learner's benefit graph", "### Test mse per client", "## Published numbers"):
        assert heading in text, heading
    assert "| client | " + " | ".join(COLUMNS) + " |" in text
    assert "0.24 ± 0.08" in text and "1e-4 ± .0" in text  # the paper's Table 1 beside ours
    assert "`0,1,2 | 3,4,5` (1/1 seeds; support " in text  # with the support of that CE


@pytest.mark.slow
def test_quick_report_shows_the_support_of_every_exact_ce(quick):
    """Every exact CE carries its support over 50 bootstrap replicates, in results.json and report.md."""
    from coalitions.equilibrium import solve
    from coalitions.io import read_game_replicates
    from coalitions.learners.experiments.runner import REPLICATES
    from coalitions.support import support

    res = read_results(quick / "results.json").to_json()
    text = (quick / "report.md").read_text()
    for reg in res["regimes"]:
        run = reg["runs"][0]
        game, reps = read_game_replicates(quick / "runs" / "quick" / f"{reg['name']}-seed{run['seed']}-game.json")
        assert reps is not None and reps.b == REPLICATES
        s = support(solve(game).masks, reps)
        assert run["exact"]["support"] == {"partition": s.partition_share, "replicates": REPLICATES,
                                           "coalitions": {game.key(k): v for k, v in s.coalition_shares.items()}}
        assert f"Support over validation resamples (per seed, the share of {REPLICATES} bootstrap replicates" in text
        assert f"whose CE is that seed's CE; it measures how close the validation values sit to a tie, not what " \
               f"retraining would give): {s.partition_share:.2f};" in text
        assert "Support over retraining (share of the seeds" in text


@pytest.mark.slow
def test_quick_report_has_the_statistics_tables(quick):
    """Intervals, paired tests, sensitivity and SPO's two rules in every regime; seeds recorded separately."""
    from coalitions.learners.experiments.statistics import separate_seeds

    res = read_results(quick / "results.json").to_json()
    text = (quick / "report.md").read_text()
    for heading in ("### Test mse per client with 95% bootstrap intervals", "### Paired tests",
                    "### Sensitivity to the weight rule's threshold",
                    "### SPO: the paper's ratio rule beside backward elimination"):
        assert text.count(heading) == 2, heading
    assert "SPO — paper's ratio rule d_j/d_i ≥ 0.7 (not used)" in text
    for reg in res["regimes"]:
        run = reg["runs"][0]
        pair = separate_seeds(run["seed"])
        assert (run["data_seed"], run["init_seed"]) == (pair.data, pair.init) and pair.data != pair.init
        st = reg["summary"]["statistics"]
        assert st["columns"] == STAT_COLUMNS and st["outputs_check"] < 1e-6
        for col in STAT_COLUMNS:
            for c in reg["clients"]:
                iv = st["intervals"][col][c]
                assert iv["low"] <= iv["estimate"] <= iv["high"], (col, c)
                assert iv["estimate"] == pytest.approx(reg["summary"]["test"][col][c]["mean"], rel=1e-5)
        assert set(st["seed"]["seed_tests"]) == set(STAT_COLUMNS) - {"Local"}
        assert set(reg["summary"]["sensitivity"]) == {"spo", "fedamp", "fedamp-heuristic", "federico-mean",
                                                      "federico-sum"}
        rules = reg["summary"]["spo_rules"]
        assert "ratio" in rules and not rules["ratio"]["used"] and sum(r["used"] for r in rules.values()) == 1


@pytest.mark.slow
def test_quick_figures_exist(quick):
    res = read_results(quick / "results.json").to_json()
    names = set(res["figures"])
    for reg in ("few", "many"):
        assert f"{reg}-exact-ce.dot" in names and f"{reg}-spo-graph.dot" in names
        assert (quick / f"{reg}-exact-ce.dot").read_text().startswith("digraph")
    if figures._pyplot() is None:
        assert "plot_hint" in res
    else:
        for reg in ("few", "many"):
            for kind in ("benefit-graph", "weights", "utilities"):
                png = quick / f"{reg}-{kind}.png"
                assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                assert f"![{png.name}]({png.name})" in (quick / "report.md").read_text()


@pytest.mark.slow
def test_rerun_reads_every_piece_back(quick, capsys):
    before = json.loads((quick / "results.json").read_text())
    rc = cli.main(["reproduce", "synthetic", "--quick", "-o", str(quick)])
    err = capsys.readouterr().err
    assert rc == 0
    trained = [line for line in err.splitlines() if line.startswith("[synthetic]") and "read back" not in line]
    assert trained == []
    after = json.loads((quick / "results.json").read_text())
    assert after["regimes"] == before["regimes"]
    # the time spent on the pieces is remembered, so the report of a resumed run still states it
    assert after["compute_complete"] and after["compute_s"] == pytest.approx(before["compute_s"])
    assert after["compute_s"] > 0


@pytest.mark.slow
def test_without_matplotlib_dot_files_and_a_hint(quick, tmp_path, monkeypatch):
    res = read_results(quick / "results.json").to_json()
    for reg in res["regimes"]:  # the in-memory objects are gone from JSON: DOT of the exact CE is skipped
        for run in reg["runs"]:
            run.get("exact", {}).pop("_equilibrium", None)
    monkeypatch.setattr(figures, "_pyplot", lambda: None)
    files, hint = figures.write_figures(res, tmp_path)
    assert hint == figures.PLOT_HINT and "collaboration-equilibrium[plot]" in hint
    assert not any(f.endswith(".png") for f in files)
    res["figures"], res["plot_hint"] = files, hint
    assert hint in report_markdown(res)


def test_experiments_are_well_formed():
    from coalitions.learners.data.datasets import loader_options
    from coalitions.learners.experiments.catalogue import method_of
    from coalitions.learners.methods.registry import METHODS

    assert set(EXPERIMENTS) == {"synthetic", "heart", "adult", "digits", "fashion"}
    for exp in EXPERIMENTS.values():
        for reg in exp.regimes:
            assert set(reg.options) <= set(loader_options(exp.dataset))
        for m in exp.methods:
            assert method_of(m) in METHODS and m in METHOD_LABELS   # a registered method, or a variant of one
            for quick in (True, False):
                assert set(exp.settings(quick).options_for(m)) <= set(METHODS[method_of(m)].keys)
    # every method's options derive from the experiment's protocol and budget (issue 9)
    from coalitions.learners.experiments.catalogue import budgeted_options

    syn = EXPERIMENTS["synthetic"]
    sizes = [10] * 6
    assert budgeted_options(syn, True, "spo", sizes)["protocol"].steps == syn.protocol_for(True).steps == 100
    assert budgeted_options(syn, True, "fedavg", sizes) == {"protocol": syn.protocol_for(True)}
    # every learner takes the protocol itself (its rounds follow from the budget: tests/test_protocol.py)
    assert budgeted_options(syn, True, "federico", sizes) == {"protocol": syn.protocol_for(True)}
    assert budgeted_options(syn, True, "fedamp", sizes) == {"protocol": syn.protocol_for(True)}
    # a regime's own learning rate and budget reach every method of that regime, the oracle included
    few, many = syn.regimes
    assert syn.protocol_for(True, few).lr == 0.005 and syn.protocol_for(True, many).lr == 0.1
    assert budgeted_options(syn, True, "fedavg", sizes, few) == {"protocol": syn.protocol_for(True, few)}
    assert budgeted_options(syn, True, "federico", sizes, many) == {"protocol": syn.protocol_for(True, many)}
    # FedeRiCo's two loss scales are two columns of one registered method, each with its likelihood fixed
    assert budgeted_options(syn, True, "federico-sum", sizes, many) == {"protocol": syn.protocol_for(True, many),
                                                                        "likelihood": "sum"}
    assert syn.full.options_for("federico-mean") == {"likelihood": "mean"}
    assert syn.oracle_options(True, many)["protocol"].lr == 0.1
    for exp in EXPERIMENTS.values():
        for m in exp.methods:
            for quick in (True, False):
                opts = budgeted_options(exp, quick, m, [100, 40])
                # the protocol's own settings (its learning-rate grid, its patience) reach the estimator as
                # parameters, not as method options
                assert set(opts) - {"protocol", "lr_grid", "patience"} <= set(METHODS[method_of(m)].keys), (exp.name, m)
                if exp.protocol is not None:     # every column, SPO included, reads it from the protocol
                    assert opts["protocol"] == exp.protocol_for(quick), (exp.name, m)


def test_the_exact_games_keywords_hold_no_training_setting():
    """Every experiment's oracle keywords fit the oracle, whose training settings are its protocol's alone."""
    import dataclasses

    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.experiments.columns import oracle_settings
    from coalitions.params import ParameterError

    for exp in EXPERIMENTS.values():
        if exp.oracle is None:
            continue
        for quick in (True, False):
            for regime in (None, *exp.regimes):
                opts = exp.oracle_options(quick, regime)
                ExhaustiveOracle(**opts)._check()  # every key a constructor keyword (a TypeError otherwise), valid
                assert exp.protocol is None or opts["protocol"].steps == exp.protocol_for(quick, regime).steps
    digits = EXPERIMENTS["digits"]   # one model family: the exact game trains the experiment's own protocol
    assert oracle_settings(digits) == digits.oracle_options(False)
    assert oracle_settings(digits)["protocol"] == digits.protocol_for(False)
    assert digits.protocol_for(False).model == "logistic"
    fashion = EXPERIMENTS["fashion"]  # its exact game tunes on the protocol's grid, so Local is its singletons
    p = oracle_settings(fashion)["protocol"]
    assert p == fashion.protocol_for(False) and p.model == "mlp" and p.lr_grid == (0.001, 0.003, 0.01)
    bare = dataclasses.replace(fashion, protocol=None, oracle={"heads": "personal", "lr_grid": None})
    with pytest.raises(ParameterError, match=r"^oracle of experiment 'fashion' sets the protocol field\(s\) "
                                             r"lr_grid but the experiment has no protocol") as e:
        bare.oracle_options(False)
    assert e.value.param == "oracle"
    assert dataclasses.replace(bare, oracle={"heads": "personal"}).oracle_options(True) == {"heads": "personal"}


def test_unknown_experiment():
    with pytest.raises(InputError, match="unknown experiment 'cifar'"):
        get_experiment("cifar")


def test_cli_rejects_bad_arguments(capsys, tmp_path):
    assert cli.main(["reproduce", "cifar", "-o", str(tmp_path)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert cli.main(["reproduce", "synthetic", "--seeds", "a,b", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--seeds" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "cannot create the output folder" in err


def test_summarize_means_and_spread():
    reg = {"clients": ["a", "b"],
           "runs": [{"methods": {"local": {"test": {"a": 1.0, "b": 3.0}}}},
                    {"methods": {"local": {"test": {"a": 3.0, "b": 5.0}}}}]}
    s = summarize(reg, ["local"])
    assert s["columns"] == ["Local"]
    assert s["test"]["Local"]["a"] == {"mean": 2.0, "std": pytest.approx(2 ** 0.5), "n": 2}
    assert s["test"]["Local"]["mean"]["mean"] == 3.0
    assert fmt_stat(s["test"]["Local"]["a"]) == "2 ± 1.4"
    assert fmt_stat({"mean": 0.5, "std": 0.0, "n": 1}) == "0.5" and fmt_stat(None) == "–"


def test_readme_commands_are_the_ones_tested():
    """README's first command runs the quick reproduction tested above; .ci/run runs its second."""
    from conftest import ROOT

    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2
    assert block[0].endswith("coalitions reproduce synthetic --quick -o results")
    run = (ROOT / ".ci" / "run").read_text()
    assert block[1] in run
    # ... once, inside a fresh virtual environment of its own, as a user who follows the README in a
    # new venv runs it (the base interpreter's packages unseen: no --system-site-packages)
    lines = [line.strip() for line in run.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    venv = next(i for i, line in enumerate(lines) if line.startswith("python -m venv "))
    activate = next(i for i, line in enumerate(lines) if line.startswith(". ") and "/bin/activate" in line)
    assert "--system-site-packages" not in lines[venv] and venv < activate < lines.index(block[1])
    assert run.count("python -m pytest") == 1


def test_an_interrupt_says_how_to_resume(tmp_path, capsys, monkeypatch):
    import coalitions.learners.experiments.runner as rp

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rp, "reproduce", interrupted)
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "run the same command again to resume" in err and "interrupted" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_missing_piece_is_the_only_one_trained_again(quick, tmp_path, capsys):
    """What an interrupted run leaves: some pieces finished, one missing."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(quick, out)
    (out / "runs" / "quick" / "many-seed0-fedavg.json").unlink()
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    trained = [line for line in err.splitlines() if line.startswith("[synthetic]") and "read back" not in line]
    assert len(trained) == 1 and trained[0].startswith("[synthetic] many-seed0: fedavg, ")
    assert (out / "runs" / "quick" / "many-seed0-fedavg.json").exists()


def test_a_piece_of_other_settings_is_trained_again(quick, tmp_path, capsys):
    """A finished piece trained under another protocol (here another budget) or with another option of its method (a
    FedeRiCo column with the other loss scale) is not the piece this run asks for: it is trained again, not read."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(quick, out)
    runs = out / "runs" / "quick"
    budget = json.loads((runs / "many-seed0-fedavg.json").read_text())
    budget["config"]["protocol"]["steps"] += 1
    (runs / "many-seed0-fedavg.json").write_text(json.dumps(budget))
    scale = json.loads((runs / "few-seed0-federico-sum.json").read_text())
    scale["config"]["likelihood"] = "mean"
    (runs / "few-seed0-federico-sum.json").write_text(json.dumps(scale))
    game = json.loads((runs / "few-seed0-game.json").read_text())
    game["provenance"]["model"]["protocol"]["local_steps"] = 3
    (runs / "few-seed0-game.json").write_text(json.dumps(game))
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    trained = sorted(line.split(",")[0] for line in err.splitlines()
                     if line.startswith("[synthetic]") and "read back" not in line and "training again" not in line)
    assert trained == ["[synthetic] few-seed0: exact game", "[synthetic] few-seed0: federico-sum",
                       "[synthetic] many-seed0: fedavg"], err
    assert err.count("was made with other seeds or settings") == 3


@pytest.mark.slow
def test_report_rebuilds_from_results_json_alone(quick, tmp_path):
    """report.md is a pure function of results.json (coalitions.learners.experiments.report.rebuild)."""
    import shutil

    from coalitions.learners.experiments.report import rebuild

    shutil.copy(quick / "results.json", tmp_path / "results.json")
    rebuild(tmp_path)
    assert (tmp_path / "report.md").read_text() == (quick / "report.md").read_text()


def test_select_methods_keeps_the_experiments_order_and_refuses_unknown_names():
    from coalitions.learners.experiments.catalogue import select_methods

    adult = EXPERIMENTS["adult"]
    assert select_methods(adult, None) == adult.methods
    assert select_methods(adult, ["afl", "local", "qffl", "local"]) == ("local", "qffl", "afl")
    assert select_methods(adult, ["fedper", "local"]) == ("local", "fedper")   # not adult's, still allowed
    with pytest.raises(InputError, match="unknown method 'nope'"):
        select_methods(adult, ["local", "nope"])
    with pytest.raises(InputError, match="no methods"):
        select_methods(adult, [])
    # the paper's baselines are in adult (bodyless ones) and digits (all)
    assert {"qffl", "afl", "fedprox", "ditto", "per-fedavg", "pfedme", "pfedhn"} <= set(adult.methods)
    assert not {"fedper", "lg-fedavg"} & set(adult.methods)
    assert {"fedper", "lg-fedavg", "qffl", "afl", "pfedhn"} <= set(EXPERIMENTS["digits"].methods)


def test_cli_methods_flag_is_checked_before_anything_runs(capsys, tmp_path):
    assert cli.main(["reproduce", "synthetic", "--methods", "local,nope", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("coalitions: error: --methods: unknown method 'nope'")
    assert not (tmp_path / "o").exists()
    assert cli.main(["reproduce", "synthetic", "--methods", " , ", "-o", str(tmp_path / "o")]) == 2
    assert "--methods: no methods" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_runs_only_the_selected_methods(tmp_path, capsys):
    out = tmp_path / "sub"
    assert cli.main(["reproduce", "synthetic", "--quick", "--methods", "fedprox,local", "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["methods"] == ["local", "fedprox"]
    assert set(res["regimes"][0]["runs"][0]["methods"]) == {"local", "fedprox"}
    assert "| FedProx |" in (out / "report.md").read_text() or "FedProx" in (out / "report.md").read_text()


def test_a_piece_records_its_options_under_the_estimators_names_and_is_read_back():
    """An option an experiment gives by its flag key is recorded under the estimator's parameter (SPO's
    ``mlp_hidden`` is its ``target_hidden``, ``hypernet_hidden`` its ``hidden``): compared by flag key, every
    SPO piece of fashion was trained again on every resume.  Another value is still a piece of other settings."""
    from types import SimpleNamespace

    from coalitions.learners.experiments.pieces import _is_current

    fed = SimpleNamespace(options={"seed": 11})
    options = {"mlp_hidden": 32, "hypernet_hidden": 100, "layers": 2}

    def piece(**config):
        return SimpleNamespace(config={"seed": 5, "data_options": {"seed": 11}, **config},
                               extra={"test_outputs": {}})

    assert _is_current(piece(target_hidden=32, hidden=100, layers=2), "spo", fed, 5, options)
    assert not _is_current(piece(target_hidden=16, hidden=100, layers=2), "spo", fed, 5, options)
    assert not _is_current(piece(target_hidden=32, hidden=100, layers=3), "spo", fed, 5, options)
    # a variant column's options (FedeRiCo's loss scale) and an option the registry does not list keep their key
    assert _is_current(piece(likelihood="sum"), "federico-sum", fed, 5, {"likelihood": "sum"})
    assert not _is_current(piece(likelihood="mean"), "federico-sum", fed, 5, {"likelihood": "sum"})


def test_a_piece_tuned_on_another_grid_or_at_a_fixed_rate_is_trained_again():
    """Under a rate grid the chosen rate is not compared, but the grid is: a game trained at a fixed rate is not
    the game a grid asks for (a resumed ``reproduce fashion`` read its fixed-rate games back when its exact game
    took the grid), nor a learner tuned on another grid; and a tuned piece is not current for a fixed rate."""
    from types import SimpleNamespace

    from coalitions.learners.experiments.pieces import _is_current
    from coalitions.learners.training.protocol import TrainingProtocol

    grid = TrainingProtocol(model="mlp", lr=0.003, steps=20, lr_grid=(0.001, 0.003, 0.01))
    fixed = grid.with_(lr_grid=None)
    fed = SimpleNamespace(options={"seed": 11})

    def game(p):
        return (SimpleNamespace(provenance={"seed": 5, "options": {"seed": 11}, "model": {"protocol": p.to_json()}}),)

    assert _is_current(game(grid), "exact", fed, 5, {"protocol": grid})
    assert not _is_current(game(fixed), "exact", fed, 5, {"protocol": grid})
    assert not _is_current(game(grid), "exact", fed, 5, {"protocol": fixed})
    assert not _is_current(game(grid.with_(lr_grid=(0.01, 0.03))), "exact", fed, 5, {"protocol": grid})

    def column(chosen, tuned_on):   # a learner records the rate it kept and, when it tuned, the grid
        extra = {"test_outputs": {}, **({"lr_tuning": {"grid": list(tuned_on)}} if tuned_on else {})}
        return SimpleNamespace(config={"seed": 5, "data_options": {"seed": 11},
                                       "protocol": fixed.with_(lr=chosen).to_json()}, extra=extra)

    assert _is_current(column(0.01, grid.lr_grid), "fedavg", fed, 5, {"protocol": grid})
    assert not _is_current(column(0.01, (0.01, 0.03)), "fedavg", fed, 5, {"protocol": grid})
    assert not _is_current(column(0.003, None), "fedavg", fed, 5, {"protocol": grid})
    assert not _is_current(column(0.003, grid.lr_grid), "fedavg", fed, 5, {"protocol": fixed})
    assert _is_current(column(0.003, None), "fedavg", fed, 5, {"protocol": fixed})


def test_the_exact_games_stored_test_outputs_are_of_the_oracles_settings(quick, tmp_path, monkeypatch):
    """``<piece>-exact-outputs.npz`` is read back only under the settings it was made with: outputs of models trained
    under another protocol are trained again (it was stamped with the seeds alone)."""
    import shutil

    from coalitions.learners.exact import ExhaustiveOracle

    out = tmp_path / "copy"
    shutil.copytree(quick, out)
    calls = []
    real = ExhaustiveOracle.subset_outputs
    monkeypatch.setattr(ExhaustiveOracle, "subset_outputs",
                        lambda self, *a, **k: calls.append(a[1]) or real(self, *a, **k))
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(out)]) == 0
    assert calls == []   # under the same settings every output is read back
    stored = next((out / "runs" / "quick").glob("*-exact-outputs.npz"))
    with np.load(stored) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["settings"] = np.array('{"protocol": "another"}')
    np.savez_compressed(stored, **arrays)
    assert cli.main(["reproduce", "synthetic", "--quick", "-o", str(out)]) == 0
    assert len(calls) == 1
