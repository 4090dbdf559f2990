"""What the server of a federated exact game writes: the game, its equilibrium and the run record.

Shared by the simulation engine, the SuperLink path (:mod:`coalitions.learners.federated.run`)
and the ServerApp (:mod:`coalitions.learners.federated.apps`); see docs/federated.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import coalitions as co
from coalitions import io as cio
from coalitions.errors import InputError
from coalitions.learners.federated.server import Settings

__all__ = ["FILES", "PERSONAL_FILES", "MEASUREMENT_FILES", "write_outputs", "write_personal_outputs",
           "write_measurement", "read_measurement"]

FILES = ("game.json", "game-test.json", "equilibrium.json", "run.json")
#: What a personalised method over Flower writes (docs/federated.md).
PERSONAL_FILES = ("estimate.json", "run.json")
#: What the exact game over chosen coalitions writes (run config ``masks``; ``sample-ce --federated``).
MEASUREMENT_FILES = ("measurement.npz", "run.json")
#: The arrays of ``measurement.npz``.
MEASUREMENT_ARRAYS = ("masks", "val", "test", "val_loss", "val_replicates")


def _identity(settings: Settings) -> dict:
    """How the sites' names and weights were established: ``site_identity`` (a consortium manifest's
    keys, or the names the sites declared) and ``site_weights`` (the coalitions' averages)."""
    manifest = settings.manifest
    weights = ("equal" if settings.equal_weights else "n-train of the consortium manifest" if manifest is not None
               else "n-train reported by the sites")
    return {"site_identity": "SuperNode keys of the consortium manifest" if manifest is not None
            else "self-declared names", "site_weights": weights}


def _excluded(settings: Settings) -> dict:
    """``{"excluded_sites": {site: reason}}`` when sites were left out for bad replies (``--exclude-bad-sites``)."""
    return {"excluded_sites": dict(settings.excluded)} if settings.excluded else {}


def write_outputs(result: dict, settings: Settings, output, semantics: str = "personalized",
                  tol: float = 1e-9) -> list[str]:
    """Write the measured game, its equilibrium and the run record into the folder ``output``."""
    from coalitions.learners.data.federation import METRIC_SENSE

    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    traffic = {"rounds": result["rounds"], "communication_rounds": result["communication_rounds"],
               "bytes_sent": result["bytes_sent"], "bytes_received": result["bytes_received"],
               "messages": result["messages"]}
    sites = [{k: d[k] for k in ("name", "n-train", "n-val", "n-test")} for d in result["sites"]]
    base = {"source": "coalitions federate (FedOpt within each coalition: the training protocol's optimiser at the "
                      "server, measured over Flower; docs/federated.md)",
            "dataset": settings.dataset or "site CSV files", "options": dict(settings.data_options),
            "task": result["task"], "metric": result["metric"], "sites": sites,
            "protocol": {**result["protocol"], "seed": result["seed"], "aggregation": "fedopt-within-coalition"},
            **traffic, "flower_version": result["flower_version"], "version": co.__version__,
            **_excluded(settings), **_identity(settings)}
    sense = METRIC_SENSE[result["metric"]]
    game = co.Game.from_array(result["val"], result["names"], sense, {**base, "split": "val"})
    test = co.Game.from_array(result["test"], result["names"], sense, {**base, "split": "test"})
    replicates = None
    if result.get("val_replicates") is not None:   # each site's values on resamples of its validation rows
        from coalitions.noise import Uncertainty
        from coalitions.replicates import Replicates

        replicates = Replicates.from_array(result["val_replicates"], result["names"], sense)
        game = game.with_uncertainty(Uncertainty.from_replicates(replicates))
    co.write_game(game, out / "game.json", replicates)
    co.write_game(test, out / "game-test.json")
    record = {**traffic, "sites": sites, "seconds": round(result["seconds"], 3),
              "resumed_from_round": result["resumed_from"], "flower_version": result["flower_version"],
              "protocol": base["protocol"], "semantics": semantics, "files": list(FILES), **_excluded(settings),
              **_identity(settings),
              "replicates": 0 if replicates is None else replicates.b}
    if result.get("stopped_at") is not None:    # patience: the server step where each coalition stopped
        record["stopped_at"] = {",".join(result["names"][i] for i in co.bitmask.members(k + 1)): int(s)
                                for k, s in enumerate(result["stopped_at"])}
    try:
        eq = co.solve(game, semantics, tol)
        cio.write_json(cio.equilibrium_to_json(eq), out / "equilibrium.json")
        record["equilibrium"] = [[result["names"][i] for i in co.bitmask.members(k)] for k in eq.masks]
        record["certificate_holds"] = None if eq.certificate is None else bool(eq.certificate.holds)
    except co.NoEquilibrium as e:
        record["equilibrium"] = None
        record["no_equilibrium"] = str(e)
        record["files"] = [f for f in FILES if f != "equilibrium.json"]
        (out / "equilibrium.json").unlink(missing_ok=True)
    cio.write_json(record, out / "run.json")
    return [str(out / f) for f in record["files"]]


def write_personal_outputs(learner, record: dict, settings: Settings, output) -> list[str]:
    """Write a personalised learner's estimate (``coalitions/estimate@1``, as ``coalitions learn``) and the run record.

    ``learner`` is the server's learner after :func:`~coalitions.learners.federated.personal.run_personal`;
    its :attr:`estimate_` is built by :func:`coalitions.estimate.build_estimate`, the path of
    ``coalitions learn``.  The estimate's config also says where it was trained
    (``"federated"``: Flower, sites, traffic).
    """
    import dataclasses

    from coalitions.estimate import write_estimate

    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    traffic = {k: record[k] for k in ("rounds", "communication_rounds", "bytes_sent", "bytes_received", "messages")}
    est = learner.estimate_
    config = {**est.config, "federated": {"framework": "flower", "flower_version": record["flower_version"],
                                          "sites": record["sites"], **traffic, **_excluded(settings)}}
    est = dataclasses.replace(est, config=config)
    write_estimate(est, out / "estimate.json")
    run = {**record, "seconds": round(record["seconds"], 3), "version": co.__version__,
           "equilibrium": [list(b) for b in est.blocks()], "utilities": est.utilities,
           "files": list(PERSONAL_FILES), "threads": settings.threads, **_excluded(settings)}
    cio.write_json(run, out / "run.json")
    return [str(out / f) for f in PERSONAL_FILES]


def write_measurement(result: dict, settings: Settings, output) -> list[str]:
    """Write the values of a game over chosen coalitions (``measurement.npz``) and the run record.

    ``measurement.npz`` holds ``masks`` ``(k,)`` (int64), ``val``, ``test``, ``val_loss``
    ``(N, k)`` and, with replicates, ``val_replicates`` ``(B, N, k)`` (float64, NaN where the site
    is not a member), exactly as the server checked and assembled them; ``run.json`` the sites,
    the protocol, the traffic and the client names (no equilibrium: the game is not whole).
    """
    import numpy as np

    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    arrays: dict[str, Any] = {k: np.asarray(result[k]) for k in MEASUREMENT_ARRAYS if result.get(k) is not None}
    with open(out / "measurement.npz", "wb") as f:
        np.savez(f, **arrays)
    sites = [{k: d[k] for k in ("name", "n-train", "n-val", "n-test")} for d in result["sites"]]
    record = {"rounds": result["rounds"], "communication_rounds": result["communication_rounds"],
              "bytes_sent": result["bytes_sent"], "bytes_received": result["bytes_received"],
              "messages": result["messages"], "names": list(result["names"]), "task": result["task"],
              "metric": result["metric"], "sites": sites, "coalitions": int(len(result["masks"])),
              "seconds": round(result["seconds"], 3), "flower_version": result["flower_version"],
              "protocol": {**result["protocol"], "seed": result["seed"], "aggregation": "fedopt-within-coalition"},
              "replicates": int(settings.replicates), "files": list(MEASUREMENT_FILES), "version": co.__version__,
              **_excluded(settings)}
    cio.write_json(record, out / "run.json")
    return [str(out / f) for f in MEASUREMENT_FILES]


def read_measurement(output) -> tuple[dict, dict]:
    """The arrays of ``measurement.npz`` and the record of ``run.json`` that :func:`write_measurement` wrote."""
    import json

    import numpy as np

    out = Path(output)
    with np.load(out / "measurement.npz", allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    return arrays, json.loads((out / "run.json").read_text(encoding="utf-8"))
