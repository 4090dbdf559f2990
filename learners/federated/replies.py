"""What a site replies is checked at the server before it touches the game or the learner.

A site is another organisation's machine: its replies are input, as a file is
(docs/federated.md, "Threat model").  Every reply passes one of these checks
on arrival; a reply that fails raises :class:`BadReply`, whose one-line message
names the site and the fault, and the run stops with exit 2 (or, with
``--exclude-bad-sites``, starts again without that site and records it).

* :func:`check_description` — the ``query`` reply: typed fields, a name that
  can be shown on one line (no control, format or separator characters), split
  sizes positive integers of at most :data:`MAX_SAMPLES`.
* :func:`check_against_manifest` — with a consortium manifest: the name is the
  one the node's key is registered under, ``n-train`` (and ``n-val``) what the
  operator declared, the shared fields (shape, features, ...) the manifest's.
* :func:`check_arrays` — model parameters or gradients: float32, the expected
  shapes, finite, and ``|x| <= MAX_PARAM`` (a method's statistics and indices: float64 or
  int64, the expected shapes, finite; the method checks their meaning).
* :func:`check_metrics` — the game's values: finite, accuracy and AUC in
  ``[0, 1]``, MSE ``>= 0``.
* :func:`check_losses` — training losses and other per-site numbers: finite
  and ``>= 0`` (losses), or finite (other values).

What these checks cannot catch is a site that sends *plausible* values: a
model trained on other data, or a validation metric it made up within the
metric's range.  The threat model in docs/federated.md says what that does.
"""

from __future__ import annotations

import json
import math
import unicodedata

import numpy as np

from coalitions.errors import InputError

__all__ = ["BadReply", "Silent", "MAX_SAMPLES", "MAX_PARAM", "MAX_NAME", "check_name", "check_description", "check_arrays",
           "check_metrics", "check_losses", "check_number", "reply_json", "check_against_manifest"]

#: Largest split size a site may claim (a larger one would dominate any sample-weighted average).
MAX_SAMPLES = 10**9
#: Largest absolute value of a parameter or gradient a site may send (float32 models of standardised data
#: stay many orders of magnitude below; a scaled or overflowing model does not).
MAX_PARAM = 1e6
#: Longest site name, in characters.
MAX_NAME = 200
#: The fields of a site's description (:func:`coalitions.learners.federated.sites.describe`) and their types.
DESCRIPTION = {"name": str, "task": str, "metric": str, "n-classes": int, "input-shape": list, "n-train": int,
               "n-val": int, "n-test": int, "order": int, "features": list}


class BadReply(InputError):
    """A site's reply that the server refuses; :attr:`site` names the site (or its node id at discovery).

    :attr:`node` is the node id the reply came from, where the caller knows it.
    """

    def __init__(self, site, fault: str, node: int | None = None):
        self.site = site
        self.node = node if node is not None else (site if isinstance(site, int) else None)
        super().__init__(f"site {site!r}: {fault}" if isinstance(site, str) else f"node {site}: {fault}")


class Silent(BadReply):
    """A site that did not answer a message within its attempts; :attr:`site` is the first such site.

    The message names every silent site; with ``--exclude-bad-sites`` the
    first is left out (a site still silent in the run without it is the next).
    """

    def __init__(self, site: str, message: str, node: int | None = None):
        self.site, self.node = site, node
        InputError.__init__(self, message)


def check_name(name, who) -> str:
    """``name`` if it can name a site: a non-empty string shown on one line, else :class:`BadReply`."""
    from coalitions.game import _name_fault

    if not isinstance(name, str) or not name:
        raise BadReply(who, f"its name {name!r} is not a non-empty string")
    if len(name) > MAX_NAME:
        raise BadReply(who, f"its name is {len(name)} characters long (at most {MAX_NAME})")
    fault = _name_fault(name)
    if fault is None and any(unicodedata.category(ch) == "Cf" for ch in name):
        fault = "may not contain format characters (zero-width, bidi controls, ...)"
    if fault is None and unicodedata.normalize("NFC", name) != name:
        fault = "is not in Unicode normal form NFC"
    if fault:
        raise BadReply(who, f"its name {ascii(name) if 'invisible' in fault else repr(name)} {fault}")
    return name


def reply_json(raw, who) -> dict:
    """A JSON object a site sent as a string (a ``ConfigRecord`` value), else :class:`BadReply`."""
    try:
        value = json.loads(str(raw), parse_constant=lambda c: float(c))
    except (json.JSONDecodeError, ValueError, RecursionError) as e:
        raise BadReply(who, f"its reply is not JSON ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise BadReply(who, "its reply is not a JSON object")
    return value


def _integer(d: dict, key: str, who, low: int, high: int) -> int:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise BadReply(who, f"{key} {v!r} is not an integer in [{low}, {high:,}]")
    return v


def check_description(raw, node) -> dict:
    """The ``query`` reply of node ``node`` (a JSON string): every field typed and bounded; returns the dict."""
    from coalitions.learners.data.federation import METRIC_SENSE, TASKS

    d = reply_json(raw, node)
    if set(d) != set(DESCRIPTION):
        raise BadReply(node, f"its description has fields {sorted(d)}, expected {sorted(DESCRIPTION)}")
    name = check_name(d["name"], node)
    if d["task"] not in TASKS or d["metric"] not in METRIC_SENSE:
        raise BadReply(name, f"task {d['task']!r} / metric {d['metric']!r}: expected one of {TASKS} / "
                             f"{tuple(METRIC_SENSE)}")
    for key in ("n-train", "n-val", "n-test"):
        _integer(d, key, name, 1, MAX_SAMPLES)
    _integer(d, "n-classes", name, 0, 1 << 20)
    _integer(d, "order", name, -1, 1 << 30)
    shape = d["input-shape"]
    if not shape or len(shape) > 4 or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 1 << 20
                                              for s in shape):
        raise BadReply(name, f"input-shape {shape!r} is not a list of 1 to 4 positive integers")
    features = d["features"]
    if len(features) > 1 << 20 or not all(isinstance(f, str) and 0 < len(f) <= MAX_NAME for f in features):
        raise BadReply(name, "features is not a list of column names")
    if features and len(features) != math.prod(shape):
        raise BadReply(name, f"features names {len(features)} columns for input-shape {shape}")
    if (d["task"] == "regression") != (d["n-classes"] == 0) or (d["task"] == "binary" and d["n-classes"] != 2):
        raise BadReply(name, f"n-classes {d['n-classes']} does not fit task {d['task']!r}")
    return d


def check_against_manifest(d: dict, manifest, who: str, node) -> dict:
    """A checked description ``d`` from node ``node`` held against the consortium manifest.

    The node's key is registered under site ``who`` (the manifest's name for it,
    :meth:`~coalitions.learners.federated.manifest.Manifest.site_of_key`): the
    description must name exactly that site, claim the ``n-train`` (and ``n-val``)
    the manifest declares or one within its bound, and report the manifest's
    ``shared`` fields; else :class:`BadReply` naming ``who``.
    """
    entry = manifest.by_name(who)
    if d["name"] != who:
        raise BadReply(who, f"its SuperNode key is registered as {who!r} in {manifest.source}, but it claims "
                            f"to be {ascii(d['name']) if not d['name'].isprintable() else repr(d['name'])}", node)
    fault = entry.check_n_train(d["n-train"])
    if fault is None and entry.n_val is not None and d["n-val"] != entry.n_val:
        fault = f"claims n-val {d['n-val']:,}; the consortium manifest declares {entry.n_val:,}"
    if fault:
        raise BadReply(who, fault, node)
    for key, value in manifest.shared.items():
        if key in d and d[key] != value and not (key == "features" and not d[key]):
            raise BadReply(who, f"{key} {d[key]!r} differs from the consortium manifest's {value!r}", node)
    return d


def check_arrays(arrays, shapes, who, what: str = "models", dtype=np.float32) -> list[np.ndarray]:
    """Arrays a site returned: their number, ``dtype``, ``shapes`` (a list of tuples), finite and, for float32
    (parameters and gradients), bounded by :data:`MAX_PARAM`; float64 and int64 records (statistics, indices)
    are checked beyond that by their method."""
    arrays = list(arrays)
    if len(arrays) != len(shapes):
        raise BadReply(who, f"its {what} hold {len(arrays)} arrays, expected {len(shapes)}")
    for a, shape in zip(arrays, shapes, strict=True):
        if not isinstance(a, np.ndarray) or a.dtype != dtype:
            raise BadReply(who, f"its {what} are of type {getattr(a, 'dtype', type(a).__name__)}, "
                                f"expected {np.dtype(dtype).name}")
        if a.shape != tuple(shape):
            raise BadReply(who, f"its {what} have shape {a.shape}, expected {tuple(shape)}")
        if a.size and not np.all(np.isfinite(a)):
            raise BadReply(who, f"its {what} hold NaN or infinite values")
        if a.dtype == np.float32 and a.size and float(np.max(np.abs(a))) > MAX_PARAM:   # parameters, gradients
            raise BadReply(who, f"its {what} hold values of magnitude {float(np.max(np.abs(a))):.3g} "
                                f"(at most {MAX_PARAM:g})")
    return arrays


def check_number(v, who, what: str, low: float = -math.inf, high: float = math.inf) -> float:
    """One number a site sent: a real (not a bool or string), finite, in ``[low, high]``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise BadReply(who, f"{what} {v!r} is not a number")
    x = float(v)
    if not math.isfinite(x) or not low <= x <= high:
        raise BadReply(who, f"{what} {x!r} is not finite in [{low:g}, {high:g}]")
    return x


def check_metrics(values, metric: str, who, n: int | None = None, what: str = "metric") -> np.ndarray:
    """The game's values a site reported: ``n`` finite numbers in the range of ``metric``."""
    high = math.inf if metric == "mse" else 1.0
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        values = [values]
    values = list(values)
    if n is not None and len(values) != n:
        raise BadReply(who, f"{len(values)} {metric} values for its {what}, expected {n}")
    return np.array([check_number(v, who, f"its {what} ({metric})", 0.0, high) for v in values], dtype=np.float64)


def check_losses(values, who, what: str = "training loss", n: int | None = None, low: float = 0.0) -> list[float]:
    """Losses (or other per-site numbers with ``low=-inf``) a site reported: finite, at least ``low``."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        values = [values]
    values = list(values)
    if n is not None and len(values) != n:
        raise BadReply(who, f"{len(values)} values for its {what}, expected {n}")
    return [check_number(v, who, f"its {what}", low) for v in values]
