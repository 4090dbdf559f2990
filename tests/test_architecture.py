"""The import contract of the layers (README "Layout"), read from the source with ``ast``.

* the game core (``coalitions/``) imports the standard library and numpy only: never PyTorch,
  never ``coalitions.learners``, never the command line;
* the command line (``cli/``, installed as ``coalitions.cli``) imports the learners and PyTorch
  only lazily, inside the commands that train (so ``coalitions --help`` and the game commands
  never load them), apart from the registries its flags are built from;
* the learners (``learners/``, installed as ``coalitions.learners``) never import the CLI;
* every third-party package a layer imports is declared for it in pyproject.toml;
* there is no import cycle between the project's modules, counting imports inside functions.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
#: Import names of the distributions pyproject.toml declares, where they differ.
IMPORT_NAMES = {"scikit-learn": "sklearn"}


def _module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` of every installed module (the wheel's layout)."""
    out = {}
    for top, prefix in (("coalitions", "coalitions"), ("learners", "coalitions.learners"), ("cli", "coalitions.cli")):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT / top).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join((prefix, *rel))] = path
    return out


MODULES = _module_files()


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level?)`` for every import statement of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{base}.{a.name}"
                found.append((sub if sub in MODULES else base, id(node) in top_level))
    return found


def _third_party(module: str) -> str | None:
    top = module.split(".")[0]
    if top == "coalitions" or top in sys.stdlib_module_names or top == "__future__":
        return None
    return top


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    names = {re.match(r"[A-Za-z0-9_.-]+", s).group(0) for s in specs}
    return {IMPORT_NAMES.get(n, n).replace("-", "_") for n in names}


#: Core modules that may import networkx (the `graph` extra) inside their functions.
LAZY_EXPORTS = ("coalitions.networks",)

#: The test-time modules of coalitions.testing and the one third-party package each may import.
TEST_TIME = {"coalitions.testing.strategies": "hypothesis", "coalitions.testing.plugin": "pytest"}


def _layer(name: str) -> str:
    if name == "coalitions.cli" or name.startswith("coalitions.cli."):
        return "cli"
    if name in TEST_TIME:
        return "testing"
    return "learners" if name.startswith("coalitions.learners") else "core"


def test_the_layout_is_what_the_contract_reads():
    assert "coalitions.estimate" in MODULES and "coalitions.learners.methods.base" in MODULES
    assert _layer("coalitions.peeling") == "core" and _layer("coalitions.learners.exact") == "learners"
    assert _layer("coalitions.testing") == _layer("coalitions.testing.assertions") == "core"
    assert "coalitions.cli.main" in MODULES and _layer("coalitions.cli.learn_command") == "cli"
    assert set(TEST_TIME) <= set(MODULES)


@pytest.mark.parametrize("name", sorted(TEST_TIME))
def test_the_test_time_modules_import_their_one_test_package(name):
    for module, _ in _imports(name, MODULES[name]):
        assert not module.startswith(("coalitions.learners", "coalitions.cli")), f"{name} imports {module}"
        assert _third_party(module) in (None, "numpy", TEST_TIME[name]), f"{name} imports {module}"
    assert not any(m in TEST_TIME for m, _ in _imports("coalitions.testing", MODULES["coalitions.testing"]))


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _layer(n) == "core"))
def test_the_core_imports_numpy_and_itself_only(name):
    for module, _ in _imports(name, MODULES[name]):
        assert not module.startswith(("coalitions.learners", "coalitions.cli")), f"{name} imports {module}"
        allowed = (None, "numpy", "networkx") if name in LAZY_EXPORTS else (None, "numpy")
        assert _third_party(module) in allowed, f"{name} imports {module}"


def test_the_core_exports_import_networkx_only_when_called():
    """coalitions.networks is the core's one door to networkx, from its `graph` extra, inside functions."""
    for name in LAZY_EXPORTS:
        tops = [m for m, top in _imports(name, MODULES[name]) if top and _third_party(m)]
        assert tops == [], f"{name} imports {tops} at module level"
    assert "networkx" in _declared("graph")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _layer(n) == "cli"))
def test_the_cli_loads_the_learners_and_torch_lazily(name):
    for module, top in _imports(name, MODULES[name]):
        if top:
            assert _third_party(module) in (None, "click", "numpy"), f"{name} imports {module} at module level"
            lazy_only = module.startswith("coalitions.learners") and not module.startswith(
                ("coalitions.learners.data", "coalitions.learners.experiments.catalogue",
                 "coalitions.learners.methods.registry"))
            assert not lazy_only, f"{name} imports {module} at module level"


def test_the_cli_training_flags_are_the_protocols():
    """The command line's training flags and the library's map of them (learn's messages list them in this order)."""
    from coalitions.cli.data_options import TRAINING_KEYS
    from coalitions.learners.training.protocol import FLAG_FIELDS

    assert TRAINING_KEYS == tuple(FLAG_FIELDS)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _layer(n) == "learners"))
def test_the_learners_never_import_the_cli(name):
    for module, _ in _imports(name, MODULES[name]):
        assert not module.startswith("coalitions.cli"), f"{name} imports {module}"


@pytest.mark.parametrize("layer, extras, lazy", [("core", ("graph",), True), ("core", (), False), ("cli", (), False),
                                                 ("cli", ("learn",), True), ("testing", ("testing",), True),
                                                 ("learners", ("learn", "plot", "data", "flower", "ray"), True)])
def test_every_third_party_import_is_declared(layer, extras, lazy):
    """The core needs the required dependencies only; so does the CLI until a command trains."""
    declared = _declared(*extras)
    used = {_third_party(m) for n in MODULES if _layer(n) == layer for m, top in _imports(n, MODULES[n])
            if lazy or top}
    assert used - {None} <= declared, f"{layer} imports undeclared {sorted(used - {None} - declared)}"


def test_the_testing_extra_is_what_a_users_tests_need():
    """A user's tests need pytest and hypothesis, not the project's ruff, mypy, build and xdist (issue 36)."""
    assert _declared("testing") - _declared() == {"pytest", "hypothesis"}
    assert _declared("testing") <= _declared("test")
    page = (ROOT / "docs" / "testing.md").read_text()
    assert "collaboration-equilibrium[testing]" in page and "collaboration-equilibrium[test]" not in page


def test_no_import_cycles():
    from coalitions.scc import strongly_connected_components

    graph = {n: sorted({m for m, _ in _imports(n, p) if m in MODULES and m != n}) for n, p in MODULES.items()}
    cycles = [sorted(c) for c in strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


def test_importing_the_core_and_the_cli_loads_no_torch():
    code = ("import sys, coalitions, coalitions.cli, coalitions.estimate, coalitions.oracles, coalitions.testing; "
            "assert 'torch' not in sys.modules, 'torch'; assert 'scipy' not in sys.modules, 'scipy'; "
            "assert 'hypothesis' not in sys.modules, 'hypothesis'; assert 'pytest' not in sys.modules, 'pytest'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
