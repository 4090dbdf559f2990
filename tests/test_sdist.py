"""The sdist is complete: unpacked, installed and tested on its own (what a packager does).

A conda-forge style recipe builds from the sdist and runs its tests; this builds it from the
checkout, unpacks it in a directory with nothing beside it, installs it into a fresh environment
(dependencies from the system) and runs the ``smoke`` subset of the suite there (the command
line on the docs' worked examples and on the malformed corpus in tests/data).
"""

import os
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest
from conftest import build_distribution

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_unpacked_sdist_installs_and_passes_its_smoke_tests(tmp_path):
    sdist = build_distribution("sdist", ROOT, tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (src,) = (tmp_path / "unpacked").iterdir()
    for needed in ("tests/data/malformed", "tests/conftest.py", "docs/examples/tie.json", "docs/cli.md",
                   "benchmarks/core.py", "coalitions/cli.py", "learners/exact.py", "setup.py"):
        assert (src / needed).exists(), f"the sdist lacks {needed}"

    env_dir = tmp_path / "env"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                              "--no-build-isolation", str(src)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    # -P: the unpacked tree is not put on sys.path, so the tests import the installed package.
    run = subprocess.run([str(python), "-P", "-m", "pytest", "-m", "smoke", "-x", "-q", "-p", "no:cacheprovider"],
                         cwd=src, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-1000:]  # 5 if none were collected
