"""Learners: from client data to a benefit oracle (docs/concepts.md §5).

Every learner is a scikit-learn-style estimator whose fitted result feeds the
game core's peeling through the benefit-oracle interface
(:class:`coalitions.graph.BenefitOracle`).  PyTorch is imported only by the
modules that train.
"""
