"""``coalitions welfare``: outputs, the welfare@1 format, exit codes 0 / 1 / 2."""

import json

import pytest
from conftest import MALFORMED, MALFORMED_FAULTS, NO_CE
from test_cli import TIE, one_error_line, run

import coalitions as co


@pytest.fixture
def me(tmp_path):
    path = tmp_path / "me.json"
    co.write_game(co.mean_estimation([1, 8, 15], clients=["a", "b", "c"]), path)
    return path


def test_text(capsys, me):
    rc, out, err = run(capsys, "welfare", me, "--semantics", "shared", "--stability", "individual_stability")
    assert rc == 0 and err == ""
    assert "cost = sum of w_i * err_i, lower is better; weights uniform" in out
    assert "optimum: a,b,c (cost 3.76042)" in out
    assert "1 stable partition (individual stability):" in out
    assert [l.split() for l in out.splitlines() if l.startswith("a,c|b")] == [["a,c|b", "4.26562", "1.13435"]]
    assert "price of anarchy: 1.13435    price of stability: 1.13435" in out


def test_json(capsys, me):
    rc, out, _ = run(capsys, "welfare", me, "--weights", "sizes", "--semantics", "shared", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["format"] == "coalitions/welfare@1"
    assert doc["objective"] == {"quantity": "cost", "sense": "min", "semantics": "shared", "stability": "ce",
                                "tol": 1e-9, "weights": {"a": 1.0, "b": 8.0, "c": 15.0}}
    assert doc["optimum"]["partition"] == [["a", "b"], ["c"]] and doc["optima"] == [doc["optimum"]]
    assert doc["optimum"]["welfare"] == pytest.approx(21.777777777777)
    assert doc["stable"] == [{"partition": [["a", "c"], ["b"]], "welfare": 21.875}]
    assert doc["price_of_anarchy"] == doc["price_of_stability"] == pytest.approx(21.875 / 21.7777777777777)
    assert doc["optima_truncated"] is False and doc["notes"] == []


def test_gain_game_and_explicit_weights(capsys):
    rc, out, _ = run(capsys, "welfare", TIE, "--weights", "c0=1,c1=1,c2=2", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["objective"]["quantity"] == "welfare" and doc["objective"]["sense"] == "max"
    # personalized payoffs are monotone: the grand coalition gives MAU(all) = (3, 3, 2), welfare 3 + 3 + 4
    assert doc["optimum"] == {"partition": [["c0", "c1", "c2"]], "welfare": 10.0}
    assert doc["stable"] == [{"partition": [["c0", "c2"], ["c1"]], "welfare": 9.0}]  # the only CE
    assert doc["price_of_anarchy"] == doc["price_of_stability"] == pytest.approx(10 / 9)


def test_no_stable_partition_exits_1(capsys, tmp_path):
    out_file = tmp_path / "w.json"
    rc, out, err = run(capsys, "welfare", NO_CE, "--semantics", "shared", "--format", "json", "-o", out_file)
    doc = json.loads(out_file.read_text())
    assert rc == 1 and out == "" and doc["stable"] == [] and doc["price_of_anarchy"] is None
    assert one_error_line(err) == f"coalitions: {NO_CE}: no partition is a CE under shared semantics"


def test_large_game_reports_the_optimum_only(capsys, tmp_path):
    path = tmp_path / "p.npz"
    co.write_game(co.planted([2, 2, 2], noise=0.0), path)
    rc, out, _ = run(capsys, "welfare", path, "--semantics", "shared", "--max-enumerate", "4")
    assert rc == 0 and "optimum: c0,c1|c2,c3|c4,c5" in out and "price of" not in out
    assert "note: stable partitions not enumerated: 6 clients (203 partitions) exceed the limit of 4" in out


@pytest.mark.parametrize("args, fault", [
    (["--weights", "a=1,b=2"], "--weights a=1,b=2: client 'c' has no weight"),
    (["--weights", "a=1,b=2,zz=3"], "unknown client 'zz'"),
    (["--weights", "a=1,b=-2,c=1"], "weight of client 'b' must be a positive number"),
    (["--weights", "heavy"], "name=number pairs"),
    (["--stability", "pareto"], "--stability"),
    (["--semantics", "mixed"], "--semantics"),
    (["--tol", "-1"], "--tol"),
    (["--max-enumerate", "0"], "--max-enumerate"),
])
def test_bad_arguments_exit_2(capsys, me, args, fault):
    rc, out, err = run(capsys, "welfare", me, *args)
    line = one_error_line(err)
    assert rc == 2 and out == "" and fault in line


def test_sizes_without_provenance_names_the_file(capsys):
    rc, _, err = run(capsys, "welfare", TIE, "--weights", "sizes")
    assert rc == 2 and one_error_line(err).startswith(f"coalitions: error: {TIE}: --weights sizes: the game "
                                                      "records no sample counts")


@pytest.mark.parametrize("name", sorted(MALFORMED_FAULTS))
def test_malformed_games_exit_2(capsys, name):
    path = MALFORMED / name
    rc, out, err = run(capsys, "welfare", path)
    line = one_error_line(err)
    assert rc == 2 and out == "" and str(path) in line and MALFORMED_FAULTS[name] in line
