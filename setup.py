"""Package discovery for the design layout (pyproject.toml holds everything else).

The repository keeps two visible layers: the game core and command line in ``coalitions/`` and
the learner layer in ``learners/``, installed as ``coalitions.learners``.  setuptools' ``find``
names packages after their directories, so it cannot give ``learners/`` its installed name by
itself; here it finds both trees and ``package_dir`` maps the second one, so a new sub-package
is picked up without a hand-kept list and no link is needed (a clone without symlinks builds
the same wheel; tests/test_packaging.py builds one).
"""

from setuptools import find_packages, setup

setup(
    package_dir={"coalitions": "coalitions", "coalitions.learners": "learners"},
    packages=find_packages(include=["coalitions", "coalitions.*"])
    + [f"coalitions.{name}" for name in find_packages(include=["learners", "learners.*"])],
    # PEP 561: the installed package carries its annotations (mypy -p coalitions reads them).
    package_data={"coalitions": ["py.typed"],
                  # the CSV example federation (coalitions.learners.data.csv_sites.EXAMPLE)
                  "coalitions.learners.data": ["examples/heart-csv/*"]},
)
