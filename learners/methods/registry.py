"""The learners that ``coalitions learn --method NAME`` can run (docs/concepts.md §5, docs/cli.md).

A :class:`Method` names an estimator class by its import path (so listing the
methods, or building the command line, never imports PyTorch) and declares the
options it takes.  The ``learn`` command turns every declared option into a
command-line flag, passes to the chosen method only the options the user gave
(the estimator's own defaults apply otherwise), and refuses an option that the
chosen method does not take.

Adding a learner is one :func:`register` call with its estimator's path, its
options, its report label, any aliases, whether it runs over Flower and where its
site steps keep optimiser state; everything else is derived from the registry:
the ``learn`` and ``federate --method`` choices, the report labels
(:data:`~coalitions.learners.experiments.catalogue.METHOD_LABELS`), the Flower
site's table (:data:`~coalitions.learners.federated.personal.PERSONAL`), the
optimiser states a site keeps (:data:`OPTIMISER_KEYS`) and the package's exports
(:mod:`coalitions.learners`, through :func:`exports`; docs/adding-a-method.md walks
through one method's files).  The registration is
data beside the others, not a decorator on the class: the class's module loads
PyTorch, and the command line lists the methods and their flags without it.
What a method exchanges over Flower (its ``up``, ``down`` and ``kept`` keys) is
declared on the class, next to the steps that use it.  The estimator is a
:class:`~coalitions.learners.methods.base.Learner`
(it takes ``device``, ``seed`` and ``progress`` keywords, ``fit(federation)``
returns it, and it exposes ``estimate_``, an :class:`~coalitions.estimate.Estimate`).
A library error names the estimator's *parameter* (``Option.arg``); the command
line reports it with the option's ``flag``.

Examples
--------
>>> sorted(METHODS)[:6]
['afl', 'ditto', 'fedamp', 'fedamp-heuristic', 'fedavg', 'fedavgm']
>>> METHODS["spo"].option("rule").default
'elimination'
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from coalitions.errors import InputError

__all__ = ["Option", "Method", "METHODS", "ALIASES", "register", "create", "all_options", "resolve", "labels",
           "exports", "federated", "OPTIMISER_KEYS"]


@dataclass(frozen=True)
class Option:
    """One option of a method.

    Attributes
    ----------
    flag : str
        Command-line name without dashes, e.g. ``"search-steps"``.
    arg : str
        The estimator's keyword, e.g. ``"search_steps"``.
    kind : str
        ``"int"``, ``"float"``, ``"floats"`` (comma-separated), ``"str"``, ``"bool"`` (a ``--x/--no-x``
        switch) or ``"choice"``.
    default : object
        The estimator's default (shown in the help; the estimator applies it).
    help : str
    choices : tuple of str
        For ``kind == "choice"``.
    """

    flag: str
    arg: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The keyword click uses for this flag."""
        return self.flag.replace("-", "_")


@dataclass(frozen=True)
class Method:
    """A learner selectable by name: where its estimator lives and what it takes.

    ``label``: its column title in reports; ``aliases``: other names the command line accepts for
    it; ``federated``: ``coalitions federate --method`` runs it as a personalised learner over
    Flower; ``optimiser_keys``: the keys of its state where its site steps keep optimiser state
    (a Flower site keeps them between rounds).
    """

    name: str
    target: str  # "module:Class"
    summary: str
    options: tuple[Option, ...]
    label: str = ""
    aliases: tuple[str, ...] = ()
    federated: bool = False
    optimiser_keys: tuple[str, ...] = ()

    def option(self, key: str) -> Option:
        for o in self.options:
            if o.key == key or o.arg == key:
                return o
        raise KeyError(key)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.options)

    def estimator_class(self):
        module, cls = self.target.split(":")
        return getattr(import_module(module), cls)


METHODS: dict[str, Method] = {}
#: Another name accepted for a method -> its name.
ALIASES: dict[str, str] = {}


def register(method: Method) -> Method:
    """Add a method (a name or alias may be registered once)."""
    for name in (method.name, *method.aliases):
        if name in METHODS or name in ALIASES:
            raise ValueError(f"method {name!r} is already registered")
    METHODS[method.name] = method
    ALIASES.update({alias: method.name for alias in method.aliases})
    return method


def resolve(name: str) -> str:
    """The registered name of ``name`` (a name or an alias); an unknown name is returned as it is."""
    return ALIASES.get(name, name)


def labels() -> dict[str, str]:
    """Every method's report label, by name."""
    return {name: m.label or name for name, m in METHODS.items()}


def exports() -> dict[str, str]:
    """Every method's estimator class name -> its module (what :mod:`coalitions.learners` exports)."""
    return {m.target.partition(":")[2]: m.target.partition(":")[0] for m in METHODS.values()}


def federated() -> dict[str, str]:
    """The names (and aliases) ``coalitions federate --method`` runs as personalised learners -> the method's name."""
    out = {}
    for name, m in METHODS.items():
        if m.federated:
            out.update({name: name, **{alias: name for alias in m.aliases}})
    return out


def all_options() -> list[Option]:
    """Every option of every method, each flag once (first registration wins)."""
    seen: dict[str, Option] = {}
    for m in METHODS.values():
        for o in m.options:
            seen.setdefault(o.flag, o)
    return list(seen.values())


def create(name: str, given: dict, *, device: str = "auto", seed: int = 0, progress=None):
    """An unfitted estimator of method ``name`` with the options in ``given`` (click keys).

    Raises
    ------
    InputError
        Unknown method, or an option the method does not take.
    """
    if resolve(name) not in METHODS:
        raise InputError(f"unknown method {name!r}: choose one of {', '.join(METHODS)}")
    method = METHODS[resolve(name)]
    kwargs = {}
    for key, value in given.items():
        if key not in method.keys:
            raise InputError(f"--{key.replace('_', '-')} does not apply to --method {name} "
                             f"(it takes {', '.join('--' + o.flag for o in method.options) or 'no options'})")
        kwargs[method.option(key).arg] = value
    return method.estimator_class()(device=device, seed=seed, progress=progress, **kwargs)


register(Method(
    name="spo",
    label="SPO",
    target="coalitions.learners.methods.spo:SPO",
    summary="Specific Pareto Optimization (Cui et al. 2022): one Pareto hypernetwork, a direction "
            "search per client and remaining set.",
    options=(
        Option("rule", "rule", "choice", "elimination",
               "How collaborators are read off the best direction: the paper's ratio threshold, or "
               "backward elimination.", ("ratio", "elimination")),
        Option("threshold", "threshold", "float", 0.7, "Ratio rule: j collaborates when d_j/d_i >= this."),
        Option("tol", "tol", "float", 0.02,
               "Elimination rule: drop j when the loss without j is within this relative tolerance."),
        Option("min-weight", "min_weight", "float", 0.01,
               "Elimination rule: directions' weights at or below this count as zero."),
        Option("lr", "lr", "float", 0.01,
               "The hypernetwork's Adam learning rate (cosine-decayed), SPO's own: the training protocol's "
               "--steps, --batch-size, --patience and --lr-grid set its budget, batch, early stopping and grid."),
        Option("hypernet-hidden", "hidden", "int", 200, "Hypernetwork hidden width."),
        Option("embed", "embed", "int", 64, "Width of the direction embedding."),
        Option("layers", "layers", "int", 3, "Hidden layers of the hypernetwork."),
        Option("directions", "directions", "int", 64, "Directions sampled per training step."),
        Option("direction-alpha", "alpha", "float", 0.5, "Dirichlet concentration of the training directions."),
        Option("faces", "faces", "float", 0.5, "Share of training directions drawn on a random face."),
        Option("weight-decay", "l2", "float", None,
               "Weight decay on the target's weights [0.01 for regression, 0.001 otherwise]."),
        Option("epo", "epo", "bool", False, "Weight each direction's losses by EPO's linear program (cvxpy)."),
        Option("search-steps", "search_steps", "int", 100, "Projected-gradient iterations per direction search."),
        Option("starts", "starts", "int", 4, "Starts per direction search (barycentre, e_i, random)."),
        Option("model", "model", "choice", None,
               "Target model [linear for regression, logistic otherwise].", ("linear", "logistic", "mlp", "cnn")),
        Option("mlp-hidden", "target_hidden", "int", 64, "Hidden units of --model mlp."),
        Option("heads", "heads", "choice", "shared",
               "personal: the hypernetwork generates the target's body, each client owns its output layer.",
               ("shared", "personal")),
        Option("variant", "variant", "choice", "ours",
               "ours: one hypernetwork, sampled directions, projected-gradient search; paper: the paper's code, "
               "one hypernetwork per searched client and face trained by EPO at the searched direction "
               "(there --steps counts its front steps); it takes the code's settings where their flags are not given: "
               "--hypernet-hidden 100 --layers 2 --rule ratio --steps 10000 --batch-size full; readme: the authors' "
               "README for synthetic, the front first by linear scalarisation at sampled rays, then "
               "--direction-steps (its settings likewise: --layers 1 --steps 1000 --direction-steps 200).",
               ("ours", "paper", "readme")),
        Option("front-steps", "front_steps", "int", 5, "--variant paper: front steps per round."),
        Option("direction-steps", "direction_steps", "int", 1, "--variant paper: direction steps per round."),
        Option("direction-lr", "direction_lr", "float", 0.01, "--variant paper: the direction's gradient step."),
        Option("hypernet-momentum", "momentum", "float", 0.5, "--variant paper: SGD momentum of the hypernetworks."),
    ),
))


# ---------------------------------------------------------------------------- personalised learners
def _personalized_options() -> tuple[Option, ...]:
    """Options every personalised learner takes besides its training protocol (methods/base.py).

    The training settings (model, optimiser, rate, schedule, budget, batch, weight decay,
    patience) are not options of a method: ``coalitions learn`` builds one
    :class:`~coalitions.learners.training.protocol.TrainingProtocol` from its training
    flags (:data:`~coalitions.learners.training.protocol.FLAG_FIELDS`) and gives it to
    the learner as ``protocol``.
    """
    return (
        Option("weight-rule", "rule", "choice", None,
               "How a weight row becomes collaborators: w_ij/w_ii >= t (relative), w_ij >= t (absolute), or "
               "the smallest set holding a share t of the row's off-diagonal mass (mass), or "
               "w_ij >= t/|R| (uniform) [relative].",
               ("relative", "absolute", "mass", "uniform")),
        Option("weight-threshold", "threshold", "float", None,
               "Threshold t of --weight-rule [relative 0.7, absolute 0.1, mass 0.9, uniform 1.5]."),
        Option("refit", "refit", "bool", False,
               "BG(R) for R smaller than all clients by training again on R (default: renormalised rows)."),
        Option("engine", "engine", "choice", "auto",
               "Training engine: vmap over clients (batched), a per-client loop (sequential), or auto "
               "(batched on CUDA; on the CPU sequential for convolutions over images above 12x12 pixels, batched "
               "otherwise: a rule on the shapes, never a timing).",
               ("auto", "batched", "sequential")),
        Option("chunk", "chunk", "int", None, "Clients per vmap call on the batched engine [all]."),
        Option("checkpoint", "checkpoint", "str", None,
               "Save after every round to this file; a rerun with the same settings resumes from it."),
    )


_FEDAMP = (
    Option("alpha-k", "alpha_k", "float", 0.5, "FedAMP step size alpha_k; 0 turns message passing off (= local)."),
    Option("lam", "lam", "float", 0.2, "FedAMP lambda; the local proximal weight is lambda/(2 alpha_k)."),
    Option("amp-local-steps", "local_steps", "int", 5,
           "FedAMP: at least this many local steps per client and round, or the protocol's --local-steps if "
           "larger (one step leaves lambda inert)."),
    Option("weight-graph", "graph", "choice", "affinity",
           "What --weight-rule reads: the attention relative to an identical peer (affinity), or xi.",
           ("affinity", "xi")),
)
register(Method(
    name="fedamp",
    label="FedAMP",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedamp:FedAMP",
    summary="FedAMP (Huang et al. 2021): cloud models u_i = sum_j xi_ij w_j with "
            "xi_ij = alpha_k A'(|w_i - w_j|^2), proximal local steps.",
    options=_FEDAMP + (Option("sigma", "sigma", "float", None, "sigma of A(x) = 1 - exp(-x/sigma) [10]; "
                                                               "fedamp-heuristic: cosine temperature [200]."),
                       Option("amp-distance", "distance", "choice", "sum",
                              "x in A(x): |w_i - w_j|^2 (sum, the paper) or that over the parameter count "
                              "(mean: sigma means the same on any model size).", ("sum", "mean")))
    + _personalized_options(),
))
register(Method(
    name="fedamp-heuristic",
    label="HeurFedAMP",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedamp:FedAMPHeuristic",
    summary="HeurFedAMP: xi_ij proportional to exp(sigma cos(w_i, w_j)), self-attention xi_ii given.",
    options=_FEDAMP + (Option("sigma", "sigma", "float", None, "Cosine temperature [200]."),
                       Option("self-weight", "self_weight", "float", 0.3, "Self-attention xi_ii in [0, 1]."))
    + _personalized_options(),
))
register(Method(
    name="federico",
    label="FedeRiCo",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.federico:FedeRiCo",
    summary="FedeRiCo (Sui, Wen et al. 2022): EM posteriors over the clients' models from EMA-tracked "
            "losses, epsilon-greedy neighbours, mixture prediction.",
    options=(
        Option("neighbours", "neighbours", "int", 3, "Other clients sampled per round (K)."),
        Option("eps", "eps", "float", 0.3, "Epsilon of the epsilon-greedy neighbour sampling."),
        Option("beta", "beta", "float", 0.6, "EMA momentum of the tracked losses."),
        Option("accumulate", "accumulate", "bool", False,
               "Prior <- posterior after every E-step (the accumulated variant; default: the EMA posterior)."),
        Option("weights", "weights", "choice", "data",
               "Estimate's weights: data drawn on through the models (A = w diag(1/colsum) w^T), or the "
               "posterior w itself.", ("data", "posterior")),
        Option("likelihood", "likelihood", "choice", "mean",
               "Tracked loss: the mean of the client's per-sample losses (chosen on held-out federations) or "
               "their sum (its data's negative log-likelihood; the paper does not say which).", ("sum", "mean")),
    ) + _personalized_options(),
))
_SUPERFED = (
    Option("mu", "mu", "float", 0.01, "SuPerFed proximity weight mu."),
    Option("nu", "nu", "float", 1.0, "SuPerFed orthogonality weight nu on cos^2(W_f, W_l)."),
    Option("start", "start", "float", 0.4, "Share of the rounds before personalisation (phase II) starts."),
)
register(Method(
    name="superfed-mm",
    label="SuPerFed-MM",
    aliases=("superfed",),
    federated=True,
    optimiser_keys=("site_opt1", "site_opt2"),
    target="coalitions.learners.methods.superfed:SuPerFedMM",
    summary="SuPerFed with model mixing (Hahn et al. 2022); lambda* per client on validation data. "
            "Utilities only.",
    options=_SUPERFED + _personalized_options(),
))
register(Method(
    name="superfed-lm",
    label="SuPerFed-LM",
    federated=True,
    optimiser_keys=("site_opt1", "site_opt2"),
    target="coalitions.learners.methods.superfed:SuPerFedLM",
    summary="SuPerFed with layer mixing (one lambda per layer). Utilities only.",
    options=_SUPERFED + _personalized_options(),
))
register(Method(
    name="local",
    label="Local",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.baselines:Local",
    summary="Every client trains alone (baseline; utilities only).",
    options=_personalized_options(),
))
register(Method(
    name="fedavg",
    label="FedAvg",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.baselines:FedAvg",
    summary="Federated averaging, one model for all (baseline; utilities only).",
    options=_personalized_options(),
))


# ---------------------------------------------------------------------------- the paper's baselines
# (docs/learners-baselines.md: the update rule and the reference of each)
register(Method(
    name="fedprox",
    label="FedProx",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedprox:FedProx",
    summary="FedProx (Li et al. 2020): FedAvg whose clients minimise F_k(w) + mu/2 |w - w_t|^2 "
            "(baseline; utilities only).",
    options=(Option("mu", "mu", "float", 0.01, "FedProx proximal weight mu (0: FedAvg)."),)
    + _personalized_options(),
))
register(Method(
    name="fedavgm",
    label="FedAvgM",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedavgm:FedAvgM",
    summary="FedAvgM (Hsu, Qi & Brown 2019): FedAvg whose server takes a heavy-ball step on w - average "
            "(baseline; utilities only).",
    options=(Option("server-momentum", "server_momentum", "float", 0.9,
                    "FedAvgM's server momentum beta in [0, 1) (0, with --server-lr 1: FedAvg)."),
             Option("server-lr", "server_lr", "float", 1.0, "FedAvgM's server step eta on the velocity."))
    + _personalized_options(),
))
register(Method(
    name="ditto",
    label="Ditto",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.ditto:Ditto",
    summary="Ditto (Li et al. 2021): FedAvg plus a personal model per client minimising "
            "F_k(v) + lambda/2 |v - w_t|^2 (baseline; utilities only).",
    options=(Option("ditto-lambda", "lam", "float", 0.1, "Ditto's lambda tying each personal model to the "
                    "global one (0: Local)."),)
    + _personalized_options(),
))
register(Method(
    name="fedper",
    label="FedPer",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedper:FedPer",
    summary="FedPer (Arivazhagan et al. 2019): FedAvg of the body, a personal output layer per client "
            "(baseline; utilities only).",
    options=_personalized_options(),
))
register(Method(
    name="lg-fedavg",
    label="LG-FedAvg",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fedper:LGFedAvg",
    summary="LG-FedAvg (Liang et al. 2020): personal bodies, FedAvg of the output layer "
            "(baseline; utilities only).",
    options=_personalized_options(),
))
register(Method(
    name="qffl",
    label="q-FFL",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fair:QFFL",
    summary="q-FFL by q-FedAvg (Li et al. 2020): one model minimising sum_k p_k F_k^(q+1)/(q+1) "
            "(baseline; utilities only).",
    options=(Option("q", "q", "float", 1.0, "q-FFL's fairness exponent q (0: FedAvg)."),)
    + _personalized_options(),
))
register(Method(
    name="afl",
    label="AFL",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.fair:AFL",
    summary="Agnostic FL (Mohri et al. 2019): one model for the worst mixture of the clients' losses, "
            "gradient descent-ascent (baseline; utilities only).",
    options=(Option("lambda-lr", "lambda_lr", "float", 0.1, "AFL's ascent step on the mixture weights."),)
    + _personalized_options(),
))
register(Method(
    name="per-fedavg",
    label="Per-FedAvg",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.perfedavg:PerFedAvg",
    summary="Per-FedAvg (Fallah et al. 2020): a meta-model for one personal gradient step, "
            "Hessian-vector meta-gradient (baseline; utilities only).",
    options=(Option("personal-step", "alpha", "float", 0.01, "Per-FedAvg's personal step size alpha (0: FedAvg)."),)
    + _personalized_options(),
))
register(Method(
    name="pfedme",
    label="pFedMe",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.pfedme:PFedMe",
    summary="pFedMe (T. Dinh et al. 2020): personal models as Moreau envelopes, the inner problem "
            "solved to tolerance (baseline; utilities only).",
    options=(
        Option("pfedme-lambda", "lam", "float", 15.0, "pFedMe's Moreau-envelope weight lambda."),
        Option("pfedme-beta", "beta", "float", 1.0, "pFedMe's server mixing beta (1: averaging)."),
        Option("inner-lr", "inner_lr", "float", 0.05, "pFedMe: step of the inner gradient descent."),
        Option("inner-steps", "inner_steps", "int", 100, "pFedMe: most inner iterations per local step."),
        Option("inner-tol", "inner_tol", "float", 1e-3, "pFedMe: inner gradient-norm tolerance."),
    ) + _personalized_options(),
))
register(Method(
    name="pfedhn",
    label="pFedHN",
    federated=True,
    optimiser_keys=("site_opt",),
    target="coalitions.learners.methods.pfedhn:PFedHN",
    summary="pFedHN (Shamsian et al. 2021): a server hypernetwork generates each client's model from "
            "its embedding (baseline; utilities only).",
    options=(
        Option("client-embed", "embed", "int", 8, "pFedHN: width of the client embeddings."),
        Option("hn-hidden", "hn_hidden", "int", 100, "pFedHN: width of the hypernetwork's hidden layers."),
        Option("hn-lr", "hn_lr", "float", 0.01, "pFedHN: Adam step of the hypernetwork and embeddings."),
    ) + _personalized_options(),
))


#: Where a federated method's state holds a site's optimiser state (:meth:`PersonalizedLearner._site_steps
#: <coalitions.learners.methods.base.PersonalizedLearner._site_steps>`): every method's ``optimiser_keys``.
OPTIMISER_KEYS: tuple[str, ...] = tuple(dict.fromkeys(k for m in METHODS.values() for k in m.optimiser_keys))
