"""A real two-node Ray cluster on loopback: time per node count, a killed node, ``reproduce`` on it.

Starts a head and a worker node with ``ray start --block``, two separate raylets on this
machine (each its own process group, its own ports, ``--num-cpus 1`` each, everything on
127.0.0.2, no dashboard), joins them from this process as the driver
(``ray.init(address=HEAD)``, what ``--backend ray --address HEAD`` does), and prints:

1. The logistic exhaustive oracle (``synthetic`` with labels ``y > 0``, 100 samples per
   client, as ``benchmarks/distributed.py``) on the head alone (1 node, 1 CPU) and on both
   nodes (2 nodes, 1 CPU each), wall time per node count, and whether each game is the local
   backend's to the bit.
2. ``coalitions reproduce synthetic --quick --methods local --backend ray --address HEAD``
   (a separate driver process) against the same command with the local backend: are the
   exact games of every regime the same?
3. The kill test: the oracle again on both nodes, and once a quarter of its chunks have come
   back the worker node's whole process group (its raylet, object store and workers) is
   killed with SIGKILL, as if the machine had died.  Ray reruns the lost chunks on the head
   (``max_retries``); the run finishes and its game is compared with the local one.

Both nodes share this machine's cores, so the 2-node time measures the scheduling across
raylets, not a second machine's speed; the load average is printed with every time.
Processes are ended by their process-group id (never ``ray stop``, which would end every Ray
on the machine).

Run:  python benchmarks/ray_nodes.py [--quick] [--clients 10] [--epochs 300]

``--quick``: 6 clients, 20 epochs, no ``reproduce`` section.  Without Ray it says so.  The exit
status is 1 when a game differs from the local one or the killed run did not finish with the
worker node declared dead (so ``tests/test_benchmarks.py``, which runs ``--quick``, checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

#: Cluster settings every node and the driver run under.  The GCS declares a silent node dead after 20 missed
#: checks 1 s apart (Ray's default: 5 checks 3 s apart), so the kill test ends within seconds of the kill while a
#: head raylet starved by a loaded 2-core machine for a few seconds is not declared dead (its ``ray start
#: --block`` would then end the whole head, GCS included); a driver or raylet that loses the GCS waits up to
#: 180 s for it to answer again before it gives up (Ray's default: 60 s).
CLUSTER_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "20",
               "RAY_gcs_rpc_server_reconnect_timeout_s": "180"}


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _free_ports(k: int) -> list[int]:
    """``k`` distinct TCP ports free on the loopback interface now."""
    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.2", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LoopbackCluster:
    """Ray nodes started with ``ray start --block`` on 127.0.0.2, each in its own process group.

    Parameters
    ----------
    cpus : int
        ``--num-cpus`` of every node.
    """

    def __init__(self, cpus: int = 1):
        self.cpus = cpus
        self.temp = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.nodes: list[subprocess.Popen] = []
        self.address: str | None = None
        self._closing = False

    def _start(self, head: bool) -> subprocess.Popen:
        p = _free_ports(8)
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--node-ip-address=127.0.0.2",
               f"--num-cpus={self.cpus}", f"--node-manager-port={p[0]}", f"--object-manager-port={p[1]}",
               f"--min-worker-port={p[2]}", f"--max-worker-port={p[2] + 40}",
               f"--dashboard-agent-listen-port={p[3]}", f"--dashboard-agent-grpc-port={p[4]}",
               f"--metrics-export-port={p[5]}", f"--runtime-env-agent-port={p[6]}", "--disable-usage-stats"]
        if head:
            self.address = f"127.0.0.2:{p[7]}"
            cmd += ["--head", f"--port={p[7]}", "--include-dashboard=false", f"--temp-dir={self.temp}",
                    f"--ray-client-server-port={_free_ports(1)[0]}"]
        else:
            cmd += [f"--address={self.address}"]
        # neither a cluster address nor the single-machine switch this driver sets when it joins a loopback
        # head (coalitions.learners.distributed._single_machine): a node started in that mode never joins
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
        env.update(CLUSTER_ENV)
        log = open(self.temp / f"node{len(self.nodes)}.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.nodes.append(proc)
        return proc

    def start_head(self, timeout: float = 120) -> str:
        """Start the head node and wait until its GCS answers; its address."""
        self._start(head=True)
        host, port = self.address.split(":")
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return self.address
            except OSError:
                if self.nodes[0].poll() is not None:
                    break
                time.sleep(0.5)
        raise RuntimeError(f"the head node did not start: see {self.temp / 'node0.log'}")

    def watch_head(self) -> None:
        """End this process, printing the nodes' logs, if the head's ``ray start --block`` ends before ``shutdown``.

        Without the head's GCS the connected driver would otherwise wait for it and then end itself with
        one line of Ray's that does not say why the head ended.
        """
        def watch():
            while not self._closing:
                if self.nodes[0].poll() is not None and not self._closing:
                    print(f"ray_nodes.py: the head node ended (exit code {self.nodes[0].returncode}) during the run",
                          file=sys.stderr)
                    self.print_logs(sys.stderr)
                    for i in range(len(self.nodes)):
                        self.kill(i)
                    shutil.rmtree(self.temp, ignore_errors=True)
                    os._exit(1)
                time.sleep(1)

        threading.Thread(target=watch, daemon=True).start()

    def add_node(self, ray, timeout: float = 120) -> None:
        """Start one more node and wait until the cluster (seen by the connected driver ``ray``) counts it."""
        want = len(self.nodes) + 1
        self._start(head=False)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if sum(n["Alive"] for n in ray.nodes()) >= want:
                return
            time.sleep(0.5)
        raise RuntimeError(f"node {want - 1} did not join: see {self.temp}/node{want - 1}.log")

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``'s whole process group (its raylet, object store and workers)."""
        try:
            os.killpg(self.nodes[i].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.nodes[i].wait()

    def print_logs(self, file, lines: int = 15) -> None:
        """The last ``lines`` lines of every node's ``ray start`` log, to ``file`` (before ``shutdown`` removes them)."""
        for i in range(len(self.nodes)):
            log = self.temp / f"node{i}.log"
            tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["(no log)"]
            print(f"--- node {i} ({'running' if self.nodes[i].poll() is None else 'ended'}): {log}", file=file)
            print("\n".join(tail), file=file, flush=True)

    def shutdown(self) -> None:
        """End every node this object started (worker nodes first), then remove the temp dir."""
        self._closing = True
        for i in reversed(range(len(self.nodes))):
            if self.nodes[i].poll() is None:
                try:
                    os.killpg(self.nodes[i].pid, signal.SIGTERM)
                    self.nodes[i].wait(timeout=20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            self.kill(i)
        shutil.rmtree(self.temp, ignore_errors=True)


def fit(fed, epochs: int, backend: str, address: str | None = None, progress=None) -> tuple[float, ExhaustiveOracle]:
    """Wall seconds and the fitted logistic oracle (one thread per task, seed 0)."""
    # Adam at 0.05, cosine, weight decay 1e-3, full batch: one step per epoch
    o = ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=epochs), device="cpu", seed=0,
                         backend=backend, threads=1, address=address, progress=progress)
    t = time.perf_counter()
    o.fit(fed)
    return time.perf_counter() - t, o


def same_game(a: ExhaustiveOracle, b: ExhaustiveOracle) -> str:
    ok = all(np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True) for k in ("values_val_", "values_test_"))
    return "yes" if ok else "NO"


def reproduce_games(out: Path) -> dict[str, list]:
    """The exact validation games of a ``reproduce`` folder: ``{file name: values}``."""
    return {p.name: json.loads(p.read_text())["values"] for p in sorted(out.glob("runs/*/*-game.json"))}


def run_reproduce(backend: str, out: Path, address: str | None) -> float:
    cmd = [sys.executable, "-m", "coalitions.cli", "reproduce", "synthetic", "--quick", "--methods", "local",
           "--backend", backend, "-o", str(out)] + (["--address", address] if address else [])
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, RAY_ADDRESS=""))
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 clients, 20 epochs, no reproduce section (CI)")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=300)
    args = ap.parse_args(argv)
    try:
        import ray
    except ImportError:
        print("not run: Ray is not installed (pip install 'collaboration-equilibrium[ray]')")
        print("the local backend needs no cluster: see benchmarks/oracle.py")
        print("done")
        return 0
    from oracle import binary_federation

    if args.quick:
        args.clients, args.epochs = 6, 20
    fed = binary_federation(args.clients, samples=100, seed=0)
    models = (1 << args.clients) - 1
    print(f"# ray {ray.__version__}, {os.cpu_count()} CPUs, load average {_load()}")
    print(f"1. logistic oracle, N = {args.clients} ({models} subset models, 100 samples per client, "
          f"{args.epochs} epochs), one thread per task")
    t_local, local = fit(fed, args.epochs, "local")
    print(f"   local backend (this process):  {t_local:7.2f} s", flush=True)
    cluster = LoopbackCluster(cpus=1)
    try:
        t = time.perf_counter()
        address = cluster.start_head()
        cluster.watch_head()
        os.environ.update(CLUSTER_ENV)  # this driver's core worker reads them at ray.init
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        print(f"   (head started at {address} in {time.perf_counter() - t:.1f} s, not counted)", flush=True)
        times, wrong = {}, []
        for nodes in (1, 2):
            if nodes == 2:
                t = time.perf_counter()
                cluster.add_node(ray)
                alive = [n for n in ray.nodes() if n["Alive"]]
                print(f"   (worker node joined in {time.perf_counter() - t:.1f} s, not counted; {len(alive)} raylets "
                      f"alive at {', '.join(sorted(n['NodeManagerAddress'] + ':' + str(n['NodeManagerPort']) for n in alive))}; "
                      f"{', '.join(str(int(n['Resources'].get('CPU', 0))) for n in alive)} CPU)", flush=True)
            fit(fed, 2, "ray", address)  # warm the workers (PyTorch import), not counted
            times[nodes], on = fit(fed, args.epochs, "ray", address)
            if same_game(local, on) != "yes":
                wrong.append(f"the {nodes}-node game")
            print(f"   ray, {nodes} node(s) x 1 CPU:      {times[nodes]:7.2f} s ({on.chunks_trained_} chunks; "
                  f"load average {_load()}); same game as local: {same_game(local, on)}", flush=True)
        print(f"   2 nodes / 1 node: {times[1] / times[2]:.2f}x faster")

        if not args.quick:
            print("\n2. coalitions reproduce synthetic --quick --methods local: local backend vs the 2-node cluster")
            with tempfile.TemporaryDirectory() as d:
                t_l = run_reproduce("local", Path(d) / "local", None)
                t_r = run_reproduce("ray", Path(d) / "ray", address)
                a, b = reproduce_games(Path(d) / "local"), reproduce_games(Path(d) / "ray")
                if not a or a != b:
                    wrong.append("reproduce's games")
                print(f"   local {t_l:.1f} s, ray {t_r:.1f} s (load average {_load()}); "
                      f"{len(a)} exact games, same: {'yes' if a and a == b else 'NO'}", flush=True)

        print("\n3. kill test: the worker node is killed (SIGKILL to its process group) after a quarter of the chunks")
        killed = {}

        def kill_once(done, total):
            if not killed and done >= total // 4:
                killed["at"] = (done, total)
                cluster.kill(1)

        t_k, on = fit(fed, args.epochs, "ray", address, progress=kill_once)
        deadline = time.time() + 60  # the GCS declares a node dead after missed health checks
        while sum(n["Alive"] for n in ray.nodes()) > 1 and time.time() < deadline:
            time.sleep(1)
        alive = sum(n["Alive"] for n in ray.nodes())
        if not killed or alive != 1 or same_game(local, on) != "yes":
            wrong.append("the kill test")
        at = killed.get("at")
        print(f"   killed at {at[0]}/{at[1]} model-epochs; {alive} raylet(s) alive after; finished in {t_k:.2f} s; "
              f"same game as local: {same_game(local, on)}" if at else "   the run ended before the kill point")
        ray.shutdown()
    except BaseException:
        cluster.print_logs(sys.stderr)
        raise
    finally:
        cluster.shutdown()
    print(f"# load average {_load()} at the end")
    if wrong:
        print(f"ray_nodes.py: not as the local backend: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
