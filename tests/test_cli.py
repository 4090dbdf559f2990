"""cli/: the ``coalitions`` command (docs/cli.md) — outputs, exit codes, and the malformed corpus.

Most cases run in-process through ``cli.main([...])`` (fast); a few run the installed
``coalitions`` command in a subprocess to show it behaves the same.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    EXAMPLES,
    MALFORMED,
    MALFORMED_FAULTS,
    NO_CE,
    ROOT,
    STALLS,
    check_equilibrium_json,
    check_graph_json,
)

import coalitions as co
from coalitions import cli

#: Part of the subset tests/test_sdist.py runs from the unpacked sdist.
pytestmark = pytest.mark.smoke

TIE = str(EXAMPLES / "tie.json")
ME = str(EXAMPLES / "mean-estimation-5-5-25.json")
GAME_COMMANDS = {
    "solve": [],
    "verify": ["--partition", "a|b"],
    "enumerate": [],
    "graph": [],
    "welfare": [],
}


def run(capsys, *args):
    rc = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------- solve
def test_solve_text(capsys):
    rc, out, err = run(capsys, "solve", TIE)
    assert rc == 0 and err == ""
    assert "found by peeling: c0,c2 | c1" in out
    assert "inner agreement: holds" in out and "outer agreement: holds" in out
    assert [l.split()[:5] for l in out.splitlines() if l.startswith("c1 ")] == [["c1", "c1", "2", "3", "2"]]


def test_solve_json_validates(capsys):
    rc, out, _ = run(capsys, "solve", ME, "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    check_equilibrium_json(doc, ["a", "b", "c"])
    assert doc["partition"] == [["a", "b"], ["c"]] and doc["semantics"] == "personalized"
    assert doc["certificate"] == {**doc["certificate"], "inner_agreement": True, "outer_agreement": True,
                                  "method": "exhaustive"}


def test_solve_dot_and_output_file(capsys, tmp_path):
    rc, out, _ = run(capsys, "solve", TIE, "--format", "dot", "-o", tmp_path / "eq.dot")
    assert rc == 0 and out == ""
    dot = (tmp_path / "eq.dot").read_text()
    assert dot.startswith("digraph") and "subgraph cluster_0" in dot and '"c0" -> "c1"' in dot


def test_solve_options(capsys):
    rc, out, _ = run(capsys, "solve", TIE, "--format", "json", "--tol", "0.5", "--exhaustive-up-to", "1",
                     "--seed", "3")
    doc = json.loads(out)
    assert rc == 0 and doc["tol"] == 0.5 and doc["certificate"]["method"] == "sampled"


def test_solve_shared_without_equilibrium(capsys):
    rc, out, err = run(capsys, "solve", NO_CE, "--semantics", "shared")
    assert rc == 1 and out == ""
    line = one_error_line(err)
    assert str(NO_CE) in line and "no collaboration equilibrium exists" in line
    rc, out, err = run(capsys, "solve", NO_CE, "--semantics", "shared", "--max-enumerate", "2")
    assert rc == 2 and "exceeds the limit of 2" in one_error_line(err)


def test_solve_shared_by_enumeration(capsys, tmp_path):
    co.write_game(STALLS, tmp_path / "stalls.json")
    rc, out, _ = run(capsys, "solve", tmp_path / "stalls.json", "--semantics", "shared", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["found_by"] == "enumeration" and doc["partition"] == [["p"], ["q"], ["r"]]
    check_equilibrium_json(doc, ["p", "q", "r"])


def test_solve_reports_a_failed_certificate_with_exit_1(capsys, tmp_path):
    # With tol = 1 on integer values "equal" is not transitive (0 ~ 1 ~ 2 but 0 !~ 2): peeling keeps
    # {0,1} (condition (a) holds against MAU(R)), yet {1} may leave it with nobody losing.  The
    # command must say so rather than print an uncertified partition with exit 0.
    g = co.Game.from_mapping(["0", "1", "2"], {
        "0": {"0": 0, "0,1": 2, "0,2": 0, "0,1,2": 0},
        "1": {"1": 0, "0,1": 1, "1,2": 0, "0,1,2": 2},
        "2": {"2": 0, "0,2": 0, "1,2": 0, "0,1,2": 0}})
    co.write_game(g, tmp_path / "g.json")
    rc, out, err = run(capsys, "solve", tmp_path / "g.json", "--tol", "1", "--max-enumerate", "2")
    assert rc == 1 and "inner agreement: VIOLATED" in out
    assert "fails its certificate" in one_error_line(err)
    # Within the enumeration limit, solve falls back to searching all partitions and finds the CE.
    rc, out, _ = run(capsys, "solve", tmp_path / "g.json", "--tol", "1", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["found_by"] == "enumeration" and doc["partition"] == [["0"], ["1"], ["2"]]
    rc, out, _ = run(capsys, "enumerate", tmp_path / "g.json", "--tol", "1", "--format", "json")
    assert rc == 0 and json.loads(out)["equilibria"] == [[["0"], ["1"], ["2"]]]


# ---------------------------------------------------------------------------- verify
def test_verify_equilibrium_exit_0(capsys):
    rc, out, err = run(capsys, "verify", TIE, "--partition", "c1|c2,c0")
    assert rc == 0 and err == ""
    assert out.startswith("Partition c0,c2|c1 is a collaboration equilibrium")


def test_verify_non_equilibrium_exit_1_with_witnesses(capsys):
    rc, out, err = run(capsys, "verify", TIE, "--partition", "c0,c1,c2")
    assert rc == 1 and err == ""
    assert "is NOT a collaboration equilibrium" in out
    assert "{c0,c2} can leave {c0,c1,c2} with nobody losing" in out
    rc, out, _ = run(capsys, "verify", TIE, "--partition", "c0|c1|c2", "--format", "json")
    doc = json.loads(out)
    assert rc == 1 and doc["is_equilibrium"] is False
    assert [w["coalition"] for w in doc["checks"]["outer_agreement"]["witnesses"]] == [["c0", "c2"],
                                                                                       ["c0", "c1", "c2"]]


def test_verify_shared_semantics(capsys):
    rc, out, _ = run(capsys, "verify", NO_CE, "--partition", "x,y|z", "--semantics", "shared")
    assert rc == 1 and "outer agreement: VIOLATED" in out and "{y,z} blocks" in out


@pytest.mark.parametrize("partition, fault", [
    ("c0,c2|zz", "unknown client 'zz'"),
    ("c0,c1|c1,c2", "client 'c1' appears in two blocks"),
    ("c0,c2", "client 'c1' is in no block"),
    ("c0,c2||c1", "empty block"),
    ("c0,c2|", "empty block"),
    ("", "partition is empty"),
    ("c0,,c2|c1", "empty member name"),
])
def test_verify_bad_partition_exit_2(capsys, partition, fault):
    rc, out, err = run(capsys, "verify", TIE, "--partition", partition)
    line = one_error_line(err)
    assert rc == 2 and out == ""
    assert "--partition" in line and fault in line


# ---------------------------------------------------------------------------- enumerate
def test_enumerate_json(capsys):
    rc, out, _ = run(capsys, "enumerate", TIE, "--format", "json")
    assert rc == 0
    assert json.loads(out) == {"format": "coalitions/equilibria@1", "semantics": "personalized",
                               "equilibria": [[["c0", "c2"], ["c1"]]]}


def test_enumerate_two_equilibria(capsys, tmp_path):
    co.write_game(co.mean_estimation([2, 8, 2, 40]), tmp_path / "me.json")
    rc, out, _ = run(capsys, "enumerate", tmp_path / "me.json", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and len(doc["equilibria"]) == 2
    rc, out, _ = run(capsys, "enumerate", tmp_path / "me.json")
    assert rc == 0 and out.startswith("2 collaboration equilibria (personalized semantics, 15 partitions")


def test_enumerate_none_exit_1(capsys):
    rc, out, err = run(capsys, "enumerate", NO_CE, "--semantics", "shared", "--format", "json")
    assert rc == 1 and err == ""
    assert json.loads(out) == {"format": "coalitions/equilibria@1", "semantics": "shared", "equilibria": []}
    rc, out, _ = run(capsys, "enumerate", NO_CE, "--semantics", "shared")
    assert rc == 1 and out.startswith("0 collaboration equilibria")


def test_enumerate_refuses_large_game(capsys, tmp_path):
    co.write_game(co.planted([2, 2]), tmp_path / "g.npz")
    rc, _, err = run(capsys, "enumerate", tmp_path / "g.npz", "--max-clients", "3")
    assert rc == 2 and "exceeds the limit of 3" in one_error_line(err)


# ---------------------------------------------------------------------------- graph
def test_graph_text_shows_ambiguity(capsys):
    rc, out, _ = run(capsys, "graph", TIE)
    assert rc == 0 and "ambiguous: {c1} / {c2}" in out and "edges: c0->c1, c0->c2, c1->c0, c2->c1" in out


def test_graph_within(capsys):
    rc, out, _ = run(capsys, "graph", TIE, "--within", "c1,c0", "--format", "json")
    doc = json.loads(out)
    assert rc == 0
    check_graph_json(doc, ["c0", "c1", "c2"])
    assert doc["clients"] == ["c0", "c1"] and doc["edges"] == [["c1", "c0"]]
    rc, out, _ = run(capsys, "graph", TIE, "--format", "json")
    assert json.loads(out)["ambiguous"] == {"c0": [["c1"], ["c2"]]}
    rc, out, _ = run(capsys, "graph", TIE, "--format", "dot")
    assert rc == 0 and '"c1" -> "c0" [style=dashed];' in out


@pytest.mark.parametrize("within, fault", [("c0,zz", "unknown client 'zz'"), ("", "empty member name"),
                                           ("c0,c0", "twice")])
def test_graph_bad_within(capsys, within, fault):
    rc, out, err = run(capsys, "graph", TIE, "--within", within)
    line = one_error_line(err)
    assert rc == 2 and out == "" and "--within" in line and fault in line


# ---------------------------------------------------------------------------- game
@pytest.mark.parametrize("ext", ["json", "npz"])
def test_game_mean_estimation(capsys, tmp_path, ext):
    path = tmp_path / f"me.{ext}"
    rc, out, err = run(capsys, "game", "mean-estimation", "--sizes", "5,5,25", "--names", "a,b,c",
                       "--mu-e", "10", "--sigma2", "1", "-o", path)
    assert rc == 0 and f"wrote {path}: 3 clients" in err
    g = co.read_game(path)
    expect = co.mean_estimation([5, 5, 25], 10, 1, ["a", "b", "c"])
    np.testing.assert_array_equal(g.values, expect.values)
    assert g.clients == expect.clients and g.provenance == expect.provenance
    np.testing.assert_allclose(g.values, co.read_game(ME).values, rtol=1e-14)


@pytest.mark.parametrize("federation", ["uniform", "coarse", "fine"])
def test_game_mean_estimation_federation(capsys, tmp_path, federation):
    path = tmp_path / "me.json"
    rc, _, _ = run(capsys, "game", "mean-estimation", "--sizes", "1,8,15", "--federation", federation, "-o", path)
    g = co.read_game(path)
    expect = co.mean_estimation([1, 8, 15], federation=federation)
    assert rc == 0 and g.sense == "min" and g.provenance["federation"] == federation
    np.testing.assert_allclose(g.values, expect.values, rtol=1e-15)
    assert json.loads(path.read_text())["values"]["0"]["0"] == 10.0  # the error itself, not negated
    rc, _, err = run(capsys, "game", "mean-estimation", "--sizes", "1,8", "--federation", "median", "-o", path)
    assert rc == 2 and "--federation" in one_error_line(err)


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_game_planted(capsys, tmp_path, ext):
    path = tmp_path / f"p.{ext}"
    rc, _, _ = run(capsys, "game", "planted", "--groups", "2,3", "--noise", "0.1", "--ties", "0.05",
                   "--seed", "4", "-o", path)
    assert rc == 0
    g = co.read_game(path)
    expect = co.planted([2, 3], 0.1, 0.05, 4)
    np.testing.assert_array_equal(g.values, expect.values)
    assert g.clients == expect.clients and g.provenance == expect.provenance
    rc, out, _ = run(capsys, "solve", path, "--format", "json")
    assert rc == 0 and json.loads(out)["certificate"]["inner_agreement"]


@pytest.mark.parametrize("args, fault", [
    (["mean-estimation", "--sizes", "5,x"], "--sizes must be comma-separated numbers"),
    (["mean-estimation", "--sizes", "5,-1"], "sizes must be positive"),
    (["mean-estimation", "--sizes", "5,5", "--names", "a"], "--names gives 1 names for 2 sizes"),
    (["mean-estimation", "--sizes", "5,5", "--names", "a,a"], "'a' is listed twice"),
    (["mean-estimation", "--sizes", "5,5", "--mu-e", "0"], "mu_e"),
    (["planted", "--groups", "2,0"], "group sizes"),
    (["planted", "--groups", "2.5"], "--groups"),
    (["planted", "--groups", "2", "--noise", "-1"], "--noise"),
])
def test_game_bad_arguments(capsys, tmp_path, args, fault):
    rc, _, err = run(capsys, "game", *args, "-o", tmp_path / "g.json")
    assert rc == 2 and fault in one_error_line(err)
    assert not (tmp_path / "g.json").exists()


def test_game_unwritable_output(capsys, tmp_path):
    target = tmp_path / "no-such-dir" / "g.json"
    rc, _, err = run(capsys, "game", "planted", "--groups", "2", "-o", target)
    assert rc == 2 and str(target) in one_error_line(err)


# ---------------------------------------------------------------------------- malformed input
@pytest.mark.parametrize("command", sorted(GAME_COMMANDS))
@pytest.mark.parametrize("name", sorted(MALFORMED_FAULTS))
def test_malformed_game_exit_2(capsys, command, name):
    path = MALFORMED / name
    rc, out, err = run(capsys, command, path, *GAME_COMMANDS[command])
    line = one_error_line(err)
    assert rc == 2 and out == ""
    assert str(path) in line and MALFORMED_FAULTS[name] in line


@pytest.mark.parametrize("command", sorted(GAME_COMMANDS))
@pytest.mark.parametrize("name", ["absent.json", "absent.npz"])
def test_missing_game_file_exit_2(capsys, tmp_path, command, name):
    path = tmp_path / name
    rc, out, err = run(capsys, command, path, *GAME_COMMANDS[command])
    line = one_error_line(err)
    assert rc == 2 and out == "" and str(path) in line and "no such file" in line


@pytest.mark.parametrize("args, fault", [
    (["solve", TIE, "--tol", "-1"], "--tol"),
    (["solve", TIE, "--tol", "nan"], "--tol"),
    (["enumerate", TIE, "--tol", "inf"], "--tol"),
    (["graph", TIE, "--tol", "-0.5"], "--tol"),
    (["verify", TIE, "--partition", "c0|c1|c2", "--tol", "-1"], "--tol"),
    (["solve", TIE, "--format", "xml"], "'xml'"),
    (["solve", TIE, "--semantics", "selfish"], "'selfish'"),
    (["solve", TIE, "--tol", "abc"], "'abc'"),
    (["solve"], "GAME"),
    (["verify", TIE], "--partition"),
    (["solve", TIE, "--bogus"], "--bogus"),
    (["nonsense"], "nonsense"),
    (["game", "mean-estimation", "--sizes", "5,5"], "--output"),
])
def test_bad_arguments_exit_2(capsys, args, fault):
    rc, out, err = run(capsys, *args)
    assert rc == 2 and out == "" and fault in one_error_line(err)


def test_help_and_version(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0 and "solve" in out and "enumerate" in out
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and co.__version__ in out
    rc, out, err = run(capsys)  # no command: the help, never a traceback
    assert rc in (0, 2) and "Commands:" in out and "Traceback" not in err
    rc, out, err = run(capsys, "game")
    assert rc in (0, 2) and "mean-estimation" in out and "Traceback" not in err


# ---------------------------------------------------------------------------- the installed command
def _command():
    here = Path(sys.executable).with_name("coalitions")  # this environment's command, not another on PATH
    exe = str(here) if here.exists() else shutil.which("coalitions")
    return [exe] if exe else [sys.executable, "-m", "coalitions.cli"]


@pytest.mark.parametrize("args", [
    ["verify", str(MALFORMED / "client-twice-in-key.json"), "--partition", "a|b"],
    ["solve", str(MALFORMED / "corrupt.npz")],
    ["solve", TIE, "--format", "json"],
    ["verify", TIE, "--partition", "c0,c1,c2"],
])
def test_installed_command_matches_in_process(capsys, args):
    proc = subprocess.run(_command() + args, capture_output=True, text=True, timeout=60, cwd=ROOT)
    rc, out, err = run(capsys, *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (rc, out, err)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("package, extra", [("torch", "torch==2.13.0"), ("cvxpy", "collaboration-equilibrium[learn]")])
def test_missing_optional_package_is_exit_2_with_the_install_command(capsys, monkeypatch, tmp_path, package,
                                                                       extra):
    def missing(*args, **kwargs):
        raise ModuleNotFoundError(f"No module named '{package}'", name=package)

    monkeypatch.setattr(cli.data_options, "load_federation", missing)
    rc, _, err = run(capsys, "oracle", "synthetic", "-o", tmp_path / "g.json")
    assert rc == 2 and extra in one_error_line(err) and not (tmp_path / "g.json").exists()


def test_missing_other_module_is_not_disguised(monkeypatch, tmp_path):
    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'learners.nope'", name="learners.nope")

    monkeypatch.setattr(cli.data_options, "load_federation", missing)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["oracle", "synthetic", "-o", str(tmp_path / "g.json")])
