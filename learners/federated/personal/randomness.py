"""A site's share of the in-process random draws (docs/federated.md, "Randomness").
"""

from __future__ import annotations

import numpy as np

__all__ = ["SiteGenerator", "epoch_steps"]


# --------------------------------------------------------------------------- randomness
class SiteGenerator:
    """Site ``site``'s row of the in-process draws of round ``r``, stream ``stream``.

    The in-process learner draws, for all ``N`` clients at once, from
    ``default_rng([seed, r, stream])``.  A site's learner, built over its own
    data alone, asks for one row; this generator draws the whole matrix from
    the same generator and hands back the site's row, so the site sees exactly
    what the in-process learner gives it.

    * stream 0 (minibatch order, :func:`coalitions.learners.training.engine.epoch_plan`):
      a request ``(1, n_i)`` is the site's row of ``(N, n_max)``, first ``n_i`` keys;
    * other streams: a request ``(1, …)`` is the site's row of ``(N, …)``.  With
      ``steps = (S, s_i)`` the draws are one per minibatch step: in process an
      epoch has ``S`` steps (the largest client's), the site takes ``s_i``, so
      after each ``s_i`` draws the generator skips ``S − s_i`` (SuPerFed's
      mixing coefficients over several local epochs).
    """

    def __init__(self, seed: int, r: int, stream: int, site: int, sizes, steps: tuple[int, int] | None = None):
        self._g = np.random.default_rng([int(seed), int(r), int(stream)])
        self.stream = int(stream)
        self.site = int(site)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.steps = steps
        self._drawn = 0

    def random(self, size=None):
        """The site's row of the federation-wide ``random`` draw (shape ``(1, …)``)."""
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size or ())
        if not shape or shape[0] != 1:
            raise ValueError(f"a site draws its own row (shape (1, ...)), not {shape}")
        n = len(self.sizes)
        if self.stream == 0:
            if shape != (1, int(self.sizes[self.site])):
                raise ValueError(f"stream 0 holds minibatch keys (1, {self.sizes[self.site]}), not {shape}")
            full = self._g.random((n, int(self.sizes.max())))
            return full[self.site:self.site + 1, :shape[1]]
        full_shape = (n, *shape[1:])
        out = self._g.random(full_shape)[self.site:self.site + 1]
        self._drawn += 1
        if self.steps is not None:
            total, mine = self.steps
            if self._drawn % mine == 0:
                for _ in range(total - mine):
                    self._g.random(full_shape)
        return out


def epoch_steps(sizes, batch_size, site: int) -> tuple[int, int]:
    """``(S, s_i)``: minibatch steps of an in-process epoch and of site ``site`` (``epoch_plan``'s rule)."""
    from coalitions.learners.training.engine import epoch_steps_of

    steps = epoch_steps_of(sizes, batch_size)
    return int(steps.max()), int(steps[site])


