"""The installed layout: one top-level name, ``coalitions``, from the repository's design layout.

pyproject.toml maps ``learners/`` to ``coalitions.learners`` and ``cli.py`` (through the link
``coalitions/cli.py``) to ``coalitions.cli``; these tests build the wheel and read what it holds.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def _declared_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"])


def _source_packages() -> set[str]:
    found = set()
    for top, name in (("coalitions", "coalitions"), ("learners", "coalitions.learners")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_source_package_is_declared():
    """A new sub-package that pyproject.toml forgets would be missing from the wheel."""
    assert _source_packages() == _declared_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True)
    if proc.returncode != 0 and "setuptools" in proc.stderr and "No module named" in proc.stderr:
        pytest.skip("setuptools is not importable for a no-isolation build")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


@pytest.mark.slow
def test_wheel_has_one_top_level_name(wheel):
    tops = {name.split("/")[0] for name in wheel if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"coalitions"}


@pytest.mark.slow
def test_wheel_holds_the_learners_and_the_cli(wheel):
    assert "coalitions/cli.py" in wheel
    assert "coalitions/learners/exact.py" in wheel
    assert "coalitions/learners/data/datasets/adult.py" in wheel
    assert not any(name.startswith(("learners/", "cli.py", "tests/")) for name in wheel)


def test_core_import_does_not_import_torch():
    code = "import coalitions, coalitions.estimate, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
