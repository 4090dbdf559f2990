"""Every benchmark script runs to its end in its ``--quick`` mode (what CI executes).

Each runs as its own process, as a user would start it; only the exit status and
the presence of output are checked (timings are never asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
#: Scripts whose --quick run takes about 15 s or more on this 2-core machine (a Ray cluster, trained games).
SLOW = {"ray_nodes.py", "data_roles.py", "distributed.py", "threads.py", "protocol_defaults.py"}
#: Scripts whose --quick run reads Fashion-MNIST, which a Debian package ships (docs/learners-data.md):
#: skipped, saying so, where it is not installed, as every test of that data is.
FASHION = {"fashion_settings.py", "frontier.py", "gpu.py", "spo_cost.py"}
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
needs_fashion = pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="Debian package dataset-fashion-mnist not "
                                   "installed (apt-get install dataset-fashion-mnist)")


def _marks(p: Path) -> list:
    return ([pytest.mark.slow] if p.name in SLOW else []) + ([needs_fashion] if p.name in FASHION else [])


def test_every_benchmark_is_listed():
    assert {p.name for p in SCRIPTS} >= {"core.py", "learners.py", "oracle.py", "threads.py"}


@pytest.mark.parametrize("script", [pytest.param(p, marks=_marks(p)) for p in SCRIPTS], ids=lambda p: p.name)
def test_benchmark_quick_runs_to_its_end(script, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, str(script), "--quick"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr
    assert len(r.stdout.splitlines()) >= 3, r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device: gpu.py measures instead")
def test_gpu_benchmark_without_cuda_says_so_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert len(said) == 1 and said[0].startswith("no CUDA device on this machine"), r.stdout


@needs_fashion
def test_frontier_quick_prints_measured_points_and_redraws_them(tmp_path):
    """The frontier's table holds measured points only (no projection), one JSON line per (N, seed), and
    ``--from`` gives the same table and a figure from those lines without measuring."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    script = str(ROOT / "benchmarks" / "frontier.py")
    r = subprocess.run([sys.executable, script, "--quick", "--jsonl", "out.jsonl"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "projection" not in r.stdout.lower()
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((x["n"], x["seed"]) for x in rows) == [(3, 0), (3, 1), (4, 0), (4, 1)]
    for x in rows:
        assert {"exhaustive", "spo", "sampled"} <= set(x)
        assert 0.0 <= x["spo"]["f1"] <= 1.0 and 0.0 <= x["exhaustive"]["self_f1"] <= 1.0
        assert 0 < x["sampled"]["trained"] <= (1 << x["n"]) - 1
    table = [line for line in r.stdout.splitlines() if line.startswith("| 3 |") or line.startswith("| 4 |")]
    assert len(table) == 2 and all("2 (0,1)" in line for line in table)
    assert sum(line.startswith("crossover: ") for line in r.stdout.splitlines()) == 2
    again = subprocess.run([sys.executable, script, "--from", "out.jsonl", "--figure", "f.png"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [line for line in again.stdout.splitlines() if line.startswith("| 3 |") or line.startswith("| 4 |")] == table
    assert (tmp_path / "f.png").stat().st_size > 0
