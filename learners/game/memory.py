"""The chunk memory model of the exhaustive game: how many stacked subset models fit a memory budget."""

from __future__ import annotations


def activation_floats(spec) -> int:
    """Floats one model keeps per sample: each layer's activations and outputs."""
    if spec.kind == "cnn":
        c, h, w = spec.input_shape
        c1, c2 = spec.shapes["c1"][0], spec.shapes["c2"][0]
        act = 2 * c1 * h * w + c1 * h * w // 4 + 2 * c2 * h * w // 4 + c2 * h * w // 16
    elif spec.kind == "mlp":
        act = 2 * spec.shapes["w1"][1]
    else:
        act = 0
    return act + 2 * spec.n_outputs + 2


def eval_batch(spec, n_models: int, memory_mb: float) -> int:
    """Evaluation samples per forward pass so that ``n_models`` fit ``memory_mb``."""
    per_sample = 4 * n_models * activation_floats(spec)
    return int(max(1, min(4096, memory_mb * 2 ** 20 // per_sample)))


def memory_chunk(spec, n_samples: int, n_masks: int, memory_mb: float) -> int:
    """Subset models per chunk that fit ``memory_mb`` when each sees ``n_samples`` per step.

    Bytes per model: float32 activations ×3 for autograd, ``3·4·n·a`` (``a`` =
    :func:`activation_floats`), plus parameters and Adam state ``16·p``.
    """
    per_model = 3 * 4 * n_samples * activation_floats(spec) + 16 * spec.n_params
    return int(max(1, min(n_masks, memory_mb * 2 ** 20 // per_model)))


#: Forward activations (MiB) one chunk may keep so that a step's working set stays in the last-level
#: cache share of one core.  Measured on this 2-core EPYC (32 MiB L3): the N = 12 logistic game
#: (1200 samples) ran 1.58× faster per model-epoch in chunks of 256–512 models than in one chunk of
#: 4095, and the fashion personal-head MLP 1.19× faster in chunks of 40 than of 512
#: (docs/performance.md, "Cache-aware chunking").
CACHE_MB = 8.0
#: The smallest cache-sized chunk: below it Python's per-step overhead outweighs the cache.
MIN_CACHE_CHUNK = 32


def cache_chunk(spec, n_samples: int, n_masks: int, cache_mb: float = CACHE_MB) -> int:
    """Subset models per chunk whose forward activations, ``4·n·a`` bytes each, fit ``cache_mb``.

    ``a`` = :func:`activation_floats`, ``n`` = samples per step; at least
    :data:`MIN_CACHE_CHUNK` models (and at most ``n_masks``).
    """
    per_model = 4 * n_samples * activation_floats(spec)
    return int(max(1, min(n_masks, max(MIN_CACHE_CHUNK, cache_mb * 2 ** 20 // per_model))))
