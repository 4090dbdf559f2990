"""Value sources by name: the one place that maps a ``SOURCE`` of ``coalitions sample-ce`` to a lazy game.

The analytic generators are registered here; a data source (a federation that trains
one model per coalition asked, in ``coalitions.learners``) registers its factory with
:func:`register_source` under its own name.  A factory takes keyword options (those of
``coalitions game`` for the analytic ones) and returns a
:class:`~coalitions.lazy.ValueSource`.

Examples
--------
>>> make_source("planted", groups=[2, 2], seed=3).clients
('c0', 'c1', 'c2', 'c3')
>>> make_source("nowhere")
Traceback (most recent call last):
...
coalitions.errors.InputError: unknown source 'nowhere' (known: mean-estimation, planted)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import InputError
from .lazy import ValueSource, check_source
from .lazy_analytic import MeanEstimationSource, PlantedSource

__all__ = ["register_source", "make_source", "source_names"]


def _planted(groups, noise: float = 0.05, ties: float = 0.0, seed: int = 0, names=None) -> ValueSource:
    return PlantedSource(tuple(groups), noise, ties, seed, names)


def _mean_estimation(sizes, mu_e: float = 10.0, sigma2: float = 1.0, names=None,
                     federation: str = "uniform") -> ValueSource:
    return MeanEstimationSource(tuple(sizes), mu_e, sigma2, names, federation)


_FACTORIES: dict[str, Callable[..., ValueSource]] = {"planted": _planted, "mean-estimation": _mean_estimation}


def register_source(name: str, factory: Callable[..., ValueSource]) -> None:
    """Make ``factory(**options)`` the source called ``name`` (a name already taken is refused)."""
    if not isinstance(name, str) or not name or name in _FACTORIES:
        raise InputError(f"source name {name!r} is empty or taken")
    _FACTORIES[name] = factory


def source_names() -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(_FACTORIES))


def make_source(name: str, **options: Any) -> ValueSource:
    """The source called ``name`` built with ``options``; an unknown name is an :class:`InputError`."""
    if name not in _FACTORIES:
        raise InputError(f"unknown source {name!r} (known: {', '.join(source_names())})")
    return check_source(_FACTORIES[name](**options))
