"""Federations: clients whose train / validation / test data must stay apart.

docs/learners-data.md.  A :class:`Federation` is what every learner fits: a tuple of
:class:`Client` objects, each holding three :class:`Split` objects, plus the
task (``"regression"``, ``"binary"``, ``"multiclass"``), the metric used for the
game's values (``"mse"``, ``"accuracy"``, ``"auc"``) and, for data with planted
structure, the groups of clients that should collaborate.

Arrays are ``float32`` features of shape ``(n, d)`` (tabular) or
``(n, C, H, W)`` (images); targets are ``float32`` of shape ``(n,)`` for
regression and ``int64`` class ids of shape ``(n,)`` otherwise.  Everything is
validated when built, and a malformed federation raises
:class:`~coalitions.errors.InputError` with one line naming the client at fault.

Examples
--------
>>> import numpy as np
>>> s = Split(np.zeros((3, 2), np.float32), np.zeros(3, np.float32))
>>> fed = Federation("toy", "regression", "mse", (Client("a", s, s, s),), None, None, {})
>>> fed.n, fed.names, fed.input_shape, fed.sense
(1, ('a',), (2,), 'min')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from coalitions.errors import InputError

__all__ = ["Split", "Client", "Federation", "TASKS", "METRICS", "METRIC_SENSE"]

TASKS = ("regression", "binary", "multiclass")
METRICS = ("mse", "accuracy", "auc")
#: The sense of each metric as a game value (docs/concepts.md §1: losses are given with ``"min"``).
METRIC_SENSE = {"mse": "min", "accuracy": "max", "auc": "max"}


@dataclass(frozen=True, eq=False)
class Split:
    """One client's split: features ``X`` and targets ``y`` (same length ``n``).

    ``ids`` (optional, ``(n,)`` integers): each row's number in the loader's source data, the same
    for the same row in every seed's federation (feature scaling changes ``X`` with the seed), so
    that statistics pooled over seeds count distinct rows (Adult's fixed ``adult.test``, heart's
    patients drawn again by every split).  ``None`` where the source has no row numbers.
    """

    X: np.ndarray
    y: np.ndarray
    ids: np.ndarray | None = None

    def __post_init__(self):
        X = np.ascontiguousarray(self.X, dtype=np.float32)
        y = np.asarray(self.y)
        if X.ndim < 2:
            raise InputError(f"split features must have shape (n, ...), got {X.shape}")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise InputError(f"split targets must have shape ({X.shape[0]},), got {y.shape}")
        y = np.ascontiguousarray(y, dtype=np.float32 if y.dtype.kind == "f" else np.int64)
        X.setflags(write=False)
        y.setflags(write=False)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        if self.ids is not None:
            ids = np.asarray(self.ids)
            if ids.shape != y.shape or ids.dtype.kind not in "iu":
                raise InputError(f"split row ids must be {y.shape[0]} integers, got {ids.dtype} {ids.shape}")
            ids = np.ascontiguousarray(ids, dtype=np.int64)
            ids.setflags(write=False)
            object.__setattr__(self, "ids", ids)

    def __len__(self) -> int:
        return int(self.X.shape[0])


@dataclass(frozen=True, eq=False)
class Client:
    """A client: its name and its disjoint splits.

    ``tune`` is a fourth split, the rows that choose a model's learning rate and stopping step,
    held out of the training rows by :func:`~coalitions.learners.data.roles.with_roles` under a
    protocol's ``tune_split``; ``None`` (every loader's federation): the validation rows tune
    (:attr:`tuning`).
    """

    name: str
    train: Split
    val: Split
    test: Split
    tune: Split | None = None

    @property
    def tuning(self) -> Split:
        """The rows that choose a rate and a stopping step: ``tune``, or ``val`` when there is none."""
        return self.val if self.tune is None else self.tune


@dataclass(frozen=True, eq=False)
class Federation:
    """A set of clients with a common task and metric (docs/learners-data.md).

    Parameters
    ----------
    name : str
        Dataset name, e.g. ``"synthetic"``.
    task : {"regression", "binary", "multiclass"}
    metric : {"mse", "accuracy", "auc"}
        The game value ``v_i(S)``: this metric of the model trained on ``S``,
        on client ``i``'s validation data.  ``"mse"`` has sense ``"min"``.
    clients : tuple of Client
    n_classes : int or None
        Number of classes (``None`` for regression).
    planted_groups : tuple of tuple of str, or None
        Planted structure (client names), when the data has one.
    options : dict
        The loader options that made the federation (written as provenance).
    preparation : dict
        How the features were prepared, e.g. ``{"numeric": {"source": "pooled
        training data of all clients", "columns": [...], "mean": [...],
        "scale": [...]}}`` (see ``docs/learners-data.md``); empty when the
        loader scales nothing.
    tuning : dict or None
        How the clients' ``tune`` rows were held out of their training rows
        (``{"fraction": f, "seed": s}``, :func:`~coalitions.learners.data.roles.with_roles`);
        ``None``: no client has tuning rows of its own, the validation rows tune.

    Attributes
    ----------
    single_class_splits : tuple of (str, str)
        For classification: every ``(client, split)`` with ``split`` in
        ``("val", "test")`` whose labels hold a single class, where accuracy
        rewards a constant prediction and AUC is undefined.  The loaders'
        stratified splits avoid it whenever the client's class counts allow
        (:func:`~coalitions.learners.data.datasets._common.split_indices`); what
        is left here is unavoidable.  Empty for regression.
    """

    name: str
    task: str
    metric: str
    clients: tuple
    n_classes: int | None = None
    planted_groups: tuple | None = None
    options: dict = field(default_factory=dict)
    preparation: dict = field(default_factory=dict)
    tuning: dict | None = None
    single_class_splits: tuple = field(init=False, default=())

    def __post_init__(self):
        if self.task not in TASKS:
            raise InputError(f"federation {self.name!r}: task must be one of {TASKS}, got {self.task!r}")
        if self.metric not in METRICS:
            raise InputError(f"federation {self.name!r}: metric must be one of {METRICS}, got {self.metric!r}")
        clients = tuple(self.clients)
        if not clients:
            raise InputError(f"federation {self.name!r} has no clients")
        names = [c.name for c in clients]
        if len(set(names)) != len(names):
            raise InputError(f"federation {self.name!r}: a client name is used twice")
        shape = clients[0].train.X.shape[1:]
        for c in clients:
            if not isinstance(c.name, str) or not c.name or "," in c.name or "|" in c.name:
                raise InputError(f"federation {self.name!r}: bad client name {c.name!r}")
            for part in ("train", "val", "test", "tune"):
                s = getattr(c, part)
                if s is None:   # no tuning rows of its own: the validation rows tune
                    continue
                if len(s) == 0:
                    raise InputError(f"client {c.name!r}: empty {part} split")
                if s.X.shape[1:] != shape:
                    raise InputError(f"client {c.name!r}: {part} features have shape {s.X.shape[1:]}, "
                                     f"expected {shape}")
                if (self.task == "regression") != (s.y.dtype == np.float32):
                    raise InputError(f"client {c.name!r}: {part} targets of dtype {s.y.dtype} "
                                     f"do not fit task {self.task!r}")
                if self.task != "regression" and (s.y.min() < 0 or s.y.max() >= (self.n_classes or 0)):
                    raise InputError(f"client {c.name!r}: {part} labels outside 0..{(self.n_classes or 0) - 1}")
        if self.task == "regression" and self.n_classes is not None:
            raise InputError(f"federation {self.name!r}: regression takes n_classes=None")
        if self.task == "binary" and self.n_classes != 2:
            raise InputError(f"federation {self.name!r}: binary task needs n_classes=2")
        groups = None
        if self.planted_groups is not None:
            groups = tuple(tuple(g) for g in self.planted_groups)
            for g in groups:
                for n in g:
                    if n not in names:
                        raise InputError(f"federation {self.name!r}: planted group names unknown client {n!r}")
        object.__setattr__(self, "clients", clients)
        object.__setattr__(self, "planted_groups", groups)
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "preparation", dict(self.preparation))
        if self.tuning is not None:
            object.__setattr__(self, "tuning", dict(self.tuning))
        own = {c.tune is not None for c in clients}
        if len(own) > 1 or own.pop() != (self.tuning is not None):
            raise InputError(f"federation {self.name!r}: either every client has tuning rows and the federation "
                             "says how they were held out (tuning), or none has")
        single = ()
        if self.task != "regression":
            single = tuple((c.name, part) for c in clients for part in ("val", "test")
                           if len(np.unique(getattr(c, part).y)) < 2)
        object.__setattr__(self, "single_class_splits", single)

    @property
    def n(self) -> int:
        """Number of clients ``N``."""
        return len(self.clients)

    @property
    def names(self) -> tuple[str, ...]:
        """Client names in order."""
        return tuple(c.name for c in self.clients)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input (without the sample dimension)."""
        return tuple(self.clients[0].train.X.shape[1:])

    @property
    def sense(self) -> str:
        """``"min"`` for a loss metric (MSE), else ``"max"``."""
        return METRIC_SENSE[self.metric]

    @property
    def n_outputs(self) -> int:
        """Model outputs: 1 for regression and binary (a logit), ``n_classes`` for multiclass."""
        if self.task == "multiclass":
            assert self.n_classes is not None  # __post_init__ rejects it (every label is outside 0..-1)
            return self.n_classes
        return 1

    def sizes(self, part: str = "train") -> np.ndarray:
        """Sample count of each client's ``part`` split (``"tuning"``: the rows that tune, :attr:`Client.tuning`)."""
        return np.array([len(getattr(c, part)) for c in self.clients], dtype=np.int64)

    def __repr__(self) -> str:
        return (f"Federation({self.name!r}, task={self.task!r}, metric={self.metric!r}, "
                f"clients={list(self.names)!r})")
