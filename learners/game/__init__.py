"""The exhaustive game's machinery, one job per module; the estimator is
:class:`coalitions.learners.exact.ExhaustiveOracle`.

* :mod:`.masks` — subset bitmasks; :mod:`.closed_form` — the linear game in closed form;
* :mod:`.bootstrap` — validation resamples; :mod:`.stepper` — the one stacked subset trainer
  and its optimiser step;
* :mod:`.shared`, :mod:`.personal` — its two head objectives (one head, a head per member);
* :mod:`.chunks` — one chunk trained and scored; :mod:`.memory` — the chunk memory model.
"""
