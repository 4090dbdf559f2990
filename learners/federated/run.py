"""Running the Flower app: in Flower's simulation engine, or on a SuperLink, and writing the results.

:func:`federate_simulation`
    Rehearsal on one machine: ``flwr run`` of the app folder against a private
    SuperLink in simulation mode (Flower's Simulation Runtime, Ray backend),
    one virtual SuperNode per client of a loader's federation.  The ServerApp
    writes the output folder.
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
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from coalitions.errors import InputError
from coalitions.learners.federated.app_folder import write_app
from coalitions.learners.federated.outputs import FILES, write_outputs
from coalitions.learners.game.bootstrap import DEFAULT_REPLICATES

#: The run's log lines, the --insecure warning and an unexpected traceback (docs/learners-protocol.md, "Logging").
_log = logging.getLogger(__name__)

__all__ = ["federate", "write_outputs", "federate_simulation", "federate_superlink", "FILES",
           "DEFAULT_ROUND_TIMEOUT_S", "MAX_ROUND_TIMEOUT_S"]

#: How long one attempt of a round waits for the sites' replies by default (``--round-timeout``).
DEFAULT_ROUND_TIMEOUT_S = 600.0
#: The longest ``--round-timeout`` (a week; 0 means no limit).
MAX_ROUND_TIMEOUT_S = 7 * 86400.0

def federate_simulation(dataset: str, data_options: dict, training: dict, output, *, seed: int = 0, checkpoint=None,
                        semantics: str = "personalized", tol: float = 1e-9, threads: int = 1,
                        cpus: int | None = None, log=None, progress=None, method: str = "exact",
                        method_options: dict | None = None, exclude_bad_sites: bool = False,
                        supernodes: int | None = None, wait_s: float = 120.0,
                        replicates: int = DEFAULT_REPLICATES, masks=None, equal_weights: bool = False,
                        round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S) -> dict:
    """Measure the game of ``dataset`` in Flower's Simulation Runtime; returns ``run.json``'s record.

    The way Flower runs a simulation since ``run_simulation`` was deprecated:
    ``flwr run`` of the app folder (:mod:`~coalitions.learners.federated.app_folder`)
    against a SuperLink in simulation mode.  A private SuperLink is started on
    a free loopback port for this run and stopped after it.  The federation has
    one virtual SuperNode per client of the dataset's federation
    (``--federation-config num-supernodes=N``; its ``partition-id`` selects the
    client; ``dataset="csv"`` with ``data_options={"schemas": [...]}``: one per
    schema file), and the app waits for all ``N``.  ``cpus`` bounds the CPUs
    Ray may use (default: all, at most one per site).  ``method``: ``"exact"``
    (the game) or a personalised learner
    (:mod:`coalitions.learners.federated.personal`, its own parameters in
    ``method_options``).  ``log`` receives the run's log lines (default: the ``coalitions.learners.federated.run`` logger, at
    INFO), ``progress``
    ``(round, rounds)`` for every round the server reports.  ``supernodes``
    (default ``N``) and ``wait_s`` rehearse a federation that lacks sites: the
    server waits ``wait_s`` seconds for the missing ones, then the run fails
    (an :class:`~coalitions.errors.InputError` naming the sites that came).
    ``masks``: train only these coalitions (the run config's ``masks``); the ServerApp then writes
    ``measurement.npz`` and ``run.json`` (:func:`~coalitions.learners.federated.outputs.write_measurement`).
    """
    if dataset == "csv":
        n = len(data_options.get("schemas", ()))
    else:
        from coalitions.learners.data.datasets import load

        n = load(dataset, **data_options).n     # checks the options before anything starts
    run_config = _run_config(training, seed, n, dataset, data_options, output, checkpoint, semantics, tol, wait_s,
                             threads, method, method_options, exclude_bad_sites, replicates, masks,
                             equal_weights=equal_weights, round_timeout_s=round_timeout_s)
    nodes = n if supernodes is None else int(supernodes)
    n_cpus = max(1, min(nodes, cpus or os.cpu_count() or 1))
    federation = f"num-supernodes={nodes} client-resources-num-cpus=1 client-resources-num-gpus=0 init-args-num-cpus={n_cpus}"
    out = Path(output).resolve()
    (out / "run.json").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="coalitions-simulation-") as tmp:
        env = _flower_env(Path(tmp))
        link, address = _local_superlink(Path(tmp), env)
        try:
            (Path(env["FLWR_HOME"]) / "config.toml").write_text(
                _connection(address, True, None, name="simulation"), encoding="utf-8")
            app = write_app(Path(tmp) / "app", run_config)
            flwr = shutil.which("flwr", path=env["PATH"]) or _flwr_executable()
            cmd = [flwr, "run", str(app), "simulation", "--federation-config", federation, "--stream"]
            code, error = _flwr_run(cmd, env, None, log=log, progress=progress)
        finally:
            _stop(link)
    return _read_run(out, error, code, "the simulation")


def _flower_env(tmp: Path) -> dict:
    """The environment of the Flower processes of one run: a private ``FLWR_HOME``, this interpreter's commands.

    The SuperLink starts ``flower-superexec``, ``flwr-serverapp`` and
    ``flwr-simulation`` by name; when they are not installed beside this
    interpreter (a virtual environment over system packages) a folder of
    launchers running them with this interpreter comes first on ``PATH``, so
    every process imports this very package.  Ray stays on loopback
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: its single-machine mode, which
    binds nothing but 127.0.0.1; a ``RAY_ADDRESS`` of the caller's is not
    passed on) and Flower installs no dependencies at run time.
    """
    home = tmp / "flwr-home"
    home.mkdir()
    here = Path(sys.executable).parent
    if not any((here / f"flwr-serverapp{ext}").exists() for ext in ("", ".exe")):
        here = tmp / "bin"
        here.mkdir()
        from importlib.metadata import distribution

        for entry in distribution("flwr").entry_points:
            if entry.group == "console_scripts":
                module, _, attr = entry.value.partition(":")
                launcher = here / entry.name
                launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {attr}\n"
                                    f"sys.exit({attr}())\n", encoding="utf-8")
                launcher.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}      # the rehearsal's Ray is its own
    return {**env, "FLWR_HOME": str(home), "PATH": f"{here}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
            "RAY_DEDUP_LOGS": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1"}


def _local_superlink(tmp: Path, env: dict, timeout_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start a SuperLink in simulation mode on a free loopback port; returns the process and its address."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logfile = tmp / "superlink.log"
    cmd = [str(Path(env["PATH"].split(os.pathsep)[0]) / "flower-superlink"), "--insecure", "--simulation",
           "--isolation", "subprocess", "--host", "127.0.0.1", "--port", str(port),
           "--disable-runtime-dependency-installation"]
    with open(logfile, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = [line for line in logfile.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
            raise InputError(f"the local Flower SuperLink exited (code {proc.returncode}): "
                             f"{tail[-1] if tail else 'no output'}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                _stop(proc)
                raise InputError(f"the local Flower SuperLink did not start within {timeout_s:g} s") from None
            time.sleep(0.2)


def _process_groups(root: int) -> list[int]:
    """The process groups of ``root`` and of all its descendants (Linux ``/proc``; elsewhere ``root``'s alone).

    Flower's SuperExec starts its own session, and the simulation (its Ray
    included) runs in that one, so stopping the SuperLink's group alone would
    leave the simulation running.
    """
    children: dict[int, list[int]] = {}
    groups = {root: root}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        groups[pid] = int(fields[2])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return list(dict.fromkeys(groups.get(pid, pid) for pid in found))


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session and every process group it started (SIGTERM, then SIGKILL)."""
    import signal
    import time

    killpg = getattr(os, "killpg", None)
    if killpg is None:                        # no process groups: the process alone
        proc.kill()
        proc.wait()
        return
    groups = _process_groups(proc.pid)
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        alive = []
        for group in groups:
            try:
                killpg(group, sig)
                alive.append(group)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            proc.poll()                       # reap the SuperLink itself
            alive = [g for g in alive if _group_alive(g)]
            time.sleep(0.1)
        if not alive:
            break
    proc.poll()


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _run_config(training: dict, seed: int, sites: int, dataset: str | None, data_options: dict | None, output,
                checkpoint, semantics: str, tol: float, wait_s: float, threads: int, method: str,
                method_options: dict | None, exclude_bad_sites: bool, replicates: int = DEFAULT_REPLICATES,
                masks=None, manifest=None, equal_weights: bool = False,
                round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S) -> dict:
    """The app's run config (``--run-config``) for these settings; paths made absolute.

    ``training``: the training flags given (protocol field -> value), as JSON; the server turns
    them into the run's protocol once the sites have told it their task.  ``masks``: the coalitions
    to train, a JSON list (``""``: all of them).  ``manifest``: the consortium manifest
    (:class:`~coalitions.learners.federated.manifest.Manifest`), carried whole as JSON so the
    ServerApp needs no file of its own.  ``round_timeout_s``: how long one attempt of a round
    waits for the sites (0: no limit).
    """
    return {"training": json.dumps(training, sort_keys=True), "seed": int(seed), "sites": int(sites),
            "dataset": dataset or "",
            "data-options": json.dumps(data_options or {}, sort_keys=True), "output": str(Path(output).resolve()),
            "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else "", "semantics": semantics,
            "tol": float(tol), "wait-s": float(wait_s), "round-timeout-s": float(round_timeout_s), "retries": 2,
            "threads": int(threads), "method": method,
            "method-options": json.dumps(method_options or {}, sort_keys=True),
            "exclude-bad-sites": bool(exclude_bad_sites), "replicates": int(replicates),
            "masks": "" if masks is None else json.dumps([int(m) for m in masks]),
            "manifest": "" if manifest is None else json.dumps(manifest.to_json(), sort_keys=True),
            "equal-weights": bool(equal_weights)}


def _read_run(out: Path, error: str, code: int, where: str) -> dict:
    """``run.json`` the ServerApp wrote, or the run's error as one line."""
    if not (out / "run.json").exists():
        raise InputError(error or f"{where} ended (flwr run exit code {code}) without writing "
                         f"{out / 'run.json'}; see the log above")
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def _flwr_executable() -> str:
    here = Path(sys.executable).with_name("flwr")
    found = str(here) if here.exists() else shutil.which("flwr")
    if not found:
        raise InputError("the flwr command is not installed: pip install 'collaboration-equilibrium[flower]'")
    return found


#: Largest ``--root-certificates`` file read (a CA bundle of the whole web is about 220 KB).
MAX_CERTIFICATE_BYTES = 1 << 20


def _connection(address: str, insecure: bool, root_certificates, name: str = "coalitions") -> str:
    """The ``[superlink.<name>]`` table of the private Flower configuration: TLS unless ``insecure``.

    With TLS the SuperLink's certificate is checked against ``root_certificates``
    (a PEM file: the consortium's own CA) or, without it, the system's trust store.
    """
    if insecure and root_certificates:
        raise InputError("--insecure and --root-certificates exclude each other")
    lines = [f"address = {json.dumps(address)}", f"insecure = {'true' if insecure else 'false'}"]
    if root_certificates:
        from coalitions.files import read_bytes

        path = Path(root_certificates).resolve()
        if not path.exists():
            raise InputError(f"--root-certificates {root_certificates}: cannot read (No such file or directory)")
        try:  # a regular file of at most 1 MiB: /dev/zero is never read, a FIFO never opened
            head = read_bytes(root_certificates, MAX_CERTIFICATE_BYTES, "a certificate file")[:4096]
        except InputError as e:
            raise InputError(f"--root-certificates {e}") from None
        if b"-----BEGIN CERTIFICATE-----" not in head:
            raise InputError(f"--root-certificates {root_certificates}: not a PEM certificate file")
        lines.append(f"root-certificates = {json.dumps(str(path))}")
    return f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\n' + "\n".join(lines) + "\n"


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
#: Terminal colour codes in Flower's log lines.
_ANSI = re.compile("\x1b\\[[0-9;]*m")
#: Flower's own chatter around a run, not shown (the run's log lines are).
_CHATTER = ("Using SuperLink", "Successfully started run", "Successfully installed", "INFO :",
            "(ClientAppActor pid=",
            "WARNING : Since flwr 1.32", "ERROR : ServerApp raised an exception")
#: The line the server logs after every round (:func:`coalitions.learners.federated.server.measure_game`).
_ROUND = re.compile(r"^round (\d+)/(\d+)\b")
#: The level tag that opens a record of Flower's log.
_LOG_TAG = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +:")
#: The last line of a Python traceback: the exception's type and message.
_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Reply|Stopped|Interrupt)): (.*)$")


#: The line ``flwr run`` prints once the SuperLink accepted the run.
_STARTED = re.compile(r"Successfully started run (\d+)")


#: Seconds a submitted run may stay ``pending`` before ``federate --superlink`` gives up on it (a
#: SuperLink whose SuperExec cannot start the ServerApp leaves it pending for ever).
START_TIMEOUT_S = 30.0


class _StartWatch:
    """Poll the run's status (``flwr ls``) until it leaves ``pending``; after ``limit_s``, end ``flwr run``.

    Started by :func:`_flwr_run` with the process it watches; :attr:`pending` is True when it
    ended the process because the run never started.
    """

    def __init__(self, started: dict, env: dict, limit_s: float, every_s: float = 2.0):
        self.started, self.env, self.limit_s, self.every_s = started, env, float(limit_s), every_s
        self.pending = False
        self._done = threading.Event()

    def start(self, proc) -> None:
        threading.Thread(target=self._run, args=(proc,), daemon=True).start()

    def stop(self) -> None:
        self._done.set()

    def _status(self, run_id: int) -> str | None:
        try:
            r = subprocess.run([_flwr_executable(), "ls", "coalitions", "--run-id", str(run_id), "--format", "json"],
                               env=self.env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            out = r.stdout
            runs = json.loads(out[out.index("{"):]).get("runs", [])
        except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError, InputError):
            return None                           # no answer: say nothing, the run's own stream decides
        return next((str(x.get("status", "")) for x in runs if str(x.get("run-id")) == str(run_id)), None)

    def _run(self, proc) -> None:
        begin = time.monotonic()
        while not self._done.wait(self.every_s):
            run_id = self.started.get("run_id")
            if run_id is None:
                continue
            status = self._status(run_id)
            if status is not None and not status.startswith("pending"):
                return                            # starting, running or finished: the stream takes over
            if time.monotonic() - begin > self.limit_s and status is not None:
                self.pending = True
                proc.kill()
                return


def _flwr_run(cmd: list, env: dict, timeout_s, log=None, progress=None, started=None,
              watch: _StartWatch | None = None) -> tuple[int, str]:
    """Run ``flwr run --stream``, passing the run's log on; returns its exit code and the run's error (one line).

    Flower's boxed errors and the ServerApp's traceback are held back: their
    message is returned (a :class:`~coalitions.errors.InputError` raised in the
    ServerApp as its own message), and an unexpected exception's traceback is
    logged after all (level ERROR), since it is a fault of this package, not of the
    input.  A server line ``round r/R: ...`` goes to ``progress(r, R)`` when given (a
    bar), to ``log`` otherwise; ``log`` defaults to this module's logger (INFO), which
    ``coalitions federate`` prints to stderr.  ``started`` (a dict), when given, receives
    ``"run_id"`` as soon as Flower says the run started (to stop it on an interrupt);
    ``watch`` (a :class:`_StartWatch`) watches the process while it runs.
    """
    log = log or _log.info
    box: list[str] = []
    trace: list[str] | None = None
    raised = ""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
    if timer is not None:
        timer.start()
    if watch is not None:
        watch.start(proc)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = _ANSI.sub("", raw.rstrip("\n"))
            stripped = line.strip()
            run_id = _STARTED.search(stripped)
            if run_id and started is not None:
                started["run_id"] = int(run_id.group(1))
            if stripped.startswith(_BOX):
                text = _BOX_DRAWING.sub(" ", stripped).strip()
                if text and text != "Error":
                    box.append(text)
                continue
            if raised:                                   # after the traceback: Flower's exit notice
                continue
            if trace is not None:
                trace.append(line)
                found = _RAISED.match(_LOG_TAG.split(line)[0].rstrip())   # Flower's next record may follow
                if found:
                    raised = found.group(2) if found.group(1).startswith("coalitions.") else found.group(0)
                    if not found.group(1).startswith("coalitions."):
                        _log.error("\n".join(trace))
                continue
            if stripped.startswith("Traceback (most recent call last)"):
                trace = [line]
                continue
            if not stripped or " ".join(stripped.split()).startswith(_CHATTER):
                continue
            step = _ROUND.match(stripped)
            if step and progress is not None:
                progress(int(step.group(1)), int(step.group(2)))
            else:
                log(line)
        proc.wait()
    finally:
        if timer is not None:
            timer.cancel()
        if watch is not None:
            watch.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if timer is not None and proc.returncode < 0 and not (watch is not None and watch.pending):
        raise InputError(f"the run did not finish within {timeout_s:g} s")
    return proc.returncode, raised or " ".join(" ".join(box).split())


def federate_superlink(address: str, sites: int, training: dict, output, *, seed: int = 0, dataset: str | None = None,
                       data_options: dict | None = None, checkpoint=None, semantics: str = "personalized",
                       tol: float = 1e-9, threads: int = 1, wait_s: float = 120.0, timeout_s: float | None = None,
                       insecure: bool = False, root_certificates=None, method: str = "exact",
                       method_options: dict | None = None, exclude_bad_sites: bool = False,
                       replicates: int = DEFAULT_REPLICATES, masks=None, manifest=None, equal_weights: bool = False,
                       round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S,
                       start_timeout_s: float = START_TIMEOUT_S) -> dict:
    """Submit the app to the SuperLink whose Control API listens at ``address``; wait; read ``run.json``.

    ``sites`` SuperNodes must connect; ``dataset`` is the loader they use
    with their ``partition-id`` (``None``: each reads its ``site-schema``).
    Runs ``flwr run`` with a private Flower configuration (``FLWR_HOME``)
    naming this SuperLink, over TLS (``root_certificates``: the CA's PEM file;
    ``insecure=True`` only when asked for, with a logged warning), passes its log lines
    to this module's logger (``coalitions federate`` prints them to stderr), and returns the run record the ServerApp wrote to ``output``
    (it must be reachable from here, i.e. the SuperLink runs on this machine).
    ``manifest``: the consortium manifest
    (:class:`~coalitions.learners.federated.manifest.Manifest`; ``None``: the sites' names
    are self-declared, and a warning says so).  An interrupt (Ctrl-C, SIGTERM) stops the run
    on the SuperLink (Flower's ``StopRun``, as ``flwr stop``) before it is passed on.  A run
    that is still ``pending`` ``start_timeout_s`` seconds after it was submitted (the SuperLink
    never started its ServerApp) is stopped, with one line that says where to look, instead
    of waiting on it.
    """
    config = _connection(address, insecure, root_certificates)
    if insecure:
        _log.warning("--insecure: the connection to the SuperLink at %s is not encrypted or authenticated; use it "
                     "only on loopback or a trusted network", address)
    _reachable(address)
    if manifest is None:
        _log.warning("no --manifest: the sites' names and training sizes are self-declared (a site can claim "
                     "another's name or size); see docs/federated.md, \"Threat model\"")
    out = Path(output).resolve()
    run_config = _run_config(training, seed, sites, dataset, data_options, out, checkpoint, semantics, tol, wait_s, threads,
                             method, method_options, exclude_bad_sites, replicates, masks, manifest, equal_weights,
                             round_timeout_s)
    (out / "run.json").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="coalitions-federate-") as tmp:
        app_dir = write_app(Path(tmp) / "app", run_config)
        home = Path(tmp) / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(config, encoding="utf-8")
        env = {**os.environ, "FLWR_HOME": str(home)}
        cmd = [_flwr_executable(), "run", str(app_dir), "coalitions", "--stream"]
        started: dict = {}
        watch = _StartWatch(started, env, start_timeout_s)
        try:
            code, error = _flwr_run(cmd, env, timeout_s, started=started, watch=watch)
        except InputError as e:
            _stop_run(started, env, address)
            raise InputError(f"--superlink {address}: {e}") from None
        except BaseException:          # Ctrl-C, SIGTERM (the command's Terminated): the run must not go on
            _stop_run(started, env, address)
            raise
        if watch.pending:
            _stop_run(started, env, address)
            raise InputError(f"--superlink {address}: run {started['run_id']} was still pending after "
                             f"{start_timeout_s:g} s: the SuperLink did not start its ServerApp (see the "
                             "SuperLink's log; its certificate must also name the address its own SuperExec "
                             "connects to, e.g. IP:127.0.0.1, or that fails on 'IP address mismatch')")
    if not (out / "run.json").exists() and "unavailable" in error:
        error += (" (is the SuperLink running with TLS and --root-certificates its CA's certificate, or "
                  "without TLS and --insecure given?)")
    try:
        return _read_run(out, error, code, "the run")
    except InputError as e:
        raise InputError(f"--superlink {address}: {e}") from None


def _stop_run(started: dict, env: dict, address: str, timeout_s: float = 30.0) -> None:
    """Stop the run ``flwr run`` started on the SuperLink (``flwr stop RUN_ID``) and say so in one line.

    Without it, an interrupted ``federate`` leaves its ServerApp running on the
    SuperLink, which writes the output folder later and races a rerun.  Flower
    marks the run stopped at once; its ServerApp learns it at its next heartbeat
    (within about 30 s) and exits, the checkpoint holding the last finished round.
    """
    run_id = started.get("run_id")
    if run_id is None:
        return
    try:
        r = subprocess.run([_flwr_executable(), "stop", str(run_id), "coalitions"], env=env, capture_output=True,
                           text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired, InputError) as e:
        _log.warning("could not stop run %s on the SuperLink at %s (%s); stop it with: flwr stop %s",
                     run_id, address, type(e).__name__, run_id)
        return
    if r.returncode == 0:
        _log.info("stopped run %s on the SuperLink at %s (its ServerApp exits at its next heartbeat; "
                  "the checkpoint keeps the rounds done)", run_id, address)
    else:
        tail = [ln for ln in _ANSI.sub("", r.stdout + r.stderr).splitlines() if ln.strip()]
        why = _BOX_DRAWING.sub(" ", tail[-1]).strip() if tail else f"exit code {r.returncode}"
        _log.warning("could not stop run %s on the SuperLink at %s (%s); stop it with: flwr stop %s",
                     run_id, address, " ".join(why.split()), run_id)


def check_replicates(replicates, method: str = "exact") -> int:
    """``replicates`` as a count of bootstrap replicates for ``method``'s game; else :class:`InputError`.

    ``None``: :data:`~coalitions.learners.game.bootstrap.DEFAULT_REPLICATES` for ``exact``,
    0 for the other methods (only the game's values are resampled).  Otherwise 0 or between
    2 and :data:`~coalitions.replicates.MAX_REPLICATES`, and 0 for any method but ``exact``.
    """
    from coalitions.replicates import MAX_REPLICATES

    if replicates is None:
        return DEFAULT_REPLICATES if method == "exact" else 0
    if isinstance(replicates, bool) or not isinstance(replicates, int) or not 0 <= replicates <= MAX_REPLICATES:
        raise InputError(f"--replicates must be a whole number from 0 to {MAX_REPLICATES:,}, got {replicates!r}")
    if replicates == 1:
        raise InputError("--replicates 1: standard errors need at least 2 replicates (0: none)")
    if replicates and method != "exact":
        raise InputError(f"--replicates is for --method exact (the game's values), not --method {method}")
    return replicates


def check_round_timeout(seconds) -> float:
    """``--round-timeout``: seconds from 0 (no limit) to :data:`MAX_ROUND_TIMEOUT_S`; else :class:`InputError`."""
    import math

    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or not 0 <= seconds <= MAX_ROUND_TIMEOUT_S:
        raise InputError(f"--round-timeout must be a number of seconds from 0 (no limit) to "
                         f"{MAX_ROUND_TIMEOUT_S:g}, got {seconds!r}")
    return float(seconds)


def _check_output_folder(out: Path, checkpoint: Path | None) -> None:
    """Before anything starts: ``out`` is a folder (or absent) and every file the run writes there can be replaced.

    A directory, FIFO or device where ``run.json`` or ``game.json`` goes would
    otherwise fail the ServerApp after the whole run (``IsADirectoryError``).
    """
    from coalitions.files import check_output_path
    from coalitions.learners.federated.outputs import FILES, PERSONAL_FILES

    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder (-o names the output folder)")
    for name in dict.fromkeys((*FILES, *PERSONAL_FILES)):
        if os.path.lexists(out / name):
            check_output_path(out / name)
    if checkpoint is not None and os.path.lexists(checkpoint):
        check_output_path(checkpoint)


def federate(dataset: str, data_options: dict, training: dict, output, *, seed: int = 0, superlink: str | None = None,
             sites: int | None = None, schemas=(), checkpoint=None, semantics: str = "personalized",
             tol: float = 1e-9, threads: int = 1, wait_s: float = 120.0, progress=None, method: str = "exact",
             method_options: dict | None = None, insecure: bool = False, root_certificates=None,
             exclude_bad_sites: bool = False, replicates: int | None = None, manifest=None,
             equal_weights: bool = False, round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S) -> dict:
    """``coalitions federate``: the simulation engine (``superlink=None``) or a running SuperLink.

    ``dataset`` is a loader name, or ``"csv"``: in the simulation engine the
    sites then read ``schemas`` (one schema file per site); on a SuperLink
    every SuperNode reads its own ``site-schema``.  ``sites`` is the number of
    SuperNodes to wait for (default: the loader's client count).  The
    checkpoint defaults to ``output/checkpoint.npz``: running the same
    command again resumes an interrupted run.  ``method`` other than
    ``"exact"``: a personalised learner over Flower (``estimate.json``; not
    checkpointed).  ``training``: the training flags given (:class:`~coalitions.learners.training.protocol.TrainingProtocol`
    field -> value); every method trains under the sites' task's default protocol with these
    changed (:meth:`~coalitions.learners.federated.server.Settings.protocol_for`), SPO with its own.
    ``seed`` draws the initial models and the sites' minibatch orders.  ``replicates``: the
    bootstrap replicates of each site's validation rows the game carries (``exact`` only;
    default :data:`~coalitions.learners.game.bootstrap.DEFAULT_REPLICATES`; 0: none, the
    game's values without their standard errors).  ``manifest``: the path of the consortium
    manifest (``--superlink`` only; :func:`~coalitions.learners.federated.manifest.read_manifest`).
    ``equal_weights``: every site weighs the same in the game's averages.  ``round_timeout_s``:
    how long one attempt of a round waits for the sites (0: no limit).
    """
    from coalitions.learners.federated.personal import PERSONAL
    from coalitions.learners.federated.protocol import check_training

    if method not in ("exact", "spo") and method not in PERSONAL:
        raise InputError(f"--method {method}: choose exact, spo or one of {', '.join(PERSONAL)}")
    if method == "exact" and method_options:
        raise InputError("--method-option is for the personalised methods, not --method exact")
    if method != "exact" and checkpoint:
        raise InputError(f"--checkpoint: --method {method} is not checkpointed (only the exact game resumes)")
    if method == "spo":
        from coalitions.learners.federated.spo import check_spo

        check_spo(training, method_options, seed)         # before Ray or a SuperLink starts
    elif method != "exact":
        from coalitions.learners.federated.personal import check_method

        check_method(method, training, method_options)   # before Ray or a SuperLink starts
    else:
        check_training(training)
    replicates = check_replicates(replicates, method)
    round_timeout_s = check_round_timeout(round_timeout_s)
    if equal_weights and method != "exact":
        raise InputError(f"--equal-weights is for --method exact (the game's averages), not --method {method}")
    if manifest is not None and superlink is None:
        raise InputError("--manifest is for --superlink (a site's identity is its SuperNode key)")
    if manifest is not None:
        from coalitions.learners.federated.manifest import read_manifest

        manifest = read_manifest(manifest)
        if method == "exact" and not equal_weights:
            manifest.weights()         # every site's signed n-train, before anything starts
        if sites is not None and sites != len(manifest.sites):
            raise InputError(f"--sites {sites}: the consortium manifest {manifest.source} lists "
                             f"{len(manifest.sites)} sites")
        sites = len(manifest.sites)
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
    _check_output_folder(out, ckpt)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the output folder ({e.strerror})") from None
    try:
        if superlink is None:
            return federate_simulation(dataset, options, training, out, seed=seed, checkpoint=ckpt, semantics=semantics,
                                       tol=tol, threads=threads, progress=progress, method=method,
                                       method_options=method_options, exclude_bad_sites=exclude_bad_sites,
                                       replicates=replicates, equal_weights=equal_weights,
                                       round_timeout_s=round_timeout_s)
        assert sites is not None   # counted above when not given
        return federate_superlink(superlink, sites, training, out, seed=seed, dataset=dataset, data_options=options,
                                  checkpoint=ckpt, semantics=semantics, tol=tol, threads=threads, wait_s=wait_s,
                                  method=method, method_options=method_options, insecure=insecure,
                                  root_certificates=root_certificates, exclude_bad_sites=exclude_bad_sites,
                                  replicates=replicates, manifest=manifest, equal_weights=equal_weights,
                                  round_timeout_s=round_timeout_s)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()          # a run that failed leaves no empty -o folder behind
        raise

