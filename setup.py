"""Package discovery for the design layout (pyproject.toml holds everything else).

The repository keeps three visible folders, one installed name: the game core in ``coalitions/``,
the learner layer in ``learners/`` (installed as ``coalitions.learners``) and the command line in
``cli/`` (installed as ``coalitions.cli``).  setuptools' ``find`` names packages after their
directories, so it cannot give ``learners/`` and ``cli/`` their installed names by itself; here it
finds the three trees and ``package_dir`` maps the other two, so a new sub-package is picked up
without a hand-kept list and no link is needed (a clone without symlinks builds the same wheel;
tests/test_packaging.py builds one).  ``PACKAGE_DIR`` is the one statement of the mapping
(.ci/mypy and docs/conf.py read the same folders).
"""

from setuptools import find_packages, setup

#: Installed package -> its folder in the repository.
PACKAGE_DIR = {"coalitions": "coalitions", "coalitions.learners": "learners", "coalitions.cli": "cli"}

setup(
    package_dir=PACKAGE_DIR,
    packages=find_packages(include=["coalitions", "coalitions.*"])
    + [f"coalitions.{name}" for folder in ("learners", "cli") for name in find_packages(include=[folder, f"{folder}.*"])],
    # PEP 561: the installed package carries its annotations (mypy -p coalitions reads them).
    package_data={"coalitions": ["py.typed"],
                  # the CSV example federation (coalitions.learners.data.csv_sites.EXAMPLE)
                  "coalitions.learners.data": ["examples/heart-csv/*"]},
)
