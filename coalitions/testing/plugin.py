"""The pytest plugin of :mod:`coalitions.testing` (entry point ``coalitions`` in ``pytest11``).

Installed with the package, pytest loads it on its own; it adds

* the fixture ``game_from``: ``game_from("games/mine.json")`` reads a game (JSON or ``.npz``)
  with :func:`coalitions.io.read_game`, a relative path taken from the test file's folder;
* a readable report for a failed certificate: when a test fails with
  :class:`~coalitions.testing.CertificateFailure` (every ``assert_*`` of the package raises
  it), pytest shows the witness message alone, without the traceback through the
  package, after the file and line of the test that asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..game import Game
from ..io import read_game
from .assertions import CertificateFailure

__all__ = ["game_from"]


@pytest.fixture
def game_from(request: pytest.FixtureRequest) -> Callable[[str | Path], Game]:
    """A reader of games: ``game_from(path)``, relative paths from the requesting test's folder."""
    here = Path(str(request.path)).parent

    def read(path: str | Path) -> Game:
        p = Path(path)
        return read_game(p if p.is_absolute() else here / p)

    return read


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Report a failed certificate by its witness message (no traceback through the package)."""
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if report.failed and excinfo is not None and isinstance(excinfo.value, CertificateFailure):
        # the line of the test that asserted, not the package's own frames
        own = [e for e in excinfo.traceback if Path(str(e.path)) == Path(str(item.path))]
        where = f"{own[-1].path}:{own[-1].lineno + 1}" if own else item.nodeid
        report.longrepr = f"{where}: {excinfo.typename}\n{excinfo.value}"
