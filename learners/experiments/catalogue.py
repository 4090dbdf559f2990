"""The paper's experiments as data: what ``coalitions reproduce`` runs.

Each :class:`Experiment` names a data set, the *regimes* to run it in (loader
options), the exhaustive oracle's settings where the exact game is affordable,
the learners to compare, two sets of run settings (``quick`` and ``full``) and
the published numbers to print beside ours (Cui et al., KDD 2022, Tables 1–3,
as far as our text copies of the papers preserve them).

Matched budgets: an experiment names one
:class:`~coalitions.learners.training.protocol.TrainingProtocol`, and every method's options
derive from it and its budget of gradient steps per client (:func:`budgeted_options`): the exact
game's subset models and Local train under the protocol itself, SPO trains its hypernetwork ``steps``
steps (its batch, patience and rate grid the protocol's too), and every round-based learner runs the rounds that give its largest client ``steps``
local optimiser steps (rounds × local epochs × batches, FedAMP's local-step floor included).
A method's own options in the settings (pFedMe's inner steps, FedAMP's λ) are kept; the
protocol decides the model, optimiser, learning rate, batch and budget.

Nothing here trains anything; :mod:`coalitions.learners.experiments.runner` runs it.

Examples
--------
>>> exp = EXPERIMENTS["synthetic"]
>>> [r.name for r in exp.regimes], exp.settings(quick=True).seeds
(['few', 'many'], (0,))
>>> digits = EXPERIMENTS["digits"]
>>> digits.protocol_for(quick=True).steps, digits.protocol_for(quick=False).steps
(40, 250)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from coalitions.errors import InputError
from coalitions.learners.methods.registry import labels
from coalitions.learners.training.protocol import DEFAULT_PATIENCE, DEFAULT_PROTOCOLS, TrainingProtocol, rate_grid
from coalitions.params import ParameterError

__all__ = ["Regime", "Settings", "Experiment", "EXPERIMENTS", "METHOD_LABELS", "PAPER_BASELINES", "get_experiment",
           "Variant", "VARIANTS", "method_of",
           "select_methods", "budgeted_options", "budget_record"]


@dataclass(frozen=True)
class Variant:
    """A report column that runs registered ``method`` with ``options`` fixed: one method's two readings side by side.

    A column name that is not a variant is the registered method itself (:func:`method_of`).
    """

    method: str
    options: dict
    label: str


#: FedeRiCo's two loss scales (the paper does not say which, so both are reported, named;
#: docs/learners-personalized.md): the mean is the default (``benchmarks/federico_scale.py`` on held-out
#: federations), the sum the data's negative log-likelihood.  A report run before the two columns existed has
#: one column ``federico``, trained with the default of its day (the sum; docs/results.md names it).
VARIANTS = {
    "federico-mean": Variant("federico", {"likelihood": "mean"}, "FedeRiCo (mean)"),
    "federico-sum": Variant("federico", {"likelihood": "sum"}, "FedeRiCo (sum)"),
}

#: Column labels of the learners in reports (the methods registry's and the variants'; CE is inserted after SPO).
METHOD_LABELS = {**labels(), **{name: v.label for name, v in VARIANTS.items()}}
ALL_METHODS = ("local", "fedavg", "spo", "fedamp", "fedamp-heuristic", "federico-mean", "federico-sum", "superfed-mm")


def method_of(column: str) -> str:
    """The registered method that column ``column`` runs (a :data:`VARIANTS` entry's, or the column itself)."""
    return VARIANTS[column].method if column in VARIANTS else column


def _variant_options(column: str) -> dict:
    """The options column ``column`` fixes (none for a registered method's own column)."""
    return dict(VARIANTS[column].options) if column in VARIANTS else {}


#: The baselines of the paper's tables (docs/learners-baselines.md).  FedPer and LG-FedAvg split a
#: model into body and output layer: with a logistic model there is no body (FedPer is Local,
#: LG-FedAvg is FedAvg), so the logistic experiments leave them out.
PAPER_BASELINES = ("fedprox", "ditto", "fedper", "lg-fedavg", "qffl", "afl", "per-fedavg", "pfedme", "pfedhn")
BODYLESS_BASELINES = tuple(m for m in PAPER_BASELINES if m not in ("fedper", "lg-fedavg"))


@dataclass(frozen=True)
class Regime:
    """One setting of the data: ``name`` (used in file names), a title, loader options.

    ``protocol``: fields of the experiment's
    :class:`~coalitions.learners.training.protocol.TrainingProtocol` that this regime changes
    (for example its learning rate and budget, where the regimes' data differ so much that no
    one setting suits both; chosen on held-out seeds, see docs/learners-protocol.md).  Every
    method of the regime still trains under the one resulting protocol.

    ``primary``: the exact game the regime's verdicts are to rest on, ``"metric"`` (the regime's
    metric, as in the paper) or ``"loss"`` (the validation-loss game of the same subset models),
    chosen before the reported runs as the one whose benefit graph reproduces itself better under
    validation resampling on data splits no report uses (``benchmarks/self_agreement.py
    --data-seeds 100-104``; docs/results.md, "The primary game"); ``None`` where that was not
    measured (the report then says so and shows the metric game first, as the paper does).

    ``family``: which comparisons the level ``z = 1.96`` covers at once when the regime's exact games
    are solved (``coalitions.noise``: ``"comparison"``, ``"client"`` or ``"game"``), fixed before the
    reported runs by the rule ``FAMILY_RULE`` on the same held-out splits as ``primary``.
    """

    name: str
    title: str
    options: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    primary: str | None = None
    family: str = "comparison"


#: How ``Regime.family`` is chosen (docs/results.md, "The family of comparisons"): the narrowest
#: family — per comparison, then client-wise, then game-wise — under which the primary game's CE
#: keeps a support over validation resampling of at least 0.8 on the held-out data splits
#: (``benchmarks/self_agreement.py``); power first, as long as the answer reproduces.
FAMILY_RULE = ("comparison", "client", "game"), 0.8


@dataclass(frozen=True)
class Settings:
    """How long to run: seeds, options per learner (``coalitions learn`` keys), and the budget.

    ``method_options["*"]`` applies to every learner that takes the option.  ``steps``
    replaces the experiment protocol's budget (gradient steps per client) in these
    settings (``None``: the protocol's own).
    """

    seeds: tuple[int, ...]
    method_options: dict = field(default_factory=dict)
    steps: int | None = None

    def options_for(self, method: str) -> dict:
        """The options of ``method``: those under ``"*"`` that it takes, then its own."""
        from coalitions.learners.methods.registry import METHODS

        base = method_of(method)
        takes = METHODS[base].keys if base in METHODS else ()
        common = {k: v for k, v in self.method_options.get("*", {}).items() if k in takes}
        return dict(common, **self.method_options.get(method, {}), **_variant_options(method))


@dataclass(frozen=True)
class Experiment:
    """An experiment of the paper, or our stand-in for one.

    Attributes
    ----------
    name, dataset, title : str
    regimes : tuple of Regime
    oracle : dict or None
        :class:`coalitions.learners.exact.ExhaustiveOracle` keyword options; ``None``
        where the exact game is not affordable.  Keys that are
        :class:`~coalitions.learners.training.protocol.TrainingProtocol` fields change
        :attr:`protocol` for the exact game (:meth:`oracle_options`); the oracle itself
        takes no training setting.
    methods : tuple of str
        Registered learners (``coalitions.learners.methods.registry``).
    quick, full : Settings
    published : dict
        The paper's numbers, keyed by what they describe (see the reports).
    notes : str
        Markdown: where the data or the setup differ from the paper's.
    protocol : TrainingProtocol or None
        How every model is trained and the budget (module docstring); ``oracle``
        keys that are protocol fields (``model``, ``lr``, ``batch_size``) change
        it for the exact game only (digits: softmax regression instead of the CNN).
    quick_oracle : dict
        Oracle options that ``--quick`` changes (:meth:`oracle_options`); empty for most.
    """

    name: str
    dataset: str
    title: str
    regimes: tuple[Regime, ...]
    oracle: dict | None
    methods: tuple[str, ...]
    quick: Settings
    full: Settings
    published: dict = field(default_factory=dict)
    notes: str = ""
    protocol: TrainingProtocol | None = None
    quick_oracle: dict = field(default_factory=dict)

    def settings(self, quick: bool) -> Settings:
        return self.quick if quick else self.full

    def protocol_for(self, quick: bool, regime: Regime | None = None) -> TrainingProtocol | None:
        """The experiment's protocol with ``regime``'s changes, then the settings' budget."""
        p = self.protocol
        if p is None:
            return None
        if regime is not None and regime.protocol:
            p = p.with_(**regime.protocol)
        steps = self.settings(quick).steps
        return p if steps is None else p.with_(steps=steps)

    def oracle_options(self, quick: bool, regime: Regime | None = None) -> dict:
        """The exhaustive oracle's keyword options of a run.

        :attr:`oracle` (with :attr:`quick_oracle` under ``--quick``) and, with a
        protocol, ``protocol`` (with the oracle's overrides of protocol fields).
        Without a protocol the oracle trains the default protocol of the data's task
        (:class:`~coalitions.learners.exact.ExhaustiveOracle`), and an override of a
        protocol field has nothing to change: a :class:`ParameterError` naming ``oracle``.
        """
        if self.oracle is None:
            return {}
        mine = {**self.oracle, **(self.quick_oracle if quick else {})}
        names = {f.name for f in fields(TrainingProtocol)}
        p = self.protocol_for(quick, regime)
        if p is None:
            fixed = sorted(k for k in mine if k in names)
            if fixed:
                raise ParameterError("oracle", f"{{name}} of experiment {self.name!r} sets the protocol field(s) "
                                               f"{', '.join(fixed)} but the experiment has no protocol to change")
            return mine
        if "tune_split" in mine:   # the rows that tune are the same for every column (learners/data/roles.py)
            raise ParameterError("oracle", f"{{name}} of experiment {self.name!r} sets tune_split: the rows that tune "
                                           "are the experiment's protocol's, the same for every column")
        own = {k: v for k, v in mine.items() if k not in names}
        # the exact game tunes every subset model's rate on the protocol's grid (learners/game/chunks.py) unless
        # the experiment fixes it (``oracle["lr_grid"] = None``), and every subset model stops on the protocol's
        # patience (learners/game/stopping.py)
        return {**own, "protocol": p.with_(**{k: v for k, v in mine.items() if k in names})}


_SEEDS = (0, 1, 2, 3, 4)
#: Fashion's seeds: ten per regime, for seed-level tests with more power than five give (the
#: differences between its columns are a few points, the spread between seeds as large).
_FASHION_SEEDS = tuple(range(10))

#: The early-stopping patience of every neural and logistic experiment's protocol: each
#: column -- every exact subset model, Local, every learner, SPO -- stops when its validation loss has not
#: improved for this many evaluations (one per round or step) and keeps its best parameters; the report names
#: the columns that reached the budget instead. (Synthetic keeps none: its exact game is the closed form.)
PATIENCE = DEFAULT_PATIENCE

#: Local gradient steps a site takes per communication round in every round-based column of heart, Adult, digits
#: and fashion:
#: more than one, so that each method's defining step acts (FedProx's proximal term is zero at a round's first
#: step, so with one step FedProx is FedAvg; Per-FedAvg's meta step, Ditto's and pFedMe's personal steps act
#: within a round), and FedAMP's own floor (its ``local_steps``, 5), so that every round-based column
#: has one round length.  Local is not affected (it evaluates after every epoch, as the exact game's models do).
#: Each experiment's budget is then the smallest of 50, 100 and 250 steps under which every round-based column
#: stops on its patience before the budget on at least 2 of the 3 held-out seeds 100-102
#: (``benchmarks/columns.py --local-steps 5 --steps S``; docs/learners-protocol.md, "Local steps and budgets").
LOCAL_STEPS = 5

#: The share of each client's training rows that heart, Adult and digits hold out to choose every column's rate
#: and stopping step (docs/learners-protocol.md, "Data roles"), so that the validation rows only score the
#: game and the columns.
TUNE_SPLIT = 0.2

#: Fashion-MNIST's share: half of about 40 training rows a client, so that its models still fit on about 20
#: rows (the federation's design: a client alone far from saturated) and tune on about 20 of their own, while the
#: 100 validation rows only score.
FASHION_TUNE_SPLIT = 0.5

#: The learning-rate grid every learner column of heart and Adult tunes on (validation loss;
#: :mod:`coalitions.learners.training.tuning`): a third of, equal to and three times the exact game's
#: rate (0.05, chosen once on seeds 100-102 by ``benchmarks/protocol_defaults.py``).
LOGISTIC_GRID = rate_grid(0.05)


def budgeted_options(exp: Experiment, quick: bool, method: str, sizes, regime: Regime | None = None) -> dict:
    """``method``'s options in ``exp`` under the experiment's training protocol.

    Without a protocol, the settings' options (:meth:`Settings.options_for`).
    With one, every column gets the protocol itself (the object): a personalised
    learner (:class:`~coalitions.learners.methods.base.PersonalizedLearner`'s
    ``protocol``: model, optimiser, rate and schedule, batch, weight decay,
    patience and the budget, from which it derives its rounds on the data it is
    given) and SPO (its steps, grid, batch and patience; its hypernetwork's rate and
    its target model are its own options).  The settings' method-specific options are applied last.  ``sizes`` (the
    clients' training-set sizes) is kept for callers; the learners read them
    off the federation.
    """
    settings = exp.settings(quick)
    base = settings.options_for(method)
    p = exp.protocol_for(quick, regime)
    if p is None:
        return base
    own = dict(settings.method_options.get(method, {}))
    return {"protocol": p, **own, **_variant_options(method)}


def budget_record(exp: Experiment, quick: bool, methods, sizes, regime: Regime | None = None) -> dict | None:
    """What ``results.json`` records of a regime's budget: the protocols and each method's derived options.

    ``{"protocol": {...}, "steps_per_client": S, "oracle_protocol": {...} | None,
    "methods": {method: {option: value}}}`` (Local and FedAvg: ``{"protocol": "the protocol"}``);
    ``None`` without a protocol.  The runner adds ``"data_roles"``: which rows tuned and which
    scored, with the first seed's row counts (:func:`coalitions.learners.data.roles.data_roles`).
    """
    p = exp.protocol_for(quick, regime)
    if p is None:
        return None
    per = {}
    for m in methods:
        o = budgeted_options(exp, quick, m, sizes, regime)
        per[m] = {k: ("the protocol" if isinstance(v, TrainingProtocol) else v) for k, v in o.items()}
    oracle = exp.oracle_options(quick, regime).get("protocol")
    return {"protocol": p.to_json(), "steps_per_client": p.steps,
            "oracle_protocol": None if oracle is None else oracle.to_json(), "methods": per}


SYNTHETIC = Experiment(
    name="synthetic",
    dataset="synthetic",
    title="Synthetic linear regression, 6 clients in two conflicting groups (paper §5.1, Table 1)",
    regimes=(
        # Per-regime learning rate and budget: the selection rule of docs/learners-protocol.md applied
        # to each regime's grid on seeds 100-102 (no single setting is within 1 % in both).
        Regime("few", "I: few samples, alike clients (10 samples per client, rho 0.1 as the paper's code)",
               {"samples": 10, "rho": 0.1, "noise": 0.01}, protocol={"lr": 0.005, "steps": 50}),
        Regime("many", "II: many samples, distant clients (1000 samples per client, rho 1)",
               {"samples": 1000, "rho": 1.0}, protocol={"lr": 0.1, "steps": 50}),
    ),
    oracle={},
    methods=ALL_METHODS,
    quick=Settings((0,), {}),
    full=Settings(_SEEDS, {}),
    protocol=DEFAULT_PROTOCOLS[("regression", "linear")],
    published={
        "table": "Table 1",
        "ocs": {"few": "the other clients of the same label process ({0,1,2} and {3,4,5})",
                "many": "itself: everyone learns alone"},
        "ce_partition": {"few": [["0", "1", "2"], ["3", "4", "5"]],
                         "many": [["0"], ["1"], ["2"], ["3"], ["4"], ["5"]]},
        "ce_mse": {"few": ["0.24 ± 0.08", "0.26 ± 0.08", "0.24 ± 0.04", "0.26 ± 0.07", "0.26 ± 0.09",
                           "0.26 ± 0.03"],
                   "many": ["1e-4 ± .0"] * 6},
    },
    notes=("The paper does not give the number of samples per client, so regime I takes 10 "
           "samples per client "
           "(fewer than the 21 unknowns) with the paper's public code's rho = 0.1 and noise SD 0.01; "
           "regime II takes 1000 samples and rho = 1. With these settings the exact game's CE is the "
           "paper's {0,1,2},{3,4,5} on 15 of seeds 0–19 (not on seeds 3, 9, 10, 18, 19), with CE test "
           "MSE 0.197 (SD of the per-seed means 0.079) against the paper's 0.24–0.26; regime II gives "
           "everyone alone on 20 of 20 seeds (benchmarks/synthetic_ce.py, docs/learners-data.md)."),
)

HEART = Experiment(
    name="heart",
    dataset="heart",
    title="UCI heart disease, four hospitals (stand-in for the paper's eICU hospitals, §5.3)",
    regimes=(
        Regime("accuracy", "all four hospitals, accuracy", {}, primary="loss"),
        Regime("auc", "Cleveland, Hungary, VA, AUC (Switzerland's test AUC is undefined)",
               {"metric": "auc", "hospitals": "Cleveland,Hungary,VA"}, primary="metric"),
    ),
    oracle={"loss_game": True},
    methods=ALL_METHODS,
    quick=Settings((0,), {}),
    full=Settings(_SEEDS, {}),
    protocol=DEFAULT_PROTOCOLS[("binary", "logistic")].with_(lr_grid=LOGISTIC_GRID, patience=PATIENCE,
                                                             tune_split=TUNE_SPLIT, local_steps=LOCAL_STEPS,
                                                             steps=250),
    published={},
    notes=("The paper's hospital experiment uses eICU, which no installable package ships, so it "
           "has no counterpart here and no published numbers are shown. UCI heart disease "
           "(FLamby's four-hospital split) is the real multi-hospital data we can run offline."),
)

ADULT = Experiment(
    name="adult",
    dataset="adult",
    title="UCI Adult, PhD vs non-PhD (paper §5.1, Table 2)",
    regimes=(Regime("phd", "PhD vs non-PhD, accuracy", {}, primary="loss"),),
    oracle={"loss_game": True},
    methods=ALL_METHODS + BODYLESS_BASELINES,
    # AFL's mixture step, the best mean validation accuracy of benchmarks/afl_lambda.py's grid on seeds 100-102
    # (0.771 at 0.01, 0.003 and 0.001 to three digits, 0.003 the highest; 0.763 at the default 0.1)
    quick=Settings((0,), {"afl": {"lambda_lr": 0.003}}),
    full=Settings(_SEEDS, {"afl": {"lambda_lr": 0.003}}),
    protocol=DEFAULT_PROTOCOLS[("binary", "logistic")].with_(lr_grid=LOGISTIC_GRID, patience=PATIENCE,
                                                             tune_split=TUNE_SPLIT, local_steps=LOCAL_STEPS,
                                                             steps=250),
    published={
        "table": "Table 2",
        "accuracy": {"PhD": {"Local": "66.9 ± 1.0", "SPO": "77.0 ± 0.7", "CE": "66.9 ± 1.0"},
                     "non-PhD": {"Local": "83.5 ± 0.0", "SPO": "82.8 ± 0.3", "CE": "83.5 ± 0.0"}},
        "ce_partition": [["PhD"], ["non-PhD"]],
    },
    notes=("Logistic regression as in the paper; every model trains under one protocol (full batch, "
           "Adam, the same budget of gradient steps per client; learners/training/protocol.py). "
           "Accuracies in the tables are fractions; the paper prints percentages. The paper's Table 2 "
           "baselines AFL and q-FFL run here with FedProx, Ditto, Per-FedAvg, pFedMe and pFedHN; FedPer "
           "and LG-FedAvg are left out because a logistic model has no body to share (FedPer would be "
           "Local and LG-FedAvg FedAvg)."),
)

DIGITS = Experiment(
    name="digits",
    dataset="digits",
    title="Label skew on 8×8 digits, 10 clients with 2 classes each (stand-in for CIFAR-10, Table 3)",
    # The twins split (pairs of clients with the same two classes): the regime is named for it, so
    # that its files (twins-*.png, convergence_twins.png) say what their titles say.
    regimes=(Regime("twins", "label skew, 10 clients, 2 classes each (twins split)",
                    {"clients": 10, "partition": "twins"}, primary="metric"),),
    # every column trains softmax regression, the exact game's 1023 subset models included: one model
    # family for the CE and Local (a CNN for the learners beside a softmax-regression game compared two)
    oracle={"loss_game": True},
    methods=ALL_METHODS + PAPER_BASELINES,
    # AFL's mixture step: 0.001 is the best mean validation accuracy of benchmarks/afl_lambda.py's grid on seeds
    # 100-102 under this protocol (0.847, the grid's smallest step; 0.836 at 0.003, 0.685 at the default 0.1;
    # 2026-11-28)
    quick=Settings((0,), {"pfedme": {"inner_steps": 20}, "afl": {"lambda_lr": 0.001}}, steps=40),
    full=Settings(_SEEDS, {"pfedme": {"inner_steps": 20}, "afl": {"lambda_lr": 0.001}}),
    # heart's and Adult's protocol with this model: five local steps a round, the rate grid, and the budget
    # their rule gives (250: at 50-250 steps no budget lets every round-based column stop on patience on 2 of
    # seeds 100-102); docs/learners-protocol.md has the budget sweep to 1,000 for the columns that reach it
    protocol=DEFAULT_PROTOCOLS[("multiclass", "logistic")].with_(steps=250, patience=PATIENCE, lr_grid=LOGISTIC_GRID,
                                                                 tune_split=TUNE_SPLIT, local_steps=LOCAL_STEPS),
    published={
        "table": "Table 3",
        "accuracy": {"Local": "86.46 ± 4.02", "FedAvg": "51.42 ± 2.41", "SPO": "92.47 ± 4.80",
                     "CE": "92.47 ± 4.80"},
        "ordering": "FedAvg far below Local; the personalised methods above Local",
    },
    notes=("CIFAR-10 is not shipped by any installable package; scikit-learn's 8×8 digits with the "
           "twins split (pairs of clients sharing the same two classes, ten "
           "clients) stand in for it. Every "
           "column, the exact game's 1023 subset models included, trains softmax regression (full batch, "
           "Adam, the default protocol of a multiclass logistic model), so that the CE and Local compare one "
           "model family; the paper's target is a CNN, which the exact game cannot afford on a CPU. pFedMe's "
           "inner solve is capped at 20 steps, and each estimate reports the residual."),
)

#: One architecture for every column of ``fashion``: an MLP (784 → 32 → 10); its output layer is the head.
#: SPO on ``fashion``: the hypernetwork generates the MLP's body, each client owns its head.
_FASHION_SPO = {"model": "mlp", "mlp_hidden": 32, "heads": "personal", "hypernet_hidden": 100, "embed": 32,
                "layers": 2, "directions": 16, "search_steps": 50}

#: The Table 3 federation, fixed before any test datum was read: 10 clients, about 40
#: training (20 fit, 20 tune: ``FASHION_TUNE_SPLIT``) / 100 validation / 100 test samples each (validation
#: accuracy moves in 1-point steps, not 5), label skew of two kinds. Settings chosen on seeds 100-102 by
#: validation loss only (benchmarks/fashion_settings.py, benchmarks/columns.py); the report uses seeds 0-9.
_FASHION_SPLIT = "40/100/100"

FASHION = Experiment(
    name="fashion",
    dataset="fashion",
    title="Label skew on Fashion-MNIST, 10 clients, about 20 train / 20 tune / 100 validation / 100 test samples "
          "each, personal heads (stand-in for CIFAR-10, Table 3)",
    # family: the loss game's CE support on splits 100-101 is 0.56 per comparison, 0.70 client-wise,
    # 0.80 game-wise (docs/results.md), so FAMILY_RULE gives game-wise; 0.95 per comparison on the
    # pathological regime
    regimes=(Regime("dirichlet", "Dirichlet label skew (alpha 0.1), 10 clients",
                    {"clients": 10, "partition": "dirichlet", "alpha": 0.1, "split": _FASHION_SPLIT},
                    primary="loss", family="game"),
             Regime("pathological", "pathological label skew, 10 clients, 2 classes each (McMahan's shards: "
                    "random overlapping class pairs)",
                    {"clients": 10, "partition": "pathological", "split": _FASHION_SPLIT},
                    primary="loss")),
    # the exact game tunes each of its 1,023 personal-head subset models' rate on the protocol's grid, as Local
    # tunes each client's, so that Local is the game's singletons (issue 33); it multiplies the run's most
    # expensive piece by 3.5-5.8 (docs/learners-protocol.md)
    oracle={"heads": "personal", "loss_game": True},
    methods=ALL_METHODS + PAPER_BASELINES,
    # One protocol for every column: Adam, weight decay 1e-3, full batch; lr 0.003, the lowest mean validation
    # loss of the exact game on seeds 100-101 (benchmarks/fashion_settings.py); five local steps a round and the
    # budget rule's 250 steps (none of 50, 100, 250 lets every round-based column stop on patience on 2 of the 3
    # held-out seeds 100-102: benchmarks/columns.py --local-steps 5, docs/learners-protocol.md); rates and stops
    # chosen on the tuning rows.
    protocol=TrainingProtocol(model="mlp", hidden=32, optimizer="adam", lr=0.003, weight_decay=1e-3, steps=250,
                              lr_grid=(0.001, 0.003, 0.01), patience=PATIENCE, local_steps=LOCAL_STEPS,
                              tune_split=FASHION_TUNE_SPLIT),
    # --quick: SPO's direction searches shortened too (they, not the 15 budget steps, cost its minutes)
    # AFL's mixture step, the best mean validation accuracy of benchmarks/afl_lambda.py's grid on seeds 100-102 in
    # both regimes (Dirichlet 0.682, pathological 0.612; at the default 0.1: 0.591 and 0.430)
    quick=Settings((0,), {"spo": dict(_FASHION_SPO, search_steps=10), "pfedme": {"inner_steps": 20},
                          "afl": {"lambda_lr": 0.001}}, steps=15),
    full=Settings(_FASHION_SEEDS, {"spo": dict(_FASHION_SPO), "pfedme": {"inner_steps": 20},
                                   "afl": {"lambda_lr": 0.001}}),
    published=DIGITS.published,
    notes=("CIFAR-10 is not shipped by any installable package; Fashion-MNIST from the Debian package "
           "`dataset-fashion-mnist` stands in for it. Ten clients in two label-skew regimes: Dirichlet "
           "(alpha 0.1, Hsu et al.) and the paper's pathological split (McMahan et al.: two classes per client "
           "drawn as shards, class pairs overlapping at random). Each client holds about 40 training rows (half fit "
           "the models, half choose every column's rate and stopping step), 100 validation rows, which only "
           "score, and 100 test rows (stratified by label), so that a client alone is far from saturated and "
           "one validation sample moves accuracy by one point, not five. As in the paper's CIFAR-10 code "
           "every client has its own output layer on a shared body: the exact game trains, for each of the 1023 "
           "subsets, one body and one head per member (v_i(S) is client i's validation accuracy with the body of "
           "S and its own head), and SPO's hypernetwork generates the body while each client owns its head. The "
           "same subset models are also scored by their mean validation cross-entropy (the validation-loss game, "
           "reported beside); the CE column is the accuracy game's, as in the paper. Every column uses the same "
           "MLP (784-32-10; its output layer is the head), which is what the exact game can afford on a 2-core "
           "CPU; the paper's target is a CNN. pFedMe's inner solve is capped at 20 steps as on digits. The "
           "published column is the paper's CIFAR-10 Table 3."),
)

EXPERIMENTS = {e.name: e for e in (SYNTHETIC, HEART, ADULT, DIGITS, FASHION)}


def select_methods(exp: Experiment, names) -> tuple[str, ...]:
    """The learners of ``names`` (an iterable of method names) in ``exp``'s column order, then any others.

    ``None`` selects the experiment's own learners.  Every name must be a learner that reports
    know (:data:`METHOD_LABELS`); repeats are dropped.

    Raises
    ------
    InputError
        An unknown name, or none at all.
    """
    if names is None:
        return tuple(exp.methods)
    chosen = []
    for m in names:
        if m not in METHOD_LABELS:
            raise InputError(f"unknown method {m!r} for reproduce: choose from {', '.join(METHOD_LABELS)}")
        if m not in chosen:
            chosen.append(m)
    if not chosen:
        raise InputError("no methods to run")
    order = {m: i for i, m in enumerate(exp.methods)}
    return tuple(sorted(chosen, key=lambda m: order.get(m, len(order) + chosen.index(m))))


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``, or an :class:`InputError` listing the choices."""
    if name not in EXPERIMENTS:
        raise InputError(f"unknown experiment {name!r}: choose one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
