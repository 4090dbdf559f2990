"""Training: models, the batched engine, optimisers and checkpoints."""
