"""Sphinx configuration of the reference site (build: ``sphinx-build -W -b html docs site``).

Sphinx, not mkdocs: the docstrings are numpydoc with reStructuredText roles (``:class:``,
``:func:``) and ``.. math::`` blocks, which Sphinx's autodoc and numpydoc render as they are
(cross-references resolved, math typeset); the narrative pages stay Markdown through MyST.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

# The reference documents the *installed* package (``pip install -e '.[docs,learn]'``): one name,
# ``coalitions``, whose ``coalitions.learners`` and ``coalitions.cli`` are the repository's
# ``learners/`` and ``cli/`` (setup.py's PACKAGE_DIR).  Run from a clone's root, Python would import
# ./coalitions first, which holds neither, and autodoc would leave their pages empty; so the
# repository's root is taken off the import path, and every object the API pages name is imported
# here: one that does not import stops the build with its error (not a warning on an empty page).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
for _name in list(sys.modules):   # a conf.py loaded after ./coalitions was imported starts again
    if _name == "coalitions" or _name.startswith("coalitions."):
        del sys.modules[_name]


def _documented() -> list[str]:
    """The dotted names the API pages' autodoc directives name."""
    found = []
    for page in sorted((_ROOT / "docs" / "api").glob("*.rst")):
        found += re.findall(r"^\.\. auto(?:module|class|function|data|exception)::\s*(\S+)",
                            page.read_text(encoding="utf-8"), flags=re.M)
    return found


def _import_all(names: list[str]) -> None:
    failed = []
    for name in names:
        module, attr = name, None
        while True:
            try:
                obj = importlib.import_module(module)
                break
            except ModuleNotFoundError as e:
                if e.name is None or not module.startswith(e.name) or "." not in module:
                    failed.append(f"{name}: {e}")
                    obj = None
                    break
                module, _, tail = module.rpartition(".")
                attr = tail if attr is None else f"{tail}.{attr}"
            except Exception as e:   # every import error stops the build
                failed.append(f"{name}: {type(e).__name__}: {e}")
                obj = None
                break
        for part in (attr.split(".") if obj is not None and attr else []):
            if not hasattr(obj, part):
                failed.append(f"{name}: {module} has no {attr}")
                break
            obj = getattr(obj, part)
    if failed:
        raise ImportError("the API pages name objects that do not import from the installed package "
                          "(pip install -e '.[docs,learn]'):\n  " + "\n  ".join(failed))


_import_all(_documented())

from coalitions import __version__  # noqa: E402

project = "coalitions"
author = "the coalitions authors"
release = version = __version__

extensions = ["myst_parser", "numpydoc", "sphinx.ext.autodoc", "sphinx.ext.mathjax",
              "sphinx.ext.intersphinx"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# The committed run outputs and examples are data, not pages.
exclude_patterns = ["results/**", "learners-spo-runs/**", "examples/**", "_build"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 4
# Links from the pages to the repository's files (README, sources, results) are not pages.
suppress_warnings = ["myst.xref_missing", "myst.header", "misc.highlighting_failure"]
# (the JSON examples of formats.md elide with "..." on purpose)

autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Nothing downloads while building: no intersphinx inventories are fetched.
intersphinx_mapping: dict = {}

html_theme = "alabaster"
html_title = f"coalitions {version}"
