"""A site's own data, where the site's process finds it (never sent anywhere).

Two sources (docs/federated.md):

* **A loader and a partition id** (rehearsal, tests): the site loads the
  federation ``dataset`` with ``options`` (:func:`coalitions.learners.data.datasets.load`)
  and keeps client number ``partition`` of it.  Flower's simulation engine
  gives every virtual SuperNode its ``partition-id``; a real SuperNode is
  started with ``--node-config "partition-id=0"``.
* **A CSV file with a small schema** (deployment): the site is started with
  ``--node-config "site-schema='/data/site.json'"``; the schema is JSON::

      {"site": "Cleveland",            # the site's name in the game
       "csv": "cleveland.csv",         # relative to the schema file
       "task": "binary",               # regression | binary | multiclass
       "metric": "accuracy",           # mse | accuracy | auc
       "n_classes": 2,                 # binary: 2; multiclass: C; regression: omit
       "label": "disease",             # target column (class ids 0..C-1, or a number)
       "features": ["age", "chol"],    # numeric feature columns, in this order at every site
       "split": "split",               # column holding train, val or test
       "standardize": true}            # optional: scale features by the train split's mean/std

  Every site of a federation uses the same ``task``, ``metric``,
  ``n_classes`` and feature list (the server checks).

Only sizes and the fields above leave the site in the first message (see
:func:`describe`); the rows never do.
"""

from __future__ import annotations

import csv
import io
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.files import open_input, read_bytes
from coalitions.resources import check_memory

#: Largest site schema read (a few hundred bytes in practice).
MAX_SCHEMA_BYTES = 1 << 20
#: Largest site CSV file read, and its rows' peak in memory in multiples of its bytes (Python floats in lists).
MAX_CSV_BYTES = 4 << 30
CSV_PEAK = 8

__all__ = ["SiteData", "from_loader", "from_schema", "describe", "SCHEMA_KEYS"]

SCHEMA_KEYS = ("site", "csv", "task", "metric", "n_classes", "label", "features", "split", "standardize")


class SiteData:
    """One site: its :class:`~coalitions.learners.data.federation.Client` and what its data is."""

    def __init__(self, client, task: str, metric: str, n_classes: int | None, order: int = -1, features=()):
        self.client = client
        self.task = task
        self.metric = metric
        self.n_classes = n_classes
        self.order = int(order)
        self.features = [str(f) for f in features]   # the feature columns in order (a schema's; a loader's: none)

    @property
    def name(self) -> str:
        return self.client.name

    @property
    def n_outputs(self) -> int:
        """Model outputs: ``n_classes`` for a multiclass task, else 1 (a logit, or the regression value)."""
        if self.task != "multiclass":
            return 1
        if self.n_classes is None:
            raise InputError(f"site {self.name!r}: a multiclass task needs n_classes")
        return self.n_classes


def describe(site: SiteData) -> dict:
    """What the site tells the server: name, task, metric, feature shape and names, split sizes (no data)."""
    c = site.client
    return {"name": c.name, "task": site.task, "metric": site.metric, "n-classes": int(site.n_classes or 0),
            "input-shape": [int(d) for d in c.train.X.shape[1:]], "n-train": len(c.train), "n-val": len(c.val),
            "n-test": len(c.test), "order": site.order, "features": list(site.features)}


@lru_cache(maxsize=8)
def _federation(dataset: str, options_json: str):
    from coalitions.learners.data.datasets import load

    return load(dataset, **json.loads(options_json))


def from_loader(dataset: str, options: dict, partition: int) -> SiteData:
    """Client ``partition`` of the federation ``dataset`` built with ``options``.

    ``dataset="csv"`` with ``options={"schemas": [path, ...]}`` reads the
    schema file number ``partition`` (a rehearsal of CSV sites in the
    simulation engine, whose virtual SuperNodes differ only by partition id).
    """
    if dataset == "csv":
        schemas = options.get("schemas") or []
        if not 0 <= int(partition) < len(schemas):
            raise InputError(f"partition-id {partition} has no site schema (this SuperNode needs a "
                             "site-schema node config)")
        return from_schema(schemas[int(partition)])
    fed = _federation(dataset, json.dumps(options, sort_keys=True))
    if not 0 <= int(partition) < fed.n:
        raise InputError(f"partition-id {partition} is outside 0..{fed.n - 1} of dataset {dataset!r}")
    return SiteData(fed.clients[int(partition)], fed.task, fed.metric, fed.n_classes, int(partition))


def from_schema(path) -> SiteData:
    """The site described by the JSON schema at ``path`` (see the module docstring)."""
    path = Path(path)
    key = (str(path.resolve()), path.stat().st_mtime_ns if path.exists() else 0)
    return _from_schema(*key)


@lru_cache(maxsize=4)
def _from_schema(path: str, _mtime: int) -> SiteData:
    from coalitions.learners.data.federation import METRIC_SENSE, TASKS, Client, Split

    if not os.path.lexists(path):
        raise InputError(f"{path}: cannot read site schema (No such file or directory)")
    raw = read_bytes(path, MAX_SCHEMA_BYTES, "a site schema")  # a regular file, sized before it is read
    try:
        schema = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: not JSON (nested too deeply)") from None
    if not isinstance(schema, dict):
        raise InputError(f"{path}: a site schema is a JSON object")
    unknown = set(schema) - set(SCHEMA_KEYS)
    missing = {"site", "csv", "task", "metric", "label", "features", "split"} - set(schema)
    if unknown or missing:
        what = f"unknown key(s) {sorted(unknown)}" if unknown else f"missing key(s) {sorted(missing)}"
        raise InputError(f"{path}: {what} (keys: {', '.join(SCHEMA_KEYS)})")
    task, metric = schema["task"], schema["metric"]
    if task not in TASKS or metric not in METRIC_SENSE:
        raise InputError(f"{path}: task must be one of {TASKS} and metric one of {tuple(METRIC_SENSE)}")
    n_classes = schema.get("n_classes")
    if task == "regression":
        n_classes = None
    elif not isinstance(n_classes, int) or n_classes < 2 or (task == "binary" and n_classes != 2):
        raise InputError(f"{path}: n_classes must be 2 for binary and an integer >= 2 for multiclass")
    features = schema["features"]
    if not isinstance(features, list) or not features or not all(isinstance(f, str) for f in features):
        raise InputError(f"{path}: features must be a non-empty list of column names")
    data_path = os.path.join(os.path.dirname(path), str(schema["csv"]))
    rows: dict[str, tuple[list, list]] = {"train": ([], []), "val": ([], []), "test": ([], [])}
    top = int(n_classes or 0)
    try:
        with open_input(data_path, MAX_CSV_BYTES, "a site's CSV file") as raw_file, \
                io.TextIOWrapper(raw_file, encoding="utf-8", newline="") as f:
            check_memory(CSV_PEAK * os.fstat(raw_file.fileno()).st_size, f"{data_path}: reading its rows")
            reader = csv.DictReader(f)
            need = [*features, schema["label"], schema["split"]]
            absent = [c for c in need if c not in (reader.fieldnames or [])]
            if absent:
                raise InputError(f"{data_path}: column(s) {absent} named by {path} are missing")
            for line, row in enumerate(reader, start=2):
                part = row[schema["split"]].strip()
                if part not in rows:
                    raise InputError(f"{data_path}: line {line}: split must be train, val or test, got {part!r}")
                try:
                    x = [float(row[c]) for c in features]
                    y = float(row[schema["label"]])
                except ValueError:
                    raise InputError(f"{data_path}: line {line}: a feature or the label is not a number") from None
                if not all(np.isfinite(x)) or not np.isfinite(y):
                    raise InputError(f"{data_path}: line {line}: a feature or the label is not finite")
                if task != "regression" and (y != int(y) or not 0 <= y < top):
                    raise InputError(f"{data_path}: line {line}: label {y:g} is not a class id 0..{top - 1}")
                rows[part][0].append(x)
                rows[part][1].append(y)
    except OSError as e:
        raise InputError(f"{data_path}: cannot read the site's data ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{data_path}: not UTF-8 text (byte 0x{e.object[e.start]:02x})") from None
    except csv.Error as e:
        raise InputError(f"{data_path}: not a readable CSV file ({e})") from None
    for part, (X, _) in rows.items():
        if not X:
            raise InputError(f"{data_path}: no {part} rows")
    arrays = {p: np.asarray(X, dtype=np.float64) for p, (X, _) in rows.items()}
    if schema.get("standardize", False):
        mean, std = arrays["train"].mean(axis=0), arrays["train"].std(axis=0, ddof=1)
        arrays = {p: (X - mean) / (std + 1e-9) for p, X in arrays.items()}
    ydt = np.float32 if task == "regression" else np.int64
    splits = {p: Split(arrays[p].astype(np.float32), np.asarray(rows[p][1]).astype(ydt)) for p in rows}
    name = str(schema["site"])
    if not name or "," in name or "|" in name:
        raise InputError(f"{path}: site name {name!r} is empty or contains ',' or '|'")
    return SiteData(Client(name, splits["train"], splits["val"], splits["test"]), task, metric, n_classes,
                    features=features)
