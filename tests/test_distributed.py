"""The Ray backend (coalitions.learners.distributed): same game as the local backend, resumes.

A local Ray (2 CPUs, loopback, no dashboard) is started once for the module; a
subprocess test starts its own through the CLI.  Skipped when Ray is missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the optional extra: pip install ray")

import coalitions as co  # noqa: E402
from coalitions.cli import main  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners import distributed  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle, membership  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol, protocol_with  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    distributed.init(num_cpus=2)
    yield
    ray.shutdown()


def digits(n=6, seed=0):
    return load("digits", clients=n, partition="practical", seed=seed)


def test_oracle_on_ray_equals_local_to_the_bit(local_ray, tmp_path):
    fed = digits()
    p = TrainingProtocol(model="logistic", steps=15)
    local = ExhaustiveOracle(protocol=p, device="cpu", seed=3).fit(fed)
    on_ray = ExhaustiveOracle(protocol=p, device="cpu", seed=3, backend="ray",
                              checkpoint=tmp_path / "ck.npz").fit(fed)
    assert on_ray.chunks_trained_ == distributed.MIN_CHUNKS      # 63 models spread over 16 tasks
    assert np.array_equal(local.values_val_, on_ray.values_val_, equal_nan=True)
    assert np.array_equal(local.values_test_, on_ray.values_test_, equal_nan=True)
    assert local.game_.provenance["model"] == on_ray.game_.provenance["model"]
    # the provenance says what trained the models: this process, or Ray's cluster and its workers
    assert local.game_.provenance["backend"] == {"name": "local", "workers": 1}
    ran = on_ray.game_.provenance["backend"]
    assert ran == on_ray.backend_ and ran["name"] == "ray" and ran["tasks"] == distributed.MIN_CHUNKS
    assert ran["address"] == ray.get_runtime_context().gcs_address and ":" in ran["address"]
    assert ran["nodes"] == 1 and 1 <= ran["workers"] <= ran["tasks"]
    # every chunk was stored: a rerun trains nothing
    again = ExhaustiveOracle(protocol=p, device="cpu", seed=3, backend="ray",
                             checkpoint=tmp_path / "ck.npz").fit(fed)
    assert again.chunks_trained_ == 0 and again.chunks_resumed_ == distributed.MIN_CHUNKS
    assert again.backend_["tasks"] == again.backend_["workers"] == 0   # nothing ran on the cluster
    assert np.array_equal(again.values_val_, local.values_val_, equal_nan=True)


def test_oracle_on_ray_without_a_protocol_trains_the_default_one(local_ray):
    """The workers rebuild the oracle from its parameters and the protocol the driver resolved."""
    fed = load("heart", seed=0)
    local = ExhaustiveOracle(device="cpu", seed=2).fit(fed)
    on_ray = ExhaustiveOracle(device="cpu", seed=2, backend="ray").fit(fed)
    assert on_ray.protocol_ == local.protocol_ == protocol_with(fed.task, tuple(fed.input_shape))
    assert on_ray.chunks_trained_ > 1 and on_ray.game_.provenance["model"] == local.game_.provenance["model"]
    assert np.array_equal(local.values_val_, on_ray.values_val_, equal_nan=True)


def test_lazy_subset_models_on_ray_equal_the_local_ones(local_ray):
    """A lazy game's batch on Ray (coalitions.learners.game.source): the local batch, to the bit, its chunks Ray tasks."""
    from coalitions.learners.game.source import SubsetSource

    fed = digits()
    p = TrainingProtocol(model="logistic", steps=15)
    ms = np.array([63, 1, 6, 40, 17, 34, 12, 9])
    local = SubsetSource(fed, ExhaustiveOracle(protocol=p, device="cpu", seed=3, replicates=4)).measure(ms)
    src = SubsetSource(fed, ExhaustiveOracle(protocol=p, device="cpu", seed=3, replicates=4, backend="ray"))
    on_ray = src.measure(ms)
    assert np.array_equal(local.values, on_ray.values, equal_nan=True)
    assert np.array_equal(local.replicates, on_ray.replicates, equal_nan=True)
    # at most ceil(8 / MIN_CHUNKS) = 1 model per task: each coalition its own task
    assert src.backend_["name"] == "ray" and src.backend_["tasks"] == len(ms)


def _dies_once(marker, job, setup, k, ms, threads):
    """The oracle's chunk task, except that the first attempt at chunk 2 kills its worker process."""
    from coalitions.learners.exact import chunk_trainer

    if k == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return distributed._oracle_task(job, setup, k, ms, threads, chunk_trainer)


def test_a_killed_worker_loses_only_its_task(local_ray, tmp_path):
    from coalitions.learners.exact import ChunkTrainer

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    fed = digits(5)
    oracle = ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=10), device="cpu", seed=1)
    cfg = oracle.config(fed)
    masks = np.arange(1, 32)
    chunks = [masks[s:s + 4] for s in range(0, 31, 4)]
    params = {k: getattr(oracle, k) for k in ("memory_mb", "device", "dtype", "seed", "replicates", "protocol")}
    setup = ray.put((params, fed, cfg, "cpu"))
    got = {}
    marker = str(tmp_path / "died")
    distributed.run_tasks(_dies_once, [(marker, "job", setup, k, ms, 1) for k, ms in enumerate(chunks)],
                          lambda item, v: got.setdefault(item[3], v))
    assert os.path.exists(marker) and sorted(got) == list(range(len(chunks)))
    whole = ChunkTrainer(oracle, fed, cfg, "cpu")(masks)              # all 31 models in one local chunk
    for k, ms in enumerate(chunks):
        for part in ("val", "test"):
            assert np.array_equal(got[k][part], whole[part][:, ms - 1], equal_nan=True)
            assert np.isnan(got[k][part][~membership(ms, 5).T]).all()


def test_task_input_errors_arrive_as_input_errors(local_ray):
    def bad():
        raise InputError("client 'x': something wrong")

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with pytest.raises(InputError, match="client 'x'"):
        distributed.run_tasks(bad, [()], lambda item, v: None)


@pytest.mark.slow
def test_reproduce_on_ray_equals_local(local_ray, tmp_path):
    from coalitions.learners.experiments.runner import reproduce

    kw = dict(quick=True, methods=("local", "fedavg"), figures=False, device="cpu")
    lines = []
    a = reproduce("synthetic", tmp_path / "local", **kw)
    b = reproduce("synthetic", tmp_path / "ray", backend="ray", log=lines.append, **kw)
    assert sum(line.endswith("(ray)") for line in lines) == 2 * 3     # 2 regimes x (exact + 2 learners)
    assert not any("read back" in line for line in lines)

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("elapsed_s", "compute_s", "files", "backend")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    assert strip(a) == strip(b)
    assert a["backend"] == {"name": "local", "workers": 1}
    assert b["backend"]["name"] == "ray" and b["backend"]["tasks"] == 2 * 3 and b["backend"]["workers"] >= 1
    # read back, nothing runs on Ray: the record says so rather than repeating what was asked for
    c = reproduce("synthetic", tmp_path / "ray", backend="ray", **kw)
    assert c["backend"] == {"name": "local", "workers": 1, "requested": "ray"} and strip(c) == strip(a)


#: Steps of the resumed command: enough that the 15 chunks left after the first checkpoint take seconds on
#: two CPUs (the interrupt comes within 0.1 s), few enough that the local reference fit is short (400: 12 s).
RESUME_STEPS = 150


@pytest.mark.slow
def test_cli_oracle_on_ray_resumes_after_the_driver_is_stopped(tmp_path):
    """The driver is interrupted once the checkpoint holds a chunk; the same command then finishes."""
    ck, out = tmp_path / "ck.npz", tmp_path / "game.json"
    args = ["oracle", "digits", "--clients", "6", "--model", "logistic", "--steps", str(RESUME_STEPS),
            "--backend", "ray", "--checkpoint", str(ck), "-o", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # the child takes Ctrl-C as a foreground process does, whatever this runner inherited (a background job
    # ignores SIGINT, and the child would inherit that)
    p = subprocess.Popen([sys.executable, "-m", "coalitions.cli", *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not ck.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert ck.exists()
    if p.returncode == 0:
        pytest.skip("the run finished before it could be interrupted (an idle, fast machine)")
    assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
    with np.load(ck) as z:
        before = int(z["progress"])  # chunks done (the one checkpoint format)
    assert 1 <= before < distributed.MIN_CHUNKS
    r = subprocess.run([sys.executable, "-m", "coalitions.cli", *args], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{before} chunk(s) from checkpoint" in r.stderr
    game = co.read_game(out)
    fed = digits()   # the command's protocol: the task's default with --model logistic --steps RESUME_STEPS
    local = ExhaustiveOracle(protocol=protocol_with(fed.task, fed.input_shape,
                                                    {"model": "logistic", "steps": RESUME_STEPS}),
                             device="cpu").fit(fed)
    assert np.array_equal(game.raw_values(), local.game_.raw_values(), equal_nan=True)


def test_backend_errors_are_exit_2(capsys):
    assert main(["oracle", "synthetic", "--clients", "3", "--address", "127.0.0.1:1", "-o", "x.json"]) == 2
    assert "--address needs --backend ray" in capsys.readouterr().err
    if not ray.is_initialized():  # a running Ray would be used as it is
        args = ["oracle", "synthetic", "--clients", "3", "--model", "logistic", "--backend", "ray",
                "--address", "127.0.0.1:1", "-o", "x.json"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--address 127.0.0.1:1: no Ray cluster answers there" in err
    with pytest.raises(InputError, match="^backend must be"):
        ExhaustiveOracle(backend="spark").fit(digits(3))


def _threads_in_force():
    import torch

    from coalitions.learners.training.threads import blas_threads

    return torch.get_num_threads(), blas_threads()


def test_ray_tasks_run_with_the_threads_of_the_local_run(local_ray):
    """A Ray task and the local run train with the same PyTorch and BLAS thread counts: the same sums, to the bit.

    Ray gives a one-CPU task ``OMP_NUM_THREADS=1``; a local run gets the thread policy's count, which
    now pins BLAS as well (threadpoolctl), so the two agree even where BLAS would use every core.
    """
    from coalitions.learners.training.threads import configure, get_override

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers cannot import tests/
    before = get_override()
    try:
        configure(None)
        local = _threads_in_force()
    finally:
        configure(before)
    seen = []
    distributed.run_tasks(distributed._piece_task, [(_threads_in_force, (), None)], lambda item, v: seen.append(v))
    assert seen == [local] and local[0] == 1


def test_ray_address_is_honoured(tmp_path):
    """Ray's own RAY_ADDRESS names the cluster when --address is not given (one line when nothing answers)."""
    args = [sys.executable, "-m", "coalitions.cli", "oracle", "synthetic", "--clients", "3", "--model", "logistic",
            "--backend", "ray", "-o", str(tmp_path / "g.json")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == ("coalitions: error: RAY_ADDRESS 127.0.0.1:1: no Ray cluster answers there "
                                "(Connection refused); start one with `ray start --head`")
