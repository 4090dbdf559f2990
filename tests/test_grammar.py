"""One grammar for every command (issue 36): -o and --format everywhere, learned estimates where games go,
and ``compare`` refusing an estimate and a game measured on different data."""

import json

import pytest
from conftest import EXAMPLES, one_line, run

import coalitions as co
from coalitions import cli
from coalitions.compare import DataCheck, data_check, data_record
from coalitions.estimate import Estimate, write_estimate
from coalitions.graph import BenefitGraph

pytestmark = pytest.mark.smoke

TIE = str(EXAMPLES / "tie.json")
#: The commands whose result is printed (or written with -o), and the formats each prints.
PRINTING = {"solve": {"text", "json", "dot", "graphml"}, "graph": {"text", "json", "dot", "graphml"},
            "verify": {"text", "json"}, "enumerate": {"text", "json"}, "welfare": {"text", "json"},
            "compare": {"text", "json"}, "sample-ce": {"text", "json"}}
DATA = {"clients": 3, "samples": 1000, "rho": 1.0, "seed": 7}

# a: best with b (3); b: best with a (2); c: best alone (5).  CE {a,b} | {c}.
VALUES = {"a": {"a": 1, "a,b": 3, "a,c": 0, "a,b,c": 2},
          "b": {"b": 1, "a,b": 2, "b,c": 0, "a,b,c": 1},
          "c": {"c": 5, "a,c": 1, "b,c": 2, "a,b,c": 4}}


def commands(group=cli.cli, path=()):
    import click

    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def option(cmd, name):
    return next((p for p in cmd.params if name in getattr(p, "opts", ())), None)


def make_estimate(data=DATA, dataset="synthetic"):
    """An estimate over a, b, c: a <-> b learned, c alone; partition {a,b} | {c}."""
    graph = BenefitGraph(("a", "b", "c"), 0b111, ((0, 0b010), (1, 0b001), (2, 0)))
    util = {"a": 0.5, "b": 0.25, "c": 0.125}
    config = {} if data is None else {"method": "spo", "dataset": dataset, "data_options": dict(data)}
    return Estimate(clients=("a", "b", "c"), method="spo", config=config, weights=None,
                    utilities={"val": util, "test": util}, metric="mse", sense="min", benefit_graph=graph,
                    partition=(0b100, 0b011), rounds=((0b011,), (0b100,)))


@pytest.fixture
def est(tmp_path):
    path = tmp_path / "est.json"
    write_estimate(make_estimate(), path)
    return str(path)


def game_file(tmp_path, provenance=None, name="game.json"):
    path = tmp_path / name
    co.write_game(co.Game.from_mapping(["a", "b", "c"], VALUES, "max", provenance or {}), path)
    return str(path)


# ---------------------------------------------------------------------------- the grammar itself
@pytest.mark.parametrize("name,cmd", list(commands()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_takes_output(name, cmd):
    assert option(cmd, "-o") is not None and option(cmd, "--output") is not None, name


@pytest.mark.parametrize("name", sorted(PRINTING))
def test_every_printing_command_takes_its_formats(name):
    fmt = option(cli.cli.commands[name], "--format")
    assert fmt is not None and set(fmt.type.choices) == PRINTING[name]


def test_no_other_command_prints_a_result_without_format():
    """The commands left have a required -o (their result is a file); what they print is a log on stderr."""
    for name, cmd in commands():
        if name not in PRINTING and name not in ("learn", "reproduce"):
            assert option(cmd, "-o").required, name


@pytest.mark.parametrize("args", [["graph", TIE], ["graph", TIE, "--format", "graphml"],
                                  ["verify", TIE, "--partition", "c0,c2|c1", "--format", "json"],
                                  ["enumerate", TIE], ["enumerate", TIE, "--format", "json"]])
def test_output_writes_what_stdout_would_show(capsys, tmp_path, args):
    rc, out, _ = run(capsys, *args)
    assert rc == 0 and out
    target = tmp_path / "out.txt"
    rc2, out2, _ = run(capsys, *args, "-o", target)
    assert rc2 == 0 and out2 == "" and target.read_text() == out


def test_output_is_written_before_a_negative_answer(capsys, tmp_path):
    target = tmp_path / "v.json"
    rc, out, _ = run(capsys, "verify", TIE, "--partition", "c0,c1,c2", "--format", "json", "-o", target)
    assert rc == 1 and out == "" and json.loads(target.read_text())["is_equilibrium"] is False


def test_compare_takes_output(capsys, tmp_path, est):
    game = game_file(tmp_path, {"dataset": "synthetic", "options": DATA})
    target = tmp_path / "c.json"
    rc, out, _ = run(capsys, "compare", est, game, "--format", "json", "-o", target)
    assert rc == 0 and out == ""
    assert json.loads(target.read_text())["format"] == "coalitions/comparison@1"


def test_read_estimate_is_exported(est):
    assert "read_estimate" in co.__all__ and "Estimate" in co.__all__
    assert co.read_estimate(est).blocks() == [["a", "b"], ["c"]]  # canonical: by each block's first client


# ---------------------------------------------------------------------------- a learned estimate where a game goes
def test_solve_an_estimate_shows_its_partition_labelled_learned_without_certificate(capsys, est):
    rc, out, err = run(capsys, "solve", est)
    assert rc == 0 and err == ""
    head = out.splitlines()[0]
    assert head.startswith("Learned collaboration equilibrium") and head.endswith(": a,b | c")
    assert "not certified: an estimate holds no coalition values" in out
    assert "certificate (" not in out and "inner agreement" not in out
    assert "val mse" in out and "0.25" in out          # the learner's own metric, labelled as such
    assert "edges: a->b, b->a" in out or "edges: b->a, a->b" in out


def test_solve_an_estimate_as_json_dot_and_graphml(capsys, tmp_path, est):
    nx = pytest.importorskip("networkx")
    rc, out, err = run(capsys, "solve", est, "--format", "json")
    data = json.loads(out)
    assert rc == 0 and "not certified" in one_line(err)
    assert data["format"] == "coalitions/learned-equilibrium@1" and data["learned"] is True
    assert data["certificate"] is None and "payoffs" not in data
    assert data["partition"] == [["a", "b"], ["c"]] and data["rounds"] == [[["a", "b"]], [["c"]]]
    assert sorted(map(tuple, data["benefit_graphs"][0]["edges"])) == [("a", "b"), ("b", "a")]
    rc, out, _ = run(capsys, "solve", est, "--format", "dot")
    assert rc == 0 and out.startswith("digraph learned_equilibrium") and "not certified" in out
    rc, _, _ = run(capsys, "solve", est, "--format", "graphml", "-o", tmp_path / "ce.graphml")
    g = nx.read_graphml(tmp_path / "ce.graphml")
    assert rc == 0 and g.graph["learned"] is True and g.graph["certified"] == "unavailable"
    assert g.nodes["a"]["coalition"] == g.nodes["b"]["coalition"] != g.nodes["c"]["coalition"]
    assert sorted(g.edges) == [("a", "b"), ("b", "a")]


def test_graph_of_an_estimate_as_graphml_reads_back_with_networkx(capsys, tmp_path, est):
    nx = pytest.importorskip("networkx")
    target = tmp_path / "g.graphml"
    rc, out, err = run(capsys, "graph", est, "--format", "graphml", "-o", target)
    assert rc == 0 and out == "" and err == ""
    g = nx.read_graphml(target)
    assert sorted(g.nodes) == ["a", "b", "c"] and sorted(g.edges) == [("a", "b"), ("b", "a")]
    assert g.graph["learned_by"] == "spo" and g.nodes["c"]["ocs_size"] == 0


@pytest.mark.parametrize("fmt,expect", [("text", "Learned by spo"), ("dot", "digraph benefit_graph"),
                                        ("json", '"learned_by": "spo"')])
def test_graph_of_an_estimate_in_every_format(capsys, est, fmt, expect):
    rc, out, _ = run(capsys, "graph", est, "--format", fmt)
    assert rc == 0 and expect in out and "b" in out
    if fmt == "json":
        assert json.loads(out)["ocs"] == {"a": ["b"], "b": ["a"], "c": []}


def test_graph_of_an_estimate_within_all_clients_only(capsys, est):
    assert run(capsys, "graph", est, "--within", "c,b,a")[0] == 0
    rc, _, err = run(capsys, "graph", est, "--within", "a,b")
    assert rc == 2 and "--within" in one_line(err) and "all clients only" in err
    rc, _, err = run(capsys, "graph", est, "--within", "a,zed")
    assert rc == 2 and "zed" in one_line(err)


@pytest.mark.parametrize("args", [["solve", "--z", "1"], ["solve", "--tol", "0.1"], ["solve", "--semantics", "shared"],
                                  ["solve", "--retrained", TIE], ["graph", "--z", "2"], ["graph", "--tol", "1"]])
def test_an_option_that_acts_on_values_is_refused_for_an_estimate(capsys, est, args):
    rc, out, err = run(capsys, args[0], est, *args[1:])
    assert rc == 2 and out == ""
    assert one_line(err).startswith(f"coalitions: error: {args[1]}: ") and "learned estimate" in err


@pytest.mark.parametrize("args", [["verify", "--partition", "a,b|c"], ["enumerate"], ["welfare"]])
def test_commands_that_need_values_refuse_an_estimate_in_one_line(capsys, est, args):
    rc, out, err = run(capsys, args[0], est, *args[1:])
    line = one_line(err)
    assert rc == 2 and out == ""
    assert f"{est}: a learned estimate" in line and f"holds no coalition values, which {args[0]} needs" in line
    assert "coalitions oracle" in line and f"coalitions compare {est} GAME" in line


def test_an_estimate_given_as_the_game_of_compare_is_refused(capsys, est):
    rc, _, err = run(capsys, "compare", est, est)
    assert rc == 2 and "holds no coalition values" in one_line(err)


def test_unknown_format_names_what_a_game_command_reads(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "coalitions/benefit-graph@1"}')
    rc, _, err = run(capsys, "solve", bad)
    assert rc == 2 and "unknown format 'coalitions/benefit-graph@1'" in one_line(err)
    assert "'coalitions/estimate@1'" in err


def test_a_learned_estimate_from_learn_solves_and_exports(capsys, tmp_path):
    pytest.importorskip("torch")
    nx = pytest.importorskip("networkx")
    est = tmp_path / "est.json"
    assert run(capsys, "learn", "synthetic", "--method", "local", "--samples", "20", "--steps", "2", "-o", est)[0] == 0
    rc, out, _ = run(capsys, "solve", est)
    assert rc == 0 and out.startswith("Learned collaboration equilibrium") and "0 | 1 | 2 | 3 | 4 | 5" in out
    assert run(capsys, "graph", est, "--format", "graphml", "-o", tmp_path / "g.graphml")[0] == 0
    g = nx.read_graphml(tmp_path / "g.graphml")
    assert sorted(g.nodes, key=int) == [str(i) for i in range(6)] and g.graph["learned_by"] == "local"


# ---------------------------------------------------------------------------- compare checks provenance
def test_data_check_is_pure_and_names_each_difference():
    game = co.Game.from_mapping(["a", "b", "c"], VALUES, "max",
                                {"dataset": "synthetic", "options": {"clients": 3, "samples": 10, "rho": 0.1,
                                                                     "seed": 0}})
    check = data_check(make_estimate(), game)
    assert check.checked and not check.same
    assert check.describe() == "samples 1000 vs 10, rho 1 vs 0.1, seed 7 vs 0"
    assert check.to_json()["differences"][0] == {"field": "samples", "estimate": 1000, "game": 10}
    assert data_check(make_estimate(dataset="heart"), game).differences[0] == ("dataset", "heart", "synthetic")


def test_data_check_reads_equal_options_as_equal():
    options = {"clients": 3, "samples": 1000, "rho": 1, "seed": 7, "flipped": [1, 2], "val": None}
    game = co.Game.from_mapping(["a", "b", "c"], VALUES, "max", {"dataset": "synthetic", "options": options})
    assert data_check(make_estimate({**DATA, "flipped": (1, 2)}), game).same    # 1 == 1.0, a tuple == its list
    assert data_check(make_estimate({**DATA, "flipped": [1, 2], "other": 1}), game).describe() == "other 1 vs none"


def test_data_check_of_files_without_provenance():
    plain = co.Game.from_mapping(["a", "b", "c"], VALUES)
    assert data_record(plain) is None and data_record(make_estimate(None)) is None
    assert data_check(make_estimate(), plain) == DataCheck(("game",), ())
    assert data_check(make_estimate(None), plain).unrecorded == ("estimate", "game")
    assert not data_check(make_estimate(), plain).checked


def test_compare_refuses_different_data_in_one_line(capsys, tmp_path, est):
    game = game_file(tmp_path, {"dataset": "synthetic", "options": {**DATA, "samples": 10, "rho": 0.1, "seed": 0}})
    rc, out, err = run(capsys, "compare", est, game)
    assert rc == 2 and out == ""
    assert one_line(err) == (f"coalitions: error: {est} vs {game}: different data: samples 1000 vs 10, rho 1 vs 0.1, "
                             "seed 7 vs 0 (--allow-different-data compares anyway)")


def test_compare_refuses_another_dataset(capsys, tmp_path, est):
    game = game_file(tmp_path, {"dataset": "heart", "options": DATA})
    rc, _, err = run(capsys, "compare", est, game)
    assert rc == 2 and "different data: dataset synthetic vs heart" in one_line(err)


def test_allow_different_data_compares_and_records_it(capsys, tmp_path, est):
    game = game_file(tmp_path, {"dataset": "synthetic", "options": {**DATA, "seed": 0}})
    rc, out, err = run(capsys, "compare", est, game, "--allow-different-data", "--format", "json")
    assert rc == 0 and "different data, compared anyway: seed 7 vs 0" in one_line(err)
    data = json.loads(out)["data"]
    assert data["allowed_different"] is True and data["same"] is False and data["checked"] is True
    assert data["differences"] == [{"field": "seed", "estimate": 7, "game": 0}]
    rc, out, _ = run(capsys, "compare", est, game, "--allow-different-data")
    assert rc == 0 and "data     DIFFERENT (compared anyway, --allow-different-data): seed 7 vs 0" in out


def test_compare_on_the_same_data_says_it_checked(capsys, tmp_path, est):
    game = game_file(tmp_path, {"dataset": "synthetic", "options": DATA})
    rc, out, _ = run(capsys, "compare", est, game)
    assert rc == 0 and "data     the same data set and options (checked)" in out
    rc, out, _ = run(capsys, "compare", est, game, "--format", "json")
    assert json.loads(out)["data"] == {"checked": True, "same": True, "unrecorded": [], "differences": [],
                                       "allowed_different": False}


def test_compare_without_provenance_compares_as_before_and_says_so(capsys, tmp_path, est):
    rc, out, err = run(capsys, "compare", est, game_file(tmp_path))
    assert rc == 0 and err == ""
    assert "data     not checked: the game records no data set" in out and "edges    precision 1.000" in out
    rc, out, _ = run(capsys, "compare", est, game_file(tmp_path), "--format", "json")
    assert json.loads(out)["data"]["unrecorded"] == ["game"]
