"""The sdist is complete: unpacked, installed and tested on its own (what a packager does).

A conda-forge style recipe builds from the sdist and runs its tests; this builds it from the
checkout, unpacks it in a directory with nothing beside it, installs it into a fresh folder
(dependencies from the environment running the tests) and runs the ``smoke`` subset of the suite
against that install (the command line on the docs' worked examples and on the malformed corpus in
tests/data).

The install uses the running interpreter's own pip and setuptools (``--target``), so the test
passes wherever the README's test command does: in a virtual environment over a base interpreter
whose setuptools is too old to build (a ``venv`` with ``system_site_packages`` would inherit the
*base* interpreter's packages, not the virtual environment's), in a conda-like environment, and
as CI runs it.
"""

import os
import subprocess
import sys
import tarfile
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
                   "benchmarks/core.py", "cli/main.py", "learners/exact.py", "setup.py"):
        assert (src / needed).exists(), f"the sdist lacks {needed}"

    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-compile", "--target", str(target), str(src)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    assert (target / "coalitions" / "learners" / "exact.py").exists(), "the learners are not installed"
    # -P: the unpacked tree is not put on sys.path; the install comes first, ahead of any
    # editable install of the checkout, so the tests import the installed package.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-P", "-m", "pytest", "-m", "smoke", "-x", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-o", "addopts=", "-c", str(src / "pyproject.toml"), "--rootdir",
                          str(src)], cwd=src, env=env, capture_output=True, text=True)
    where = subprocess.run([sys.executable, "-P", "-c", "import coalitions; print(coalitions.__file__)"], cwd=src,
                           env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-1000:]  # 5 if none were collected
