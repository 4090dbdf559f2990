"""coalitions.io: the file formats of docs/formats.md, round trips and validation."""

import json

import numpy as np
import pytest
from conftest import MALFORMED, MALFORMED_FAULTS, check_equilibrium_json, check_graph_json

from coalitions.analytic import mean_estimation, planted
from coalitions.axioms import all_checks
from coalitions.equilibrium import solve
from coalitions.errors import InputError
from coalitions.game import Game
from coalitions.graph import ExactOracle
from coalitions.io import (
    benefit_graph_to_json,
    checks_to_json,
    equilibria_to_json,
    equilibrium_to_json,
    game_from_json,
    read_game,
    read_json,
    write_game,
    write_json,
)


def same_game(a: Game, b: Game):
    assert a.clients == b.clients and a.sense == b.sense
    np.testing.assert_array_equal(a.values, b.values)  # NaN in the same places, bit-identical numbers
    assert dict(a.provenance) == dict(b.provenance)


GAMES = {
    "mean-estimation": lambda: mean_estimation([2, 8, 2, 40], clients=["w", "x", "y", "z"]),
    "planted-ties": lambda: planted([2, 2, 1], ties=0.125, seed=3),
    "min": lambda: Game.from_array(np.random.default_rng(0).normal(size=(3, 8)), ["p", "q", "r"], "min",
                                   {"metric": "loss"}),
    "single": lambda: Game.from_array([[np.nan, -0.0]], ["solo"], "min"),
}


@pytest.mark.parametrize("name", sorted(GAMES))
@pytest.mark.parametrize("ext", ["json", "npz"])
def test_round_trip(tmp_path, name, ext):
    g = GAMES[name]()
    path = tmp_path / f"game.{ext}"
    write_game(g, path)
    back = read_game(path)
    same_game(g, back)
    np.testing.assert_array_equal(g.raw_values(), back.raw_values())
    write_game(back, tmp_path / f"again.{ext}")
    same_game(g, read_game(tmp_path / f"again.{ext}"))


def test_min_game_file_holds_losses(tmp_path):
    g = GAMES["min"]()
    write_game(g, tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["format"] == "coalitions/game@1" and doc["sense"] == "min"
    assert doc["values"]["p"]["p"] == g.raw_values()[0, 1] == -g.values[0, 1]
    write_game(g, tmp_path / "g.npz")
    with np.load(tmp_path / "g.npz") as z:
        assert str(z["sense"]) == "min" and z["values"].dtype == np.float64 and z["values"].shape == (3, 8)
        np.testing.assert_array_equal(z["values"], g.raw_values())
        assert z["clients"].tolist() == ["p", "q", "r"]


def test_json_and_npz_agree(tmp_path):
    g = planted([3, 2], seed=9)
    write_game(g, tmp_path / "a.json")
    write_game(g, tmp_path / "a.npz")
    same_game(read_game(tmp_path / "a.json"), read_game(tmp_path / "a.npz"))


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_provenance_with_numpy_scalars_is_written(tmp_path, ext):
    # Learners record seeds and options as numpy scalars; both formats must store them as plain JSON.
    g = Game.from_array([[0.0, 1.0]], ["a"], provenance={"seed": np.int64(3), "rho": np.float32(0.5),
                                                         "sizes": (np.int32(1), 2)})
    write_game(g, tmp_path / f"g.{ext}")
    assert dict(read_game(tmp_path / f"g.{ext}").provenance) == {"seed": 3, "rho": 0.5, "sizes": [1, 2]}


def test_shared_examples_read(me_game, tie_game):
    assert me_game.clients == ("a", "b", "c") and tie_game.clients == ("c0", "c1", "c2")
    assert tie_game.value("c1", "c0,c1,c2") == 3


def test_sense_defaults_to_max_and_keys_in_any_order():
    g = game_from_json({"clients": ["a", "b"], "values": {"a": {"a": 1, "b,a": 2}, "b": {"b": 0, "a,b": 1}}})
    assert g.sense == "max" and g.value("a", "a,b") == 2


@pytest.mark.parametrize("name", sorted(MALFORMED_FAULTS))
def test_malformed_corpus(name):
    path = MALFORMED / name
    with pytest.raises(InputError) as err:
        read_game(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    assert MALFORMED_FAULTS[name] in msg


def test_corpus_is_fully_covered():
    assert sorted(p.name for p in MALFORMED.iterdir()) == sorted(MALFORMED_FAULTS)


@pytest.mark.parametrize("name", ["absent.json", "absent.npz"])
def test_missing_file(tmp_path, name):
    with pytest.raises(InputError, match="no such file"):
        read_game(tmp_path / name)


def test_directory_is_not_a_game(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path)):
        read_game(tmp_path)
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(InputError, match="d.npz"):
        read_game(tmp_path / "d.npz")


def test_read_json_checks_format(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"format": "coalitions/equilibrium@1"}')
    assert read_json(p)["format"] == "coalitions/equilibrium@1"
    with pytest.raises(InputError, match="unknown format"):
        read_json(p, "coalitions/game@1")


def test_write_json_replaces_non_finite_with_null(tmp_path):
    text = write_json({"a": float("nan"), "b": [np.float64(np.inf), 1.5], "c": np.int64(3)}, tmp_path / "o.json")
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": 3}
    assert json.loads((tmp_path / "o.json").read_text()) == json.loads(text)


def test_equilibrium_json(tie_game):
    eq = solve(tie_game)
    doc = json.loads(write_json(equilibrium_to_json(eq), None))
    check_equilibrium_json(doc, tie_game.clients)
    assert doc["partition"] == [["c0", "c2"], ["c1"]]
    assert doc["rounds"] == [[["c0", "c2"]], [["c1"]]]
    assert doc["payoffs"] == {"c0": 3.0, "c1": 2.0, "c2": 2.0}
    assert doc["mau"] == {"c0": 3.0, "c1": 3.0, "c2": 2.0}
    assert doc["certificate"]["inner_agreement"] and doc["certificate"]["outer_agreement"]
    assert doc["certificate"]["method"] == "exhaustive" and doc["found_by"] == "peeling"
    assert doc["benefit_graphs"][0]["ambiguous"] == {"c0": [["c1"], ["c2"]]}


def test_equilibrium_json_without_certificate(tie_game):
    doc = equilibrium_to_json(solve(tie_game, certify_result=False))
    assert "certificate" not in doc


def test_benefit_graph_json(tie_game):
    doc = benefit_graph_to_json(ExactOracle(tie_game).benefit_graph(0b111))
    check_graph_json(doc, tie_game.clients)
    assert doc["edges"] == [["c0", "c1"], ["c0", "c2"], ["c1", "c0"], ["c2", "c1"]]
    assert doc["ocs"] == {"c0": ["c1"], "c1": ["c0", "c2"], "c2": ["c0"]}
    sub = benefit_graph_to_json(ExactOracle(tie_game).benefit_graph(0b011))
    assert sub["clients"] == ["c0", "c1"] and "ambiguous" not in sub


def test_equilibria_and_checks_json(tie_game):
    doc = equilibria_to_json(tie_game, "personalized", [(0b101, 0b010)])
    assert doc == {"format": "coalitions/equilibria@1", "semantics": "personalized",
                   "equilibria": [[["c0", "c2"], ["c1"]]]}
    chk = checks_to_json(tie_game, (0b111,), all_checks(tie_game, (0b111,)))
    assert chk["format"] == "coalitions/verification@1" and chk["is_equilibrium"] is False
    (w,) = chk["checks"]["inner_agreement"]["witnesses"]
    assert w["coalition"] == ["c0", "c1", "c2"] and w["subcoalition"] == ["c0", "c2"]
    assert w["payoffs"]["c0"] == {"deviation": 3.0, "current": 3.0}
    assert json.loads(write_json(chk, None)) == chk


def test_an_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    """write_json writes next to the target and renames, so a resumable run never reads half a file."""
    from coalitions import files

    target = tmp_path / "game.json"

    def boom(path, write):
        def half(f):
            f.write(b'{"a": ')
            raise KeyboardInterrupt

        return real(path, half)

    real = files.write_file
    monkeypatch.setattr(files, "write_file", boom)
    with pytest.raises(KeyboardInterrupt):
        files.write_text(target, "{}")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    write_json({"a": 1}, target)
    assert json.loads(target.read_text()) == {"a": 1} and list(tmp_path.iterdir()) == [target]
