"""A personalised method's learner as a site and as the server build it (docs/federated.md).

The same class with the same parameters: a site's over a one-client federation holding its own data,
the server's over a stand-in federation built from the sites' descriptions (no data).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.methods.registry import OPTIMISER_KEYS, federated

__all__ = ["PERSONAL", "learner_params", "method_params", "check_method", "site_learner", "server_learner", "initial_state",
           "row_of", "as_tensors", "as_numpy"]

#: ``coalitions federate --method`` name (a registered name or alias) -> the learner's registry name
#: (coalitions.learners.methods.registry: the methods registered as ``federated``).
PERSONAL = federated()

#: Learner parameters that are not the method's (the server's business, or meaningless at a site).
_NOT_SENT = ("progress", "checkpoint", "device")



# --------------------------------------------------------------------------- learners
def learner_params(learner) -> dict:
    """The JSON-ready parameters a site needs to build the same learner."""
    out = {k: v for k, v in learner.get_params(deep=False).items() if k not in _NOT_SENT}
    if out.get("protocol") is not None:
        out["protocol"] = out["protocol"].to_json()
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


def method_params(protocol, seed: int = 0, options: dict | None = None) -> dict:
    """A personalised learner's parameters over Flower: the run's training ``protocol``, ``seed``, then ``options``.

    ``protocol`` is the :class:`~coalitions.learners.training.protocol.TrainingProtocol` of the run
    (:meth:`Settings.protocol_for <coalitions.learners.federated.server.Settings.protocol_for>`: the
    sites' task's default with the training flags given), as ``coalitions learn`` passes it, so a
    method trains the same way in process and over Flower.  ``options`` holds the method's own
    parameters (``alpha_k``, ``mu``, …) by their constructor names.  A protocol with a
    ``tune_split`` is refused (:func:`~coalitions.learners.federated.protocol.refuse_tuning_split`).
    """
    from coalitions.learners.federated.protocol import refuse_tuning_split

    refuse_tuning_split(protocol)
    return {"protocol": protocol, "seed": int(seed), **dict(options or {})}


def check_method(method: str, training: dict, options: dict | None) -> None:
    """Refuse a bad method or option before anything starts (:class:`InputError` naming the option).

    ``training``: the training flags given (protocol field -> value); the sites' task is not known
    yet, so the learner is checked under the generic protocol with these changes.
    """
    from coalitions.learners.federated.protocol import check_training
    from coalitions.learners.training.protocol import TrainingProtocol
    from coalitions.params import ParameterError

    check_training(training)
    params = method_params(TrainingProtocol(**training), 0, options)
    if params.get("refit"):
        raise InputError(f"--method-option refit: --method {method} over Flower reads BG(R) off the learned "
                         "weights (refit would train again on every set peeling asks about)")
    try:
        _create(method, params)
    except ParameterError as e:
        raise InputError(f"--method {method}: {e}") from None
    except TypeError as e:
        raise InputError(f"--method-option: {e}") from None


def _create(method: str, params: dict):
    from coalitions.learners.methods.base import COMMON_PARAMS
    from coalitions.learners.methods.registry import METHODS

    if method not in PERSONAL:
        raise InputError(f"--method {method}: the federated personalised methods are {', '.join(PERSONAL)}")
    cls = METHODS[PERSONAL[method]].estimator_class()
    names = cls.param_names()
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise InputError(f"--method-option {unknown[0]}: --method {method} takes no such option "
                         f"(its own: {', '.join(n for n in names if n not in COMMON_PARAMS) or 'none'})")
    params = dict(params)
    if isinstance(params.get("protocol"), dict):   # as learner_params sends it
        from coalitions.learners.training.protocol import TrainingProtocol

        params["protocol"] = TrainingProtocol.from_json(params["protocol"])
    learner = cls(**{**{k: params[k] for k in params}, "device": "cpu"})
    learner.check_params()
    return learner


def site_learner(method: str, params: dict, site, train_sizes=None):
    """The learner of ``method`` over a one-client federation holding ``site``'s data only.

    Set up as :meth:`PersonalizedLearner.fit <coalitions.learners.methods.base.PersonalizedLearner.fit>`
    sets it up (:meth:`~coalitions.learners.methods.base.PersonalizedLearner.prepare`, then the
    padded training data), without training: the site then calls the learner's own round.
    ``train_sizes``: every site's training-set size (the rounds and a protocol's schedule depend on
    them); ``None``: the site's own.
    """
    import torch

    from coalitions.learners.data.federation import Federation
    from coalitions.learners.training.engine import Padded

    learner = _create(method, params)
    fed = Federation(site.client.name, site.task, site.metric, (site.client,), site.n_classes, None, {})
    learner.prepare(fed, torch.device("cpu"), train_sizes)
    learner.train_data_ = Padded(fed, "train", torch.device("cpu"))
    return learner


def server_learner(method: str, params: dict, sites: list[dict], dataset: str | None, data_options: dict):
    """The learner of ``method`` as the server holds it: the federation's shape and names, no data.

    ``federation_`` is a stand-in with what the server knows from the sites'
    descriptions (names, task, metric, classes, feature shape), enough for
    the learner's server step, its ``finish`` where that needs no data
    (FedAMP), its oracle and its estimate.
    """
    import torch

    from coalitions.learners.federated.protocol import described_federation

    learner = _create(method, params)
    fed = described_federation(sites, dataset, data_options)
    learner.prepare(fed, torch.device("cpu"))
    return learner


def initial_state(learner, n: int) -> dict:
    """The in-process initial state of ``n`` clients (from ``torch.Generator().manual_seed(seed)``): no data."""
    import torch

    gen = torch.Generator().manual_seed(int(learner.seed))
    return learner.init_state(SimpleNamespace(n=n), gen, torch.device("cpu"))


def row_of(params: dict, i: int) -> dict:
    """Row ``i`` of each stacked tensor (leading dimension kept: one site's share of ``N`` rows)."""
    return {k: v[i:i + 1] for k, v in params.items()}


#: The dtypes a message carries as they are: statistics (FedeRiCo's posterior rows) and indices.  Anything
#: else travels as float32, the models' dtype.
KEPT_DTYPES = (np.float64, np.int64)


def _dtype(dtype) -> type:
    return next((d for d in KEPT_DTYPES if np.dtype(dtype) == d), np.float32)


def as_tensors(arrays: dict) -> dict:
    """A message's arrays as tensors, by name: float32, or float64 and int64 as they are (:data:`KEPT_DTYPES`)."""
    import torch

    return {k: torch.as_tensor(np.array(v, dtype=_dtype(np.asarray(v).dtype))) for k, v in arrays.items()}


def as_numpy(params: dict) -> dict:
    """Tensors as numpy arrays, by name (what a message carries): float32, or float64 and int64 as they are."""
    out = {}
    for k, v in params.items():
        a = v.detach().cpu().numpy()
        out[k] = a.astype(_dtype(a.dtype))
    return out


# Where a learner's state holds a site's optimiser state: the registry's OPTIMISER_KEYS (every
# method's ``optimiser_keys``); it never leaves the site.


def flat_optimiser(state: dict) -> dict:
    """An optimiser state (nested dicts of tensors) as flat ``{"m/weight": ndarray}``, dtypes kept."""
    out: dict = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}/")
        else:
            out[prefix[:-1]] = node.detach().cpu().numpy()

    walk(state, "")
    return out


def nested_optimiser(flat: dict) -> dict:
    """Inverse of :func:`flat_optimiser`: tensors of the same dtypes, nested again."""
    import torch

    out: dict = {}
    for path, arr in flat.items():
        *parents, leaf = path.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = torch.as_tensor(np.array(arr))
    return out


def kept_optimisers(state: dict) -> dict:
    """The site's optimiser states found in a learner ``state``, flat (what the site keeps)."""
    return {k: flat_optimiser(state[k]) for k in OPTIMISER_KEYS if state.get(k) is not None}


def restored_optimisers(kept: dict | None) -> dict:
    """The optimiser states a site kept, back in the learner's state shape."""
    return {k: nested_optimiser(kept[k]) for k in OPTIMISER_KEYS if kept and k in kept}


