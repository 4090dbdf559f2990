"""Data: federations, metrics and the packaged datasets (SPEC §5–6)."""
