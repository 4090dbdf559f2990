"""Which code path the training engine takes: a rule on shapes, never a timing.

The engine (:mod:`coalitions.learners.training.engine`) computes a step of
``M`` stacked models either *batched* (one ``torch.func.vmap`` call) or
*sequential* (a Python loop over the models).  The two agree only to
floating-point rounding, so the choice must not depend on anything but the
command: the same command on the same machine gives the same numbers whatever
the load.  The rule, from ``python benchmarks/learners.py timing`` on the
development machine (2 cores; docs/learners-personalized.md and
docs/performance.md):

* **CUDA** (any device but the CPU): batched, all models in one call — the
  point of the stacked engine on a GPU.
* **CPU, convolutions on images of more than** :data:`CONV_PIXELS` **pixels**:
  sequential.  ``vmap`` turns the per-model convolutions into one grouped
  convolution, which the CPU kernels handle poorly: on 28×28 images the
  batched step measured 0.3–0.9× the loop's speed at 10–200 clients, on 8×8
  images 2.3–3.1× *faster*, with the crossover between 12×12 and 16×16.
* **CPU, everything else** (linear, logistic, MLP, small CNN): batched, all
  models in one call (1.5–3.1× the loop at 10–200 clients; chunks of 32 were
  within 10 % of it either way).

The inputs are read off the shapes of the first call: a stacked parameter of
five dimensions ``(M, out, in, kh, kw)`` is a convolution kernel, and the
first argument of five dimensions ``(M, B, C, H, W)`` holds the images.

Examples
--------
>>> import torch
>>> conv = {"c1": torch.zeros(4, 16, 1, 3, 3), "w": torch.zeros(4, 10, 3)}
>>> choose(torch.device("cpu"), conv, (torch.zeros(4, 32, 1, 28, 28),))
('sequential', None)
>>> choose(torch.device("cpu"), conv, (torch.zeros(4, 32, 1, 8, 8),))
('batched', None)
>>> choose(torch.device("cuda"), conv, (torch.zeros(4, 32, 1, 28, 28),))
('batched', None)
"""

from __future__ import annotations

__all__ = ["CONV_PIXELS", "choose"]

#: Largest image (H·W pixels) whose convolutions run batched on the CPU (12×12 measured faster
#: batched, 16×16 and larger slower; docs/performance.md, "Engine path").
CONV_PIXELS = 144


def _convolves(params: dict) -> bool:
    return any(v.dim() == 5 for v in params.values())


def _image_pixels(args: tuple) -> int:
    for a in args:
        if hasattr(a, "dim") and a.dim() == 5:
            return int(a.shape[-2]) * int(a.shape[-1])
    return 0


def choose(device, params: dict, args: tuple = ()) -> tuple[str, int | None]:
    """``(path, chunk)`` for stacked ``params`` on ``device`` (see the module docstring).

    Parameters
    ----------
    device : torch.device
    params : dict of str -> tensor
        Stacked parameters, leading dimension ``M``.
    args : tuple
        The per-model arguments of the step (images first of dimension 5).
    """
    if getattr(device, "type", str(device)) != "cpu":
        return ("batched", None)
    if _convolves(params) and _image_pixels(args) > CONV_PIXELS:
        return ("sequential", None)
    return ("batched", None)
