"""A registered method trained the way ``coalitions learn`` trains it (docs/cli.md, docs/learners-spo.md).

The command line gives a method name, the method's own options and its training flags;
:class:`Learning` owns what happens between those and the estimate:

* a **personalised learner** trains under one training protocol, the data's default protocol
  with the training flags changed (:func:`~coalitions.learners.training.protocol.protocol_with`);
  with an ``lr_grid`` it trains once per rate and keeps the rate whose kept models have the lowest
  mean tuning loss, as ``coalitions reproduce`` does
  (:func:`~coalitions.learners.training.tuning.fit_on_grid`, recorded as ``extra.lr_tuning``;
  Local chooses per client);
* **without training flags** every method trains until its validation loss stops improving: the
  protocol with the reports' patience and, for a personalised learner, a rate grid around its rate
  (:func:`~coalitions.learners.training.protocol.tuned`; SPO, whose rate is its hypernetwork's own,
  takes the patience); :attr:`Learning.defaulted` says so;
* **SPO** splits the training flags: those that are its own settings (``--lr``, ``--model``,
  ``--mlp-hidden``, ``--weight-decay``: its hypernetwork's rate, its target model and ridge) go
  to the estimator, those it reads from the protocol (:attr:`SPO.protocol_fields
  <coalitions.learners.methods.spo.estimator.SPO.protocol_fields>`) make its protocol, and any
  other is refused, naming the flags it takes;
* SPO's ``--variant paper`` takes **the authors' settings** wherever their flags are not given
  (:data:`~coalitions.learners.methods.spo.paper.PAPER_SETTINGS`: a 100-wide hypernetwork of two
  layers, SGD at 0.01 with momentum 0.5, the ratio rule; ``PAPER_PROTOCOL``: 10,000 full-batch
  front steps, no early stopping), so that the variant alone runs the code as its authors do.

The estimator is built (and its options checked) when the run is made, before any data is read;
:meth:`Learning.fit` trains it on a federation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coalitions.errors import InputError
from coalitions.learners.methods.registry import METHODS, create

__all__ = ["Learning"]


class Learning:
    """One run of method ``method``: its estimator, built at once, and its fit under the run's protocol.

    Parameters
    ----------
    method : str
        A registered method name (:data:`~coalitions.learners.methods.registry.METHODS`).
    options : dict
        The method's own options given, by their flag keys (``alpha_k``, ``search_steps``, …).
    training : dict
        The training flags given, by their keys (:data:`~coalitions.learners.training.protocol.FLAG_FIELDS`),
        ``None`` for ``--batch-size full``.
    device : str
    seed : int
    progress : callable, optional
        ``progress(label)`` -> a ``progress(done, total)`` callback for the training named ``label``.

    Attributes
    ----------
    estimator : Learner
        The estimator; after :meth:`fit`, the fitted one (with a grid: the one at the chosen rate).
    defaulted : bool
        No training flag was given: the run stops on its validation loss (and tunes its rate) by default
        (SPO's ``--variant paper`` excepted: it runs the code's fixed schedule).
    paper : bool
        SPO's ``--variant paper`` (or ``readme``): the authors' settings fill every flag of theirs not given.
    paper_defaults : dict
        Those settings, by flag key (``hypernet_hidden``, ``layers``, ``rule``, ``steps``, …).

    Raises
    ------
    InputError
        An option the method does not take, or a training flag SPO neither owns nor reads.
    """

    def __init__(self, method: str, options: dict, training: dict, *, device: str = "auto", seed: int = 0,
                 progress: Callable[[str], Any] | None = None):
        from coalitions.learners.methods.base import PersonalizedLearner

        self.method, self.options, self.training = method, dict(options), dict(training)
        self.defaulted = not self.training
        self.paper = method == "spo" and self.options.get("variant") in ("paper", "readme")
        #: The authors' settings ``--variant paper`` took, by flag key (those not given).
        self.paper_defaults: dict = _paper_defaults(self.options, self.training) if self.paper else {}
        for key, value in self.paper_defaults.items():
            (self.training if key in ("steps", "batch_size") else self.options)[key] = value
        self.device, self.seed, self._progress = device, seed, progress
        if method not in METHODS:   # create's message
            create(method, {})
        cls = METHODS[method].estimator_class()
        self.personal = issubclass(cls, PersonalizedLearner)
        own: dict = {}
        self._fields: dict = {}
        if not self.personal:   # SPO: the training flags that are its own settings, and the protocol fields it reads
            own, self._fields = _split_flags(method, cls, self.training)
        self.estimator = create(method, {**self.options, **own}, device=device, seed=seed,
                                progress=self._progress_for(f"training {method}"))

    def _progress_for(self, label: str):
        return None if self._progress is None else self._progress(label)

    def fit(self, fed):
        """Train on federation ``fed``; the estimate (:class:`~coalitions.estimate.Estimate`), ``lr_tuning`` in
        its ``extra`` when the protocol has a grid."""
        import dataclasses

        from coalitions.learners.training.protocol import DEFAULT_PATIENCE, FLAG_FIELDS, protocol_with, tuned

        tuning = None
        if self.personal:
            protocol = protocol_with(fed.task, fed.input_shape, {FLAG_FIELDS[k]: v for k, v in self.training.items()})
            if self.defaulted:   # stop on the validation loss and tune the rate, as the reports do
                protocol = tuned(protocol)
            from coalitions.learners.training.tuning import fit_on_grid

            def make(lr):
                if lr is None:
                    return self.estimator
                return create(self.method, self.options, device=self.device, seed=self.seed,
                              progress=self._progress_for(f"training {self.method} at lr {lr:g}"))

            self.estimator, tuning = fit_on_grid(make, protocol, fed)   # the rule reproduce follows
        else:   # SPO: the default protocol of the data with the flags it reads changed
            # the paper's variant runs the code's fixed schedule (its protocol fields in ``_fields``)
            fields = {"patience": DEFAULT_PATIENCE} if self.defaulted and not self.paper else self._fields
            self.estimator.set_params(protocol=protocol_with(fed.task, fed.input_shape, fields)).fit(fed)
        e = self.estimator.estimate_
        if tuning is not None:
            e = dataclasses.replace(e, extra={**e.extra, "lr_tuning": tuning})
        return e


def _paper_defaults(options: dict, training: dict) -> dict:
    """The authors' settings (:data:`~coalitions.learners.methods.spo.paper.PAPER_SETTINGS` and ``PAPER_PROTOCOL``,
    or ``README_*`` for ``--variant readme``) that the run was not given, by flag key."""
    from coalitions.learners.methods.spo import paper

    key_of = {o.arg: o.key for o in METHODS["spo"].options}
    settings, protocol = ((paper.README_SETTINGS, paper.README_PROTOCOL) if options.get("variant") == "readme" else
                          (paper.PAPER_SETTINGS, paper.PAPER_PROTOCOL))
    wanted = {key_of.get(arg, arg): value for arg, value in {**settings, **protocol}.items()}
    return {k: v for k, v in wanted.items() if k not in options and k not in training}


def _split_flags(method: str, cls, training: dict) -> tuple[dict, dict]:
    """SPO's training flags: ``(its own options, the protocol fields it reads)``; any other flag is refused."""
    from coalitions.learners.training.protocol import FLAG_FIELDS

    reads = getattr(cls, "protocol_fields", ())
    keys = METHODS[method].keys
    own, fields = {}, {}
    for k, v in training.items():
        if k in keys:
            own[k] = v
        elif FLAG_FIELDS[k] in reads:
            fields[FLAG_FIELDS[k]] = v
        else:
            takes = [f"--{k2.replace('_', '-')}" for k2 in FLAG_FIELDS if k2 in keys or FLAG_FIELDS[k2] in reads]
            raise InputError(f"--{k.replace('_', '-')} does not apply to --method {method} (of the training "
                             f"flags it takes {', '.join(takes)})")
    return own, fields
