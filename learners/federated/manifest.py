"""The consortium manifest: who each site is (its SuperNode key) and what size the operator signs for it.

A SuperNode's description (name, split sizes) is what the site *says*; on a
SuperLink with SuperNode authentication the only thing the server can trust
is which registered key a message came from.  The operator therefore writes a
manifest (``coalitions/consortium@1``, docs/formats.md) that binds each site's
exact name to its SuperNode public key (the OpenSSH public key file Flower's
``flwr supernode register`` reads) and declares its training-set size (the
FedAvg weight of the game) or a bound on it::

    {"format": "coalitions/consortium@1",
     "sites": [{"name": "Cleveland", "public-key": "ecdsa-sha2-nistp384 AAAA... cleveland", "n-train": 152},
               {"name": "VA", "public-key": "ecdsa-sha2-nistp384 AAAA... va", "n-train-max": 100}],
     "shared": {"input-shape": [13], "features": ["age", "sex", "trestbps"]}}

``shared`` (optional) holds what every site must report alike (``task``,
``metric``, ``n-classes``, ``input-shape``, ``features``): a site that differs is the
one at fault.  :func:`read_manifest` checks the file; :meth:`Manifest.to_json`
and :func:`manifest_from_json` carry it in the run config to the ServerApp,
which matches each node's registered key (Flower's ``NodeInfo.public_key``,
``Grid.get_nodes``) to a site (:meth:`Manifest.site_of_key`).
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field

from coalitions.errors import InputError

__all__ = ["FORMAT", "Manifest", "ManifestSite", "read_manifest", "manifest_from_json", "key_id", "stored_key_id",
           "SHARED_FIELDS", "MAX_MANIFEST_BYTES"]

#: The format tag of a consortium manifest.
FORMAT = "coalitions/consortium@1"
#: Largest manifest file read (a few hundred bytes per site).
MAX_MANIFEST_BYTES = 1 << 20
#: What a manifest's ``shared`` may fix for every site (fields of a site's description).
SHARED_FIELDS = ("task", "metric", "n-classes", "input-shape", "features")
_SITE_KEYS = {"name", "public-key", "n-train", "n-train-max", "n-val"}


@dataclass(frozen=True)
class ManifestSite:
    """One site of the consortium.

    Parameters
    ----------
    name : str
        The site's exact name in the game.
    public_key : str
        Its SuperNode's OpenSSH public key (one line, as in the ``.pub`` file).
    n_train : int or None
        The training-set size the operator signs: the site's reply must claim
        exactly this, and it is the site's FedAvg weight.
    n_train_max : int or None
        A bound instead: the reply must claim at most this (the game then
        needs equal weights).
    n_val : int or None
        The validation-set size the operator signs (optional): the reply must
        claim exactly this; under patience it weighs the site's validation loss.
    """

    name: str
    public_key: str
    n_train: int | None = None
    n_train_max: int | None = None
    n_val: int | None = None

    def check_n_train(self, claimed: int) -> str | None:
        """Why a reply's ``n-train`` of ``claimed`` contradicts this entry, or ``None``."""
        if self.n_train is not None and claimed != self.n_train:
            return f"claims n-train {claimed:,}; the consortium manifest declares {self.n_train:,}"
        if self.n_train_max is not None and claimed > self.n_train_max:
            return f"claims n-train {claimed:,}; the consortium manifest bounds it by {self.n_train_max:,}"
        return None


@dataclass(frozen=True)
class Manifest:
    """A checked consortium manifest (:func:`read_manifest`).

    Parameters
    ----------
    sites : tuple of ManifestSite
        The sites, in the file's order.
    shared : dict
        What every site must report alike (keys of :data:`SHARED_FIELDS`).
    source : str
        Where it was read from (messages).
    """

    sites: tuple
    shared: dict = field(default_factory=dict)
    source: str = "the consortium manifest"

    def by_name(self, name: str) -> ManifestSite | None:
        """The entry of the site called exactly ``name``, or ``None``."""
        return next((s for s in self.sites if s.name == name), None)

    def site_of_key(self, public_key: bytes) -> ManifestSite | None:
        """The entry whose key is ``public_key`` (the SuperLink's copy, ``NodeInfo.public_key``: PEM
        SubjectPublicKeyInfo, as ``flwr supernode register`` sends it), or ``None``."""
        if not public_key:
            return None
        try:
            wanted = stored_key_id(public_key)
        except ValueError:
            return None
        return next((s for s in self.sites if key_id(s.public_key) == wanted), None)

    def weights(self, key: str = "n-train") -> dict:
        """Site name -> the weight the operator signed (``key``: ``"n-train"``, FedAvg's, or ``"n-val"``,
        the pooled validation loss's under patience); :class:`InputError` when a site declares none."""
        values = {s.name: s.n_train if key == "n-train" else s.n_val for s in self.sites}
        missing = [name for name, v in values.items() if v is None]
        if missing:
            why = ("declare only n-train-max; the coalitions' averages need each site's n-train" if key == "n-train"
                   else "declare no n-val; --patience pools the validation losses by each site's n-val")
            raise InputError(f"{self.source}: site(s) {', '.join(missing)} {why} (or --equal-weights)")
        return values

    def to_json(self) -> dict:
        """The manifest as the JSON object of its file."""
        sites = []
        for s in self.sites:
            entry = {"name": s.name, "public-key": s.public_key}
            if s.n_train is not None:
                entry["n-train"] = s.n_train
            if s.n_train_max is not None:
                entry["n-train-max"] = s.n_train_max
            if s.n_val is not None:
                entry["n-val"] = s.n_val
            sites.append(entry)
        return {"format": FORMAT, "sites": sites, **({"shared": dict(self.shared)} if self.shared else {})}


#: The NIST curves of OpenSSH's ECDSA keys (Flower's SuperNode keys): name -> (DER of the curve's OID, coordinate bytes).
_CURVES = {"nistp256": (bytes.fromhex("06082a8648ce3d030107"), 32),
           "nistp384": (bytes.fromhex("06052b81040022"), 48),
           "nistp521": (bytes.fromhex("06052b81040023"), 66)}
#: DER of the OID id-ecPublicKey (1.2.840.10045.2.1).
_EC_PUBLIC_KEY = bytes.fromhex("06072a8648ce3d0201")


def key_id(public_key: str) -> tuple[str, bytes]:
    """An OpenSSH ECDSA public key line (a ``.pub`` file) as ``(curve, point)``; ``ValueError`` when it is not one.

    The point is the uncompressed ``0x04 || X || Y`` of the key; two keys are the same key when
    their curve and point are (what :func:`stored_key_id` reads from the SuperLink's copy).
    """
    import base64
    import binascii

    parts = public_key.strip().split()
    if len(parts) < 2 or not parts[0].startswith("ecdsa-sha2-"):
        raise ValueError("not an OpenSSH ECDSA public key (ecdsa-sha2-nistp256/384/521 AAAA...)")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not an OpenSSH public key (its key is not base64)") from None
    fields: list[bytes] = []
    i = 0
    while i < len(blob) and len(fields) < 4:
        n = int.from_bytes(blob[i:i + 4], "big")
        fields.append(blob[i + 4:i + 4 + n])
        i += 4 + n
    if len(fields) != 3 or i != len(blob):
        raise ValueError("not an OpenSSH ECDSA public key (its key is malformed)")
    kind, curve, point = fields[0].decode("ascii", "replace"), fields[1].decode("ascii", "replace"), fields[2]
    if curve not in _CURVES or kind != f"ecdsa-sha2-{curve}" or parts[0] != kind:
        raise ValueError("not an EC public key on a NIST curve (what Flower's SuperNode authentication takes)")
    if len(point) != 1 + 2 * _CURVES[curve][1] or point[0] != 4:
        raise ValueError("not an OpenSSH ECDSA public key (its point is malformed)")
    return curve, bytes(point)


def _tlv(data: bytes, i: int) -> tuple[int, bytes, int]:
    """One DER element at ``data[i]``: its tag, its content, the index after it."""
    if i + 2 > len(data):
        raise ValueError("truncated")
    tag, length, i = data[i], data[i + 1], i + 2
    if length & 0x80:
        k = length & 0x7F
        length, i = int.from_bytes(data[i:i + k], "big"), i + k
    if i + length > len(data):
        raise ValueError("truncated")
    return tag, data[i:i + length], i + length


def stored_key_id(pem: bytes) -> tuple[str, bytes]:
    """The key the SuperLink registered for a node (Flower's ``NodeInfo.public_key``: PEM
    SubjectPublicKeyInfo) as ``(curve, point)``, as :func:`key_id`; ``ValueError`` when it is not an EC key."""
    import base64
    import binascii

    lines = [ln.strip() for ln in bytes(pem).decode("ascii", "replace").splitlines()]
    body = "".join(ln for ln in lines if ln and not ln.startswith("-----"))
    try:
        der = base64.b64decode(body, validate=True)
        tag, spki, _ = _tlv(der, 0)
        tag_alg, alg, j = _tlv(spki, 0)
        tag_bits, bits, _ = _tlv(spki, j)
    except (binascii.Error, ValueError):
        raise ValueError("not a PEM public key") from None
    if tag != 0x30 or tag_alg != 0x30 or tag_bits != 0x03 or not alg.startswith(_EC_PUBLIC_KEY) or bits[:1] != b"\0":
        raise ValueError("not an EC public key")
    curve = next((c for c, (oid, _) in _CURVES.items() if alg[len(_EC_PUBLIC_KEY):] == oid), None)
    if curve is None:
        raise ValueError("not an EC public key on an OpenSSH curve")
    return curve, bytes(bits[1:])


def _size(entry: dict, key: str, where: str) -> int | None:
    from coalitions.learners.federated.replies import MAX_SAMPLES

    if key not in entry:
        return None
    v = entry[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SAMPLES:
        raise InputError(f"{where}: {key} {v!r} is not an integer in [1, {MAX_SAMPLES:,}]")
    return v


def _name(name, where: str) -> str:
    from coalitions.game import _name_fault

    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: name {name!r} is not a non-empty string")
    fault = _name_fault(name)
    if fault is None and unicodedata.normalize("NFC", name) != name:
        fault = "is not in Unicode normal form NFC"
    if fault:
        raise InputError(f"{where}: name {ascii(name)} {fault}")
    return name


def _shared(value, where: str) -> dict:
    if not isinstance(value, dict) or set(value) - set(SHARED_FIELDS):
        raise InputError(f"{where}: shared must be an object with some of the keys {', '.join(SHARED_FIELDS)}")
    for key in ("input-shape", "features"):
        v = value.get(key)
        if v is not None and (not isinstance(v, list) or not v):
            raise InputError(f"{where}: shared {key} must be a non-empty list")
    return dict(value)


def manifest_from_json(data, source: str = "the consortium manifest") -> Manifest:
    """A :class:`Manifest` from its JSON object, every field checked; else :class:`InputError` naming ``source``."""
    from coalitions.learners.federated.replies import MAX_NAME

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{source}: not a consortium manifest (expected \"format\": \"{FORMAT}\")")
    extra = set(data) - {"format", "sites", "shared"}
    if extra:
        raise InputError(f"{source}: unknown key(s) {', '.join(sorted(extra))}")
    sites = data.get("sites")
    if not isinstance(sites, list) or not sites:
        raise InputError(f"{source}: sites must be a non-empty list")
    out: list = []
    folded: dict[str, str] = {}
    keys: dict[tuple, str] = {}
    for k, entry in enumerate(sites):
        where = f"{source}: site {k + 1}"
        if not isinstance(entry, dict) or not {"name", "public-key"} <= set(entry) or set(entry) - _SITE_KEYS:
            raise InputError(f"{where}: an object with name, public-key and n-train or n-train-max")
        name = _name(entry["name"], where)
        where = f"{source}: site {name!r}"
        if len(name) > MAX_NAME:
            raise InputError(f"{where}: its name is longer than {MAX_NAME} characters")
        look = unicodedata.normalize("NFKC", name).casefold()
        if look in folded:
            raise InputError(f"{where}: its name looks like site {folded[look]!r}'s (two sites must not print alike)")
        folded[look] = name
        n_train, n_max = _size(entry, "n-train", where), _size(entry, "n-train-max", where)
        if (n_train is None) == (n_max is None):
            raise InputError(f"{where}: give exactly one of n-train (the signed size) and n-train-max (a bound)")
        if not isinstance(entry["public-key"], str):
            raise InputError(f"{where}: public-key must be the one line of its SuperNode's .pub file")
        try:
            der = key_id(entry["public-key"])
        except ValueError as e:
            raise InputError(f"{where}: public-key is {e}") from None
        if der in keys:
            raise InputError(f"{where}: has the same public key as site {keys[der]!r}")
        keys[der] = name
        out.append(ManifestSite(name, entry["public-key"].strip(), n_train, n_max, _size(entry, "n-val", where)))
    shared = _shared(data.get("shared", {}), source)
    return Manifest(tuple(out), shared, source)


def read_manifest(path) -> Manifest:
    """The consortium manifest at ``path`` (a regular JSON file of at most 1 MiB), checked."""
    from coalitions.files import read_bytes

    raw = read_bytes(path, MAX_MANIFEST_BYTES, "a consortium manifest")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=lambda c: c)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InputError(f"{path}: not a JSON consortium manifest ({type(e).__name__})") from None
    return manifest_from_json(data, str(path))
