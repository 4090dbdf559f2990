"""The flags of the commands that read a dataset and train: the dataset's, the training protocol's, each method's.

Every flag comes from a registry: the datasets' loader options
(:data:`coalitions.learners.data.datasets.OPTIONS`), the one set of training flags (each a
field of the run's :class:`~coalitions.learners.training.protocol.TrainingProtocol`), and the
options of every registered method (:mod:`coalitions.learners.methods.registry`).  None of them
loads PyTorch.
"""

from __future__ import annotations

import click

from coalitions.cli.output import flag_errors
from coalitions.cli.params import SEED, Batch, Finite, Rates
from coalitions.learners.data.datasets import LOADERS
from coalitions.learners.data.datasets import OPTIONS as LOADER_OPTIONS
from coalitions.learners.methods.registry import ALIASES, METHODS, all_options
from coalitions.params import MAX_STEPS

__all__ = ["DATASETS", "DATASET_OPTIONS", "dataset_options", "training_options", "training_given", "TRAINING_KEYS",
           "TRAINING_FLAG_OF", "method_options", "MethodChoice", "SectionedCommand", "apply_threads", "load_federation"]

#: The datasets and the loader options offered as flags: the datasets registry's.
DATASETS = tuple(LOADERS)
DATASET_OPTIONS = tuple(o.name for o in LOADER_OPTIONS)


def _loader_option(o):
    if o.name == "seed":  # every seed option takes the same type (SEED)
        kind = SEED
    elif o.kind == "choice":
        kind = click.Choice(list(o.choices))
    else:
        kind = {"int": int, "float": float, "str": str}[o.kind]
    return click.option(f"--{o.flag}", o.name, type=kind, default=None, help=o.help)


def dataset_options(f):
    """Add the loader options shared by every command that reads a dataset (docs/learners-data.md)."""
    for o in reversed(LOADER_OPTIONS):
        f = _loader_option(o)(f)
    return f


#: The training flags: one set, turned into one TrainingProtocol (``learn``); SPO reads the fields it trains with.
_TRAINING_FLAGS = (
    ("model", click.Choice(["linear", "logistic", "mlp", "cnn"]),
     "The model [cnn for images, linear for regression, logistic otherwise]."),
    ("mlp-hidden", click.IntRange(1), "Hidden units of --model mlp [64]."),
    ("optimizer", click.Choice(["adam", "sgd"]), "The optimiser [the dataset's default protocol: adam]."),
    ("lr", Finite(0.0, open_low=True), "Peak learning rate [the dataset's default protocol]."),
    ("lr-grid", Rates(), "Train once per rate and keep the one with the lowest validation loss."),
    ("schedule", click.Choice(["cosine", "constant"]), "Learning rate over the run [cosine]."),
    ("momentum", Finite(0.0), "SGD momentum [0]."),
    ("weight-decay", Finite(0.0), "weight_decay/2 |w|^2 on the weights [the dataset's default protocol]."),
    ("steps", click.IntRange(1, MAX_STEPS),
     "The budget: local gradient steps per client [the dataset's default protocol]."),
    ("local-steps", click.IntRange(1, MAX_STEPS), "Local steps a site takes per communication round [1]."),
    ("batch-size", Batch(), "Samples per step and client, or full [the dataset's default protocol]."),
    ("patience", click.IntRange(1, MAX_STEPS),
     "Stop when the validation loss has not improved for this many evaluations and keep the best models "
     "[train the whole budget]."),
    ("tune-split", Finite(0.0, open_low=True), "Hold this share of each client's training rows out to choose "
                                                "the rate and the stopping step, so that the validation rows only "
                                                "score [none: the validation rows tune and score]."),
)


def training_options(f):
    """The one set of training flags (docs/cli.md): each sets a field of the run's training protocol."""
    for flag, kind, text in reversed(_TRAINING_FLAGS):
        f = click.option(f"--{flag}", flag.replace("-", "_"), type=kind, default=None, help=text)(f)
    return f


def training_given(opts: dict) -> dict:
    """The training flags given (click keys), ``--batch-size full`` as ``None`` (full batch)."""
    given = {k: opts.pop(k) for k in list(opts) if k in TRAINING_KEYS}
    return {k: (None if v == "full" else v) for k, v in given.items() if v is not None}


TRAINING_KEYS = tuple(flag.replace("-", "_") for flag, _, _ in _TRAINING_FLAGS)
#: A protocol field -> the flag that sets it (error messages name the flag the user typed).
TRAINING_FLAG_OF = {"hidden": "--mlp-hidden", **{k: "--" + k.replace("_", "-") for k in TRAINING_KEYS if k != "mlp_hidden"}}


class MethodChoice(click.Choice):
    """``--method``: a registered method's name, or one of its aliases (given back as the name); the help lists
    the names."""

    def __init__(self):
        super().__init__(list(METHODS))

    def convert(self, value, param, ctx):
        return super().convert(ALIASES.get(value, value) if isinstance(value, str) else value, param, ctx)


class SectionedCommand(click.Command):
    """A command whose ``--help`` groups its options: the training protocol, each method's own, the dataset, the run.

    ``learn`` takes some eighty flags (every registered method's options); one flat list hides
    which apply to the method at hand.  The sections follow the methods registry: an option
    appears under the methods that take it.
    """

    def format_options(self, ctx, formatter):
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx) if p.get_help_record(ctx)}
        sections: list[tuple[str, list[str]]] = []
        training = [k for k in TRAINING_KEYS if k in records]
        data = [k for k in DATASET_OPTIONS if k in records]
        placed = set(training) | set(data)
        if "method" in records:
            sections.append(("Method", ["method"]))
            placed.add("method")
        if training:
            sections.append(("Training protocol (one set of flags, docs/cli.md)", training))
        if self.name == "learn":
            shared = [o.key for o in METHODS["fedavg"].options if o.key in records and o.key not in placed]
            sections.append(("Every personalised learner", shared))
            placed |= set(shared)
            for method in METHODS.values():
                own = [o.key for o in method.options if o.key in records and o.key not in placed]
                if own:
                    users = [m for m, other in METHODS.items() if set(own) <= set(other.keys)]
                    sections.append((", ".join(users), own))
                    placed |= set(own)
        if data:
            sections.append(("Dataset", data))
        rest = [k for k in records if k not in placed and k not in data]
        sections.append(("Run", rest))
        for title, keys in sections:
            with formatter.section(title):
                formatter.write_dl([records[k] for k in keys])


def apply_threads(threads: int | None) -> None:
    """Apply the thread policy (docs/performance.md) with ``--threads`` as its override."""
    from coalitions.learners.training.threads import configure

    configure(threads)



def load_federation(dataset: str, opts: dict):
    """The federation ``dataset`` built from the dataset options present in ``opts`` (others ignored).

    Options left at ``None`` take the loader's defaults; an option the loader does
    not take is an InputError (exit 2).
    """
    from coalitions.learners.data.datasets import load

    given = {k: v for k, v in opts.items() if k in DATASET_OPTIONS and v is not None}
    with flag_errors():  # a loader's parameter is its flag with dashes
        return load(dataset, **given)


def method_options(f):
    """One flag per option of every registered learner (the methods registry); default None = the method's.

    The training flags (:func:`training_options`) are declared once there, not per method.
    """
    types = {"int": int, "float": float, "str": str, "floats": Rates()}
    for o in reversed(all_options()):
        if o.key in TRAINING_KEYS:
            continue
        shown = "" if o.default is None else f" [{o.default}]"
        if o.kind == "bool":
            f = click.option(f"--{o.flag}/--no-{o.flag}", o.key, default=None, help=o.help + shown)(f)
        elif o.kind == "choice":
            f = click.option(f"--{o.flag}", o.key, type=click.Choice(list(o.choices)), default=None,
                             help=o.help + shown)(f)
        else:
            f = click.option(f"--{o.flag}", o.key, type=types[o.kind], default=None, help=o.help + shown)(f)
    return f
