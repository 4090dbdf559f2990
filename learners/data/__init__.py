"""Data: federations, metrics and the packaged datasets (docs/learners-data.md)."""
