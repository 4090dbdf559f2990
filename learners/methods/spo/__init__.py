r"""Specific Pareto Optimization (SPO): a learned benefit oracle (Cui et al. 2022).

One **Pareto hypernetwork** ``h(d)`` maps a direction ``d`` on the simplex
``Δ = {d ≥ 0, Σ_j d_j = 1}`` to the parameters of the target model (linear for
regression, logistic for classification).  It is trained with linearly
scalarised losses over Dirichlet-sampled directions (Navon et al. 2021, PHN-LS)

.. math::  \min_\phi\; \mathbb{E}_{d}\; \log\Big(\sum_j d_j\, L_j(h_\phi(d))
           + \tfrac{\lambda}{2}\lVert W(h_\phi(d))\rVert^2\Big),

``L_j`` being client ``j``'s mean training loss and ``W`` the target's weights
(biases not decayed).  Each step draws a batch of directions — ``Dir(α)`` on the
whole simplex, or, with probability ``faces``, on a random face — and
evaluates every client's loss for every direction in one batched call
(``torch.func.vmap``, no loop over clients).  Three choices make the learned
front faithful on the faces that the searches visit (measured in
``docs/learners-spo.md``):

* the **logarithm** (``log_loss``) does not move any direction's minimiser
  (it is monotone per direction) but weighs directions by relative rather than
  absolute error, so faces with small losses (a client alone with much data)
  are fitted as precisely as conflicting mixtures with large ones;
* the **ridge** ``λ`` (``l2``; 0.01 for regression, 0.001 otherwise) makes the
  Pareto model ``argmin Σ d_j L_j + λ/2‖W‖²`` unique and smooth in ``d`` even
  where a client's data cannot determine the model alone (``n < d``), so the
  network's value on a face is the sub-coalition's own regularised model
  rather than an extrapolation from nearby directions;
* **face sampling** (``faces``) trains on the sub-simplices themselves.

With ``epo=True`` each direction's weights come instead from the Exact Pareto
Optimal search's linear program (Mahapatra & Rajan 2020; PHN-EPO), solved with
cvxpy: ``N·α`` replaces ``d`` in the sum (about 8 ms per direction and step).

**Direction search.**  For client ``i`` within a remaining set ``R``, SPO looks
for the point of the face ``Δ_R = {d ∈ Δ : d_j = 0 for j ∉ R}`` whose model has
the lowest validation loss of ``i`` (the paper's Eq. 7, Appendix B.2), by
projected gradient descent

.. math::  d \leftarrow \Pi_{\Delta_R}\big(d - t\, \hat g\big),\qquad
           \hat g = \frac{g - \bar g}{\lVert g - \bar g \rVert},\; g = \nabla_d L_i^{val}(h(d)),

with the exact Euclidean projection onto the face (:func:`project_simplex`)
and the step ``t`` chosen by a batched line search over ``1, 1/2, 1/4, …`` (a
step is taken only when it lowers the loss, so every start descends
monotonically).  Several starts per client (the face's barycentre, the vertex
``e_i`` and random points of the face), all clients and all starts run as one
batch; the best end point wins.

**Collaborators** of ``i`` within ``R``:

* ``rule="ratio"``: the paper's threshold, ``j`` with ``d_j / d_i ≥ threshold``
  (0.7) at ``i``'s best direction ``d`` (every ``j`` with ``d_j > 0`` when ``d_i = 0``);
* ``rule="elimination"`` (default): backward elimination.  Start from
  ``S = R``; first drop every ``j`` whose weight at the best direction is at
  most ``min_weight`` (1 %: the paper notes that the searched direction is
  rarely exactly sparse but has "significantly small" entries; exact zeros cost
  nothing, since the optimum already lies on the smaller face); then, while
  some ``j ∈ S∖{i}`` has a best loss on the face ``Δ_{S∖{j}}`` no worse than
  the best loss found so far (over ``R``) within the relative tolerance
  ``tol`` — ``L ≤ (1 + tol)·L_best`` — drop the ``j`` whose removal costs least,
  together with any weight that the new best direction puts at or below
  ``min_weight``.  Comparing with the best over ``R`` (not with the current
  face) keeps repeated drops from drifting, like the OCS condition
  ``v_i(S) ≥ MAU_i(R) − tol``.  All clients' candidate faces of one round are
  searched as one batch.

**Collaborators** (continued) follow ``docs/concepts.md`` ("Learned benefit graphs").

:class:`SPOOracle` answers ``BG(R)`` for any ``R`` from the one trained
hypernetwork (no retraining), cached per ``R``, so the core's peeling runs on it
unchanged; :class:`SPO` is the estimator that trains the hypernetwork and exposes
the oracle.

**Variants.**  Everything above is ``variant="ours"``.  ``variant="paper"`` runs the
procedure of the paper's public code instead (:mod:`.paper`): for every searched client and
face a fresh hypernetwork, trained by EPO at the direction being searched, 5 front steps
alternating with 1 direction step, directions clamped to ``[1/(3k), 1 − 1/(3k)]``; the same
oracle and rules read its results.  ``variant="readme"`` runs the procedure of the authors'
README for synthetic on the same per-search networks: the front first, by linear
scalarisation at a direction drawn from ``Dir(1/k)`` every step, then the direction steps.
``docs/learners-spo.md`` compares them.

The package, one piece a module: :mod:`.simplex` (projection onto a face, training
directions), :mod:`.epo` (the EPO linear program), :mod:`.hypernetwork`
(:class:`ParetoHypernetwork`), :mod:`.search` (the projected-gradient direction
search), :mod:`.fold` (each client's validation data folded into the hypernetwork's output
layer, the search's first layer without generating its weights), :mod:`.oracle` (:class:`SPOOracle`: the rules on top of the searches),
:mod:`.paper` (:class:`~.paper.PaperSearch`, the paper's variant), :mod:`.estimator` (:class:`SPO`);
:mod:`.exact_front` (:class:`ExactParetoFront`, the closed-form
front of linear least squares: a perfect-front yardstick for diagnostics, and the game it gives at
each coalition's pooled direction, which is the exact game as the ridge vanishes).
"""

from coalitions.learners.methods.spo.epo import epo_lp
from coalitions.learners.methods.spo.estimator import SPO, VARIANTS
from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
from coalitions.learners.methods.spo.oracle import RULES, SPOOracle
from coalitions.learners.methods.spo.search import DirectionSearch
from coalitions.learners.methods.spo.simplex import project_simplex, sample_directions

__all__ = ["SPO", "SPOOracle", "DirectionSearch", "ParetoHypernetwork", "project_simplex", "sample_directions",
           "epo_lp", "RULES", "VARIANTS"]
