"""Fashion-MNIST with label skew, from the Debian package ``dataset-fashion-mnist`` (docs/learners-data.md).

Data (never downloaded): the four gzip IDX files that the Debian package
``dataset-fashion-mnist`` installs under :data:`FASHION_DIR`
(``/usr/share/datasets/fashion-mnist/``): ``train-images-idx3-ubyte.gz`` and
``train-labels-idx1-ubyte.gz`` (60,000 images), ``t10k-images-idx3-ubyte.gz``
and ``t10k-labels-idx1-ubyte.gz`` (10,000), 28 × 28 grey levels 0..255 of ten
clothing classes (:data:`CLASSES`; Xiao, Rasul and Vollgraf 2017).  The files
are parsed with :func:`~coalitions.learners.data.datasets.idx.read_idx`,
strictly.  Without the package the loader stops with one line naming
``apt-get install dataset-fashion-mnist``.

The two files are pooled into one set of 70,000 samples (index ``i < 60000``:
training file, the rest: test file), which the label-skew schemes of
:mod:`~coalitions.learners.data.datasets.partitions` share among the clients
exactly as for ``digits`` and ``mnist``
(:func:`~coalitions.learners.data.datasets.label_skew.label_skew_federation`):
every client's samples are then split 60 / 20 / 20 % into train / validation
/ test, stratified by label, so each client is evaluated on its own label
distribution.  ``samples`` (500 by default) caps each client's samples, so a
federation of ten clients holds about as much data as MNIST 5k.  Only the
labels are read in full; images are decoded only up to the last one a client
holds, and only those are kept.  Pixels go through the fixed map ``x / 255``
(no data statistics: the same at every client and split, federation-consistent
by construction, docs/concepts.md §5), recorded in ``Federation.preparation``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import fixed_scaler
from coalitions.learners.data.datasets.idx import read_idx
from coalitions.learners.data.datasets.label_skew import label_skew_federation
from coalitions.learners.data.federation import Federation

__all__ = ["fashion", "FASHION_DIR", "INSTALL", "FILES", "CLASSES", "read_labels"]

#: Where the Debian package installs the files (a module constant, so tests can point it elsewhere).
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
INSTALL = "apt-get install dataset-fashion-mnist"
#: ``(images, labels)`` file names of the training and the test part, in pool order.
FILES = (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"))
#: Class names of the labels 0..9 (Xiao et al. 2017, Table 1).
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def _root() -> Path:
    root = Path(FASHION_DIR)
    if not root.is_dir():
        raise InputError(f"Fashion-MNIST is not installed (no folder {root}): run `{INSTALL}`")
    for pair in FILES:
        for name in pair:
            if not (root / name).is_file():
                raise InputError(f"Fashion-MNIST file {root / name} is missing: reinstall the Debian package with "
                                 f"`{INSTALL} --reinstall`")
    return root


def read_labels(root: Path) -> tuple[np.ndarray, tuple[int, ...]]:
    """Pooled labels of both files (int64, 0..9) and the size of each file's part."""
    parts = []
    for _, name in FILES:
        _, y = read_idx(root / name, ())
        if y.size and y.max() > 9:
            raise InputError(f"{root / name}: label {int(y.max())} outside the ten classes 0..9")
        parts.append(y.astype(np.int64))
    return np.concatenate(parts), tuple(len(p) for p in parts)


def _image_reader(root: Path, sizes: tuple[int, ...]):
    def images(idx: np.ndarray) -> np.ndarray:
        out = []
        start = 0
        for (name, _), n in zip(FILES, sizes, strict=True):
            local = idx[(idx >= start) & (idx < start + n)] - start
            if local.size:
                _, X = read_idx(root / name, (28, 28), rows=int(local.max()) + 1, items=n)  # n: its labels
                out.append(X[local])
            start += n
        return np.concatenate(out).reshape(-1, 1, 28, 28)

    return images


def fashion(clients: int = 10, partition: str = "practical", groups: int = 3, alpha: float = 0.5,
            samples: int | None = 500, seed: int = 0, split: str | None = None) -> Federation:
    """Fashion-MNIST (Debian ``dataset-fashion-mnist``) with label skew (see the module docstring).

    Parameters
    ----------
    clients : int
        Number of clients (1..62).
    partition : {"practical", "pathological", "dirichlet", "twins"}
        Label-skew scheme (:mod:`~coalitions.learners.data.datasets.partitions`).
    groups : int
        Groups of the practical scheme.
    alpha : float
        Dirichlet concentration.
    samples : int or None
        Cap on each client's samples before its 60 / 20 / 20 split (``None``:
        all the scheme gives it, up to 7,000 per client for ten clients).
    seed : int
        Seeds the partition, the assignment of samples, the cap and the split.
    split : str, optional
        ``"TRAIN/VAL/TEST"`` samples per client, e.g. ``"20/100/100"``: replaces
        ``samples`` by their sum and the 60 / 20 / 20 % split by these proportions
        (stratified, so about these counts; the Table 3 regimes of ``reproduce fashion``).

    Raises
    ------
    InputError
        Without the Debian package (naming ``apt-get install
        dataset-fashion-mnist``), for a malformed file, or a bad option.
    """
    root = _root()
    labels, sizes = read_labels(root)
    scaler = fixed_scaler(255.0, "fixed: 8-bit pixel values 0..255 to [0, 1]")
    return label_skew_federation("fashion", labels, _image_reader(root, sizes), scaler, clients=clients,
                                 partition=partition, groups=groups, alpha=alpha, samples=samples, seed=seed,
                                 split=split)
