"""Sphinx configuration of the reference site (build: ``sphinx-build -W -b html docs site``).

Sphinx, not mkdocs: the docstrings are numpydoc with reStructuredText roles (``:class:``,
``:func:``) and ``.. math::`` blocks, which Sphinx's autodoc and numpydoc render as they are
(cross-references resolved, math typeset); the narrative pages stay Markdown through MyST.
"""

from __future__ import annotations

from coalitions import __version__

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
