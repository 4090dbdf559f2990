"""Running the Flower app: in Flower's simulation engine, or on a SuperLink, and writing the results.

:func:`federate_simulation`
    Rehearsal on one machine: one virtual SuperNode per client of a loader's
    federation (Flower's simulation engine, Ray backend).  The ServerApp runs
    in this process and writes the output folder.
:func:`federate_superlink`
    Deployment: submits the app to a running SuperLink (``flwr run`` against
    its Control API) whose SuperNodes are the sites.  The ServerApp runs where
    the SuperLink runs (the third party's machine) and writes the output
    folder there; with the SuperLink on this machine that is ``output``.
:func:`write_outputs`
    ``game.json`` (``coalitions/game@1``, validation values, the game), its
    test-split twin ``game-test.json`` (for reporting, never for choosing),
    ``equilibrium.json`` (``coalitions/equilibrium@1``, peeled and certified,
    docs/concepts.md §3–4) and ``run.json`` (sites, rounds, bytes exchanged, timing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from coalitions.errors import InputError
from coalitions.learners.federated.outputs import FILES, write_outputs
from coalitions.learners.federated.protocol import Protocol
from coalitions.learners.federated.server import Settings, protocol_config

__all__ = ["federate", "write_outputs", "federate_simulation", "federate_superlink", "app_pyproject", "FILES"]

def _quiet_flower() -> None:
    import logging

    logging.getLogger("flwr").setLevel(logging.WARNING)
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


def federate_simulation(dataset: str, data_options: dict, protocol: Protocol, output, *, checkpoint=None,
                        semantics: str = "personalized", tol: float = 1e-9, threads: int = 1,
                        cpus: int | None = None, log=None, progress=None, method: str = "exact",
                        method_options: dict | None = None, exclude_bad_sites: bool = False) -> dict:
    """Measure the game of ``dataset`` in Flower's simulation engine; returns ``run.json``'s record.

    One virtual SuperNode per client of the federation (its ``partition-id``
    selects the client; ``dataset="csv"`` with ``data_options={"schemas": [...]}``:
    one per schema file).  ``cpus`` bounds the CPUs Ray may use (default:
    all, at most one per site).  ``method``: ``"exact"`` (the game) or a
    personalised learner (:mod:`coalitions.learners.federated.personal`, with
    its own parameters in ``method_options``).
    """
    if dataset == "csv":
        n = len(data_options.get("schemas", ()))
    else:
        from coalitions.learners.data.datasets import load

        n = load(dataset, **data_options).n     # checks the options before Ray starts
    settings = Settings(protocol=protocol, sites=n, dataset=dataset, data_options=dict(data_options),
                        checkpoint=None if checkpoint is None else str(checkpoint), threads=threads,
                        method=method, method_options=dict(method_options or {}),
                        exclude_bad_sites=exclude_bad_sites)
    return _simulate(settings, output, semantics, tol, cpus, log, progress)


def _loopback_ray() -> None:
    """Make the local Ray instance of the simulation engine listen on 127.0.0.1 only.

    Ray (2.55) binds its GCS, raylet and workers to all interfaces unless its
    node address is the loopback address, and it replaces an explicit
    ``127.0.0.1`` by the machine's address; only its single-machine mode
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read when Ray is imported) keeps
    it on loopback.  The simulation never needs another machine.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:          # Ray already imported in this process: the same switch
        constants.ENABLE_RAY_CLUSTER = False


def _simulate(settings: Settings, output, semantics, tol, cpus, log, progress) -> dict:
    _loopback_ray()
    from flwr.simulation import run_simulation

    from coalitions.learners.federated.apps import client_app, make_server_app

    outcome: dict = {}
    log = log or (lambda s: print(s, file=sys.stderr))
    app = make_server_app(settings, str(output), semantics, tol, outcome, log=log, progress=progress)
    n_cpus = max(1, min(settings.sites, cpus or os.cpu_count() or 1))
    _quiet_flower()
    settings.stop = threading.Event()
    try:
        run_simulation(app, client_app, num_supernodes=settings.sites,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"num_cpus": n_cpus, "num_gpus": 0, "include_dashboard": False}})
    except KeyboardInterrupt:
        settings.stop.set()       # the ServerApp thread stops polling, so the process can exit
        raise
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise InputError("the Flower simulation ended before the server finished (see the log above)")
    return json.loads((Path(output) / "run.json").read_text(encoding="utf-8"))


def app_pyproject(run_config: dict) -> str:
    """A Flower app's ``pyproject.toml`` whose components are this package's apps.

    The app folder holds no code: its components import the installed
    ``coalitions`` package, so every machine of the federation (SuperLink and
    SuperNodes) runs with ``collaboration-equilibrium[learn,flower]``
    installed and Flower's runtime dependency installation off.  The
    repository's ``federated-app/pyproject.toml`` is this file for
    :data:`~coalitions.learners.federated.apps.RUN_CONFIG` (a test keeps them equal).
    """
    import tomli_w

    from coalitions import __version__

    return ("# The `flwr run` entry of collaboration-equilibrium (docs/federated.md).  Generated by\n"
            "# coalitions.learners.federated.run.app_pyproject(RUN_CONFIG); tests keep the two equal.\n"
            + tomli_w.dumps({
                "project": {"name": "coalitions-federate", "version": __version__,
                            "description": "The exact collaboration game, or a learner's estimate, over Flower",
                            "license": "MIT",
                            # collaboration-equilibrium[learn,flower] must be installed where the apps run;
                            # nothing is listed, so Flower's runtime installation (uv sync) fetches nothing
                            "dependencies": []},
                "tool": {"flwr": {"app": {
                    "publisher": "coalitions",
                    "fab-include": ["README.md"],
                    "components": {"serverapp": "coalitions.learners.federated.apps:server_app",
                                   "clientapp": "coalitions.learners.federated.apps:client_app"},
                    "config": run_config}}},
            }))


APP_README = """# coalitions-federate: the `flwr run` entry

The exact collaboration game measured over Flower, the data staying at the sites; or,
with the run-config key `method` (spo, local, fedavg, fedamp, federico, superfed, ...),
that learner trained over Flower and its estimate (`method-options`: its own parameters, JSON).
The app holds no code: its components import the installed `coalitions` package
(`pip install 'collaboration-equilibrium[learn,flower]'` on every machine).
See docs/federated.md of collaboration-equilibrium.
"""


def _flwr_executable() -> str:
    here = Path(sys.executable).with_name("flwr")
    found = str(here) if here.exists() else shutil.which("flwr")
    if not found:
        raise InputError("the flwr command is not installed: pip install 'collaboration-equilibrium[flower]'")
    return found


def _connection(address: str, insecure: bool, root_certificates) -> str:
    """The ``[superlink.coalitions]`` table of the private Flower configuration: TLS unless ``insecure``.

    With TLS the SuperLink's certificate is checked against ``root_certificates``
    (a PEM file: the consortium's own CA) or, without it, the system's trust store.
    """
    if insecure and root_certificates:
        raise InputError("--insecure and --root-certificates exclude each other")
    lines = [f"address = {json.dumps(address)}", f"insecure = {'true' if insecure else 'false'}"]
    if root_certificates:
        path = Path(root_certificates).resolve()
        try:
            head = path.read_bytes()[:4096]
        except OSError as e:
            raise InputError(f"--root-certificates {root_certificates}: cannot read ({e.strerror})") from None
        if b"-----BEGIN CERTIFICATE-----" not in head:
            raise InputError(f"--root-certificates {root_certificates}: not a PEM certificate file")
        lines.append(f"root-certificates = {json.dumps(str(path))}")
    return '[superlink]\ndefault = "coalitions"\n\n[superlink.coalitions]\n' + "\n".join(lines) + "\n"


def _reachable(address: str) -> None:
    """One line and exit 2 when nothing listens at ``address`` (before ``flwr run`` prints its boxed error)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--superlink {address!r}: write HOST:PORT, e.g. 127.0.0.1:9093")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise InputError(f"--superlink {address}: cannot connect ({e.strerror or e})") from None


#: Characters that open, continue or close the boxed errors Flower's command line prints.
_BOX = ("╭", "│", "╰", "┌", "└", "|")
#: Unicode box-drawing characters (U+2500 to U+257F), removed from a boxed error's text.
_BOX_DRAWING = re.compile("[\u2500-\u257f|]+")


def _flwr_run(cmd: list, env: dict, timeout_s) -> tuple[int, str]:
    """Run ``flwr run``, streaming its log to stderr; a boxed error is held back and returned as one line."""
    box: list[str] = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
    if timer is not None:
        timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            stripped = line.strip()
            if stripped.startswith(_BOX):
                text = _BOX_DRAWING.sub(" ", stripped).strip()
                if text and text != "Error":
                    box.append(text)
                continue
            sys.stderr.write(line)
        proc.wait()
    finally:
        if timer is not None:
            timer.cancel()
    if timer is not None and proc.returncode < 0:
        raise InputError(f"the run did not finish within {timeout_s:g} s")
    return proc.returncode, " ".join(" ".join(box).split())


def federate_superlink(address: str, sites: int, protocol: Protocol, output, *, dataset: str | None = None,
                       data_options: dict | None = None, checkpoint=None, semantics: str = "personalized",
                       tol: float = 1e-9, threads: int = 1, wait_s: float = 120.0, timeout_s: float | None = None,
                       insecure: bool = False, root_certificates=None, method: str = "exact",
                       method_options: dict | None = None, exclude_bad_sites: bool = False) -> dict:
    """Submit the app to the SuperLink whose Control API listens at ``address``; wait; read ``run.json``.

    ``sites`` SuperNodes must connect; ``dataset`` is the loader they use
    with their ``partition-id`` (``None``: each reads its ``site-schema``).
    Runs ``flwr run`` with a private Flower configuration (``FLWR_HOME``)
    naming this SuperLink, over TLS (``root_certificates``: the CA's PEM file;
    ``insecure=True`` only when asked for, with a warning), streams its log
    to stderr, and returns the run record the ServerApp wrote to ``output``
    (it must be reachable from here, i.e. the SuperLink runs on this machine).
    """
    config = _connection(address, insecure, root_certificates)
    if insecure:
        print(f"coalitions: warning: --insecure: the connection to the SuperLink at {address} is not encrypted "
              "or authenticated; use it only on loopback or a trusted network", file=sys.stderr)
    _reachable(address)
    out = Path(output).resolve()
    run_config = {**protocol_config(protocol), "sites": int(sites), "dataset": dataset or "",
                  "data-options": json.dumps(data_options or {}, sort_keys=True), "output": str(out),
                  "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else "", "semantics": semantics,
                  "tol": float(tol), "wait-s": float(wait_s), "round-timeout-s": 600.0, "retries": 2,
                  "threads": int(threads), "method": method,
                  "method-options": json.dumps(method_options or {}, sort_keys=True),
                  "exclude-bad-sites": bool(exclude_bad_sites)}
    (out / "run.json").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="coalitions-federate-") as tmp:
        app_dir = Path(tmp) / "app"
        app_dir.mkdir()
        (app_dir / "pyproject.toml").write_text(app_pyproject(run_config), encoding="utf-8")
        (app_dir / "README.md").write_text(APP_README, encoding="utf-8")
        home = Path(tmp) / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(config, encoding="utf-8")
        env = {**os.environ, "FLWR_HOME": str(home)}
        cmd = [_flwr_executable(), "run", str(app_dir), "coalitions", "--stream"]
        try:
            code, error = _flwr_run(cmd, env, timeout_s)
        except InputError as e:
            raise InputError(f"--superlink {address}: {e}") from None
    if not (out / "run.json").exists():
        if "unavailable" in error:
            error += (" (is the SuperLink running with TLS and --root-certificates its CA's certificate, or "
                      "without TLS and --insecure given?)")
        raise InputError(f"--superlink {address}: " + (error or f"the run ended (flwr run exit code {code}) "
                         f"without writing {out / 'run.json'}; see the log above"))
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def federate(dataset: str, data_options: dict, protocol: Protocol, output, *, superlink: str | None = None,
             sites: int | None = None, schemas=(), checkpoint=None, semantics: str = "personalized",
             tol: float = 1e-9, threads: int = 1, wait_s: float = 120.0, progress=None, method: str = "exact",
             method_options: dict | None = None, insecure: bool = False, root_certificates=None,
             exclude_bad_sites: bool = False) -> dict:
    """``coalitions federate``: the simulation engine (``superlink=None``) or a running SuperLink.

    ``dataset`` is a loader name, or ``"csv"``: in the simulation engine the
    sites then read ``schemas`` (one schema file per site); on a SuperLink
    every SuperNode reads its own ``site-schema``.  ``sites`` is the number of
    SuperNodes to wait for (default: the loader's client count).  The
    checkpoint defaults to ``output/checkpoint.npz``: running the same
    command again resumes an interrupted run.  ``method`` other than
    ``"exact"``: a personalised learner over Flower (``estimate.json``; not
    checkpointed).
    """
    from coalitions.learners.federated.personal import PERSONAL

    if method not in ("exact", "spo") and method not in PERSONAL:
        raise InputError(f"--method {method}: choose exact, spo or one of {', '.join(PERSONAL)}")
    if method == "exact" and method_options:
        raise InputError("--method-option is for the personalised methods, not --method exact")
    if method != "exact" and checkpoint:
        raise InputError(f"--checkpoint: --method {method} is not checkpointed (only the exact game resumes)")
    if method == "spo":
        from coalitions.learners.federated.spo import check_spo

        check_spo(protocol, method_options)               # before Ray or a SuperLink starts
    elif method != "exact":
        from coalitions.learners.federated.personal import check_method

        check_method(method, protocol, method_options)   # before Ray or a SuperLink starts
    options = dict(data_options)
    if dataset == "csv":
        if options:
            raise InputError(f"dataset csv takes no loader options (got --{', --'.join(options)})")
        if superlink is None and not schemas:
            raise InputError("dataset csv in the simulation engine needs --site-schema, once per site")
        if superlink is not None and schemas:
            raise InputError("--site-schema is for the simulation engine; on a SuperLink each SuperNode names "
                             "its own with --node-config \"site-schema='...'\"")
        if superlink is None:
            from coalitions.learners.federated.sites import from_schema

            names = [from_schema(s).name for s in schemas]   # checks every file before anything starts
            if len(set(names)) != len(names):
                raise InputError(f"--site-schema: two schema files name the same site ({', '.join(names)})")
            options = {"schemas": [str(Path(s).resolve()) for s in schemas]}
    elif schemas:
        raise InputError(f"--site-schema goes with dataset csv, not {dataset!r}")
    out = Path(output)
    ckpt = None if method != "exact" else Path(checkpoint) if checkpoint else out / "checkpoint.npz"
    if superlink is None and (insecure or root_certificates):
        raise InputError("--insecure and --root-certificates are for --superlink")
    if superlink is None and sites is not None:
        raise InputError("--sites is for --superlink; the simulation engine runs one site per client")
    if superlink is not None and sites is None:
        if dataset == "csv":
            raise InputError("--sites is required with dataset csv on a SuperLink (how many SuperNodes to wait for)")
        from coalitions.learners.data.datasets import load

        sites = load(dataset, **options).n
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    try:
        if superlink is None:
            return federate_simulation(dataset, options, protocol, out, checkpoint=ckpt, semantics=semantics,
                                       tol=tol, threads=threads, progress=progress, method=method,
                                       method_options=method_options, exclude_bad_sites=exclude_bad_sites)
        return federate_superlink(superlink, sites, protocol, out, dataset=dataset, data_options=options,
                                  checkpoint=ckpt, semantics=semantics, tol=tol, threads=threads, wait_s=wait_s,
                                  method=method, method_options=method_options, insecure=insecure,
                                  root_certificates=root_certificates, exclude_bad_sites=exclude_bad_sites)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()          # a run that failed leaves no empty -o folder behind
        raise

