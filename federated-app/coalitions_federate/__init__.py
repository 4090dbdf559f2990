"""coalitions-federate: the collaboration game over Flower (a thin app over the installed package)."""
