"""The installed layout: one top-level name, ``coalitions``, from the repository's design layout.

setup.py finds the packages under ``coalitions/`` (the core), ``learners/`` (mapped to
``coalitions.learners``) and ``cli/`` (the command line, mapped to ``coalitions.cli``).  The repository holds
no symbolic link, so a clone without links (Windows' default, ``git clone -c core.symlinks=false``)
builds the same wheel: these tests build it from such a clone, install it into a fresh
environment and run the command it installs.
"""

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import build_distribution

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _in_git_checkout() -> bool:
    return shutil.which("git") is not None and (ROOT / ".git").exists()


def _source_packages() -> set[str]:
    found = set()
    for top, name in (("coalitions", "coalitions"), ("learners", "coalitions.learners"), ("cli", "coalitions.cli")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    return found


@pytest.mark.skipif(not _in_git_checkout(), reason="needs the git checkout")
def test_no_symbolic_link_is_tracked():
    """Mode 120000 is a link; a clone without links would turn it into a text file."""
    links = [line.split("\t")[1] for line in _git("ls-files", "-s").splitlines() if line.startswith("120000")]
    assert links == []


@pytest.fixture(scope="module")
def linkless_wheel(tmp_path_factory) -> Path:
    """A wheel built from a clone of this checkout's HEAD made with ``core.symlinks=false``."""
    if not _in_git_checkout():
        pytest.skip("needs the git checkout")
    base = tmp_path_factory.mktemp("linkless")
    clone = base / "clone"
    _git("clone", "-q", "-c", "core.symlinks=false", "--no-checkout", str(ROOT), str(clone), cwd=base)
    _git("fetch", "-q", str(ROOT), "HEAD", cwd=clone)
    _git("checkout", "-q", "FETCH_HEAD", cwd=clone)
    return build_distribution("wheel", clone, base / "dist")


@pytest.mark.slow
def test_wheel_has_one_top_level_name_and_every_package(linkless_wheel):
    with zipfile.ZipFile(linkless_wheel) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"coalitions"}
    packages = {name.rpartition("/")[0].replace("/", ".") for name in names if name.endswith("/__init__.py")}
    assert packages == _source_packages()  # found by setup.py, none forgotten
    assert not any(name.startswith(("learners/", "cli/", "tests/")) for name in names)
    example = ROOT / "learners" / "data" / "examples" / "heart-csv"   # package data: the CSV example federation
    assert {f"coalitions/learners/data/examples/heart-csv/{p.name}" for p in example.iterdir()} <= set(names)
    assert "coalitions/py.typed" in names


@pytest.mark.slow
def test_the_linkless_wheel_installs_and_runs(linkless_wheel, tmp_path):
    """Installed into a fresh environment (dependencies from the system), ``coalitions --help`` works."""
    env_dir = tmp_path / "env"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(linkless_wheel)], check=True, capture_output=True)
    where = subprocess.run([str(python), "-c", "import coalitions.cli; print(coalitions.cli.__file__)"],
                           cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert Path(where.strip()).is_relative_to(env_dir)  # the wheel, not this checkout
    proc = subprocess.run([str(bindir / "coalitions"), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage: coalitions" in proc.stdout


def test_core_import_does_not_import_torch():
    code = "import coalitions, coalitions.estimate, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_ci_types_the_whole_package_from_the_checkout():
    """.ci/run's mypy step checks the checkout: every module of the three folders, under its installed name."""
    import importlib.machinery
    import importlib.util

    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ".ci/mypy" in run
    loader = importlib.machinery.SourceFileLoader("ci_mypy", str(ROOT / ".ci" / "mypy"))
    spec = importlib.util.spec_from_loader("ci_mypy", loader)
    script = importlib.util.module_from_spec(spec)
    loader.exec_module(script)
    checked = {s.module: Path(s.path) for s in script.sources()}
    assert _source_packages() <= set(checked)
    assert checked["coalitions.learners.exact"] == ROOT / "learners" / "exact.py"
    assert checked["coalitions.cli"] == ROOT / "cli" / "__init__.py"
