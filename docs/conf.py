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

# sphinx-mathjax-offline (the `docs` extra) copies MathJax into the site and points
# sphinx.ext.mathjax at that copy: the math is typeset with no network, as the rest of the site
# reads (without it MathJax is fetched from a CDN when a page opens).
extensions = ["myst_parser", "numpydoc", "sphinx.ext.autodoc", "sphinx.ext.mathjax",
              "sphinx-mathjax-offline", "sphinx.ext.intersphinx"]
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

# Every cross-reference resolves (CI builds with -n): a name that is not documented here is an
# error, except these, which belong to other projects whose inventories are not fetched (above).
nitpicky = True
nitpick_ignore = [("py:class", "networkx.DiGraph"), ("py:func", "scipy.stats.wilcoxon"),
                  ("py:func", "scipy.stats.binomtest"), ("py:mod", "numpy.testing"),
                  ("py:func", "importlib.util.find_spec")]

# The roles a Python object type answers (for short names, below).
_ROLES = {"class": {"class", "exception"}, "exc": {"exception", "class"}, "func": {"function", "method"},
          "meth": {"method", "classmethod", "staticmethod", "function", "property"},
          "attr": {"attribute", "property", "data"}, "data": {"data", "attribute"}, "mod": {"module"},
          "const": {"data", "attribute"}}


def _documented(objects, target: str, types) -> str | None:
    """The one documented object of a fitting type named ``target`` or ending with ``.target``."""
    fits = {(entry.docname, entry.node_id): name for name, entry in objects.items()
            if (name == target or name.endswith("." + target)) and not entry.aliased
            and (types is None or entry.objtype in types)}
    return next(iter(fits.values())) if len(fits) == 1 else None


_NOTHING = object()


def _imported(path: str):
    """The object a dotted ``path`` names (a module, or an attribute of one), or ``_NOTHING``."""
    import importlib

    module, attrs = path, []
    while module:
        try:
            obj = importlib.import_module(module)
        except ImportError:
            module, _, last = module.rpartition(".")
            attrs.insert(0, last)
            continue
        for a in attrs:
            if not hasattr(obj, a):
                return _NOTHING
            obj = getattr(obj, a)
        return obj
    return _NOTHING


def _member_of(cls, member: str) -> bool:
    """Whether ``member`` is an attribute, field or (fitted, ``name_``) attribute its docstring names."""
    return (hasattr(cls, member) or member in getattr(cls, "__dataclass_fields__", {})
            or re.search(rf"(^|[\s,]){re.escape(member)}(\s*[:,]|$)", cls.__doc__ or "", re.M) is not None)


def _short_names(app, env, node, contnode):
    """Resolve a docstring's short, re-exported or member name to the documented object it names.

    Docstrings say :class:`InputError`, :class:`Game`, :func:`coalitions.solve` (the name a user
    imports) or :attr:`Game.uncertainty` (a field their class's docstring describes); Sphinx looks
    only in the current module and at the exact path.  Here a name resolves when exactly one
    documented object of a fitting type ends with it; or when it imports as an object documented
    under its defining module; or, for an attribute or method, when its class is documented (the
    link goes to the class, whose docstring describes it).  Anything else stays unresolved (an
    error under -n).
    """
    if node.get("refdomain") != "py":
        return None
    from sphinx.util.nodes import make_refnode

    target = node["reftarget"].lstrip(".~")
    objects = env.get_domain("py").objects
    found = _documented(objects, target, _ROLES.get(node["reftype"]))
    if found is None:
        here = [p for p in (node.get("py:module"), node.get("py:class")) if p]
        for path in (".".join(here + [target]), ".".join(here[:1] + [target]), target):
            obj = _imported(path)
            where = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
            if obj is not _NOTHING and where in objects:
                found = where
                break
            owner, _, member = path.rpartition(".")
            cls = _imported(owner)
            if member and isinstance(cls, type) and _member_of(cls, member):
                name = f"{cls.__module__}.{cls.__qualname__}"
                found = name if name in objects else _documented(objects, cls.__qualname__, {"class", "exception"})
                if found is not None:
                    break
    if found is None:
        return None
    entry = objects[found]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found)


# "docs/concepts.md §5", "docs/formats.md" or "docs/cli.md#bad-input" in a docstring (where help()
# shows it as it is) or a page's text: a link on the site, to the page and its section.
_DOC_REF = re.compile(r"(?:docs/)?(?P<page>[a-z][a-z0-9-]*)\.md(?:#(?P<anchor>[a-z0-9-]+)|,? §(?P<section>\d+))?")


def _section_ids(env, page: str) -> dict[str, str]:
    """The anchor of each numbered section of ``page`` ("## 5. Learners..." -> {"5": its id})."""
    from docutils import nodes

    cache = env.__dict__.setdefault("_coalitions_sections", {})
    if page not in cache:
        ids = {}
        for section in env.get_doctree(page).findall(nodes.section):
            title = section.next_node(nodes.title)
            m = re.match(r"(\d+)\.\s", title.astext()) if title is not None else None
            if m and section["ids"]:
                ids.setdefault(m.group(1), section["ids"][0])
        cache[page] = ids
    return cache[page]


def _doc_links(app, doctree, docname):
    """Turn every plain-text mention of a page of this site (``x.md``, ``x.md §n``) into a link."""
    from docutils import nodes

    if app.builder.format != "html":
        return
    found = app.env.found_docs
    skip = (nodes.literal, nodes.literal_block, nodes.reference, nodes.raw, nodes.math, nodes.math_block,
            nodes.title, nodes.target)
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or any(isinstance(a, skip) for a in _ancestors(parent)):
            continue
        source = str(text)
        pieces, at = [], 0
        for m in _DOC_REF.finditer(source):
            page = m.group("page")
            if page not in found or page == docname and not (m.group("section") or m.group("anchor")):
                continue
            anchor = m.group("anchor") or (_section_ids(app.env, page).get(m.group("section") or "") or "")
            if m.group("section") and not anchor:
                raise ValueError(f"{docname}: {m.group(0)!r} names no numbered section of {page}.md")
            uri = ("" if page == docname else app.builder.get_relative_uri(docname, page)) + (
                f"#{anchor}" if anchor else "")
            pieces += [nodes.Text(source[at:m.start()]),
                       nodes.reference(m.group(0), m.group(0), internal=True, refuri=uri)]
            at = m.end()
        if pieces:
            pieces.append(nodes.Text(source[at:]))
            parent.replace(text, [p for p in pieces if not (isinstance(p, nodes.Text) and not str(p))])


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


def setup(app):
    app.connect("missing-reference", _short_names)
    app.connect("doctree-resolved", _doc_links)

html_theme = "alabaster"
html_title = f"coalitions {version}"
